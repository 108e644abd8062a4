"""Static breakpoints (`interrupt_before` / `interrupt_after`) in the chat routes.

LangGraph records no interrupt for a static breakpoint: the run ends, `state.interrupts` is
empty and `state.next` names the steps still to run. The routes show it as an interrupt
(`id` "breakpoint:<checkpoint id>", `value` `{"type": "breakpoint", "next": [...]}`),
refuse a new message while it waits (LangGraph would drop the pending tool step and leave
the model's tool call unanswered), and continue the run on any answer, with no input: a
`Command(resume=value)` would also answer the next step's first `interrupt()` with that
value, which the control shows on the raw graph.

Ground truth: the tool results, the scripted answers, and a marker in what an internal
planner says, which must never leave.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility.chat import ChatStreamMapper, achat_events, chat_events, chat_router
from lg_visibility.chat._mapper import ChatEvent
from lg_visibility.testing import FakeChatModel
from tests._support.aisdk import parse_ui_message_stream
from tests.chat.test_aisdk import ui_body
from tests.chat.test_router import (
    ALICE,
    TIMEOUT,
    assert_json_error,
    kinds,
    parse_sse,
    post_sse,
)

pytestmark = pytest.mark.timeout(TIMEOUT * 3)

SECRET = "SECRET-PLAN-51c9"
CALL = {"id": "call-weather", "name": "weather", "args": {"city": "Oslo"}}


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"SUNNY in {city}"


@tool("weather")
def asking_weather(city: str) -> str:
    """The weather in a city, once a human agrees."""
    answer = interrupt({"question": f"look up {city}?"})
    return f"SUNNY in {city}, agreed {answer}"


@tool("weather")
def broken_weather(city: str) -> str:
    """The weather in a city; the service is down."""
    raise RuntimeError("weather service down")


def _assistant(tools: Any) -> StateGraph[Any]:
    """An internal planner, then a visible model that calls the tool once and answers."""
    planner = FakeChatModel(responses=[f"{SECRET} plan"])
    model = FakeChatModel(
        responses=[AIMessage("VISIBLE checking", tool_calls=[CALL]), "VISIBLE it is sunny"]
    )
    builder: StateGraph[Any] = StateGraph(MessagesState)
    builder.add_node("plan", lambda s: {"messages": [planner.invoke(s["messages"])]})
    builder.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    builder.add_node("tools", tools)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder


def breakpoint_graph(where: str, the_tool: Any = weather) -> Any:
    """The assistant stopping before its tools step (`before`), after its model step
    (`after`), or before its tools step inside a subgraph (`subgraph`); wrapped."""
    tools = ToolNode([the_tool], handle_tool_errors=False)
    if where == "subgraph":
        root: StateGraph[Any] = StateGraph(MessagesState)
        root.add_node("assistant", _assistant(tools).compile(interrupt_before=["tools"]))
        root.add_edge(START, "assistant")
        compiled = root.compile(checkpointer=InMemorySaver())
        return with_visibility(compiled, VisibilityPolicy(internal=["assistant/plan"]))
    static = {"before": {"interrupt_before": ["tools"]}, "after": {"interrupt_after": ["agent"]}}
    compiled = _assistant(tools).compile(checkpointer=InMemorySaver(), **static[where])
    return with_visibility(compiled, VisibilityPolicy(internal=["plan"]))


def _app(graph: Any) -> FastAPI:
    app = FastAPI()
    app.include_router(chat_router(graph))
    return app


@pytest.fixture
async def client_for() -> AsyncIterator[Any]:
    clients: list[httpx.AsyncClient] = []

    def make(graph: Any) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=_app(graph))
        client = httpx.AsyncClient(transport=transport, base_url="http://test", timeout=TIMEOUT)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


def _of(events: list[tuple[str, dict[str, Any]]], kind: str) -> list[dict[str, Any]]:
    return [data for name, data in events if name == kind]


@pytest.mark.parametrize(
    ("where", "next_step"), [("before", "tools"), ("after", "tools"), ("subgraph", "tools")]
)
async def test_a_breakpoint_is_shown_as_an_interrupt_and_any_answer_continues(
    client_for: Any, where: str, next_step: str
) -> None:
    client = client_for(breakpoint_graph(where))
    first, events = await post_sse(client, "/api/chat/stream", {"message": "weather?"})
    thread_id = first.headers["x-thread-id"]
    assert kinds(events)[-2:] == ["interrupt", "done"]
    (paused,) = _of(events, "interrupt")
    assert paused["id"].startswith("breakpoint:")
    assert paused["value"] == {"type": "breakpoint", "next": [next_step]}
    assert paused["source"] == "main"
    assert events[-1][1] == {"thread_id": thread_id, "interrupted": True}
    assert [d["name"] for d in _of(events, "tool_start")] == ["weather"]
    assert _of(events, "tool_result") == []  # stopped before the tool ran

    history = (await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
    assert history["interrupts"] == [{"id": paused["id"], "value": paused["value"]}]
    busy = await client.post(
        "/api/chat/stream", json={"message": "hello?", "thread_id": thread_id}, headers=ALICE
    )
    assert_json_error(busy, 409, "interrupt_pending")

    _, resumed = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": True})
    assert [d["content"] for d in _of(resumed, "tool_result")] == ["SUNNY in Oslo"]
    assert [d["content"] for d in _of(resumed, "message")] == ["VISIBLE it is sunny"]
    assert _of(resumed, "interrupt") == []
    assert resumed[-1][1] == {"thread_id": thread_id, "interrupted": False}

    history = (await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
    assert history["interrupts"] == []
    assert [m["content"] for m in history["messages"]][-2:] == [
        "SUNNY in Oslo",
        "VISIBLE it is sunny",
    ]
    for text in (first.text, str(resumed), str(history)):
        assert SECRET not in text


async def test_answering_a_breakpoint_leaves_the_tools_own_question_to_the_user(
    client_for: Any,
) -> None:
    client = client_for(breakpoint_graph("before", asking_weather))
    first, _ = await post_sse(client, "/api/chat/stream", {"message": "weather?"})
    thread_id = first.headers["x-thread-id"]

    _, resumed = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": "go on"})
    (asked,) = _of(resumed, "interrupt")
    assert asked["value"] == {"question": "look up Oslo?"}
    assert _of(resumed, "tool_result") == []
    assert resumed[-1][1]["interrupted"] is True

    _, answered = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": "yes"})
    assert [d["content"] for d in _of(answered, "tool_result")] == ["SUNNY in Oslo, agreed yes"]


async def test_control_a_resume_command_at_a_breakpoint_answers_the_tools_question() -> None:
    """Why the router continues a breakpoint with no input: LangGraph hands the value of
    `Command(resume=...)` to the next `interrupt()`, which then never asks."""
    graph = breakpoint_graph("before", asking_weather)
    config = {"configurable": {"thread_id": "control"}}
    await graph.ainvoke({"messages": [("user", "weather?")]}, config)
    assert (await graph.aget_state(config)).next == ("tools",)
    out = await graph.ainvoke(Command(resume="go on"), config)
    assert "SUNNY in Oslo, agreed go on" in [m.content for m in out["messages"]]


async def test_a_step_that_failed_is_not_a_breakpoint(client_for: Any) -> None:
    client = client_for(breakpoint_graph("before", broken_weather))
    first, _ = await post_sse(client, "/api/chat/stream", {"message": "weather?"})
    thread_id = first.headers["x-thread-id"]
    _, resumed = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": True})
    assert kinds(resumed) == ["error", "done"]
    assert resumed[-1][1]["interrupted"] is False
    history = (await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
    assert history["interrupts"] == []
    _, again = await post_sse(
        client, "/api/chat/stream", {"message": "never mind", "thread_id": thread_id}
    )
    assert again[-1][0] == "done"


async def test_the_ai_sdk_route_shows_a_breakpoint_and_the_next_message_continues(
    client_for: Any,
) -> None:
    client = client_for(breakpoint_graph("before"))
    first = await client.post("/api/chat/ui", json=ui_body("t-bp", "weather?"), headers=ALICE)
    second = await client.post("/api/chat/ui", json=ui_body("t-bp", "go on"), headers=ALICE)

    paused = parse_ui_message_stream(first.content)
    (data,) = [p["data"] for p in paused["parts"] if p["type"] == "data-interrupt"]
    assert data["id"].startswith("breakpoint:")
    assert data["value"] == {"type": "breakpoint", "next": ["tools"]}
    (card,) = [p for p in paused["parts"] if p["type"] == "tool-weather"]
    assert card["state"] == "input-available"

    done = parse_ui_message_stream(second.content)
    (card,) = [p for p in done["parts"] if p["type"] == "tool-weather"]
    assert (card["state"], card["input"], card["output"]) == (
        "output-available",
        CALL["args"],
        "SUNNY in Oslo",
    )
    assert [p["text"] for p in done["parts"] if p["type"] == "text"] == ["VISIBLE it is sunny"]
    assert SECRET not in first.text + second.text


def _steps(*names: str, before: list[str], gate: asyncio.Event | None = None) -> Any:
    """Nodes run one after the other, each writing a visible message; `gate` holds the
    first until it is set."""
    builder: StateGraph[Any] = StateGraph(MessagesState)
    for i, name in enumerate(names):

        async def node(state: Any, name: str = name, first: bool = i == 0) -> dict[str, Any]:
            if first and gate is not None:
                await gate.wait()
            return {"messages": [AIMessage(f"VISIBLE {name}", id=f"m-{name}")]}

        builder.add_node(name, node)
        builder.add_edge(names[i - 1] if i else START, name)
    compiled = builder.compile(checkpointer=InMemorySaver(), interrupt_before=before)
    internal = [name for name in names if name.startswith("secret")]
    return with_visibility(compiled, VisibilityPolicy(internal=internal))


async def test_a_thread_whose_run_is_under_way_waits_for_nothing(client_for: Any) -> None:
    """While its run has steps to run it is busy, not at a breakpoint (as `useStream`
    shows no breakpoint while loading)."""
    gate = asyncio.Event()
    client = client_for(_steps("slow", "review", before=["review"], gate=gate))
    started = asyncio.ensure_future(
        client.post("/api/chat/stream", json={"message": "go"}, headers=ALICE)
    )
    thread_id = None
    for _ in range(200):
        listed = (await client.get("/api/chat/threads", headers=ALICE)).json()["threads"]
        if listed:
            thread_id = listed[0]["thread_id"]
            break
        await asyncio.sleep(0.01)
    assert thread_id is not None
    history = (await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
    assert history["interrupts"] == []
    busy = await client.post(
        "/api/chat/stream", json={"message": "again", "thread_id": thread_id}, headers=ALICE
    )
    assert_json_error(busy, 409, "thread_busy")
    gate.set()
    response = await asyncio.wait_for(started, TIMEOUT)
    (paused,) = [d for n, d in parse_sse(response.content) if n == "interrupt"]
    assert paused["value"] == {"type": "breakpoint", "next": ["review"]}


async def test_a_continue_sent_again_does_not_pass_the_next_breakpoint(client_for: Any) -> None:
    client = client_for(_steps("draft", "approve", "pay", before=["approve", "pay"]))
    first, events = await post_sse(client, "/api/chat/stream", {"message": "go"})
    thread_id = first.headers["x-thread-id"]
    (one,) = _of(events, "interrupt")
    _, resumed = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": {one["id"]: 1}})
    (two,) = _of(resumed, "interrupt")
    assert two["id"] != one["id"]
    assert two["value"] == {"type": "breakpoint", "next": ["pay"]}
    again = await client.post(
        f"/api/chat/{thread_id}/resume", json={"resume": {one["id"]: 1}}, headers=ALICE
    )
    assert_json_error(again, 409, "stale_answer")
    _, paid = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": {two["id"]: 1}})
    assert [d["content"] for d in _of(paid, "message")] == ["VISIBLE pay"]


async def test_two_pauses_in_one_subgraph_step_have_their_own_ids(client_for: Any) -> None:
    model = FakeChatModel(
        responses=[
            AIMessage("VISIBLE one", tool_calls=[CALL]),
            AIMessage("VISIBLE two", tool_calls=[{**CALL, "id": "call-again"}]),
            "VISIBLE done",
        ]
    )
    inner: StateGraph[Any] = StateGraph(MessagesState)
    inner.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    inner.add_node("tools", ToolNode([weather]))
    inner.add_edge(START, "agent")
    inner.add_conditional_edges("agent", tools_condition)
    inner.add_edge("tools", "agent")
    root: StateGraph[Any] = StateGraph(MessagesState)
    root.add_node("assistant", inner.compile(interrupt_before=["tools"]))
    root.add_edge(START, "assistant")
    client = client_for(
        with_visibility(root.compile(checkpointer=InMemorySaver()), VisibilityPolicy())
    )
    first, events = await post_sse(client, "/api/chat/stream", {"message": "weather?"})
    thread_id = first.headers["x-thread-id"]
    (one,) = _of(events, "interrupt")
    _, resumed = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": True})
    (two,) = _of(resumed, "interrupt")
    assert one["id"] != two["id"]
    _, done = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": {two["id"]: 1}})
    assert done[-1][1]["interrupted"] is False


async def test_an_internal_steps_name_is_not_shown(client_for: Any) -> None:
    client = client_for(_steps("draft", "secret_step", "reply", before=["secret_step", "reply"]))
    first, events = await post_sse(client, "/api/chat/stream", {"message": "go"})
    (paused,) = _of(events, "interrupt")
    assert paused["value"] == {"type": "breakpoint", "next": []}
    assert "secret_step" not in first.text


def _asking(before: list[str], *, first_asks: bool, gate: asyncio.Event | None = None) -> Any:
    """`ask` then `pay`: the one named by `first_asks` calls `interrupt()` (and then waits
    for `gate`), the other is stopped before by a breakpoint."""

    async def ask(state: Any) -> dict[str, Any]:
        answer = interrupt({"question": "pay whom?"}) if first_asks else "bob"
        if gate is not None:
            await gate.wait()
        return {"messages": [AIMessage(f"VISIBLE will pay {answer}")]}

    async def pay(state: Any) -> dict[str, Any]:
        sure = "yes" if first_asks else interrupt({"question": "really pay?"})
        return {"messages": [AIMessage(f"VISIBLE paid {sure}")]}

    builder: StateGraph[Any] = StateGraph(MessagesState)
    builder.add_node("ask", ask)
    builder.add_node("pay", pay)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "pay")
    compiled = builder.compile(checkpointer=InMemorySaver(), interrupt_before=before)
    return with_visibility(compiled, VisibilityPolicy())


@pytest.mark.parametrize("first_asks", [True, False])
async def test_an_answer_sent_again_never_answers_the_next_pause(
    client_for: Any, first_asks: bool
) -> None:
    """A retry keyed by a question or breakpoint already answered is a 409, whatever the
    thread waits for next (an `interrupt()` would take the map as its answer; a breakpoint
    would pass unseen): `ask`'s question then a breakpoint before `pay`, or a breakpoint
    before `ask` then `pay`'s question."""
    before = ["pay"] if first_asks else ["ask"]
    client = client_for(_asking(before, first_asks=first_asks))
    first, events = await post_sse(client, "/api/chat/stream", {"message": "go"})
    thread_id = first.headers["x-thread-id"]
    (one,) = _of(events, "interrupt")
    answer = {one["id"]: "bob"}
    _, answered = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": answer})
    (two,) = _of(answered, "interrupt")
    assert two["id"].startswith("breakpoint:") is first_asks
    again = await client.post(
        f"/api/chat/{thread_id}/resume", json={"resume": answer}, headers=ALICE
    )
    assert_json_error(again, 409, "stale_answer")
    _, done = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": {two["id"]: "ok"}})
    assert [d["content"] for d in _of(done, "message")][-1] == (
        "VISIBLE paid yes" if first_asks else "VISIBLE paid ok"
    )


async def test_an_answered_question_is_not_pending_while_its_run_goes_on(
    client_for: Any,
) -> None:
    gate = asyncio.Event()
    client = client_for(_asking([], first_asks=True, gate=gate))
    first, events = await post_sse(client, "/api/chat/stream", {"message": "go"})
    thread_id = first.headers["x-thread-id"]
    assert len(_of(events, "interrupt")) == 1
    resumed = asyncio.ensure_future(
        client.post(f"/api/chat/{thread_id}/resume", json={"resume": "bob"}, headers=ALICE)
    )
    for _ in range(200):
        await asyncio.sleep(0.01)
        history = (await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)).json()
        if history["interrupts"] == []:
            break
    assert history["interrupts"] == []
    for url, body in (
        ("/api/chat/stream", {"message": "hi", "thread_id": thread_id}),
        (f"/api/chat/{thread_id}/resume", {"resume": "bob"}),
    ):
        assert_json_error(await client.post(url, json=body, headers=ALICE), 409, "thread_busy")
    gate.set()
    response = await asyncio.wait_for(resumed, TIMEOUT)
    assert [d["content"] for n, d in parse_sse(response.content) if n == "message"] == [
        "VISIBLE will pay bob",
        "VISIBLE paid yes",
    ]


async def test_continuing_after_a_subgraphs_last_step_sends_nothing_again(
    client_for: Any,
) -> None:
    """LangGraph streams the subgraph's output again when the run continues past an
    `interrupt_after` on its last step: what the thread held is not sent twice."""
    inner: StateGraph[Any] = StateGraph(MessagesState)
    inner.add_node("work", lambda s: {"messages": [AIMessage("VISIBLE work")]})
    inner.add_node("finish", lambda s: {"messages": [AIMessage("VISIBLE finish")]})
    inner.add_edge(START, "work")
    inner.add_edge("work", "finish")
    root: StateGraph[Any] = StateGraph(MessagesState)
    root.add_node("sub", inner.compile(interrupt_after=["finish"]))
    root.add_node("pay", lambda s: {"messages": [AIMessage("VISIBLE paid")]})
    root.add_edge(START, "sub")
    root.add_edge("sub", "pay")
    graph = with_visibility(root.compile(checkpointer=InMemorySaver()), VisibilityPolicy())
    client = client_for(graph)
    first, events = await post_sse(client, "/api/chat/stream", {"message": "go"})
    thread_id = first.headers["x-thread-id"]
    assert [d["content"] for d in _of(events, "message")] == ["VISIBLE work", "VISIBLE finish"]
    _, resumed = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": True})
    assert [d["content"] for d in _of(resumed, "message")] == ["VISIBLE paid"]


async def test_parallel_subgraphs_stopped_name_their_visible_steps(client_for: Any) -> None:
    def branch(first: str, then: str) -> Any:
        inner: StateGraph[Any] = StateGraph(MessagesState)
        inner.add_node(first, lambda s: {"messages": [AIMessage(f"VISIBLE {first}")]})
        inner.add_node(then, lambda s: {"messages": [AIMessage(f"VISIBLE {then}")]})
        inner.add_edge(START, first)
        inner.add_edge(first, then)
        return inner.compile(interrupt_before=[then])

    root: StateGraph[Any] = StateGraph(MessagesState)
    root.add_node("mail", branch("draft", "send"))
    root.add_node("books", branch("check", "secret_apply"))
    root.add_edge(START, "mail")
    root.add_edge(START, "books")
    policy = VisibilityPolicy(internal=["books/secret_apply"])
    client = client_for(with_visibility(root.compile(checkpointer=InMemorySaver()), policy))
    first, events = await post_sse(client, "/api/chat/stream", {"message": "go"})
    (paused,) = _of(events, "interrupt")
    assert paused["value"] == {"type": "breakpoint", "next": ["send"]}
    assert "secret_apply" not in first.text
    thread_id = first.headers["x-thread-id"]
    _, resumed = await post_sse(client, f"/api/chat/{thread_id}/resume", {"resume": True})
    assert "VISIBLE send" in [d["content"] for d in _of(resumed, "message")]
    assert resumed[-1][1]["interrupted"] is False


# -- the mapper's end of a run ------------------------------------------------------------


class _Waiting:
    def __init__(self, interrupt_id: str, value: Any) -> None:
        self.id = interrupt_id
        self.value = value


def _parts() -> Iterator[dict[str, Any]]:
    yield {"type": "values", "ns": (), "data": {"messages": []}, "interrupts": ()}


def _asked() -> Iterator[dict[str, Any]]:
    waiting = _Waiting("i-1", "which one?")
    yield {"type": "values", "ns": (), "data": {"messages": []}, "interrupts": (waiting,)}


def _failing() -> Iterator[dict[str, Any]]:
    yield from _parts()
    raise RuntimeError("boom")


def _ends(events: list[ChatEvent]) -> list[tuple[str, Any]]:
    return [(e.event, e.data.get("id", e.data.get("interrupted"))) for e in events]


def test_pending_interrupts_the_events_did_not_carry_are_sent_before_done() -> None:
    waiting = [_Waiting("breakpoint:c1", {"type": "breakpoint", "next": ["tools"]})]
    events = list(chat_events(_parts(), thread_id="t", pending=lambda: waiting))
    assert _ends(events) == [("interrupt", "breakpoint:c1"), ("done", True)]
    assert events[0].data == {"id": "breakpoint:c1", "source": "main", "value": waiting[0].value}
    # one the events carried is not sent twice
    again = list(chat_events(_asked(), thread_id="t", pending=lambda: [_Waiting("i-1", "x")]))
    assert _ends(again) == [("interrupt", "i-1"), ("done", True)]
    # nothing pending: done says so, whatever the events saw
    assert _ends(list(chat_events(_asked(), thread_id="t", pending=list))) == [
        ("interrupt", "i-1"),
        ("done", False),
    ]
    # unreadable: what the events saw
    assert _ends(list(chat_events(_parts(), thread_id="t", pending=lambda: None))) == [
        ("done", False)
    ]
    # a failed run sends no question, and done still says what waits
    failed = list(chat_events(_failing(), thread_id="t", pending=lambda: waiting))
    assert [e.event for e in failed] == ["error", "done"]
    assert failed[-1].data["interrupted"] is True


async def test_the_async_mapper_ends_the_same_way_and_takes_one_decider() -> None:
    async def parts() -> AsyncIterator[dict[str, Any]]:
        for part in _parts():
            yield part

    async def pending() -> list[Any]:
        return [_Waiting("breakpoint:c2", {"type": "breakpoint", "next": ["x"]})]

    async def interrupted(seen: bool) -> bool:
        return seen

    events = [e async for e in achat_events(parts(), thread_id="t", pending=pending)]
    assert _ends(events) == [("interrupt", "breakpoint:c2"), ("done", True)]
    with pytest.raises(TypeError, match="not both"):
        [
            e
            async for e in achat_events(
                parts(), thread_id="t", pending=pending, interrupted=interrupted
            )
        ]
    assert ChatStreamMapper().pending([_Waiting("a", 1), _Waiting("a", 1)])[0].data["id"] == "a"
