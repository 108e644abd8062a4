"""The AI SDK answer to a tool's interrupt: its card comes again with the input it showed.

A resumed run's response is a new assistant message, so a tool that called `interrupt()`
opens its card again there before its output; the router keeps the calls each response
showed, and no result answered, in the thread's notes. Ground truth: the arguments the
scripted models called the tools with, and a marker in what an internal node asked for;
the control is the encoder given no calls, which sends the card without its input.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import interrupt

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility.chat import chat_router, open_storage
from lg_visibility.chat._aisdk import UIStreamEncoder
from lg_visibility.chat._history import MAX_OPEN_CALLS, RunNotes
from lg_visibility.chat._mapper import ChatEvent
from lg_visibility.chat._sse import encode_part
from lg_visibility.testing import FakeChatModel
from tests._support.aisdk import parse_ui_message_stream
from tests._support.chat import serve_in_thread
from tests.chat.test_aisdk import ALICE, TIMEOUT, ui_body

pytestmark = pytest.mark.timeout(TIMEOUT * 3)

CALL = {"id": "call-approve", "name": "approve", "args": {"amount": 7}}
SECRET_CALL = {"id": "call-secret", "name": "lookup", "args": {"query": "SECRET plan"}}


@tool
def approve(amount: int) -> str:
    """Ask a human to approve a payment."""
    answer = interrupt({"question": f"approve {amount}?"})
    return f"APPROVED {amount} {answer}"


def _plan(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage("", tool_calls=[SECRET_CALL])]}  # internal, never answered


def _approving_model() -> FakeChatModel:
    return FakeChatModel(
        responses=[AIMessage("VISIBLE asking", tool_calls=[CALL]), AIMessage("VISIBLE done")]
    )


def _agent_after_a_plan(checkpointer: Any) -> Any:
    """`plan` (internal) leaves an unanswered call in state; then an agent whose tool
    interrupts."""
    builder = StateGraph(MessagesState)
    builder.add_node("plan", _plan)
    builder.add_node("agent", create_agent(_approving_model(), tools=[approve]))
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "agent")
    return with_visibility(
        builder.compile(checkpointer=checkpointer), VisibilityPolicy(internal=["plan"])
    )


def _agent_in_a_tool(checkpointer: Any) -> Any:
    """The interrupting tool belongs to an agent that a visible agent's tool runs: no state
    read holds its call."""
    helper = create_agent(_approving_model(), tools=[approve], name="helper")

    @tool
    def ask_helper(question: str) -> str:
        """Ask the helper."""
        return str(helper.invoke({"messages": [("user", question)]})["messages"][-1].content)

    call = {"id": "call-outer", "name": "ask_helper", "args": {"question": "pay"}}
    model = FakeChatModel(responses=[AIMessage("VISIBLE outer", tool_calls=[call])])
    return with_visibility(
        create_agent(model, tools=[ask_helper], checkpointer=checkpointer), VisibilityPolicy()
    )


def _visible_node_in_an_internal_subgraph(checkpointer: Any) -> Any:
    """A visible node of an internal subgraph calls the tool: the redacted state read
    empties the subgraph's snapshot."""
    model = _approving_model()
    inner = StateGraph(MessagesState)
    inner.add_node("plan", _plan)
    inner.add_node("ask", lambda s: {"messages": [model.invoke(s["messages"])]})
    inner.add_node("tools", ToolNode([approve]))
    inner.add_edge(START, "plan")
    inner.add_edge("plan", "ask")
    inner.add_edge("ask", "tools")
    inner.add_edge("tools", END)
    outer = StateGraph(MessagesState)
    outer.add_node("outer", inner.compile())
    outer.add_edge(START, "outer")
    policy = VisibilityPolicy(internal=["outer"], user_visible=["outer/ask", "outer/tools"])
    return with_visibility(outer.compile(checkpointer=checkpointer), policy)


GRAPHS: dict[str, Callable[[Any], Any]] = {
    "agent after an internal plan": _agent_after_a_plan,
    "agent in a tool": _agent_in_a_tool,
    "visible node in an internal subgraph": _visible_node_in_an_internal_subgraph,
}


def _card(message: dict[str, Any]) -> dict[str, Any]:
    cards = [p for p in message["parts"] if p["type"] == "tool-approve"]
    assert len(cards) == 1, message["parts"]
    return cards[0]


@pytest.mark.parametrize("graph", list(GRAPHS))
@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_resumed_tools_card_shows_the_input_the_interrupted_run_showed(
    graph: str, store: str, tmp_path: Path
) -> None:
    """Both responses, and the run log another worker replays, as the AI SDK assembles
    them: the card's input is the call's arguments in both messages, and nothing of the
    internal node's call is anywhere."""
    storage = open_storage(str(tmp_path / "chat.db")) if store == "sqlite" else None
    if storage is not None:
        await storage.setup()
    compiled = GRAPHS[graph](storage.checkpointer if storage else InMemorySaver())
    app = FastAPI()
    app.include_router(chat_router(compiled, thread_store=storage.threads if storage else None))
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            first = await client.post("/api/chat/ui", json=ui_body("t-1", "pay"), headers=ALICE)
            body = ui_body("t-1", "yes", resume="yes")
            second = await client.post("/api/chat/ui", json=body, headers=ALICE)
        logged = b""
        if storage is not None:
            _, rows = await storage.threads.runlog_read("t-1", -1)
            logged = "".join(part for _, part in rows if part is not None).encode()
    finally:
        if storage is not None:
            await storage.aclose()

    assert _card(parse_ui_message_stream(first.content))["input"] == CALL["args"]
    messages = [parse_ui_message_stream(second.content)]
    if storage is not None:
        messages.append(parse_ui_message_stream(logged + b"data: [DONE]\n\n"))
    for message in messages:
        card = _card(message)
        assert card["state"] == "output-available"
        assert card["input"] == CALL["args"]
        assert card["output"] == "APPROVED 7 yes"
    assert "SECRET" not in (first.text + second.text + logged.decode())


def _events(*items: tuple[str, dict[str, Any]]) -> list[ChatEvent]:
    return [ChatEvent(kind, data) for kind, data in items]  # type: ignore[arg-type]


def test_run_notes_keep_the_calls_shown_and_not_answered() -> None:
    """A confirmed call, a call whose arguments were only streamed, an answered one and a
    reused id, across two runs and a round trip through JSON; at most MAX_OPEN_CALLS."""
    shown = {"id": "m1", "source": "agent", "provenance": {"path": "model"}}
    first = RunNotes()
    for event in _events(
        ("message", {**shown, "tool_calls": [CALL, {"id": "c-done", "name": "f", "args": {}}]}),
        ("tool_start", {"tool_call_id": "c-stream", "name": "g", "source": "inner"}),
        ("tool_args", {"tool_call_id": "c-stream", "source": "inner", "delta": '{"x": '}),
        ("tool_args", {"tool_call_id": "c-stream", "source": "inner", "delta": "1}"}),
        ("tool_result", {"tool_call_id": "c-done", "source": "agent"}),
    ):
        first.observe(event)
    book = RunNotes.from_json(json.loads(json.dumps(RunNotes().merged(first).to_json())))
    assert book.calls == {
        CALL["id"]: {
            **{k: CALL[k] for k in ("name", "args")},
            "source": "agent",
            "provenance": {"path": "model"},
        },
        "c-stream": {"name": "g", "args": {"x": 1}, "source": "inner", "provenance": None},
    }
    second = RunNotes()
    for event in _events(
        ("tool_result", {"tool_call_id": CALL["id"], "source": "agent"}),
        ("message", {**shown, "id": "m2", "tool_calls": [{**CALL, "args": {"amount": 8}}]}),
        ("tool_result", {"tool_call_id": "c-stream", "source": "inner"}),
    ):
        second.observe(event)
    later = book.merged(second)
    assert {k: v["args"] for k, v in later.calls.items()} == {CALL["id"]: {"amount": 8}}
    # the calls whose results were sent, kept across runs (what a resume must not resend)
    assert book.results == {"c-done"}
    assert later.results == {"c-done", CALL["id"], "c-stream"}

    runs = [RunNotes(), RunNotes()]  # 60 calls each: the thread keeps the newest 100
    for n in range(120):
        runs[n // 60].observe(
            ChatEvent("message", {**shown, "tool_calls": [{**CALL, "id": f"c{n}"}]})
        )
    kept = RunNotes().merged(runs[0]).merged(runs[1]).calls
    assert list(kept) == [f"c{n}" for n in range(120 - MAX_OPEN_CALLS, 120)]


def test_a_new_message_leaves_the_open_calls_behind() -> None:
    """A run that answers a new message, not an interrupt: nothing can answer the calls
    earlier runs left open, and the notes forget them; its own open calls are kept."""
    stored = RunNotes(calls={"c-old": {"name": "f", "args": {}}})
    turn = RunNotes(new_turn=True)
    turn.observe(ChatEvent("message", {"id": "m", "source": "a", "tool_calls": [CALL]}))
    assert list(stored.merged(turn).calls) == [CALL["id"]]
    assert list(stored.merged(RunNotes()).calls) == ["c-old"]  # a resumed run's


def test_the_encoder_gives_a_resumed_card_the_open_calls_input_and_none_without() -> None:
    """A result for a call this response did not open: the open call's input, and, as the
    control, none without the calls."""
    result = ChatEvent(
        "tool_result",
        {
            "tool_call_id": CALL["id"],
            "source": "agent",
            "name": "approve",
            "content": "APPROVED 7 yes",
            "status": "success",
        },
    )
    done = ChatEvent("done", {"thread_id": "t", "interrupted": False})
    for calls, expected in ((None, None), ({CALL["id"]: {**CALL}}, CALL["args"])):
        encoder = UIStreamEncoder("m", calls)
        body = b"".join(encode_part(p) for e in (result, done) for p in encoder.encode(e))
        card = _card(parse_ui_message_stream(body + b"data: [DONE]\n\n"))
        assert card["input"] == expected


class _SlowNotesSaver(InMemorySaver):
    """Writes a thread's notes 0.3 s late (a slow database), the window in which a leaving
    SSE client cancels its run."""

    async def aput(self, config: Any, *args: Any, **kwargs: Any) -> Any:
        if config["configurable"].get("checkpoint_ns") == "lg_visibility_notes":
            await asyncio.sleep(0.3)
        return await super().aput(config, *args, **kwargs)


def test_an_sse_client_leaving_at_the_interrupt_keeps_the_runs_notes() -> None:
    """Our SSE client reads up to the interrupt and leaves, which cancels the run while
    its notes are written; the AI SDK answer then still shows the card's input."""

    def make_app() -> FastAPI:
        graph = with_visibility(
            create_agent(_approving_model(), tools=[approve], checkpointer=_SlowNotesSaver()),
            VisibilityPolicy(),
        )
        app = FastAPI()
        app.include_router(chat_router(graph))
        return app

    with serve_in_thread(make_app) as base, httpx.Client(base_url=base, timeout=TIMEOUT) as client:
        with client.stream(
            "POST", "/api/chat/stream", json={"message": "pay"}, headers=ALICE
        ) as response:
            thread_id = response.headers["x-thread-id"]
            lines = response.iter_lines()
            assert "event: interrupt" in iter(lines.__next__, "event: done")  # then leave
        deadline = time.monotonic() + TIMEOUT
        while True:  # the thread is busy until the cancelled run has ended
            body = ui_body(thread_id, "yes", resume="yes")
            answer = client.post("/api/chat/ui", json=body, headers=ALICE)
            if answer.status_code != 409 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert answer.status_code == 200, answer.text
    card = _card(parse_ui_message_stream(answer.content))
    assert (card["input"], card["output"]) == (CALL["args"], "APPROVED 7 yes")


def test_a_card_this_message_opened_keeps_the_input_it_streamed() -> None:
    """A result before its message was confirmed (a return_direct tool), under a reused
    call id the notes hold an earlier unanswered call of: the card's input is what this
    message streamed, not the earlier call's, nor null."""
    encoder = UIStreamEncoder("m", {CALL["id"]: {"name": "approve", "args": {"amount": 1}}})
    events = _events(
        (
            "tool_start",
            {"tool_call_id": CALL["id"], "message_id": "m2", "source": "agent", "name": "approve"},
        ),
        ("tool_args", {"tool_call_id": CALL["id"], "source": "agent", "delta": '{"amount": 2}'}),
        (
            "tool_result",
            {
                "tool_call_id": CALL["id"],
                "source": "agent",
                "name": "approve",
                "content": "APPROVED 2",
                "status": "success",
            },
        ),
    )
    parts = [p for e in events for p in encoder.encode(e)]
    assert [p.get("input") for p in parts if p["type"] == "tool-input-available"] == [{"amount": 2}]


@pytest.mark.parametrize(
    ("streamed", "expected"),
    [("", {}), ("  ", {}), ('{"a": 1', None), ("NaN", None), ('{"a": 1e400}', {"a": None})],
)
def test_a_streamed_input_is_read_as_the_ai_sdk_reads_it(streamed: str, expected: Any) -> None:
    """Blank is `{}` (the `ai` package's reading); what is not JSON is null; an infinity
    is sent as null: the AI SDK accepts the response in every case."""
    encoder = UIStreamEncoder("m")
    start = {"tool_call_id": "c", "message_id": "m1", "source": "a", "name": "approve"}
    result = {"tool_call_id": "c", "source": "a", "content": "ok", "status": "success"}
    events = _events(
        ("tool_start", start),
        ("tool_args", {"tool_call_id": "c", "source": "a", "delta": streamed}),
        ("tool_result", result),
        ("done", {"thread_id": "t", "interrupted": False}),
    )
    body = b"".join(encode_part(p) for e in events for p in encoder.encode(e))
    assert _card(parse_ui_message_stream(body + b"data: [DONE]\n\n"))["input"] == expected


@pytest.mark.parametrize("route", ["ui", "sse"])
async def test_a_resume_reads_the_threads_state_once_before_its_run(
    route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer reads the thread's state once before its run (what it waits for, and the
    ids it holds, which the resumed run does not send again) and once after (what it waits
    for next): each read of a long thread deserializes its whole history."""
    from langgraph.pregel.main import Pregel

    reads: list[bool] = []
    read = Pregel.aget_state

    async def counted(self: Any, config: Any, **kwargs: Any) -> Any:
        if not config["configurable"].get("checkpoint_ns"):  # (not a subgraph's own)
            reads.append(kwargs.get("subgraphs", False))
        return await read(self, config, **kwargs)

    monkeypatch.setattr(Pregel, "aget_state", counted)
    app = FastAPI()
    app.include_router(chat_router(_agent_after_a_plan(InMemorySaver())))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        if route == "ui":
            await client.post("/api/chat/ui", json=ui_body("t-1", "pay"), headers=ALICE)
            reads.clear()
            body = ui_body("t-1", "yes", resume="yes")
            answer = await client.post("/api/chat/ui", json=body, headers=ALICE)
        else:
            first = await client.post("/api/chat/stream", json={"message": "pay"}, headers=ALICE)
            reads.clear()
            url = f"/api/chat/{first.headers['x-thread-id']}/resume"
            answer = await client.post(url, json={"resume": "yes"}, headers=ALICE)
    assert "APPROVED 7 yes" in answer.text  # the control: the answer was carried out
    assert reads == [True, False]  # before (with its subgraphs'), after
