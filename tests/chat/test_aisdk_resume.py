"""The AI SDK answer to a tool's interrupt: its card comes again with the input it showed.

A resumed run's response is a new assistant message, so a tool that called `interrupt()`
opens its card again there before its output. Ground truth: the arguments the scripted
model called the tool with, and markers in what an internal model asked for; the control
is the encoder given no open calls, which sends the card without its input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import interrupt

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility.chat import chat_router, open_storage, open_tool_calls
from lg_visibility.chat._aisdk import UIStreamEncoder
from lg_visibility.chat._mapper import ChatEvent
from lg_visibility.chat._sse import encode_part
from lg_visibility.testing import FakeChatModel
from tests._support.aisdk import parse_ui_message_stream
from tests.chat.test_aisdk import ALICE, TIMEOUT, ui_body

pytestmark = pytest.mark.timeout(TIMEOUT * 3)

CALL = {"id": "call-approve", "name": "approve", "args": {"amount": 7}}
SECRET_CALL = {"id": "call-secret", "name": "lookup", "args": {"query": "SECRET plan"}}


@tool
def approve(amount: int) -> str:
    """Ask a human to approve a payment."""
    answer = interrupt({"question": f"approve {amount}?"})
    return f"APPROVED {amount} {answer}"


def _graph(checkpointer: Any) -> Any:
    """`plan` (internal) leaves an unanswered tool call in state; then an agent whose tool
    interrupts."""
    agent = create_agent(
        FakeChatModel(
            responses=[AIMessage("VISIBLE asking", tool_calls=[CALL]), AIMessage("VISIBLE done")]
        ),
        tools=[approve],
    )
    builder = StateGraph(MessagesState)
    builder.add_node("plan", lambda s: {"messages": [AIMessage("", tool_calls=[SECRET_CALL])]})
    builder.add_node("agent", agent)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "agent")
    return with_visibility(
        builder.compile(checkpointer=checkpointer), VisibilityPolicy(internal=["plan"])
    )


def _card(message: dict[str, Any]) -> dict[str, Any]:
    cards = [p for p in message["parts"] if p["type"] == "tool-approve"]
    assert len(cards) == 1, message["parts"]
    return cards[0]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_resumed_tools_card_shows_the_input_the_interrupted_run_showed(
    store: str, tmp_path: Path
) -> None:
    """Both responses, and the run log another worker replays, as the AI SDK assembles
    them: the card's input is the call's arguments in both messages."""
    storage = open_storage(str(tmp_path / "chat.db")) if store == "sqlite" else None
    if storage is not None:
        await storage.setup()
    graph = _graph(storage.checkpointer if storage else InMemorySaver())
    app = FastAPI()
    app.include_router(chat_router(graph, thread_store=storage.threads if storage else None))
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

    shown = _card(parse_ui_message_stream(first.content))
    assert (shown["state"], shown["input"]) == ("input-available", CALL["args"])
    messages = [parse_ui_message_stream(second.content)]
    if storage is not None:
        messages.append(parse_ui_message_stream(logged + b"data: [DONE]\n\n"))
    for message in messages:
        card = _card(message)
        assert card["state"] == "output-available"
        assert card["input"] == CALL["args"]
        assert card["output"] == "APPROVED 7 yes"
        assert card["callProviderMetadata"] == shown["callProviderMetadata"]
    assert "SECRET" not in (first.text + second.text + logged.decode())


async def test_open_tool_calls_of_the_redacted_read_hold_no_internal_call() -> None:
    """The redacted read's open calls are the visible agent's; the raw read's hold the
    internal node's too (the control)."""
    graph = _graph(InMemorySaver())
    config = {"configurable": {"thread_id": "t-2"}}
    await graph.ainvoke({"messages": [("user", "pay")]}, config)
    redacted = open_tool_calls(await graph.aget_state(config, subgraphs=True))
    raw = open_tool_calls(await graph.raw_state.aget_state(config, subgraphs=True))
    assert list(redacted) == [CALL["id"]]
    assert redacted[CALL["id"]]["args"] == CALL["args"]
    assert sorted(raw) == sorted([CALL["id"], SECRET_CALL["id"]])


def test_the_encoder_without_open_calls_sends_the_card_without_its_input() -> None:
    """The control: the same result event without the calls gives no input."""
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
