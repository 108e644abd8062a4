"""Tests for lg_visibility.chat._router: the chat router over SSE on a small tagged graph.

The graph here is a plain compiled graph whose nodes tag their own messages, so the
router's mechanics (ownership, bad input, errors, disconnect, persistence) are tested
independently of the enforcement core; tests/chat/test_router_order_flow.py runs the seed
003 order flow on the real visibility-wrapped example graph.
"""

from __future__ import annotations

import asyncio
import json
import operator
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from fastapi import FastAPI
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send, interrupt
from pydantic import BaseModel, SkipValidation
from typing_extensions import TypedDict

from lg_visibility.chat._router import chat_router, sqlite_checkpointer
from lg_visibility.testing import FakeChatModel
from tests._support.chat import leftover_tasks

TIMEOUT = 10
ALICE = {"X-User-Id": "alice"}
BOB = {"X-User-Id": "bob"}
INTERNAL_MARK = "INTERNAL-PLAN-7f3a"


# -- a small graph that tags its own messages ----------------------------------------


class GatedModel(FakeChatModel):
    """FakeChatModel that, after its first two chunks, waits for `gate` before each chunk."""

    gate: SkipValidation[Any] = None
    log: SkipValidation[Any] = None

    async def _astream(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        seen = 0
        try:
            async for chunk in super()._astream(messages, stop, run_manager, **kw):
                seen += 1
                if seen > 1 and self.gate is not None:
                    await self.gate.wait()
                yield chunk
        except asyncio.CancelledError:
            if self.log is not None:
                self.log.append("cancelled")
            raise


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    visits: Annotated[list[str], operator.add]


def last_text(state: State) -> str:
    return str(state["messages"][-1].content)


def tag(message: BaseMessage, visibility: str = "user_visible") -> BaseMessage:
    message.response_metadata["visibility"] = visibility
    return message


class Age(BaseModel):
    age: int


def build_graph(
    checkpointer: Any, *, gate: asyncio.Event | None = None, log: list[str] | None = None
) -> Any:
    """planner (internal JSON) -> assistant (streams) -> [order | pair] -> END."""
    model = GatedModel(respond=lambda ms: f"You said: {ms[-1].content}", gate=gate, log=log)
    closing = FakeChatModel(responses=["Order PO-1 is created and approved."])

    def planner(state: State) -> dict[str, Any]:
        plan = AIMessage(content=json.dumps({"plan": INTERNAL_MARK}), name="planner")
        return {"messages": [tag(plan, "internal")]}

    async def assistant(state: State) -> dict[str, Any]:
        human = [m for m in state["messages"] if m.type == "human"][-1]
        if "boom" in str(human.content):
            raise RuntimeError(f"tool crashed with {INTERNAL_MARK}")
        reply = await model.ainvoke([human])
        return {"messages": [tag(reply)]}

    def route(state: State) -> Any:
        human = [m for m in state["messages"] if m.type == "human"][-1]
        text = str(human.content)
        if "order" in text:
            return "order"
        if "strict" in text:
            return "strict"
        if "pair" in text:
            return [Send("ask", {"messages": [], "visits": [name]}) for name in ("color", "size")]
        return END

    async def order(state: State) -> dict[str, Any]:
        data = interrupt({"type": "missing_data", "fields": ["partId", "quantity"]})
        decision = interrupt({"type": "approval", "summary": f"order with {data}"})
        if decision != "approve":
            return {"messages": [tag(AIMessage(content="Order cancelled."))]}
        reply = await closing.ainvoke(state["messages"])
        return {"messages": [tag(reply)]}

    def ask(state: State) -> dict[str, Any]:
        answer = interrupt({"type": "question", "field": state["visits"][0]})
        return {"messages": [tag(AIMessage(content=f"{state['visits'][0]}={answer}"))]}

    def strict(state: State) -> dict[str, Any]:
        # response_schema: langgraph validates the resume value before persisting it, so
        # a bad answer fails the run without sticking to the interrupt.
        answer = interrupt({"type": "question", "field": "age"}, response_schema=Age)
        return {"messages": [tag(AIMessage(content=f"age={answer.age}"))]}

    builder = StateGraph(State)
    builder.add_node("strict", strict)
    builder.add_node("planner", planner)
    builder.add_node("assistant", assistant)
    builder.add_node("order", order)
    builder.add_node("ask", ask)
    builder.add_edge(START, "planner")
    builder.add_edge("planner", "assistant")
    builder.add_conditional_edges("assistant", route, ["order", "ask", "strict", END])
    builder.add_edge("order", END)
    builder.add_edge("ask", END)
    builder.add_edge("strict", END)
    return builder.compile(checkpointer=checkpointer)


def make_app(graph: Any, **options: Any) -> FastAPI:
    app = FastAPI()
    app.include_router(chat_router(graph, **options))
    return app


@pytest.fixture
def app() -> FastAPI:
    return make_app(build_graph(InMemorySaver()))


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=TIMEOUT) as c:
        yield c


# -- helpers --------------------------------------------------------------------------


def parse_sse(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Parse an SSE body made of `event:`/`data:` blocks."""
    events = []
    for block in body.decode("utf-8").split("\n\n"):
        if not block:
            continue
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((fields["event"], json.loads(fields["data"])))
    return events


async def post_sse(
    client: httpx.AsyncClient, url: str, body: Any, headers: dict[str, str] = ALICE
) -> tuple[httpx.Response, list[tuple[str, dict[str, Any]]]]:
    response = await asyncio.wait_for(client.post(url, json=body, headers=headers), TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    return response, parse_sse(response.content)


def kinds(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [name for name, _ in events]


def live_view(events: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """What the user saw per assistant message id: tokens appended, then replaced by message."""
    shown: dict[str, str] = {}
    for name, data in events:
        if name == "token":
            shown[data["id"]] = shown.get(data["id"], "") + data["text"]
        elif name == "message":
            assert shown.get(data["id"], data["content"]) == data["content"]
            shown[data["id"]] = data["content"]
    return shown


async def start_thread(client: httpx.AsyncClient, message: str = "hello") -> str:
    response, _ = await post_sse(client, "/api/chat/stream", {"message": message})
    return response.headers["x-thread-id"]


def assert_json_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    if code is not None:
        assert response.json()["detail"]["code"] == code


# -- streaming ----------------------------------------------------------------------------


async def test_stream_new_thread_sends_tokens_message_done(client: httpx.AsyncClient) -> None:
    """A first message creates a thread and streams token, message, done."""
    response, events = await post_sse(client, "/api/chat/stream", {"message": "hello there"})
    thread_id = response.headers["x-thread-id"]
    assert kinds(events) == ["token", "token", "token", "token", "message", "done"]
    assert live_view(events) == {events[-2][1]["id"]: "You said: hello there"}
    assert events[-2][1]["source"] == "main"
    assert events[-1] == ("done", {"thread_id": thread_id, "interrupted": False})


async def test_stream_never_sends_internal_content(client: httpx.AsyncClient) -> None:
    """The internal planner message is in state but in no event."""
    response, _ = await post_sse(client, "/api/chat/stream", {"message": "hello"})
    assert INTERNAL_MARK not in response.text


async def test_stream_continues_an_existing_thread(client: httpx.AsyncClient) -> None:
    """A second message on the same thread answers and keeps the thread id."""
    thread_id = await start_thread(client, "one")
    response, events = await post_sse(
        client, "/api/chat/stream", {"message": "two", "thread_id": thread_id}
    )
    assert response.headers["x-thread-id"] == thread_id
    assert list(live_view(events).values()) == ["You said: two"]


async def test_order_flow_interrupts_twice_and_finishes(client: httpx.AsyncClient) -> None:
    """stream -> missing_data interrupt -> resume -> approval interrupt -> resume -> done."""
    response, first = await post_sse(client, "/api/chat/stream", {"message": "place an order"})
    thread_id = response.headers["x-thread-id"]
    assert kinds(first)[-2:] == ["interrupt", "done"]
    assert first[-2][1]["value"] == {"type": "missing_data", "fields": ["partId", "quantity"]}
    assert first[-2][1]["source"] == "main"
    assert first[-1][1] == {"thread_id": thread_id, "interrupted": True}

    _, second = await post_sse(
        client, f"/api/chat/{thread_id}/resume", {"resume": {"partId": 100, "quantity": 5}}
    )
    assert kinds(second) == ["interrupt", "done"]
    assert second[0][1]["value"]["type"] == "approval"
    assert second[-1][1]["interrupted"] is True

    _, third = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": "approve"})
    assert kinds(third)[-2:] == ["message", "done"]
    assert list(live_view(third).values()) == ["Order PO-1 is created and approved."]
    assert third[-1][1] == {"thread_id": thread_id, "interrupted": False}


async def test_resume_with_a_map_answers_two_pending_interrupts(client: httpx.AsyncClient) -> None:
    """With two interrupts pending, resume takes a map from interrupt id to value."""
    response, first = await post_sse(client, "/api/chat/stream", {"message": "pair please"})
    thread_id = response.headers["x-thread-id"]
    pending = {data["value"]["field"]: data["id"] for name, data in first if name == "interrupt"}
    assert sorted(pending) == ["color", "size"]
    resume = {pending["color"]: "red", pending["size"]: "XL"}
    _, second = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": resume})
    assert sorted(d["content"] for n, d in second if n == "message") == ["color=red", "size=XL"]
    assert second[-1][1]["interrupted"] is False


# -- history ------------------------------------------------------------------------------


async def test_history_equals_what_the_user_saw(client: httpx.AsyncClient) -> None:
    """After the order flow, the history holds exactly the live messages and no internal one."""
    response, first = await post_sse(client, "/api/chat/stream", {"message": "place an order"})
    thread_id = response.headers["x-thread-id"]
    _, second = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": {"partId": 1}})
    _, third = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": "approve"})
    live = live_view(first + second + third)
    history = (await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
    assert INTERNAL_MARK not in json.dumps(history)
    assert [m["role"] for m in history["messages"]] == ["user", "assistant", "assistant"]
    assert history["messages"][0]["content"] == "place an order"
    assert {m["id"]: m["content"] for m in history["messages"][1:]} == live
    assert history["interrupts"] == []


async def test_history_shows_the_pending_interrupt(client: httpx.AsyncClient) -> None:
    """While interrupted, the history carries the pending interrupt so a reload shows the form."""
    response, first = await post_sse(client, "/api/chat/stream", {"message": "order"})
    thread_id = response.headers["x-thread-id"]
    history = (await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
    assert history["interrupts"] == [{"id": first[-2][1]["id"], "value": first[-2][1]["value"]}]


async def test_threads_lists_own_threads_newest_first(client: httpx.AsyncClient) -> None:
    """GET /threads lists the caller's threads with titles, newest first, and no one else's."""
    older = await start_thread(client, "first   question")
    newer = await start_thread(client, "second question")
    listed = (await client.get("/api/chat/threads", headers=ALICE)).json()["threads"]
    assert [(t["thread_id"], t["title"]) for t in listed] == [
        (newer, "second question"),
        (older, "first question"),
    ]
    assert (await client.get("/api/chat/threads", headers=BOB)).json() == {"threads": []}


async def test_delete_removes_the_thread(client: httpx.AsyncClient) -> None:
    """DELETE answers 204; the thread is then gone from history and the list."""
    thread_id = await start_thread(client)
    assert (await client.delete(f"/api/chat/{thread_id}", headers=ALICE)).status_code == 204
    assert_json_error(
        await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE), 404, "thread_not_found"
    )
    assert (await client.get("/api/chat/threads", headers=ALICE)).json() == {"threads": []}


async def test_history_survives_a_restart_on_the_same_sqlite_file(tmp_path: Path) -> None:
    """A new app on the same SQLite file serves the same history and thread list."""
    db = tmp_path / "chat.sqlite"

    async def session(action: Callable[[httpx.AsyncClient], Any]) -> Any:
        saver: Any = sqlite_checkpointer(db)
        try:
            transport = httpx.ASGITransport(app=make_app(build_graph(saver)))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://t", timeout=TIMEOUT
            ) as c:
                return await action(c)
        finally:
            await saver.conn.close()

    async def flow(c: httpx.AsyncClient) -> tuple[str, Any, Any]:
        response, first = await post_sse(c, "/api/chat/stream", {"message": "place an order"})
        thread_id = response.headers["x-thread-id"]
        _, second = await post_sse(c, f"/api/chat/{thread_id}/resume", {"resume": {"partId": 1}})
        _, third = await post_sse(c, f"/api/chat/{thread_id}/resume", {"resume": "approve"})
        history = (await c.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
        return thread_id, live_view(first + second + third), history

    thread_id, live, before = await session(flow)

    async def reread(c: httpx.AsyncClient) -> tuple[Any, Any]:
        history = (await c.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
        threads = (await c.get("/api/chat/threads", headers=ALICE)).json()
        return history, threads

    after, threads = await session(reread)
    assert after == before
    assert {m["id"]: m["content"] for m in after["messages"] if m["role"] == "assistant"} == live
    assert [t["thread_id"] for t in threads["threads"]] == [thread_id]


# -- ownership ------------------------------------------------------------------------------


async def test_other_user_gets_404_everywhere(client: httpx.AsyncClient) -> None:
    """Bob gets 404 on stream, resume, history and delete of Alice's thread."""
    response, _ = await post_sse(client, "/api/chat/stream", {"message": "order"})
    thread_id = response.headers["x-thread-id"]
    attempts = [
        client.post(
            "/api/chat/stream", json={"message": "hi", "thread_id": thread_id}, headers=BOB
        ),
        client.post(f"/api/chat/{thread_id}/resume", json={"resume": {"partId": 1}}, headers=BOB),
        client.get(f"/api/chat/{thread_id}/messages", headers=BOB),
        client.delete(f"/api/chat/{thread_id}", headers=BOB),
    ]
    for attempt in attempts:
        assert_json_error(await attempt, 404, "thread_not_found")
    history = (await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
    assert len(history["interrupts"]) == 1


async def test_missing_user_header_is_401(client: httpx.AsyncClient) -> None:
    """Without the user header every route answers 401 with a JSON error."""
    assert_json_error(
        await client.post("/api/chat/stream", json={"message": "hi"}), 401, "unauthenticated"
    )
    assert_json_error(await client.get("/api/chat/threads"), 401, "unauthenticated")


async def test_user_id_dependency_is_pluggable() -> None:
    """A custom user_id dependency replaces the header."""
    from fastapi import Query

    async def from_query(user: str = Query(...)) -> str:
        return user

    app = make_app(build_graph(InMemorySaver()), user_id=from_query)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        response = await c.post("/api/chat/stream?user=carol", json={"message": "hi"})
        thread_id = response.headers["x-thread-id"]
        assert (await c.get(f"/api/chat/{thread_id}/messages?user=carol")).status_code == 200
        assert (await c.get(f"/api/chat/{thread_id}/messages?user=dave")).status_code == 404


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"message": ""}, 422),
        ({"message": "   \n"}, 422),
        ({"message": "x" * 201}, 413),
        ({}, 422),
        ({"message": 5}, 422),
        ({"message": "hi", "extra": 1}, 422),
        ({"message": "hi", "thread_id": "no-such-thread"}, 404),
    ],
)
async def test_stream_rejects_bad_input_with_json_4xx(body: dict[str, Any], status: int) -> None:
    """Empty, oversized, malformed or unknown-thread messages get a JSON 4xx, never a stream."""
    app = make_app(build_graph(InMemorySaver()), max_message_chars=200)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        assert_json_error(await c.post("/api/chat/stream", json=body, headers=ALICE), status)


async def test_stream_accepts_a_message_at_the_limit() -> None:
    """A message of exactly max_message_chars is accepted."""
    app = make_app(build_graph(InMemorySaver()), max_message_chars=200)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        _, events = await post_sse(c, "/api/chat/stream", {"message": "x" * 200})
    assert kinds(events)[-1] == "done"
    assert "error" not in kinds(events)


async def test_stream_rejects_non_json_body(client: httpx.AsyncClient) -> None:
    """A body that is not JSON is a 422 with a JSON error."""
    headers = {**ALICE, "content-type": "application/json"}
    assert_json_error(await client.post("/api/chat/stream", content=b"{nope", headers=headers), 422)


async def test_stream_to_an_interrupted_thread_is_409(client: httpx.AsyncClient) -> None:
    """A new message while an interrupt is pending is a 409 that points to resume."""
    thread_id = await start_thread(client, "order")
    response = await client.post(
        "/api/chat/stream", json={"message": "hi", "thread_id": thread_id}, headers=ALICE
    )
    assert_json_error(response, 409, "interrupt_pending")


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({}, 422, None),
        ({"value": 1}, 422, None),
        ({"resume": None}, 422, "invalid_resume"),
    ],
)
async def test_resume_rejects_malformed_bodies(
    client: httpx.AsyncClient, body: dict[str, Any], status: int, code: str | None
) -> None:
    """A resume body without a value is a JSON 422 and leaves the interrupt pending."""
    thread_id = await start_thread(client, "order")
    assert_json_error(
        await client.post(f"/api/chat/{thread_id}/resume", json=body, headers=ALICE), status, code
    )
    history = (await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
    assert len(history["interrupts"]) == 1


async def test_resume_with_nothing_pending_is_409(client: httpx.AsyncClient) -> None:
    """Resuming a thread that is not waiting is a 409."""
    thread_id = await start_thread(client, "hello")
    response = await client.post(
        f"/api/chat/{thread_id}/resume", json={"resume": "x"}, headers=ALICE
    )
    assert_json_error(response, 409, "nothing_to_resume")


async def test_resume_unknown_thread_is_404(client: httpx.AsyncClient) -> None:
    """Resuming a thread that does not exist is a 404."""
    response = await client.post("/api/chat/nope/resume", json={"resume": "x"}, headers=ALICE)
    assert_json_error(response, 404, "thread_not_found")


@pytest.mark.parametrize("resume", ["red", {"not-an-id": "red"}])
async def test_resume_of_two_pending_needs_a_map_of_their_ids(
    client: httpx.AsyncClient, resume: Any
) -> None:
    """With two interrupts pending, a single value or unknown ids is a 422."""
    thread_id = await start_thread(client, "pair")
    response = await client.post(
        f"/api/chat/{thread_id}/resume", json={"resume": resume}, headers=ALICE
    )
    assert_json_error(response, 422, "invalid_resume")


async def test_unknown_thread_history_and_delete_are_404(client: httpx.AsyncClient) -> None:
    """History and delete of an unknown thread are 404."""
    assert_json_error(
        await client.get("/api/chat/nope/messages", headers=ALICE), 404, "thread_not_found"
    )
    assert_json_error(await client.delete("/api/chat/nope", headers=ALICE), 404, "thread_not_found")


# -- failures inside the graph ---------------------------------------------------------------


async def test_graph_exception_becomes_error_then_done_and_thread_continues(
    client: httpx.AsyncClient,
) -> None:
    """A node that raises yields error then done without its text; the next message works."""
    response, events = await post_sse(client, "/api/chat/stream", {"message": "boom"})
    thread_id = response.headers["x-thread-id"]
    assert kinds(events) == ["error", "done"]
    assert events[0][1] == {
        "message": "The assistant failed while answering; please try again.",
        "type": "RuntimeError",
    }
    assert events[1][1] == {"thread_id": thread_id, "interrupted": False}
    assert INTERNAL_MARK not in response.text
    _, again = await post_sse(
        client, "/api/chat/stream", {"message": "fine now", "thread_id": thread_id}
    )
    assert list(live_view(again).values()) == ["You said: fine now"]


@pytest.mark.parametrize("as_map", [False, True])
async def test_resume_bad_value_is_422_naming_the_field_before_the_graph_runs(
    client: httpx.AsyncClient, as_map: bool
) -> None:
    """A resume value off the interrupt's schema is a 422 naming the field; a good one works."""
    response, first = await post_sse(client, "/api/chat/stream", {"message": "strict"})
    thread_id = response.headers["x-thread-id"]
    interrupt_id = first[-2][1]["id"]
    field = f"resume.{interrupt_id}.age" if as_map else "resume.age"

    def body(value: Any) -> dict[str, Any]:
        return {"resume": {interrupt_id: value} if as_map else value}

    bad = await client.post(
        f"/api/chat/{thread_id}/resume", json=body({"age": "old"}), headers=ALICE
    )
    assert_json_error(bad, 422, "invalid_resume")
    assert bad.json()["detail"] == {
        "code": "invalid_resume",
        "message": f'{field}: "old" is not of type "integer"',
        "field": field,
    }
    history = (await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
    assert [i["id"] for i in history["interrupts"]] == [interrupt_id]
    _, good = await post_sse(client, f"/api/chat/{thread_id}/resume", body({"age": 41}))
    assert [d["content"] for n, d in good if n == "message"] == ["age=41"]
    assert good[-1][1]["interrupted"] is False


def test_chat_router_requires_a_checkpointer() -> None:
    """A graph compiled without a checkpointer is rejected with the fix in the message."""
    with pytest.raises(ValueError, match="sqlite_checkpointer"):
        chat_router(build_graph(None))


@pytest.mark.parametrize("modes", [("messages",), ("messages", "values", "updates")])
def test_chat_router_validates_stream_mode(modes: tuple[str, ...]) -> None:
    """stream_mode must hold messages and values and nothing but custom besides."""
    with pytest.raises(ValueError, match="stream_mode"):
        chat_router(build_graph(InMemorySaver()), stream_mode=modes)


# -- transport: incremental delivery and disconnect, with a recording ASGI send --------------


class Recorder:
    """A recording ASGI `send` plus a `receive` that disconnects on demand."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.request = json.dumps(body).encode()
        self.sent: list[dict[str, Any]] = []
        self.first_token = asyncio.Event()
        self.disconnect = asyncio.Event()
        self._requested = False

    async def receive(self) -> dict[str, Any]:
        if not self._requested:
            self._requested = True
            return {"type": "http.request", "body": self.request, "more_body": False}
        await self.disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body" and b"event: token" in message.get("body", b""):
            self.first_token.set()

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


def scope(path: str, user: str = "alice") -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"content-type", b"application/json"),
            (b"x-user-id", user.encode()),
            (b"host", b"t"),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }


async def test_events_are_sent_one_by_one_while_the_model_is_still_generating() -> None:
    """The first token reaches ASGI send while the model waits: delivery is incremental."""
    gate = asyncio.Event()
    app = make_app(build_graph(InMemorySaver(), gate=gate))
    recorder = Recorder({"message": "hello there"})
    call = asyncio.ensure_future(app(scope("/api/chat/stream"), recorder.receive, recorder.send))
    await asyncio.wait_for(recorder.first_token.wait(), TIMEOUT)
    assert not call.done()
    early = recorder.bodies()
    assert early[0].startswith(b"event: token\n")
    assert all(body.startswith(b"event: token\n") for body in early)  # no message/done yet
    gate.set()
    await asyncio.wait_for(call, TIMEOUT)
    bodies = recorder.bodies()
    assert bodies[-1] == b""
    assert [b.split(b"\n", 1)[0] for b in bodies[:-1]] == [
        b"event: token",
        b"event: token",
        b"event: token",
        b"event: token",
        b"event: message",
        b"event: done",
    ]
    assert all(b.endswith(b"\n\n") and b.count(b"\n\n") == 1 for b in bodies[:-1])


async def test_client_disconnect_cancels_the_run_and_the_thread_continues() -> None:
    """A disconnect mid-stream cancels the model, leaves no task behind, and the thread goes on."""
    gate = asyncio.Event()
    log: list[str] = []
    saver = InMemorySaver()
    app = make_app(build_graph(saver, gate=gate, log=log))
    baseline = asyncio.all_tasks()
    recorder = Recorder({"message": "hello there"})
    call = asyncio.ensure_future(app(scope("/api/chat/stream"), recorder.receive, recorder.send))
    await asyncio.wait_for(recorder.first_token.wait(), TIMEOUT)
    recorder.disconnect.set()
    await asyncio.wait_for(call, TIMEOUT)
    assert log == ["cancelled"]
    assert b"event: done" not in b"".join(recorder.bodies())
    for _ in range(50):
        if leftover_tasks(baseline) == set():
            break
        await asyncio.sleep(0.01)
    assert leftover_tasks(baseline) == set()

    thread_id = dict(recorder.sent[0]["headers"])[b"x-thread-id"].decode()
    gate.set()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        _, events = await post_sse(
            c, "/api/chat/stream", {"message": "again", "thread_id": thread_id}
        )
        assert list(live_view(events).values()) == ["You said: again"]
        history = (await c.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
    assert [(m["role"], m["content"]) for m in history["messages"]] == [
        ("user", "hello there"),
        ("user", "again"),
        ("assistant", "You said: again"),
    ]


async def test_second_stream_on_a_busy_thread_is_409() -> None:
    """While a thread is answering, another message or a delete on it is a 409."""
    gate = asyncio.Event()
    gate.set()
    app = make_app(build_graph(InMemorySaver(), gate=gate))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        thread_id = await start_thread(c, "x")
    gate.clear()
    recorder = Recorder({"message": "hold this", "thread_id": thread_id})
    call = asyncio.ensure_future(app(scope("/api/chat/stream"), recorder.receive, recorder.send))
    await asyncio.wait_for(recorder.first_token.wait(), TIMEOUT)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        busy = await c.post(
            "/api/chat/stream", json={"message": "hi", "thread_id": thread_id}, headers=ALICE
        )
        assert_json_error(busy, 409, "thread_busy")
        assert_json_error(
            await c.delete(f"/api/chat/{thread_id}", headers=ALICE), 409, "thread_busy"
        )
    gate.set()
    await asyncio.wait_for(call, TIMEOUT)


async def test_transport_pings_a_quiet_stream_at_the_configured_interval() -> None:
    """While the model waits, the stream carries `: ping` comments, byte-exact, between tokens."""
    gate = asyncio.Event()
    app = make_app(build_graph(InMemorySaver(), gate=gate), ping=0.05)
    recorder = Recorder({"message": "hello there"})
    call = asyncio.ensure_future(app(scope("/api/chat/stream"), recorder.receive, recorder.send))
    await asyncio.wait_for(recorder.first_token.wait(), TIMEOUT)
    for _ in range(200):
        if recorder.bodies().count(b": ping\n\n") >= 2:
            break
        await asyncio.sleep(0.01)
    gate.set()
    await asyncio.wait_for(call, TIMEOUT)
    bodies = [b for b in recorder.bodies()[:-1] if b != b": ping\n\n"]
    assert recorder.bodies().count(b": ping\n\n") >= 2
    assert [b.split(b"\n", 1)[0] for b in bodies] == [b"event: token"] * 4 + [
        b"event: message",
        b"event: done",
    ]


async def test_transport_send_timeout_ends_the_response_and_runs_on_close() -> None:
    """A client that stops reading ends the response after send_timeout; on_close runs once."""
    from lg_visibility.chat._transport import sse_response

    closed: list[str] = []

    async def frames() -> AsyncIterator[bytes]:
        try:
            for n in range(100):
                yield f"data: {n}\n\n".encode()
        finally:
            closed.append("frames")

    async def on_close() -> None:
        closed.append("on_close")

    stalled = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if len(sent) == 3:  # start, one body, then the client stops reading
            await stalled.wait()

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    response = sse_response(frames(), on_close=on_close, ping=0, send_timeout=0.05)
    await asyncio.wait_for(response({"type": "http", "method": "GET"}, receive, send), TIMEOUT)
    assert closed == ["frames", "on_close"]
    assert [m.get("body") for m in sent[1:]] == [b"data: 0\n\n", b"data: 1\n\n"]
