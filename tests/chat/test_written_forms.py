"""The chat shows what a visible node writes as a dict or a `(role, content)` pair.

LangGraph's `messages` mode streams only message objects, so such a message reaches the chat
through the root snapshot, and the history through the tag it carries. Ground truth: the
markers in what each node writes, and the raw graph's state holding all of them.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility.chat import chat_router
from tests.chat.test_router import ALICE, TIMEOUT, parse_sse

pytestmark = pytest.mark.timeout(TIMEOUT)

FORMS: dict[str, Any] = {
    "pair": lambda text: ("ai", text),
    "dict": lambda text: {"role": "assistant", "content": text},
}


def _graph(form: str) -> Any:
    """`think` (internal) then `answer` (visible), each writing one message in `form`."""
    make = FORMS[form]
    builder = StateGraph(MessagesState)
    builder.add_node("think", lambda s: {"messages": [make("SECRET thought")]})
    builder.add_node("answer", lambda s: {"messages": [make("VISIBLE answer")]})
    builder.add_edge(START, "think")
    builder.add_edge("think", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("form", list(FORMS))
async def test_a_visible_nodes_written_message_shows_live_and_in_the_history(form: str) -> None:
    raw = _graph(form)
    raw_state = raw.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "r"}})
    assert [m.content for m in raw_state["messages"]] == ["hi", "SECRET thought", "VISIBLE answer"]

    graph = with_visibility(_graph(form), VisibilityPolicy(internal=["think"]))
    app = FastAPI()
    app.include_router(chat_router(graph))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.post("/api/chat/stream", json={"message": "hi"}, headers=ALICE)
        thread_id = response.headers["x-thread-id"]
        history = await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)
    assert "SECRET" not in response.text and "SECRET" not in history.text
    live = [(d["source"], d["content"]) for e, d in parse_sse(response.content) if e == "message"]
    assert live == [("answer", "VISIBLE answer")]
    shown = [(m["role"], m.get("source"), m["content"]) for m in history.json()["messages"]]
    assert shown == [("user", None, "hi"), ("assistant", "answer", "VISIBLE answer")]
