"""A run frees its thread before the client hears it ended, even when unlocking is slow.

`PostgresThreadStore` unlocks with a database round trip. If the client could hear `done`
(or RUN_FINISHED) before that finished, its next message would be a 409 `thread_busy`; the
store below makes the unlock slow so the race always shows.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from langgraph.checkpoint.memory import InMemorySaver

from lg_visibility import with_visibility
from lg_visibility.chat import agui_router, chat_router
from lg_visibility.chat._threads import MemoryThreadStore, ThreadStore
from lg_visibility.demo.graphs import ORDER_POLICY, order_builder
from tests.chat.test_router import build_graph

TIMEOUT = 20
pytestmark = pytest.mark.timeout(60)
USER = {"X-User-Id": "alice"}


class SlowUnlockStore(MemoryThreadStore):
    """Memory rows, but the unlock runs in a task and takes 0.3 s, like a slow database."""

    _release = ThreadStore._release

    async def _unlock(self, thread_id: str) -> None:
        await asyncio.sleep(0.3)


async def test_chat_stream_next_message_right_after_done_is_accepted() -> None:
    """A second message sent as soon as `done` arrives is answered, not 409."""
    graph = build_graph(InMemorySaver())
    app = FastAPI()
    app.include_router(chat_router(graph, thread_store=SlowUnlockStore()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=TIMEOUT) as c:
        first = await c.post("/api/chat/stream", json={"message": "hi"}, headers=USER)
        thread_id = first.headers["x-thread-id"]
        body = {"message": "again", "thread_id": thread_id}
        second = await c.post("/api/chat/stream", json=body, headers=USER)
    assert first.text.count("event: done\n") == 1
    assert second.status_code == 200, second.text


async def test_agui_next_run_right_after_run_finished_is_accepted() -> None:
    """A resume sent as soon as the interrupted AG-UI run finishes is answered, not 409."""
    graph = with_visibility(order_builder().compile(checkpointer=InMemorySaver()), ORDER_POLICY)
    app = FastAPI()
    app.include_router(agui_router(graph, thread_store=SlowUnlockStore()))

    def body(run_id: str, **extra: Any) -> dict[str, Any]:
        base = {"threadId": "t1", "runId": run_id, "tools": [], "context": [], "state": {}}
        return {"messages": [], "forwardedProps": {}, **base, **extra}

    first_message = [{"id": "u1", "role": "user", "content": "Please create order PO-1001"}]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=TIMEOUT) as c:
        first = await c.post("/api/agui", json=body("r1", messages=first_message), headers=USER)
        legacy = {"command": {"resume": {"phone": "555-0100"}}}
        second = await c.post("/api/agui", json=body("r2", forwardedProps=legacy), headers=USER)
    assert first.status_code == 200
    assert second.status_code == 200, second.text
