"""The routers' runs reach the graph's `astream` with `durability="sync"` (or the option).

"sync" writes each step's checkpoint before the next step starts, which is what makes
"a worker killed mid-answer loses no completed step" (tests/integration/
test_postgres_workers.py) a guarantee rather than a race the write usually wins.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from langgraph.checkpoint.memory import InMemorySaver

from lg_visibility import with_visibility
from lg_visibility.chat import agui_router, chat_router
from lg_visibility.demo.graphs import ORDER_POLICY, order_builder
from tests.chat.test_router import build_graph

TIMEOUT = 20
pytestmark = pytest.mark.timeout(60)
USER = {"X-User-Id": "alice"}


def spied(graph: Any) -> list[Any]:
    """Record the `durability` of every `astream` call made on `graph` (instance spy)."""
    seen: list[Any] = []
    original = graph.astream

    def astream(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("durability", "<unset>"))
        return original(*args, **kwargs)

    object.__setattr__(graph, "astream", astream)
    return seen


@pytest.mark.parametrize("durability", [None, "async"], ids=["default", "async"])
async def test_chat_router_runs_use_the_durability_option(durability: str | None) -> None:
    """A chat run streams with durability "sync" by default, or the one given."""
    graph = build_graph(InMemorySaver())
    seen = spied(graph)
    app = FastAPI()
    options = {} if durability is None else {"durability": durability}
    app.include_router(chat_router(graph, **options))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=TIMEOUT) as c:
        response = await c.post("/api/chat/stream", json={"message": "hi"}, headers=USER)
    assert response.status_code == 200
    assert seen == [durability or "sync"]


@pytest.mark.parametrize("durability", [None, "exit"], ids=["default", "exit"])
async def test_agui_router_runs_use_the_durability_option(durability: str | None) -> None:
    """An AG-UI run reaches `astream` (through astream_events) with the same durability."""
    graph = with_visibility(order_builder().compile(checkpointer=InMemorySaver()), ORDER_POLICY)
    seen = spied(graph)
    app = FastAPI()
    options = {} if durability is None else {"durability": durability}
    app.include_router(agui_router(graph, **options))
    body = {
        "threadId": "t1",
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "Please create order PO-1001"}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=TIMEOUT) as c:
        response = await c.post("/api/agui", json=body, headers=USER)
    assert response.status_code == 200
    assert seen == [durability or "sync"]


@pytest.mark.parametrize("make", [chat_router, agui_router], ids=["chat", "agui"])
def test_routers_refuse_an_unknown_durability(make: Any) -> None:
    """A durability LangGraph does not know is a ValueError at construction."""
    graph = with_visibility(order_builder().compile(checkpointer=InMemorySaver()), ORDER_POLICY)
    with pytest.raises(ValueError, match="durability must be 'sync', 'async' or 'exit'"):
        make(graph, durability="always")
