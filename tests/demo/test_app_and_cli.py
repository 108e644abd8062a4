"""The demo as a product: plain text without markers, labels and cards after a reload,
one error shape, a favicon, registered checkpoint types, and a CLI that fails cleanly."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lg_visibility.demo import cli
from lg_visibility.demo.app import create_app
from lg_visibility.demo.graphs import (
    INCIDENT_INTERNAL_MARKERS,
    INCIDENT_VISIBLE_MARKERS,
    ORDER_INTERNAL_MARKERS,
    ORDER_VISIBLE_MARKERS,
)

TIMEOUT = 20
USER = {"X-User-Id": "alice"}
ALL_MARKERS = (
    INCIDENT_INTERNAL_MARKERS
    + INCIDENT_VISIBLE_MARKERS
    + ORDER_INTERNAL_MARKERS
    + ORDER_VISIBLE_MARKERS
)


async def with_app(
    db: Path, action: Callable[[httpx.AsyncClient], Awaitable[Any]], **options: Any
) -> Any:
    app = create_app(db_path=db, **options)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", timeout=TIMEOUT
        ) as c:
            return await action(c)


def sse_events(body: bytes) -> list[tuple[str, Any]]:
    events = []
    for block in body.decode().split("\n\n"):
        if block and not block.startswith(":"):
            fields = dict(line.split(": ", 1) for line in block.split("\n"))
            events.append((fields["event"], json.loads(fields["data"])))
    return events


# -- the served demo ---------------------------------------------------------------------


async def test_demo_app_speaks_plain_text_without_markers(tmp_path: Path) -> None:
    """The served demo's incident, status and order runs carry no test marker in any byte."""

    async def chat(c: httpx.AsyncClient) -> list[bytes]:
        bodies = []
        for text in ("I want a refund", "What is the status of my parcel?", "Create an order"):
            response = await c.post("/api/chat/stream", json={"message": text}, headers=USER)
            assert response.status_code == 200
            bodies.append(response.content)
        return bodies

    bodies = await with_app(tmp_path / "d.sqlite", chat)
    assert [m for m in ALL_MARKERS if any(m.encode() in b for b in bodies)] == []
    answers = [d["content"] for n, d in sse_events(bodies[0]) if n == "message"]
    assert answers == [
        "Refunds go back to the card you paid with.",
        "Your refund will reach your card within 5 days.",
    ]
    ask = [d["value"]["question"] for n, d in sse_events(bodies[2]) if n == "interrupt"]
    assert ask == ["Which phone number should order PO-1001 use?"]


async def test_demo_app_control_marked_run_shows_markers(tmp_path: Path) -> None:
    """Control: with marked=True the same run carries the visible markers, so the check bites."""

    async def chat(c: httpx.AsyncClient) -> bytes:
        response = await c.post("/api/chat/stream", json={"message": "refund"}, headers=USER)
        return response.content

    body = await with_app(tmp_path / "d.sqlite", chat, marked=True)
    assert [m for m in INCIDENT_VISIBLE_MARKERS if m.encode() in body] == [
        "SUBVISIBLE",
        "INSCARD",
        "RESPVISIBLE",
    ]


async def test_demo_app_labels_and_cards_survive_a_restart(tmp_path: Path) -> None:
    """After a restart the history names each answer's producer and holds the cards in place."""

    async def run(c: httpx.AsyncClient) -> Any:
        response = await c.post("/api/chat/stream", json={"message": "refund?"}, headers=USER)
        return response.headers["x-thread-id"], sse_events(response.content)

    thread_id, events = await with_app(tmp_path / "d.sqlite", run)

    async def reread(c: httpx.AsyncClient) -> Any:
        return (await c.get(f"/api/chat/{thread_id}/messages", headers=USER)).json()

    history = await with_app(tmp_path / "d.sqlite", reread)
    live = [
        (d["source"], d["content"]) if n == "message" else (d["source"], d["data"]["text"])
        for n, d in events
        if n in ("message", "custom")
    ]
    shown = [
        (m["source"], m["content"] if m["role"] == "assistant" else m["data"]["text"])
        for m in history["messages"]
        if m["role"] in ("assistant", "custom")
    ]
    assert shown == live
    assert [m["role"] for m in history["messages"]] == [
        "user",
        "assistant",
        "custom",
        "custom",
        "assistant",
    ]


async def test_demo_app_every_4xx_has_one_error_shape(tmp_path: Path) -> None:
    """Our 4xx, FastAPI's validation 422 and Starlette's 404/405 share {detail: {code, message}}."""

    async def probe(c: httpx.AsyncClient) -> list[tuple[int, Any]]:
        responses = [
            await c.post("/api/chat/stream", json={"message": "x" * 5000}, headers=USER),
            await c.post("/api/chat/stream", json={"thread_id": "t"}, headers=USER),
            await c.post("/api/chat/stream", json={"message": "hi"}),
            await c.get("/api/chat/nope/messages", headers=USER),
            await c.get("/no/such/page"),
            await c.put("/api/chat/threads", headers=USER),
        ]
        return [(r.status_code, r.json()) for r in responses]

    results = await with_app(tmp_path / "d.sqlite", probe)
    assert [(status, sorted(body["detail"])) for status, body in results] == [
        (413, ["code", "field", "message"]),
        (422, ["code", "field", "message"]),
        (401, ["code", "message"]),
        (404, ["code", "message"]),
        (404, ["code", "message"]),
        (405, ["code", "message"]),
    ]
    assert [body["detail"]["code"] for _, body in results] == [
        "message_too_long",
        "invalid_request",
        "unauthenticated",
        "thread_not_found",
        "not_found",
        "method_not_allowed",
    ]
    assert results[1][1]["detail"] == {
        "code": "invalid_request",
        "message": "message: Field required",
        "field": "message",
    }


async def test_demo_app_empty_phone_is_422_before_the_graph_runs(tmp_path: Path) -> None:
    """The phone form refuses a blank number with a 422 naming resume...phone; the form stays."""

    async def flow(c: httpx.AsyncClient) -> Any:
        response = await c.post("/api/chat/stream", json={"message": "order"}, headers=USER)
        thread_id = response.headers["x-thread-id"]
        ask = next(d for n, d in sse_events(response.content) if n == "interrupt")
        bad = await c.post(
            f"/api/chat/{thread_id}/resume",
            json={"resume": {ask["id"]: {"phone": " "}}},
            headers=USER,
        )
        wrong = await c.post(f"/api/chat/{thread_id}/resume", json={"resume": 42}, headers=USER)
        history = (await c.get(f"/api/chat/{thread_id}/messages", headers=USER)).json()
        return ask["id"], bad, wrong, history

    ask_id, bad, wrong, history = await with_app(tmp_path / "d.sqlite", flow)
    assert bad.status_code == 422
    assert bad.json()["detail"]["field"] == f"resume.{ask_id}.phone"
    assert bad.json()["detail"]["code"] == "invalid_resume"
    assert wrong.status_code == 422
    assert wrong.json()["detail"] == {
        "code": "invalid_resume",
        "message": 'resume: 42 is not of type "object"',
        "field": "resume",
    }
    assert [i["id"] for i in history["interrupts"]] == [ask_id]


async def test_demo_app_serves_a_favicon(tmp_path: Path) -> None:
    """GET /favicon.ico is an SVG icon, and the page links it."""

    async def get(c: httpx.AsyncClient) -> tuple[httpx.Response, httpx.Response]:
        return await c.get("/favicon.ico"), await c.get("/")

    icon, page = await with_app(tmp_path / "d.sqlite", get)
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/svg+xml"
    assert icon.content.startswith(b"<svg")
    assert '<link rel="icon" href="/favicon.ico"' in page.text


async def test_demo_app_checkpoints_read_back_without_a_deserialization_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The demo's own types are registered: reading its checkpoints back logs no warning."""
    from langgraph.checkpoint.serde import jsonplus

    async def run(c: httpx.AsyncClient) -> str:
        response = await c.post("/api/chat/stream", json={"message": "refund"}, headers=USER)
        return response.headers["x-thread-id"]

    thread_id = await with_app(tmp_path / "d.sqlite", run)
    jsonplus._warned_unregistered_types.clear()  # warn-once: earlier tests may have fired it
    caplog.set_level(logging.WARNING)

    async def read_all(c: httpx.AsyncClient) -> list[str]:
        app_graph = c._transport.app.state.graph  # type: ignore[attr-defined]
        names = []
        async for found in app_graph.checkpointer.alist({"configurable": {"thread_id": thread_id}}):
            for value in found.checkpoint["channel_values"].values():
                names.append(type(value).__name__)
        return names

    names = await with_app(tmp_path / "d.sqlite", read_all)
    assert "KnowledgeQuery" in names
    assert [r.getMessage() for r in caplog.records if "unregistered" in r.getMessage()] == []


# -- the CLI -------------------------------------------------------------------------------


def test_cli_demo_names_producers_explains_columns_and_shows_no_markers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`demo` prints the one-sentence legend, producer-prefixed lines and no test marker."""
    assert cli.main(["demo", "--width", "400"]) == 0
    out = capsys.readouterr().out
    assert " ".join(out.split()).startswith(" ".join(cli.EXPLAIN.split()))
    raw = [line.split(" | ")[0].strip() for line in out.splitlines() if " | " in line]
    assert [line.split(":")[0] for line in raw if line and not line.startswith("RAW")] == [
        "router_agent",
        "knowledge_agent",
        "knowledge_agent",
        "knowledge_agent",
        "knowledge_subgraph",
        "knowledge_subgraph",
        "insight_subgraph",
        "insight_subgraph",
        "insight_subgraph",
        "main",
    ]
    assert [m for m in ALL_MARKERS if m in out] == []
    assert "6 of the raw view's 10 lines are internal output" in out


def test_cli_demo_view_is_the_chat_mapper_over_the_enforced_stream() -> None:
    """chat_view of the enforced stream is exactly the user-visible lines, producer first."""
    from langchain_core.messages import HumanMessage

    from lg_visibility import with_visibility
    from lg_visibility.demo.graphs import INCIDENT_POLICY, fake_models, incident_builder

    graph = with_visibility(incident_builder(fake_models).compile(), INCIDENT_POLICY)
    parts = graph.stream(
        {"messages": [HumanMessage("refund")]},
        stream_mode=["messages", "custom", "values"],
        subgraphs=True,
        version="v2",
    )
    assert cli.chat_view(parts) == [
        ("knowledge_subgraph", "SUBVISIBLE Refunds go back to the card you paid with."),
        ("insight_subgraph", "[card] INSCARD Most refund requests follow a late delivery."),
        ("insight_subgraph", "[card] INSCARD Scenario: refund. See the refund FAQ."),
        ("main", "RESPVISIBLE Your refund will reach your card within 5 days."),
    ]


def test_cli_missing_openai_key_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--model openai:x` without OPENAI_API_KEY exits with one line naming the variable."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(SystemExit) as exited:
        cli.main(["demo", "--model", "openai:x"])
    assert str(exited.value) == (
        "--model openai:x: set OPENAI_API_KEY (and OPENAI_BASE_URL for a compatible server)."
    )


def test_cli_ctrl_c_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C during a command prints one line and exits 130, without a traceback."""

    def interrupted(*args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "demo", interrupted)
    assert cli.main(["demo"]) == 130
    assert capsys.readouterr().err == "lg-visibility: interrupted.\n"


def test_cli_broken_pipe_is_one_line() -> None:
    """`lg-visibility demo | head -1`: the closed pipe gives one stderr line, no traceback."""
    process = subprocess.Popen(
        [sys.executable, "-m", "lg_visibility.demo.cli", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert process.stdout is not None
    process.stdout.close()  # the reader is gone before the first write
    _, err = process.communicate(timeout=60)
    assert err.decode() == "lg-visibility: output closed early (broken pipe).\n"
    assert process.returncode == 141


def test_cli_help_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """`demo --help` shows each option's default."""
    with pytest.raises(SystemExit):
        cli.main(["demo", "--help"])
    out = capsys.readouterr().out
    assert "(default: fake)" in out
    assert "output width in columns (default:" in out
