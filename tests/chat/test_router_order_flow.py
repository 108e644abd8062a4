"""Seed 003 over HTTP: the order flow on the visibility-wrapped graph, and the demo app.

stream -> missing-data interrupt -> resume -> approval interrupt -> resume -> answers,
with every event in order, no internal marker in any byte sent, and a history that
equals what the user saw live, also after restarting the app on the same SQLite file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from lg_visibility import with_visibility
from lg_visibility.chat._router import chat_router, sqlite_checkpointer
from lg_visibility.demo.app import create_app
from lg_visibility.demo.graphs import (
    INCIDENT_INTERNAL_MARKERS,
    INCIDENT_VISIBLE_MARKERS,
    ORDER_INTERNAL_MARKERS,
    ORDER_POLICY,
    ORDER_VISIBLE_MARKERS,
    order_builder,
)
from tests._support.chat import leftover_tasks

TIMEOUT = 15
USER = {"X-User-Id": "alice"}
INTERNAL = ORDER_INTERNAL_MARKERS + INCIDENT_INTERNAL_MARKERS


def parse_sse(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in body.decode("utf-8").split("\n\n"):
        if block:
            fields = dict(line.split(": ", 1) for line in block.split("\n"))
            events.append((fields["event"], json.loads(fields["data"])))
    return events


async def post_sse(
    c: httpx.AsyncClient, url: str, body: Any
) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    response = await asyncio.wait_for(c.post(url, json=body, headers=USER), TIMEOUT)
    assert response.status_code == 200, response.text
    for marker in INTERNAL:
        assert marker not in response.text, marker
    return response.headers["x-thread-id"], parse_sse(response.content)


def collapse(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, Any]]:
    """Event names with runs of tokens of one message collapsed to one ('token', source)."""
    out: list[tuple[str, Any]] = []
    for name, data in events:
        entry = (name, data.get("source"))
        if name == "token" and out and out[-1] == entry:
            continue
        out.append(entry)
    return out


def live_view(events: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """Per message id: tokens appended, then replaced by the whole message (seed 000 rule)."""
    shown: dict[str, str] = {}
    for name, data in events:
        if name == "token":
            shown[data["id"]] = shown.get(data["id"], "") + data["text"]
        elif name == "message":
            assert shown.get(data["id"], data["content"]) == data["content"]
            shown[data["id"]] = data["content"]
    return shown


async def order_flow(c: httpx.AsyncClient) -> tuple[str, list[list[tuple[str, dict[str, Any]]]]]:
    thread_id, first = await post_sse(
        c, "/api/chat/stream", {"message": "Please create order PO-1001"}
    )
    _, second = await post_sse(
        c, f"/api/chat/{thread_id}/resume", {"resume": {"phone": "555-0100"}}
    )
    _, third = await post_sse(c, f"/api/chat/{thread_id}/resume", {"resume": "approve"})
    return thread_id, [first, second, third]


@pytest.fixture
async def order_client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    saver: Any = sqlite_checkpointer(tmp_path / "orders.sqlite")
    graph = with_visibility(order_builder().compile(checkpointer=saver), ORDER_POLICY)
    app = FastAPI()
    app.include_router(chat_router(graph))
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=TIMEOUT
        ) as c:
            yield c
    finally:
        await saver.conn.close()


async def test_order_flow_events_in_order_without_internal_content(
    order_client: httpx.AsyncClient,
) -> None:
    """The seed 003 flow yields exactly interrupt, interrupt, then both streamed answers."""
    thread_id, (first, second, third) = await order_flow(order_client)
    assert collapse(first) == [("interrupt", "order_agent"), ("done", None)]
    assert first[0][1]["value"]["type"] == "missing_data"
    assert first[0][1]["value"]["fields"] == ["phone"]
    assert first[-1][1] == {"thread_id": thread_id, "interrupted": True}
    assert collapse(second) == [("interrupt", "order_agent"), ("done", None)]
    assert second[0][1]["value"]["type"] == "approval"
    assert collapse(third) == [
        ("token", "order_agent"),
        ("message", "order_agent"),
        ("token", "main"),
        ("message", "main"),
        ("done", None),
    ]
    assert third[-1][1] == {"thread_id": thread_id, "interrupted": False}
    sent = json.dumps([first, second, third])
    assert [m for m in ORDER_VISIBLE_MARKERS if m not in sent] == []


async def test_order_flow_reject_is_answered(order_client: httpx.AsyncClient) -> None:
    """Rejecting at the approval interrupt ends with the 'not created' answer."""
    thread_id, _ = await post_sse(order_client, "/api/chat/stream", {"message": "order please"})
    await post_sse(order_client, f"/api/chat/{thread_id}/resume", {"resume": {"phone": "1"}})
    _, last = await post_sse(order_client, f"/api/chat/{thread_id}/resume", {"resume": "reject"})
    assert any("was not created" in text for text in live_view(last).values())


async def test_order_flow_resume_by_interrupt_id_map(order_client: httpx.AsyncClient) -> None:
    """The same flow resumed with {interrupt_id: value} maps (what the UI sends) completes."""
    thread_id, first = await post_sse(order_client, "/api/chat/stream", {"message": "order please"})
    ask = first[0][1]["id"]
    _, second = await post_sse(
        order_client, f"/api/chat/{thread_id}/resume", {"resume": {ask: {"phone": "1"}}}
    )
    approve = second[0][1]["id"]
    _, third = await post_sse(
        order_client, f"/api/chat/{thread_id}/resume", {"resume": {approve: "approve"}}
    )
    assert third[-1][1]["interrupted"] is False
    assert len(live_view(third)) == 2


async def test_order_flow_history_equals_live_view(order_client: httpx.AsyncClient) -> None:
    """The history is the user's message plus exactly the streamed answers, nothing internal."""
    thread_id, runs = await order_flow(order_client)
    history = (await order_client.get(f"/api/chat/{thread_id}/messages", headers=USER)).json()
    text = json.dumps(history)
    assert [m for m in INTERNAL if m in text] == []
    assert [(m["role"], m["content"]) for m in history["messages"][:1]] == [
        ("user", "Please create order PO-1001")
    ]
    live = live_view([event for run in runs for event in run])
    assert [m["id"] for m in history["messages"][1:]] == list(live)
    assert {m["id"]: m["content"] for m in history["messages"][1:]} == live
    assert history["interrupts"] == []


# -- the demo app -------------------------------------------------------------------------


async def run_app(db: Path, action: Any) -> Any:
    """Run `action(client)` against create_app(db_path=db, marked=True) with its lifespan."""
    app = create_app(db_path=db, marked=True)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", timeout=TIMEOUT
        ) as c:
            return await action(c)


async def test_demo_app_history_survives_restart(tmp_path: Path) -> None:
    """After the order flow, a restarted demo app on the same file shows the same history."""
    db = tmp_path / "demo.sqlite"

    async def flow(c: httpx.AsyncClient) -> Any:
        thread_id, runs = await order_flow(c)
        history = (await c.get(f"/api/chat/{thread_id}/messages", headers=USER)).json()
        return thread_id, live_view([e for run in runs for e in run]), history

    thread_id, live, before = await run_app(db, flow)

    async def reread(c: httpx.AsyncClient) -> Any:
        history = (await c.get(f"/api/chat/{thread_id}/messages", headers=USER)).json()
        threads = (await c.get("/api/chat/threads", headers=USER)).json()["threads"]
        return history, threads

    after, threads = await run_app(db, reread)
    assert after == before
    assert {m["id"]: m["content"] for m in after["messages"] if m["role"] == "assistant"} == live
    assert [t["thread_id"] for t in threads] == [thread_id]


async def test_demo_app_incident_sends_cards_and_answers_only(tmp_path: Path) -> None:
    """The incident branch streams the two visible answers and two cards, nothing internal."""

    async def ask(c: httpx.AsyncClient) -> Any:
        return await post_sse(c, "/api/chat/stream", {"message": "Where is my refund?"})

    _, events = await run_app(tmp_path / "demo.sqlite", ask)
    assert [name for name, _ in collapse(events)] == [
        "token",
        "message",
        "custom",
        "custom",
        "token",
        "message",
        "done",
    ]
    sent = json.dumps(events)
    assert [m for m in INCIDENT_VISIBLE_MARKERS if m not in sent] == []


async def test_demo_app_status_agent_sends_a_tool_card(tmp_path: Path) -> None:
    """The status branch streams a visible tool call, its result, then the answer."""

    async def ask(c: httpx.AsyncClient) -> Any:
        return await post_sse(c, "/api/chat/stream", {"message": "What is the status of my order?"})

    _, events = await run_app(tmp_path / "demo.sqlite", ask)
    assert [name for name, _ in collapse(events)] == [
        "token",
        "tool_start",
        "tool_args",
        "tool_args",
        "tool_args",
        "message",
        "tool_result",
        "tool_end",
        "token",
        "message",
        "done",
    ]


async def test_demo_app_serves_the_ui(tmp_path: Path) -> None:
    """GET / is the chat page and its script and stylesheet are served."""

    async def fetch(c: httpx.AsyncClient) -> list[httpx.Response]:
        return [await c.get(path) for path in ("/", "/static/app.js", "/static/style.css")]

    page, script, style = await run_app(tmp_path / "demo.sqlite", fetch)
    assert page.status_code == 200 and 'id="composer"' in page.text
    assert script.status_code == 200 and "readStream" in script.text
    assert style.status_code == 200


async def test_demo_app_history_of_a_tool_call(tmp_path: Path) -> None:
    """The history of the status branch holds the tool call, its result and the answer, each
    with its producer."""

    async def ask(c: httpx.AsyncClient) -> Any:
        thread_id, events = await post_sse(c, "/api/chat/stream", {"message": "Track my order"})
        history = (await c.get(f"/api/chat/{thread_id}/messages", headers=USER)).json()
        return events, history

    events, history = await run_app(tmp_path / "demo.sqlite", ask)
    call = next(data for name, data in events if name == "tool_start")
    result = next(data for name, data in events if name == "tool_result")
    user, asks, tool, answer = history["messages"]
    assert user == {"id": user["id"], "role": "user", "content": "Track my order"}
    assert asks["tool_calls"] == [
        {"id": call["tool_call_id"], "name": "order_status", "args": {"order_ref": "PO-1001"}}
    ]
    assert tool == {
        "id": tool["id"],
        "role": "tool",
        "tool_call_id": call["tool_call_id"],
        "name": "order_status",
        "provenance": {"path": "status/tools", "agent": "status_agent"},
        "content": result["content"],
        "status": "success",
    }
    # The producers, as the demo graph builds them: status_agent's model and tools nodes
    # inside the `status` node, then the model again for the answer.
    assert asks["provenance"] == {"path": "status/model", "agent": "status_agent"}
    assert answer["provenance"] == {"path": "status/model", "agent": "status_agent"}
    assert result["provenance"] == tool["provenance"]
    assert answer["content"] == live_view(events)[answer["id"]]


async def test_demo_app_disconnect_cancels_the_wrapped_run(tmp_path: Path) -> None:
    """A client leaving mid-answer cancels the enforced run; no task is left; the thread goes on."""
    app = create_app(db_path=tmp_path / "demo.sqlite", token_delay=0.01, marked=True)
    request = json.dumps({"message": "Where is my refund?"}).encode()
    sent: list[dict[str, Any]] = []
    first_token, leave = asyncio.Event(), asyncio.Event()
    asked = False

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": request, "more_body": False}
        await leave.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if b"event: token" in message.get("body", b""):
            first_token.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/chat/stream",
        "raw_path": b"/api/chat/stream",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"x-user-id", b"alice")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }
    async with app.router.lifespan_context(app):
        baseline = asyncio.all_tasks()
        call = asyncio.ensure_future(app(scope, receive, send))
        await asyncio.wait_for(first_token.wait(), TIMEOUT)
        leave.set()
        await asyncio.wait_for(call, TIMEOUT)
        body = b"".join(m.get("body", b"") for m in sent)
        assert b"event: done" not in body
        for _ in range(100):
            if leftover_tasks(baseline) == set():
                break
            await asyncio.sleep(0.01)
        assert leftover_tasks(baseline) == set()
        thread_id = dict(sent[0]["headers"])[b"x-thread-id"].decode()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", timeout=TIMEOUT
        ) as c:
            _, events = await post_sse(
                c, "/api/chat/stream", {"message": "Refund?", "thread_id": thread_id}
            )
            assert events[-1][1] == {"thread_id": thread_id, "interrupted": False}
            history = (await c.get(f"/api/chat/{thread_id}/messages", headers=USER)).json()
    # The second run's answer, its two cards after the knowledge answer, then the final answer.
    assert [m["role"] for m in history["messages"]] == [
        "user",
        "user",
        "assistant",
        "custom",
        "custom",
        "assistant",
    ]
    answers = [m for m in history["messages"] if m["role"] == "assistant"]
    assert [m["content"] for m in answers] == list(live_view(events).values())
    cards = [d["data"] for n, d in events if n == "custom"]
    assert [m["data"] for m in history["messages"] if m["role"] == "custom"] == cards
