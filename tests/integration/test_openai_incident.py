"""The incident graph on the real `langchain_openai.ChatOpenAI` client, raw and enforced.

Every role of the incident graph talks to an OpenAI-compatible server on 127.0.0.1 that
plays the same script as the fake models (content deltas, tool-call deltas, json_schema
structured output). The enforced stream must be the raw stream minus internal events.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from lg_visibility import with_visibility
from lg_visibility.demo.graphs import (
    FAKE_ROLES,
    INCIDENT_INTERNAL_MARKERS,
    INCIDENT_POLICY,
    INCIDENT_VISIBLE_MARKERS,
    fake_reply,
    incident_builder,
    openai_models,
)
from tests._support.openai_server import OpenAIStubServer, responder_script
from tests._support.oracle import Case, all_text, canon, event_parts, expected_stream, run_stream

pytestmark = pytest.mark.timeout(60)

CASE = Case(
    internal_markers=INCIDENT_INTERNAL_MARKERS,
    visible_markers=INCIDENT_VISIBLE_MARKERS,
    internal_prefixes=("router_subgraph", "knowledge_subgraph", "insight_subgraph"),
    visible_prefixes=("knowledge_subgraph/answer",),
)
SCRIPTS = {role: responder_script(functools.partial(fake_reply, role)) for role in FAKE_ROLES}
MODES = ["messages", "custom", "values", "updates"]


def _run(wrap: bool, *, sync: bool, subgraphs: bool, version: str) -> list[tuple]:
    # A fresh server per run: OpenAI response ids (chatcmpl-<n>) then match between runs.
    with OpenAIStubServer(SCRIPTS) as server:
        model_for = openai_models(base_url=server.base_url, timeout=5, max_retries=0)
        graph: Any = incident_builder(model_for).compile(checkpointer=InMemorySaver())
        if wrap:
            graph = with_visibility(graph, INCIDENT_POLICY)
        items = run_stream(
            graph,
            [{"messages": [HumanMessage("I want a refund for my order", id="u1")]}],
            thread_id="thread-1",
            sync=sync,
            stream_mode=MODES,
            subgraphs=subgraphs,
            version=version,
        )
        assert sorted({r["model"] for r in server.requests}) == sorted(
            ["router", "knowledge", "expand", "knowledge_answer", "insight", "response"]
        )
    return [event_parts(i, MODES, subgraphs, version) for i in items]


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("subgraphs", [True, False], ids=["subgraphs", "root-only"])
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_chatopenai_enforced_stream_equals_raw_minus_internal(
    sync: bool, subgraphs: bool, version: str
) -> None:
    """Over real HTTP streaming, the enforced stream is the raw one minus internal events."""
    raw = _run(False, sync=sync, subgraphs=subgraphs, version=version)
    enforced = _run(True, sync=sync, subgraphs=subgraphs, version=version)
    assert canon(enforced) == canon(expected_stream(CASE, raw))
    text, raw_text = all_text(enforced), all_text(raw)
    assert [m for m in INCIDENT_INTERNAL_MARKERS if m in raw_text] == list(
        INCIDENT_INTERNAL_MARKERS
    ) or not subgraphs
    assert [m for m in INCIDENT_INTERNAL_MARKERS if m in text] == []
    assert [m for m in ("RESPVISIBLE", "INSCARD") if m not in text] == []


def test_chatopenai_visible_answer_streams_token_by_token() -> None:
    """The root answer arrives as one content delta per word; its first chunk is tagged
    user_visible, and the merged message carries the tag once."""
    enforced = _run(True, sync=True, subgraphs=True, version="v2")
    by_id: dict[str, list[Any]] = {}
    for _, mode, payload in enforced:
        if mode == "messages":
            by_id.setdefault(payload[0].id, []).append(payload[0])
    (answer,) = [c for c in by_id.values() if "RESPVISIBLE" in "".join(t.text for t in c)]
    words = "RESPVISIBLE Your refund will reach your card within 5 days.".split()
    assert [t.text.strip() for t in answer if t.text] == words
    assert [t.response_metadata.get("visibility") for t in answer][:2] == ["user_visible", None]
    merged = answer[0]
    for chunk in answer[1:]:
        merged = merged + chunk
    assert merged.response_metadata["visibility"] == "user_visible"
