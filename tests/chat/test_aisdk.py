"""The Vercel AI SDK UI message stream: our parts, assembled by the real `ai` package in node.

The demo app is served by uvicorn on 127.0.0.1; `POST /api/chat/ui` bodies are those of
`useChat`'s `DefaultChatTransport`; the HTTP body goes to `readUIMessageStream` (via
`tests/_support/aisdk.py`). The oracle is the graph's markers: every internal output
carries one (`ORDER_INTERNAL_MARKERS`, `INCIDENT_INTERNAL_MARKERS`); the control runs the
same route on the raw graph and sees them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lg_visibility.chat._aisdk import UIStreamEncoder
from lg_visibility.chat._mapper import ChatEvent
from lg_visibility.chat._sse import UI_DONE, encode_part
from lg_visibility.demo.graphs import INCIDENT_INTERNAL_MARKERS, ORDER_INTERNAL_MARKERS
from tests._support.aisdk import parse_ui_message_stream
from tests._support.chat import marked_demo_app, serve_in_thread

TIMEOUT = 20
ALICE = {"X-User-Id": "alice"}
BOB = {"X-User-Id": "bob"}
INTERNAL = INCIDENT_INTERNAL_MARKERS + ORDER_INTERNAL_MARKERS


def meta(source: str, provenance: dict[str, str] | None = None) -> dict[str, Any]:
    if provenance is None:
        return {"lg_visibility": {"source": source}}
    return {"lg_visibility": {"source": source, "provenance": provenance}}


def ui_body(chat_id: str, text: str, **extra: Any) -> dict[str, Any]:
    """A `useChat` request body for a new user message."""
    message = {"id": f"u-{text[:8]}", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": chat_id, "messages": [message], "trigger": "submit-message", **extra}


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with serve_in_thread(lambda: marked_demo_app(token_delay=0.002)) as url:
        yield url


@pytest.fixture(scope="module")
def raw_base() -> Iterator[str]:
    with serve_in_thread(lambda: marked_demo_app(raw=True)) as url:
        yield url


def post_ui(base: str, body: dict[str, Any], headers: dict[str, str] = ALICE) -> httpx.Response:
    with httpx.Client(base_url=base, timeout=TIMEOUT) as client:
        return client.post("/api/chat/ui", json=body, headers=headers)


def assembled(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.content.endswith(b"\n\ndata: [DONE]\n\n")
    return parse_ui_message_stream(response.content)


def without_ids(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in p.items() if k not in ("toolCallId", "id")} for p in parts]


# -- the encoder, unit ---------------------------------------------------------------------


def test_ui_stream_encoder_maps_each_chat_event_to_its_parts() -> None:
    """Tokens, a tool call, its result, an interrupt, a card and done give the exact parts;
    the producer the message carries is on its text-end and tool-input-available, not on
    any part sent per token."""
    producer = {"path": "agent/model", "agent": "agent"}
    events = [
        ChatEvent("token", {"id": "m1", "source": "agent", "text": "Hi "}),
        ChatEvent("token", {"id": "m1", "source": "agent", "text": "there"}),
        ChatEvent(
            "tool_start",
            {"tool_call_id": "c1", "message_id": "m1", "source": "agent", "name": "find"},
        ),
        ChatEvent("tool_args", {"tool_call_id": "c1", "source": "agent", "delta": '{"q":1}'}),
        ChatEvent(
            "message",
            {
                "id": "m1",
                "source": "agent",
                "provenance": producer,
                "role": "assistant",
                "content": "Hi there",
                "tool_calls": [{"id": "c1", "name": "find", "args": {"q": 1}}],
            },
        ),
        ChatEvent(
            "tool_result",
            {
                "tool_call_id": "c1",
                "source": "agent",
                "name": "find",
                "content": "ok",
                "status": "success",
            },
        ),
        ChatEvent("tool_end", {"tool_call_id": "c1", "source": "agent", "status": "success"}),
        ChatEvent("custom", {"source": "cards", "data": {"type": "card", "text": "T"}}),
        ChatEvent("interrupt", {"id": "i1", "source": "desk", "value": {"q": "?"}}),
        ChatEvent("done", {"thread_id": "t", "interrupted": True}),
    ]
    encoder = UIStreamEncoder("msg-1")
    parts = [part for event in events for part in encoder.encode(event)]
    assert parts == [
        {"type": "start", "messageId": "msg-1"},
        {"type": "text-start", "id": "m1", "providerMetadata": meta("agent")},
        {"type": "text-delta", "id": "m1", "delta": "Hi "},
        {"type": "text-delta", "id": "m1", "delta": "there"},
        {
            "type": "tool-input-start",
            "toolCallId": "c1",
            "toolName": "find",
            "providerMetadata": meta("agent"),
        },
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"q":1}'},
        {"type": "text-end", "id": "m1", "providerMetadata": meta("agent", producer)},
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "find",
            "input": {"q": 1},
            "providerMetadata": meta("agent", producer),
        },
        {"type": "tool-output-available", "toolCallId": "c1", "output": "ok"},
        {"type": "data-card", "data": {"value": {"type": "card", "text": "T"}, "source": "cards"}},
        {
            "type": "data-interrupt",
            "id": "i1",
            "data": {"id": "i1", "value": {"q": "?"}, "source": "desk"},
        },
        {"type": "finish", "messageMetadata": {"thread_id": "t", "interrupted": True}},
    ]
    body = b"".join(encode_part(p) for p in parts) + UI_DONE
    message = parse_ui_message_stream(body)
    assert [p["type"] for p in message["parts"]] == [
        "text",
        "tool-find",
        "data-card",
        "data-interrupt",
    ]
    # The AI SDK keeps the metadata of a text part's text-end, and a tool's call metadata.
    assert message["parts"][0]["providerMetadata"] == meta("agent", producer)
    assert message["parts"][1]["callProviderMetadata"] == meta("agent", producer)


def test_ui_stream_encoder_error_status_and_unstreamed_message() -> None:
    """A whole message arrives as start/delta/end; a failed tool is tool-output-error."""
    encoder = UIStreamEncoder("m")
    parts = (
        encoder.encode(
            ChatEvent(
                "message",
                {
                    "id": "a",
                    "source": "s",
                    "role": "assistant",
                    "content": "All",
                    "tool_calls": [{"id": "c", "name": "t", "args": {}}],
                },
            )
        )
        + encoder.encode(
            ChatEvent(
                "tool_result",
                {
                    "tool_call_id": "c",
                    "source": "s",
                    "name": "t",
                    "content": "boom",
                    "status": "error",
                },
            )
        )
        + encoder.encode(ChatEvent("error", {"message": "failed", "type": "RuntimeError"}))
    )
    assert [p["type"] for p in parts] == [
        "start",
        "text-start",
        "text-delta",
        "text-end",
        "tool-input-start",
        "tool-input-available",
        "tool-output-error",
        "error",
    ]
    assert parts[6] == {"type": "tool-output-error", "toolCallId": "c", "errorText": "boom"}


# -- over HTTP, assembled by the ai package ------------------------------------------------


def test_aisdk_incident_message_holds_only_the_visible_text_and_cards(base: str) -> None:
    """The incident run assembles to the two visible answers, each with its producer, and
    two cards; nothing internal."""
    response = post_ui(base, ui_body("incident-1", "I want a refund"))
    message = assembled(response)
    assert message["role"] == "assistant"
    assert message["metadata"] == {"thread_id": "incident-1", "interrupted": False}
    assert without_ids(message["parts"]) == [
        {
            "type": "text",
            "text": "SUBVISIBLE Refunds go back to the card you paid with.",
            # The demo's `incident` node runs the incident graph; its knowledge_subgraph's
            # `answer` node wrote this message.
            "providerMetadata": meta(
                "knowledge_subgraph", {"path": "incident/knowledge_subgraph/answer"}
            ),
            "state": "done",
        },
        {
            "type": "data-card",
            "data": {
                "value": {
                    "type": "card",
                    "card_type": "insight",
                    "text": "INSCARD Most refund requests follow a late delivery.",
                },
                "source": "insight_subgraph",
            },
        },
        {
            "type": "data-card",
            "data": {
                "value": {
                    "type": "card",
                    "card_type": "static",
                    "text": "INSCARD Scenario: refund. See the refund FAQ.",
                },
                "source": "insight_subgraph",
            },
        },
        {
            "type": "text",
            "text": "RESPVISIBLE Your refund will reach your card within 5 days.",
            "providerMetadata": meta("incident", {"path": "incident/response_node"}),
            "state": "done",
        },
    ]
    assert [m for m in INTERNAL if m.encode() in response.content] == []


def test_aisdk_control_raw_graph_leaks_into_the_assembled_message(raw_base: str) -> None:
    """Control: the same route on the raw graph assembles internal markers into the message."""
    message = assembled(post_ui(raw_base, ui_body("raw-1", "I want a refund")))
    text = json.dumps(message)
    assert [m for m in INCIDENT_INTERNAL_MARKERS if m in text] == list(INCIDENT_INTERNAL_MARKERS)


def test_aisdk_tool_call_assembles_to_one_tool_part(base: str) -> None:
    """The status agent's visible tool call becomes one tool part with its input and output."""
    message = assembled(post_ui(base, ui_body("status-1", "What is the status of my parcel?")))
    parts = message["parts"]
    assert [p["type"] for p in parts] == ["text", "tool-order_status", "text"]
    tool = parts[1]
    assert {k: v for k, v in tool.items() if k != "toolCallId"} == {
        "type": "tool-order_status",
        "state": "output-available",
        "input": {"order_ref": "PO-1001"},
        "output": "Order PO-1001: packed, leaves the warehouse tomorrow.",
        "callProviderMetadata": meta(
            "status_agent", {"path": "status/model", "agent": "status_agent"}
        ),
    }
    assert [p["text"] for p in parts if p["type"] == "text"] == [
        "Let me check that order.",
        "Good news: Order PO-1001: packed, leaves the warehouse tomorrow.",
    ]


def test_aisdk_order_flow_interrupts_and_the_next_posts_resume(base: str) -> None:
    """The order flow: two data-interrupt parts answered by the next POSTs, then the answers."""
    first = assembled(post_ui(base, ui_body("order-1", "Please create order PO-1001")))
    assert [p["type"] for p in first["parts"]] == ["data-interrupt"]
    ask = first["parts"][0]["data"]
    assert ask["source"] == "order_agent"
    assert ask["value"]["fields"] == ["phone"]
    assert first["metadata"] == {"thread_id": "order-1", "interrupted": True}

    # The phone form wants {"phone": ...}; the bare text is a 422 naming the field.
    bad = post_ui(base, ui_body("order-1", "+1 555 0100"))
    assert bad.status_code == 422
    assert bad.json()["detail"]["code"] == "invalid_resume"
    assert bad.json()["detail"]["field"] == "resume"

    second = assembled(post_ui(base, ui_body("order-1", "", resume={"phone": "+1 555 0100"})))
    assert [p["type"] for p in second["parts"]] == ["data-interrupt"]
    assert second["parts"][0]["data"]["value"]["type"] == "approval"

    third = assembled(post_ui(base, ui_body("order-1", "approve")))
    assert [(p["type"], p["text"]) for p in third["parts"]] == [
        ("text", "ORDERVISIBLE Order PO-1001 is created for ACME."),
        ("text", "MAINVISIBLE Done: the order desk handled your request."),
    ]
    assert third["metadata"] == {"thread_id": "order-1", "interrupted": False}
    text = json.dumps([first, second, third])
    assert [m for m in ORDER_INTERNAL_MARKERS if m in text] == []


def test_aisdk_resume_stream_is_204_without_an_active_run(base: str) -> None:
    """GET .../stream is 204 for an unknown chat and for a chat whose run has ended."""
    assembled(post_ui(base, ui_body("idle-1", "I want a refund")))
    with httpx.Client(base_url=base, timeout=TIMEOUT, headers=ALICE) as client:
        assert client.get("/api/chat/ui/idle-1/stream").status_code == 204
        assert client.get("/api/chat/ui/never-seen/stream").status_code == 204


async def test_aisdk_resume_stream_replays_the_active_run_from_its_start() -> None:
    """A reloaded client's GET during a run gets the whole run from its start, like the POST."""
    with serve_in_thread(lambda: marked_demo_app(token_delay=0.05)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT, headers=ALICE) as client:
            async with client.stream(
                "POST", "/api/chat/ui", json=ui_body("live-1", "refund?")
            ) as post:
                chunks = post.aiter_bytes()
                first = await asyncio.wait_for(anext(chunks), TIMEOUT)
                assert first.startswith(b'data: {"type":"start"')
                resumed = await asyncio.wait_for(client.get("/api/chat/ui/live-1/stream"), TIMEOUT)
                rest = b"".join([chunk async for chunk in chunks])
    assert resumed.status_code == 200
    assert resumed.content == first + rest
    assert assembled(resumed)["parts"] == parse_ui_message_stream(first + rest)["parts"]


def test_aisdk_routes_keep_ownership(base: str) -> None:
    """Another user's chat id is 404 on POST and on the resume stream."""
    assembled(post_ui(base, ui_body("mine-1", "I want a refund")))
    other = post_ui(base, ui_body("mine-1", "let me in"), headers=BOB)
    assert other.status_code == 404
    assert other.json()["detail"]["code"] == "thread_not_found"
    with httpx.Client(base_url=base, timeout=TIMEOUT, headers=BOB) as client:
        assert client.get("/api/chat/ui/mine-1/stream").status_code == 404


def test_aisdk_rejects_regenerate_and_bad_bodies_in_one_error_shape(base: str) -> None:
    """Regenerate is a 422 naming trigger; a body without id is FastAPI's 422 in our shape."""
    regen = post_ui(base, ui_body("regen-1", "hi", trigger="regenerate-message"))
    assert regen.status_code == 422
    assert regen.json() == {
        "detail": {
            "code": "unsupported_trigger",
            "message": "trigger 'regenerate-message' is not supported; send 'submit-message'.",
            "field": "trigger",
        }
    }
    missing = post_ui(base, {"messages": []})
    assert missing.status_code == 422
    assert missing.json() == {
        "detail": {"code": "invalid_request", "message": "id: Field required", "field": "id"}
    }
