"""`agui_router` over real HTTP (uvicorn on 127.0.0.1), decoded with ag_ui.core's event types.

The oracle is the demo graphs' markers: internal markers must appear in no byte of any
event (text, tool calls, steps, state and messages snapshots), visible ones must arrive.
The control serves the same graph unwrapped through ag-ui's own
`add_langgraph_fastapi_endpoint` and shows every internal marker leaking. Identity,
ownership and the busy rule are those of the chat routes: another user's threadId is 404,
a forged header or a bad token is 401, a second run while one answers is 409.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Literal

import httpx
import jwt
import pytest
from ag_ui.core import Event, EventType
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGenerationChunk
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import interrupt
from pydantic import TypeAdapter

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility.chat import AGUI_PROVENANCE_EVENT, agui_router, bearer_user_id, chat_router
from lg_visibility.demo.graphs import (
    INCIDENT_INTERNAL_MARKERS,
    INCIDENT_POLICY,
    INCIDENT_VISIBLE_MARKERS,
    ORDER_INTERNAL_MARKERS,
    ORDER_POLICY,
    ORDER_VISIBLE_MARKERS,
    incident_builder,
    order_builder,
)
from lg_visibility.testing import FakeChatModel
from tests._support.chat import serve_in_thread

TIMEOUT = 30.0
pytestmark = pytest.mark.timeout(90)
EVENTS: TypeAdapter[Any] = TypeAdapter(Event)
ALICE = {"X-User-Id": "alice"}
SECRET = "an-agui-test-secret-of-32-bytes-or-more"
SUB_ANSWER = "SUBVISIBLE Refunds go back to the card you paid with."
FINAL_ANSWER = "RESPVISIBLE Your refund will reach your card within 5 days."


def run_input(thread_id: str, run_id: str, text: str | None = None, **extra: Any) -> dict[str, Any]:
    """A RunAgentInput body as an AG-UI client sends it (camelCase)."""
    messages = [] if text is None else [{"id": f"u-{run_id}", "role": "user", "content": text}]
    body = {
        "threadId": thread_id,
        "runId": run_id,
        "messages": messages,
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    return {**body, **extra}


def decode(body: str) -> list[Any]:
    """The SSE body as ag_ui.core events (`data:` lines; comments such as pings skipped)."""
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(
            line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")
        )
        if data:
            events.append(EVENTS.validate_json(data))
    return events


def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url, json=body, headers=headers, timeout=TIMEOUT)


def run(url: str, body: dict[str, Any], headers: dict[str, str] = ALICE) -> tuple[str, list[Any]]:
    """POST one run; its raw body and its decoded events."""
    response = post(url, body, headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return response.text, decode(response.text)


def kinds(events: list[Any]) -> list[str]:
    return [event.type.value for event in events]


def leaked(text: str, markers: tuple[str, ...]) -> list[str]:
    return [marker for marker in markers if marker in text]


def interrupt_values(events: list[Any]) -> list[Any]:
    return [
        json.loads(e.value)
        for e in events
        if e.type == EventType.CUSTOM and e.name == "on_interrupt"
    ]


def text_deltas(events: list[Any]) -> list[str]:
    return [e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT]


@pytest.fixture(scope="module")
def order_url() -> Iterator[str]:
    """The order flow, wrapped, behind `agui_router` (interrupt outcome on)."""

    def make() -> Any:
        from fastapi import FastAPI

        graph = with_visibility(order_builder().compile(checkpointer=InMemorySaver()), ORDER_POLICY)
        app = FastAPI()
        app.include_router(agui_router(graph, emit_interrupt_outcome=True))
        return app

    with serve_in_thread(make) as base:
        yield f"{base}/api/agui"


def incident_app(*, wrapped: bool) -> Callable[[], Any]:
    def make() -> Any:
        from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
        from fastapi import FastAPI

        graph = incident_builder().compile(checkpointer=InMemorySaver())
        app = FastAPI()
        if wrapped:
            app.include_router(agui_router(with_visibility(graph, INCIDENT_POLICY)))
        else:  # the control: ag-ui's own endpoint on the raw graph
            agent = LangGraphAgent(name="raw", graph=graph, emit_raw_events=False)
            add_langgraph_fastapi_endpoint(app, agent, "/api/agui")
        return app

    return make


def test_agui_router_incident_events_carry_no_internal_content() -> None:
    """Every event of the incident run is free of internal markers; the visible answers
    stream as text and are the assistant messages of the final MESSAGES_SNAPSHOT, whose
    producers the next event names."""
    with serve_in_thread(incident_app(wrapped=True)) as base:
        body, events = run(f"{base}/api/agui", run_input("inc-1", "r1", "I want a refund"))
    assert leaked(body, INCIDENT_INTERNAL_MARKERS) == []
    assert leaked(body, INCIDENT_VISIBLE_MARKERS) == list(INCIDENT_VISIBLE_MARKERS)
    assert "".join(text_deltas(events)) == SUB_ANSWER + FINAL_ANSWER
    assert {EventType.TOOL_CALL_START, EventType.RAW} & {e.type for e in events} == set()
    assert [e.step_name for e in events if e.type == EventType.STEP_STARTED] == [
        "input_parser_node",
        "answer",
        "response_node",
    ]
    final = [e for e in events if e.type == EventType.MESSAGES_SNAPSHOT][-1]
    assert [(m.role, m.content) for m in final.messages] == [
        ("user", "I want a refund"),
        ("assistant", SUB_ANSWER),
        ("assistant", FINAL_ANSWER),
    ]
    assert kinds(events)[0] == "RUN_STARTED" and kinds(events)[-1] == "RUN_FINISHED"
    # Right after the snapshot, the producers of its messages, as the incident graph
    # builds them: knowledge_subgraph's `answer` node, then the root's response_node.
    producers = events[events.index(final) + 1]
    assert (producers.type, producers.name) == (EventType.CUSTOM, AGUI_PROVENANCE_EVENT)
    _, sub, answer = final.messages
    assert producers.value == {
        sub.id: {"path": "knowledge_subgraph/answer"},
        answer.id: {"path": "response_node"},
    }


def test_agui_router_control_raw_graph_leaks_every_internal_marker() -> None:
    """Control: the same graph unwrapped behind ag-ui's own endpoint leaks every marker."""
    with serve_in_thread(incident_app(wrapped=False)) as base:
        body, _ = run(f"{base}/api/agui", run_input("inc-raw", "r1", "I want a refund"))
    assert leaked(body, INCIDENT_INTERNAL_MARKERS) == list(INCIDENT_INTERNAL_MARKERS)


def test_agui_router_order_flow_interrupts_and_resumes(order_url: str) -> None:
    """Missing-data interrupt, resume by `resume[]`, approval interrupt, resume by the
    legacy forwardedProps.command.resume, then both visible answers; nothing internal."""
    body1, first = run(order_url, run_input("order-1", "r1", "Please create order PO-1001"))
    assert [v["type"] for v in interrupt_values(first)] == ["missing_data"]
    assert interrupt_values(first)[0]["fields"] == ["phone"]
    assert first[-1].type == EventType.RUN_FINISHED
    (ask,) = first[-1].outcome.interrupts
    resume = [{"interruptId": ask.id, "status": "resolved", "payload": {"phone": "555-0100"}}]
    body2, second = run(order_url, run_input("order-1", "r2", resume=resume))
    assert [v["type"] for v in interrupt_values(second)] == ["approval"]
    assert "phone 555-0100" in interrupt_values(second)[0]["summary"]
    legacy = {"command": {"resume": "approve"}}
    body3, third = run(order_url, run_input("order-1", "r3", forwardedProps=legacy))
    assert interrupt_values(third) == []
    assert "".join(text_deltas(third)) == (
        "ORDERVISIBLE Order PO-1001 is created for ACME."
        "MAINVISIBLE Done: the order desk handled your request."
    )
    assert third[-1].type == EventType.RUN_FINISHED and third[-1].outcome is None
    sent = body1 + body2 + body3
    assert leaked(sent, ORDER_INTERNAL_MARKERS) == []
    assert leaked(sent, ORDER_VISIBLE_MARKERS) == list(ORDER_VISIBLE_MARKERS)


def test_agui_router_bad_resume_is_422_naming_the_field(order_url: str) -> None:
    """A blank phone number is refused before the graph runs; the interrupt stays pending."""
    _, first = run(order_url, run_input("order-bad", "r1", "Please create order PO-1001"))
    (ask,) = first[-1].outcome.interrupts
    bad = [{"interruptId": ask.id, "status": "resolved", "payload": {"phone": ""}}]
    response = post(order_url, run_input("order-bad", "r2", resume=bad), ALICE)
    assert response.status_code == 422
    assert response.json()["detail"]["field"] == "resume[0].payload.phone"
    good = [{"interruptId": ask.id, "status": "resolved", "payload": {"phone": "1"}}]
    _, second = run(order_url, run_input("order-bad", "r3", resume=good))
    assert [v["type"] for v in interrupt_values(second)] == ["approval"]


def two_questions(*, wrapped: bool, schema: Any = None) -> Callable[[], Any]:
    """`a` and `b` run in parallel, each asking with `interrupt()` (with `schema` as its
    `response_schema`, if given) and saying the answer."""

    def ask(name: str) -> Callable[[Any], dict[str, Any]]:
        def node(state: Any) -> dict[str, Any]:
            kwargs = {} if schema is None else {"response_schema": schema}
            answer = interrupt({"q": name}, **kwargs)
            return {"messages": [AIMessage(f"VISIBLE {name} got {answer}", id=f"m-{name}")]}

        return node

    def make() -> Any:
        from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
        from fastapi import FastAPI

        builder = StateGraph(MessagesState)
        builder.add_node("a", ask("a"))
        builder.add_node("b", ask("b"))
        builder.add_edge(START, "a")
        builder.add_edge(START, "b")
        graph = builder.compile(checkpointer=InMemorySaver())
        app = FastAPI()
        if wrapped:
            enforced = with_visibility(graph, VisibilityPolicy())
            app.include_router(agui_router(enforced, emit_interrupt_outcome=True))
        else:  # the control: ag-ui's own endpoint
            agent = LangGraphAgent(name="raw", graph=graph, emit_interrupt_outcome=True)
            add_langgraph_fastapi_endpoint(app, agent, "/api/agui")
        return app

    return make


def _said(events: list[Any]) -> list[str]:
    snapshots = [e for e in events if e.type == EventType.MESSAGES_SNAPSHOT]
    return [m.content for m in snapshots[-1].messages if m.role == "assistant"]


def _pending(events: list[Any]) -> dict[str, str]:
    """The questions the run ends waiting for: `q` -> interrupt id."""
    assert events[-1].type == EventType.RUN_FINISHED
    outcome = events[-1].outcome
    pending = outcome.interrupts if outcome else ()
    return {i.metadata["langgraph"]["raw"]["q"]: i.id for i in pending}


def test_agui_router_answers_two_parallel_questions_together_or_one_at_a_time() -> None:
    """Two `interrupt()`s pending at once: `resume[]` with both answers resumes both, with
    one answers that one and the other asks again, and a cancelled entry gives its question
    LangGraphAgent's cancel value. The control: ag-ui's own endpoint fails every such run
    (LangGraph refuses one value for several pending interrupts)."""
    with serve_in_thread(two_questions(wrapped=False)) as base:
        _, first = run(f"{base}/api/agui", run_input("t2", "r1", "hello"))
        ids = _pending(first)
        both = [{"interruptId": ids[q], "status": "resolved", "payload": f"yes-{q}"} for q in "ab"]
        _, control = run(f"{base}/api/agui", run_input("t2", "r2", resume=both))
        assert kinds(control)[-1] == "RUN_ERROR"

    with serve_in_thread(two_questions(wrapped=True)) as base:
        url = f"{base}/api/agui"
        _, first = run(url, run_input("both", "r1", "hello"))
        ids = _pending(first)
        assert sorted(ids) == ["a", "b"]
        both = [{"interruptId": ids[q], "status": "resolved", "payload": f"yes-{q}"} for q in "ab"]
        _, done = run(url, run_input("both", "r2", resume=both))
        assert (_said(done), _pending(done)) == (["VISIBLE a got yes-a", "VISIBLE b got yes-b"], {})

        _, first = run(url, run_input("one", "r1", "hello"))
        ids = _pending(first)
        one = [{"interruptId": ids["a"], "status": "resolved", "payload": "yes-a"}]
        _, second = run(url, run_input("one", "r2", resume=one))
        assert _said(second) == ["VISIBLE a got yes-a"]
        assert list(_pending(second)) == ["b"]
        cancel = [{"interruptId": _pending(second)["b"], "status": "cancelled"}]
        _, third = run(url, run_input("one", "r3", resume=cancel))
        assert _said(third)[-1].startswith("VISIBLE b got {'__agui_cancelled__': True")


def test_agui_router_refuses_a_repeated_entry_and_a_cancel_the_schema_refuses() -> None:
    """Before the run, each a 422 naming the field, both questions still pending: an
    interrupt answered twice in one `resume[]`, and a cancelled entry for a question whose
    `response_schema` does not take LangGraphAgent's cancel value (LangGraph would fail the
    run on it, after answering the other). Then the right answers go through."""
    with serve_in_thread(two_questions(wrapped=True, schema=Literal["yes", "no"])) as base:
        url = f"{base}/api/agui"
        _, first = run(url, run_input("refused", "r1", "hello"))
        ids = _pending(first)
        twice = [
            {"interruptId": ids["a"], "status": "resolved", "payload": "yes"},
            {"interruptId": ids["a"], "status": "resolved", "payload": "no"},
        ]
        response = post(url, run_input("refused", "r2", resume=twice), ALICE)
        assert response.status_code == 422, response.text
        assert response.json()["detail"]["field"] == "resume[1].interruptId"
        cancel = [
            {"interruptId": ids["a"], "status": "resolved", "payload": "yes"},
            {"interruptId": ids["b"], "status": "cancelled"},
        ]
        response = post(url, run_input("refused", "r3", resume=cancel), ALICE)
        assert response.status_code == 422, response.text
        assert response.json()["detail"]["field"] == "resume[1].status"
        both = [
            {"interruptId": ids["a"], "status": "resolved", "payload": "yes"},
            {"interruptId": ids["b"], "status": "resolved", "payload": "no"},
        ]
        _, done = run(url, run_input("refused", "r4", resume=both))
        assert (_said(done), _pending(done)) == (["VISIBLE a got yes", "VISIBLE b got no"], {})


def test_agui_router_legacy_resume_with_two_questions_pending_is_refused_or_mapped() -> None:
    """`forwardedProps.command.resume` with two questions pending: one plain value is a 422
    naming the field (before, the run failed inside the stream); a map of ids is
    LangGraph's own answer per question, and an id already answered in it is a 409."""
    with serve_in_thread(two_questions(wrapped=True)) as base:
        url = f"{base}/api/agui"
        _, first = run(url, run_input("legacy", "r1", "hello"))
        ids = _pending(first)
        plain = {"command": {"resume": "yes"}}
        response = post(url, run_input("legacy", "r2", forwardedProps=plain), ALICE)
        assert response.status_code == 422, response.text
        assert response.json()["detail"]["field"] == "forwardedProps.command.resume"
        by_id = {"command": {"resume": {ids["a"]: "yes-a"}}}
        _, second = run(url, run_input("legacy", "r3", forwardedProps=by_id))
        assert (_said(second), list(_pending(second))) == (["VISIBLE a got yes-a"], ["b"])
        response = post(url, run_input("legacy", "r4", forwardedProps=by_id), ALICE)
        assert response.status_code == 409, response.text
        assert response.json()["detail"]["code"] == "stale_answer"


def test_agui_router_another_users_thread_is_404(order_url: str) -> None:
    """Bob cannot run, resume or read alice's thread: 404, the same as a missing thread."""
    run(order_url, run_input("order-own", "r1", "Please create order PO-1001"))
    for body in (
        run_input("order-own", "r2", "hello"),
        run_input("order-own", "r3", forwardedProps={"command": {"resume": {"phone": "1"}}}),
    ):
        response = post(order_url, body, {"X-User-Id": "bob"})
        assert (response.status_code, response.json()["detail"]["code"]) == (
            404,
            "thread_not_found",
        )


def test_agui_router_missing_header_is_401(order_url: str) -> None:
    """Without the identity header the run is refused before anything happens."""
    response = post(order_url, run_input("order-anon", "r1", "hi"), {})
    assert (response.status_code, response.json()["detail"]["code"]) == (401, "unauthenticated")


def test_agui_router_malformed_input_is_422_in_our_error_shape(order_url: str) -> None:
    """A body that is not a RunAgentInput gets our one error shape, naming the field."""
    response = post(order_url, {"runId": "r1"}, ALICE)
    assert response.status_code == 422
    assert response.json()["detail"]["code"] == "invalid_request"
    assert response.json()["detail"]["field"] == "threadId"


def test_agui_router_refuses_an_unwrapped_graph() -> None:
    """Serving a graph that is not visibility-wrapped is a ValueError naming the fix."""
    with pytest.raises(ValueError, match=r"with_visibility\(graph, policy\)"):
        agui_router(incident_builder().compile(checkpointer=InMemorySaver()))


# -- identity: bearer tokens ------------------------------------------------------------------


def token(sub: str, *, key: str = SECRET, ttl: float = 300) -> dict[str, str]:
    value = jwt.encode({"sub": sub, "exp": int(time.time() + ttl)}, key, algorithm="HS256")
    return {"Authorization": f"Bearer {value}"}


@pytest.fixture(scope="module")
def guarded_url() -> Iterator[str]:
    """The order flow behind `agui_router` guarded by `bearer_user_id`."""

    def make() -> Any:
        from fastapi import FastAPI

        graph = with_visibility(order_builder().compile(checkpointer=InMemorySaver()), ORDER_POLICY)
        app = FastAPI()
        app.include_router(agui_router(graph, user_id=bearer_user_id(secret=SECRET)))
        return app

    with serve_in_thread(make) as base:
        yield f"{base}/api/agui"


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "unauthenticated"),
        ({"X-User-Id": "alice"}, "unauthenticated"),
        ({"Authorization": "Bearer not.a.jwt"}, "invalid_token"),
        (token("alice", ttl=-10), "token_expired"),
        (token("alice", key="x" * 40), "invalid_token"),
    ],
    ids=["none", "forged-header", "garbage-token", "expired-token", "other-secret"],
)
def test_agui_router_bad_credentials_are_401(
    guarded_url: str, headers: dict[str, str], code: str
) -> None:
    """No token, a forged X-User-Id, garbage, an expired or foreign-signed token: 401."""
    response = post(guarded_url, run_input("tok-1", "r1", "Please create order PO-1001"), headers)
    assert (response.status_code, response.json()["detail"]["code"]) == (401, code)


def test_agui_router_tokens_own_threads(guarded_url: str) -> None:
    """Alice's token runs and resumes her thread; bob's valid token gets 404 on it."""
    _, first = run(
        guarded_url, run_input("tok-2", "r1", "Please create order PO-1001"), token("alice")
    )
    assert [v["type"] for v in interrupt_values(first)] == ["missing_data"]
    legacy = {"command": {"resume": {"phone": "555-0100"}}}
    response = post(guarded_url, run_input("tok-2", "r2", forwardedProps=legacy), token("bob"))
    assert (response.status_code, response.json()["detail"]["code"]) == (404, "thread_not_found")
    _, second = run(guarded_url, run_input("tok-2", "r3", forwardedProps=legacy), token("alice"))
    assert [v["type"] for v in interrupt_values(second)] == ["approval"]


# -- streaming and the busy rule: a model that waits after its first token ---------------------


def gated_model(gate: threading.Event, reply: str) -> FakeChatModel:
    """A fake model that, after its first token, waits until the test opens `gate`."""

    class Gated(FakeChatModel):
        async def _astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
            first = True
            async for chunk in super()._astream(*args, **kwargs):
                yield chunk
                if first:
                    first = False
                    await asyncio.to_thread(gate.wait, TIMEOUT)

    return Gated(responses=[reply])


def test_agui_router_streams_tokens_before_the_answer_is_done_and_busy_is_409() -> None:
    """The first token reaches the client while the model still waits; meanwhile a second
    AG-UI run and a chat-route message on that thread are 409; after it, all tokens."""
    gate = threading.Event()

    def make() -> Any:
        from fastapi import FastAPI

        model = gated_model(gate, "one two three")

        async def talk(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        builder = StateGraph(MessagesState)  # pydantic-readable state, as LangGraphAgent needs
        builder.add_node("talk", talk)
        builder.add_edge(START, "talk")
        graph = with_visibility(builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy())
        app = FastAPI()
        app.include_router(agui_router(graph))
        app.include_router(chat_router(graph))
        return app

    with serve_in_thread(make) as base, httpx.Client(timeout=TIMEOUT) as client:
        url = f"{base}/api/agui"
        seen: list[Any] = []
        with client.stream("POST", url, json=run_input("gate-1", "r1", "hi"), headers=ALICE) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            for line in lines:
                if line.startswith("data:"):
                    seen.append(EVENTS.validate_json(line[5:].strip()))
                    if seen[-1].type == EventType.TEXT_MESSAGE_CONTENT:
                        break
            assert text_deltas(seen) == ["one "]
            again = client.post(url, json=run_input("gate-1", "r2", "again"), headers=ALICE)
            chat = client.post(
                f"{base}/api/chat/stream",
                json={"message": "again", "thread_id": "gate-1"},
                headers=ALICE,
            )
            gate.set()
            seen.extend(
                EVENTS.validate_json(line[5:].strip()) for line in lines if line.startswith("data:")
            )
    assert (again.status_code, again.json()["detail"]["code"]) == (409, "thread_busy")
    assert (chat.status_code, chat.json()["detail"]["code"]) == (409, "thread_busy")
    assert text_deltas(seen) == ["one ", "two ", "three"]
    assert seen[-1].type == EventType.RUN_FINISHED


def test_agui_router_is_mounted_by_the_demo_app() -> None:
    """`lg-visibility serve`'s app answers AG-UI at /api/agui, with ownership and no leak."""
    from tests._support.chat import marked_demo_app

    with serve_in_thread(marked_demo_app) as base:
        url = f"{base}/api/agui"
        body, events = run(url, run_input("demo-1", "r1", "Please create order PO-1001"))
        other = post(url, run_input("demo-1", "r2", "hello"), {"X-User-Id": "bob"})
        health = httpx.get(f"{url}/health", timeout=TIMEOUT)
    assert [v["type"] for v in interrupt_values(events)] == ["missing_data"]
    assert leaked(body, ORDER_INTERNAL_MARKERS + INCIDENT_INTERNAL_MARKERS) == []
    assert (other.status_code, other.json()["detail"]["code"]) == (404, "thread_not_found")
    assert health.json() == {"status": "ok", "agent": {"name": "assistant"}}


def failing_app(*, wrapped: bool) -> Callable[[], Any]:
    """An internal node whose parser fails on the model's text (it quotes it)."""

    def make() -> Any:
        from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
        from fastapi import FastAPI
        from langchain_core.output_parsers import JsonOutputParser

        chain = FakeChatModel(responses=["ERRSECRET not json"]) | JsonOutputParser()

        def plan(state: MessagesState) -> dict[str, Any]:
            chain.invoke(state["messages"])
            return {}

        builder = StateGraph(MessagesState)
        builder.add_node("plan", plan, metadata={"visibility": "internal"})
        builder.add_edge(START, "plan")
        graph = builder.compile(checkpointer=InMemorySaver())
        app = FastAPI()
        if wrapped:
            app.include_router(agui_router(with_visibility(graph, VisibilityPolicy())))
        else:  # the control: ag-ui's own endpoint on the raw graph
            agent = LangGraphAgent(name="raw", graph=graph, emit_raw_events=False)
            add_langgraph_fastapi_endpoint(app, agent, "/api/agui")
        return app

    return make


@pytest.mark.parametrize("wrapped", [True, False], ids=["agui_router", "control"])
def test_agui_router_run_error_never_quotes_the_exception(wrapped: bool) -> None:
    """RUN_ERROR carries a fixed message, as our SSE route's error event: LangGraphAgent puts
    the exception's text there, which here quotes an internal model's output (the control,
    ag-ui's own endpoint, sends it)."""
    with serve_in_thread(failing_app(wrapped=wrapped)) as base:
        body, events = run(f"{base}/api/agui", run_input("err-1", "r1", "plan it"))
    errors = [e for e in events if e.type == EventType.RUN_ERROR]
    assert len(errors) == 1
    assert ("ERRSECRET" in body) is not wrapped
    if wrapped:
        assert errors[0].message == "The assistant failed while answering; please try again."
