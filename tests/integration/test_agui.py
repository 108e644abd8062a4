"""AG-UI in-process: `ag_ui_langgraph.LangGraphAgent(graph=wrapped)` on the incident graph.

LangGraphAgent drives `astream_events(version="v2", subgraphs=True)` and builds its
STATE_SNAPSHOT / MESSAGES_SNAPSHOT events from `aget_state`, so both enforced paths meet
here. With `emit_raw_events` True (every LangGraph event re-sent as RAW) and False: no
internal marker in any event (text, tool calls, steps, snapshots, raw events), the visible
answers in TEXT_MESSAGE_CONTENT and in the final MESSAGES_SNAPSHOT; the unwrapped graph
leaks every internal marker, so the checks can fail.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

try:
    from ag_ui.core import EventType, RunAgentInput, UserMessage
    from ag_ui_langgraph import LangGraphAgent
except ImportError:  # pragma: no cover - the test extra has it
    pytest.fail("needs ag-ui-langgraph: pip install -e '.[test]'", pytrace=False)

from lg_visibility import with_visibility
from lg_visibility.demo.graphs import (
    INCIDENT_INTERNAL_MARKERS,
    INCIDENT_POLICY,
    INCIDENT_VISIBLE_MARKERS,
    incident_builder,
)

TIMEOUT = 60.0
pytestmark = pytest.mark.timeout(TIMEOUT)

SUB_ANSWER = "SUBVISIBLE Refunds go back to the card you paid with."
FINAL_ANSWER = "RESPVISIBLE Your refund will reach your card within 5 days."


def _run(*, wrapped: bool, emit_raw_events: bool) -> list[tuple[EventType, dict[str, Any]]]:
    graph = incident_builder().compile(checkpointer=InMemorySaver())
    if wrapped:
        graph = with_visibility(graph, INCIDENT_POLICY)
    agent = LangGraphAgent(name="incident", graph=graph, emit_raw_events=emit_raw_events)
    run_input = RunAgentInput(
        thread_id="thread-1",
        run_id="run-1",
        messages=[UserMessage(id="u1", content="I want a refund")],
        state={},
        tools=[],
        context=[],
        forwarded_props={},
    )

    async def collect() -> list[Any]:
        return [event async for event in agent.run(run_input)]

    events = asyncio.run(asyncio.wait_for(collect(), TIMEOUT))
    return [(e.type, json.loads(e.model_dump_json())) for e in events]


def _markers(events: list[tuple[EventType, dict[str, Any]]], markers: tuple[str, ...]) -> list:
    text = "\n".join(json.dumps(data) for _, data in events)
    return [m for m in markers if m in text]


@pytest.mark.parametrize("emit_raw_events", [True, False], ids=["raw-events", "no-raw-events"])
def test_agui_agent_on_a_wrapped_graph_emits_no_internal_content(emit_raw_events: bool) -> None:
    """Every AG-UI event of a wrapped graph is free of internal content; the visible answers
    stream as text and are the assistant messages of the final MESSAGES_SNAPSHOT."""
    events = _run(wrapped=True, emit_raw_events=emit_raw_events)

    assert _markers(events, INCIDENT_INTERNAL_MARKERS) == []
    assert _markers(events, INCIDENT_VISIBLE_MARKERS) == list(INCIDENT_VISIBLE_MARKERS)
    text = "".join(d["delta"] for t, d in events if t == EventType.TEXT_MESSAGE_CONTENT)
    assert text == SUB_ANSWER + FINAL_ANSWER
    kinds = {t for t, _ in events}
    assert {EventType.TOOL_CALL_START, EventType.TOOL_CALL_RESULT} & kinds == set()
    steps = [d["step_name"] for t, d in events if t == EventType.STEP_STARTED]
    assert steps == [
        "input_parser_node",
        "answer",
        "response_node",
    ]  # answer: knowledge_subgraph/answer
    assert (EventType.RAW in kinds) is emit_raw_events
    final = [d for t, d in events if t == EventType.MESSAGES_SNAPSHOT][-1]
    assert [(m["role"], m["content"]) for m in final["messages"]] == [
        ("user", "I want a refund"),
        ("assistant", SUB_ANSWER),
        ("assistant", FINAL_ANSWER),
    ]


@pytest.mark.parametrize("emit_raw_events", [True, False], ids=["raw-events", "no-raw-events"])
def test_agui_agent_on_the_raw_graph_leaks_so_the_checks_can_fail(emit_raw_events: bool) -> None:
    """The unwrapped graph under the same agent leaks every internal marker."""
    events = _run(wrapped=False, emit_raw_events=emit_raw_events)
    assert _markers(events, INCIDENT_INTERNAL_MARKERS) == list(INCIDENT_INTERNAL_MARKERS)
