"""An answer sent again (a retry, a second tab) never answers the next question.

A graph asks two questions in a row. The first answer, keyed by the first question's id,
is sent twice: the second time it is a 409 `stale_answer` on every route that takes
answers (our `/resume`, the AI SDK's `POST /ui`, AG-UI's `resume[]`), and the second
question is still pending. Ground truth: the answers the nodes write. Without the check, a
retry whose id is dropped on the way (LangGraphAgent's `Command(resume=payload)`), or a
map keyed by a breakpoint (a plain value to LangGraph), answers the second question, as
the raw control shows.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility.chat import agui_router, chat_router
from lg_visibility.chat._threads import MemoryThreadStore
from tests.chat.test_agui_router import run_input
from tests.chat.test_aisdk import ui_body
from tests.chat.test_router import ALICE, TIMEOUT, assert_json_error, post_sse

pytestmark = pytest.mark.timeout(TIMEOUT * 3)


def _two_questions() -> Any:
    def ask(n: int) -> Any:
        def node(state: Any) -> dict[str, Any]:
            answer = interrupt({"question": f"question {n}?"})
            return {"messages": [AIMessage(f"VISIBLE answer {n}={answer}")]}

        return node

    builder: StateGraph[Any] = StateGraph(MessagesState)
    builder.add_node("first", ask(1))
    builder.add_node("second", ask(2))
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    return with_visibility(builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy())


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    graph = _two_questions()
    app.include_router(chat_router(graph))
    app.include_router(agui_router(graph))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=TIMEOUT) as c:
        yield c


async def _pending(client: httpx.AsyncClient, thread_id: str) -> list[dict[str, Any]]:
    history = (await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
    return list(history["interrupts"])


async def _texts(client: httpx.AsyncClient, thread_id: str) -> list[str]:
    history = (await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
    return [m["content"] for m in history["messages"] if m["role"] == "assistant"]


async def test_our_resume_route(client: httpx.AsyncClient) -> None:
    first, _ = await post_sse(client, "/api/chat/stream", {"message": "go"})
    thread_id = first.headers["x-thread-id"]
    (one,) = await _pending(client, thread_id)
    body = {"resume": {one["id"]: "A1"}}
    await post_sse(client, f"/api/chat/{thread_id}/resume", body)
    (two,) = await _pending(client, thread_id)
    retry = await client.post(f"/api/chat/{thread_id}/resume", json=body, headers=ALICE)
    assert_json_error(retry, 409, "stale_answer")
    assert await _pending(client, thread_id) == [two]
    # an answer that is itself a mapping, one of its keys hex, is still an answer
    mixed = {"comment": "ok", "0123456789abcdef0123456789abcdef": 2}
    _, done = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": mixed})
    assert await _texts(client, thread_id) == ["VISIBLE answer 1=A1", f"VISIBLE answer 2={mixed}"]
    assert done[-1][1]["interrupted"] is False
    after = await client.post(f"/api/chat/{thread_id}/resume", json=body, headers=ALICE)
    assert_json_error(after, 409, "nothing_to_resume")


async def test_the_ai_sdk_route(client: httpx.AsyncClient) -> None:
    await client.post("/api/chat/ui", json=ui_body("t-ui", "go"), headers=ALICE)
    (one,) = await _pending(client, "t-ui")
    body = ui_body("t-ui", "A1", resume={one["id"]: "A1"})
    await client.post("/api/chat/ui", json=body, headers=ALICE)
    (two,) = await _pending(client, "t-ui")
    retry = await client.post("/api/chat/ui", json=body, headers=ALICE)
    assert_json_error(retry, 409, "stale_answer")
    assert await _pending(client, "t-ui") == [two]
    await client.post("/api/chat/ui", json=ui_body("t-ui", "A2"), headers=ALICE)
    assert await _texts(client, "t-ui") == ["VISIBLE answer 1=A1", "VISIBLE answer 2=A2"]
    # after the run ended, the same answer is not taken for a new message
    after = await client.post("/api/chat/ui", json=body, headers=ALICE)
    assert_json_error(after, 409, "nothing_to_resume")
    assert await _texts(client, "t-ui") == ["VISIBLE answer 1=A1", "VISIBLE answer 2=A2"]
    # a client that always sends `resume` sends null with a new message: a message
    fresh = ui_body("t-ui", "again", resume=None)
    assert (await client.post("/api/chat/ui", json=fresh, headers=ALICE)).status_code == 200
    assert len(await _pending(client, "t-ui")) == 1


async def test_the_agui_route(client: httpx.AsyncClient) -> None:
    await client.post("/api/agui", json=run_input("t-ag", "r1", "go"), headers=ALICE)
    (one,) = await _pending(client, "t-ag")
    answer = [{"interruptId": one["id"], "status": "resolved", "payload": "A1"}]
    body = run_input("t-ag", "r2", resume=answer)
    assert (await client.post("/api/agui", json=body, headers=ALICE)).status_code == 200
    (two,) = await _pending(client, "t-ag")
    retry = await client.post("/api/agui", json={**body, "runId": "r3"}, headers=ALICE)
    assert_json_error(retry, 409, "stale_answer")
    cancelled = [{"interruptId": one["id"], "status": "cancelled"}]
    retry = await client.post(
        "/api/agui", json=run_input("t-ag", "r4", resume=cancelled), headers=ALICE
    )
    assert_json_error(retry, 409, "stale_answer")
    assert await _pending(client, "t-ag") == [two]
    assert await _texts(client, "t-ag") == ["VISIBLE answer 1=A1"]


async def test_control_a_retry_without_its_id_answers_the_next_question() -> None:
    """What the AG-UI route would run for a retried entry without the check:
    LangGraphAgent builds `Command(resume=payload)`, dropping the entry's id."""
    graph = _two_questions()
    config: Any = {"configurable": {"thread_id": "raw"}}
    await graph.ainvoke({"messages": [("user", "go")]}, config)
    await graph.ainvoke(Command(resume="A1"), config)
    out = await graph.ainvoke(Command(resume="A1"), config)
    assert out["messages"][-1].content == "VISIBLE answer 2=A1"


class _HeldAtTheDoor(MemoryThreadStore):
    """Once armed, the next `try_lock` waits until `opened`: a request that got in just
    before another run's whole turn (`waiting` says it is at the door)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.waiting = asyncio.Event()
        self.opened = asyncio.Event()

    async def try_lock(self, thread_id: str) -> Any:
        if self.armed:
            self.armed = False
            self.waiting.set()
            await self.opened.wait()
        return await super().try_lock(thread_id)


@pytest.mark.parametrize("route", ["resume", "ui", "agui"])
async def test_an_answer_is_judged_by_what_the_thread_waits_for_once_it_holds_it(
    route: str,
) -> None:
    """Two answers to the first question race: the late one reaches the thread's lock only
    after the other's whole turn. It is judged by the question pending then (the second),
    so it is a 409 `stale_answer`. Before, it was judged by a read made before the lock: our
    routes ran the turn in vain, and AG-UI, which drops the id, answered the second
    question with it."""
    store = _HeldAtTheDoor()
    graph = _two_questions()
    app = FastAPI()
    app.include_router(chat_router(graph, thread_store=store))
    app.include_router(agui_router(graph, thread_store=store))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=TIMEOUT) as c:
        thread_id = f"t-{route}"
        await c.post("/api/chat/ui", json=ui_body(thread_id, "go"), headers=ALICE)
        (one,) = await _pending(c, thread_id)

        def answer(value: str, run_id: str) -> Any:
            if route == "resume":
                body = {"resume": {one["id"]: value}}
                return c.post(f"/api/chat/{thread_id}/resume", json=body, headers=ALICE)
            if route == "ui":
                body = ui_body(thread_id, value, resume={one["id"]: value})
                return c.post("/api/chat/ui", json=body, headers=ALICE)
            entry = [{"interruptId": one["id"], "status": "resolved", "payload": value}]
            body = run_input(thread_id, run_id, resume=entry)
            return c.post("/api/agui", json=body, headers=ALICE)

        store.armed = True
        late = asyncio.ensure_future(answer("LATE", "r-late"))
        await asyncio.wait_for(store.waiting.wait(), TIMEOUT)
        assert (await answer("A1", "r-first")).status_code == 200
        (two,) = await _pending(c, thread_id)
        store.opened.set()
        assert_json_error(await late, 409, "stale_answer")
        assert await _pending(c, thread_id) == [two]
        assert await _texts(c, thread_id) == ["VISIBLE answer 1=A1"]


async def test_a_first_message_is_judged_by_the_thread_it_finds_once_it_holds_it() -> None:
    """Two AI SDK requests start the same new thread: the late one reaches the lock after
    the other's turn, which ends asking question 1. It is judged as a message on that
    thread (the AI SDK route takes it as the answer), as if it had come after. Before,
    it was judged by a read made before the lock ("no such thread") and started the
    thread again, dropping the question."""
    store = _HeldAtTheDoor()
    app = FastAPI()
    app.include_router(chat_router(_two_questions(), thread_store=store))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=TIMEOUT) as c:
        store.armed = True
        late = asyncio.ensure_future(
            c.post("/api/chat/ui", json=ui_body("t-new", "late"), headers=ALICE)
        )
        await asyncio.wait_for(store.waiting.wait(), TIMEOUT)
        first = await c.post("/api/chat/ui", json=ui_body("t-new", "go"), headers=ALICE)
        assert first.status_code == 200
        (one,) = await _pending(c, "t-new")
        store.opened.set()
        assert (await late).status_code == 200
        (two,) = await _pending(c, "t-new")
        assert two["id"] != one["id"]
        assert await _texts(c, "t-new") == ["VISIBLE answer 1=late"]
