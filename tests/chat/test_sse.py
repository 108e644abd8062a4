"""lg_visibility.chat: byte-exact SSE encoding and the v2-stream -> chat mapping."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    AnyMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.messages.tool import tool_call_chunk
from langgraph.graph import add_messages
from langgraph.types import Interrupt
from pydantic import BaseModel

from lg_visibility.chat._mapper import (
    ChatEvent,
    ChatStreamMapper,
    achat_events,
    chat_events,
    message_text,
    source_name,
)
from lg_visibility.chat._sse import encode_event, format_sse

NS = ("order_agent:1b6f3c1e-0000-4000-8000-000000000001",)
MD = {"langgraph_node": "model", "lc_agent_name": "order_agent"}
VISIBLE = {"visibility": "user_visible"}
INTERNAL = {"visibility": "internal"}


def msg_part(
    message: Any, ns: tuple[str, ...] = (), metadata: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    return {"type": "messages", "ns": ns, "data": (message, dict(metadata or {}))}


def values_part(
    messages: list[Any], ns: tuple[str, ...] = (), interrupts: tuple[Any, ...] = ()
) -> dict[str, Any]:
    return {"type": "values", "ns": ns, "data": {"messages": messages}, "interrupts": interrupts}


def names(events: list[ChatEvent]) -> list[str]:
    return [event.event for event in events]


# -- encoding ----------------------------------------------------------------------------

FORMAT_TABLE = [
    ({"data": "x"}, b"data: x\n\n"),
    ({"data": ""}, b"data: \n\n"),
    ({"event": "token", "data": "hi"}, b"event: token\ndata: hi\n\n"),
    ({"data": "a\nb"}, b"data: a\ndata: b\n\n"),
    ({"data": "a\r\nb\rc"}, b"data: a\ndata: b\ndata: c\n\n"),
    ({"event": "to\nken", "data": "x"}, b"event: token\ndata: x\n\n"),
    ({"id": "4\r\n2", "data": "x"}, b"id: 42\ndata: x\n\n"),
    ({"retry": 1500}, b"retry: 1500\n\n"),
    ({"comment": "ping"}, b": ping\n\n"),
    ({"comment": "a\nb"}, b": a\n: b\n\n"),
    (
        {"comment": "c", "id": "1", "event": "e", "data": "d", "retry": 5},
        b": c\nid: 1\nevent: e\ndata: d\nretry: 5\n\n",
    ),
    ({"data": "ü → 你好"}, "data: ü → 你好\n\n".encode()),
    ({}, b"\n\n"),
]


@pytest.mark.parametrize(("fields", "expected"), FORMAT_TABLE)
def test_format_sse_bytes(fields: dict[str, Any], expected: bytes) -> None:
    """format_sse produces exactly the expected bytes for each field combination."""
    assert format_sse(**fields) == expected


def test_format_sse_rejects_non_int_retry() -> None:
    """A retry that is not an int raises TypeError naming the type."""
    with pytest.raises(TypeError, match="retry must be an int"):
        format_sse(retry="5")  # type: ignore[arg-type]


ENCODE_TABLE = [
    (
        ChatEvent("token", {"id": "m1", "source": "main", "text": "Hi "}),
        b'event: token\ndata: {"id":"m1","source":"main","text":"Hi "}\n\n',
    ),
    (
        ChatEvent("token", {"id": "m1", "source": "main", "text": "line\nnext\r"}),
        b'event: token\ndata: {"id":"m1","source":"main","text":"line\\nnext\\r"}\n\n',
    ),
    (
        ChatEvent("token", {"id": "m1", "source": "main", "text": "你好"}),
        'event: token\ndata: {"id":"m1","source":"main","text":"你好"}\n\n'.encode(),
    ),
    (
        ChatEvent(
            "message",
            {"id": "m1", "source": "main", "role": "assistant", "content": "Hi", "tool_calls": []},
        ),
        b'event: message\ndata: {"id":"m1","source":"main","role":"assistant",'
        b'"content":"Hi","tool_calls":[]}\n\n',
    ),
    (
        ChatEvent(
            "tool_start", {"tool_call_id": "c1", "message_id": "m1", "source": "a", "name": "t"}
        ),
        b'event: tool_start\ndata: {"tool_call_id":"c1","message_id":"m1",'
        b'"source":"a","name":"t"}\n\n',
    ),
    (
        ChatEvent("tool_args", {"tool_call_id": "c1", "source": "a", "delta": '{"q": "x"'}),
        b'event: tool_args\ndata: {"tool_call_id":"c1","source":"a",'
        b'"delta":"{\\"q\\": \\"x\\""}\n\n',
    ),
    (
        ChatEvent(
            "tool_result",
            {
                "tool_call_id": "c1",
                "source": "a",
                "name": "t",
                "content": "ok",
                "status": "success",
            },
        ),
        b'event: tool_result\ndata: {"tool_call_id":"c1","source":"a","name":"t",'
        b'"content":"ok","status":"success"}\n\n',
    ),
    (
        ChatEvent("tool_end", {"tool_call_id": "c1", "source": "a", "status": "success"}),
        b'event: tool_end\ndata: {"tool_call_id":"c1","source":"a","status":"success"}\n\n',
    ),
    (
        ChatEvent(
            "interrupt",
            {"id": "i1", "source": "order_agent", "value": {"type": "approval", "n": 2}},
        ),
        b'event: interrupt\ndata: {"id":"i1","source":"order_agent",'
        b'"value":{"type":"approval","n":2}}\n\n',
    ),
    (
        ChatEvent("interrupt", {"id": "i1", "source": "a", "value": ("x", None)}),
        b'event: interrupt\ndata: {"id":"i1","source":"a","value":["x",null]}\n\n',
    ),
    (
        ChatEvent("error", {"message": "failed", "type": "ValueError"}),
        b'event: error\ndata: {"message":"failed","type":"ValueError"}\n\n',
    ),
    (
        ChatEvent("done", {"thread_id": "t1", "interrupted": True}),
        b'event: done\ndata: {"thread_id":"t1","interrupted":true}\n\n',
    ),
]


@pytest.mark.parametrize(("event", "expected"), ENCODE_TABLE)
def test_encode_event_bytes(event: ChatEvent, expected: bytes) -> None:
    """encode_event produces exactly the expected bytes: one event line, one JSON data line."""
    assert encode_event(event) == expected
    assert event.encode() == expected


def test_encode_event_falls_back_to_str_for_unknown_objects() -> None:
    """A value JSON cannot encode is sent as its str() instead of failing the stream."""

    class Odd:
        def __str__(self) -> str:
            return "odd!"

    event = ChatEvent("interrupt", {"id": "i", "source": "s", "value": Odd()})
    assert (
        encode_event(event) == b'event: interrupt\ndata: {"id":"i","source":"s","value":"odd!"}\n\n'
    )


def test_encode_event_sends_a_float_that_is_not_finite_as_null() -> None:
    """`NaN` and infinities are not JSON (a browser's parser rejects the whole event): null,
    also inside an object `model_dump()` gives; a cycle still raises as before."""

    class Model(BaseModel):
        score: float

    event = ChatEvent(
        "custom", {"source": "s", "data": [float("nan"), {"x": -float("inf")}, Model(score=1e400)]}
    )
    assert encode_event(event) == (
        b'event: custom\ndata: {"source":"s","data":[null,{"x":null},{"score":null}]}\n\n'
    )
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        encode_event(ChatEvent("custom", {"source": "s", "data": loop}))


# -- helpers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ns", "metadata", "expected"),
    [
        ((), None, "main"),
        ((), {"langgraph_node": "respond"}, "main"),
        (NS, None, "order_agent"),
        (NS, {"lc_agent_name": "orders"}, "orders"),
        (("outer:1", "inner:2"), {}, "inner"),
        (("tools:1|3",), {}, "tools"),
    ],
)
def test_source_name_is_readable(
    ns: tuple[str, ...], metadata: dict[str, Any] | None, expected: str
) -> None:
    """source_name prefers lc_agent_name, then the innermost node name, never a raw id."""
    assert source_name(ns, metadata) == expected


def test_message_text_joins_text_blocks() -> None:
    """message_text keeps string content and joins only the text blocks of list content."""
    assert message_text(AIMessage(content="plain")) == "plain"
    blocks = [
        {"type": "text", "text": "a"},
        {"type": "image_url", "image_url": {}},
        {"type": "text", "text": "b"},
    ]
    assert message_text(AIMessage(content=blocks)) == "ab"


# -- mapping -----------------------------------------------------------------------------


def test_mapper_streams_tokens_then_confirms_from_values() -> None:
    """Chunks become token events; the snapshot holding the message yields one message event,
    with the producer the message carries."""
    mapper = ChatStreamMapper()
    events: list[ChatEvent] = []
    for text in ["Hel", "lo"]:
        events += mapper.feed(
            msg_part(AIMessageChunk(content=text, id="m1"), (), {"langgraph_node": "respond"})
        )
    producer = {"path": "respond"}
    final = AIMessage(
        content="Hello", id="m1", response_metadata={**VISIBLE, "provenance": producer}
    )
    events += mapper.feed(values_part([HumanMessage(content="hi", id="h1"), final]))
    events += mapper.feed(values_part([HumanMessage(content="hi", id="h1"), final]))
    assert events == [
        ChatEvent("token", {"id": "m1", "source": "main", "text": "Hel"}),
        ChatEvent("token", {"id": "m1", "source": "main", "text": "lo"}),
        ChatEvent(
            "message",
            {
                "id": "m1",
                "source": "main",
                "provenance": {"path": "respond"},
                "role": "assistant",
                "content": "Hello",
                "tool_calls": [],
            },
        ),
    ]


def test_mapper_never_confirms_messages_not_streamed_in_this_run() -> None:
    """A snapshot message that never came through the messages stream maps to nothing."""
    mapper = ChatStreamMapper()
    earlier = AIMessage(content="from an earlier run", id="old", response_metadata=VISIBLE)
    dropped = AIMessage(content='{"plan": 1}', id="x", response_metadata=INTERNAL)
    assert mapper.feed(values_part([earlier, dropped], NS)) == []


def test_mapper_sends_whole_a_visible_message_new_in_the_root_state() -> None:
    """A message new in the root state that the messages stream never carried (a node
    wrote it as a dict or a pair) is sent whole, once, if tagged visible where it was
    written: the thread's earlier messages, untagged or internal ones, and a subgraph's
    snapshot are not."""
    mapper = ChatStreamMapper()
    earlier = AIMessage(content="from an earlier run", id="old", response_metadata=VISIBLE)
    before = [HumanMessage(content="hi", id="h1"), earlier]
    assert mapper.feed(values_part(before)) == []
    producer = {"path": "answer"}
    written = AIMessage(
        content="written",
        id="w1",
        response_metadata={**VISIBLE, "provenance": producer},
        tool_calls=[{"id": "c1", "name": "look", "args": {"q": 1}}],
    )
    untagged = AIMessage(content="untagged", id="u1")
    internal = AIMessage(content="internal", id="i1", response_metadata=INTERNAL)
    inner = AIMessage(content="inner", id="s1", response_metadata=VISIBLE)
    assert mapper.feed(values_part([*before, inner], NS)) == []
    after = [*before, untagged, internal, written]
    events = mapper.feed(values_part(after)) + mapper.feed(values_part(after))
    assert events == [
        ChatEvent(
            "tool_start",
            {"tool_call_id": "c1", "message_id": "w1", "source": "answer", "name": "look"},
        ),
        ChatEvent("tool_args", {"tool_call_id": "c1", "source": "answer", "delta": '{"q":1}'}),
        ChatEvent(
            "message",
            {
                "id": "w1",
                "source": "answer",
                "provenance": producer,
                "role": "assistant",
                "content": "written",
                "tool_calls": [{"id": "c1", "name": "look", "args": {"q": 1}}],
            },
        ),
    ]


def test_mapper_drops_internal_tagged_chunks_and_their_snapshot() -> None:
    """A chunk tagged internal is dropped, and so is its message in later snapshots."""
    mapper = ChatStreamMapper()
    chunk = AIMessageChunk(content='{"plan"', id="x", response_metadata=INTERNAL)
    assert mapper.feed(msg_part(chunk, NS, MD)) == []
    assert mapper.feed(msg_part(AIMessageChunk(content=": 1}", id="x"), NS, MD)) == []
    assert mapper.feed(values_part([AIMessage(content='{"plan": 1}', id="x")], NS)) == []


def test_mapper_tool_call_chunks_become_start_and_args() -> None:
    """The first tool-call chunk opens the tool (by id); later chunks by index add args."""
    mapper = ChatStreamMapper()
    first = AIMessageChunk(
        content="",
        id="m2",
        tool_call_chunks=[tool_call_chunk(name="lookup", args='{"sku"', id="c1", index=0)],
    )
    rest = AIMessageChunk(
        content="",
        id="m2",
        tool_call_chunks=[tool_call_chunk(name=None, args=": 7}", id=None, index=0)],
    )
    events = mapper.feed(msg_part(first, NS, MD)) + mapper.feed(msg_part(rest, NS, MD))
    assert events == [
        ChatEvent(
            "tool_start",
            {"tool_call_id": "c1", "message_id": "m2", "source": "order_agent", "name": "lookup"},
        ),
        ChatEvent("tool_args", {"tool_call_id": "c1", "source": "order_agent", "delta": '{"sku"'}),
        ChatEvent("tool_args", {"tool_call_id": "c1", "source": "order_agent", "delta": ": 7}"}),
    ]


def test_mapper_tool_message_becomes_result_then_end() -> None:
    """A ToolMessage maps to tool_result then tool_end, under the source that called the tool."""
    mapper = ChatStreamMapper()
    mapper.feed(
        msg_part(
            AIMessageChunk(
                content="",
                id="m2",
                tool_call_chunks=[tool_call_chunk(name="lookup", args="{}", id="c1", index=0)],
            ),
            NS,
            MD,
        )
    )
    result = ToolMessage(
        content="found",
        tool_call_id="c1",
        name="lookup",
        id="t1",
        response_metadata={"provenance": {"path": "order_agent/tools", "agent": "order_agent"}},
    )
    assert mapper.feed(msg_part(result, NS, {"langgraph_node": "tools"})) == [
        ChatEvent(
            "tool_result",
            {
                "tool_call_id": "c1",
                "source": "order_agent",
                "provenance": {"path": "order_agent/tools", "agent": "order_agent"},
                "name": "lookup",
                "content": "found",
                "status": "success",
            },
        ),
        ChatEvent("tool_end", {"tool_call_id": "c1", "source": "order_agent", "status": "success"}),
    ]
    assert mapper.feed(msg_part(result, NS, {"langgraph_node": "tools"})) == []


def test_mapper_whole_ai_message_is_confirmed_once() -> None:
    """A whole AIMessage in the messages stream yields its tools and one message event."""
    mapper = ChatStreamMapper()
    whole = AIMessage(
        content="Done.", id="m3", tool_calls=[{"name": "notify", "args": {"to": "ops"}, "id": "c9"}]
    )
    events = mapper.feed(msg_part(whole, (), {"langgraph_node": "wrap_up"}))
    events += mapper.feed(values_part([whole]))
    assert events == [
        ChatEvent(
            "tool_start",
            {"tool_call_id": "c9", "message_id": "m3", "source": "main", "name": "notify"},
        ),
        ChatEvent("tool_args", {"tool_call_id": "c9", "source": "main", "delta": '{"to":"ops"}'}),
        ChatEvent(
            "message",
            {
                "id": "m3",
                "source": "main",
                "provenance": None,
                "role": "assistant",
                "content": "Done.",
                "tool_calls": [{"id": "c9", "name": "notify", "args": {"to": "ops"}}],
            },
        ),
    ]


def test_mapper_skips_human_messages() -> None:
    """Human messages in the messages stream map to nothing (the UI shows its own input)."""
    assert ChatStreamMapper().feed(msg_part(HumanMessage(content="hi", id="h"))) == []


def test_mapper_emits_each_interrupt_once_from_the_innermost_snapshot() -> None:
    """An interrupt seen in a subgraph snapshot and again at the root is emitted once."""
    mapper = ChatStreamMapper()
    pending = Interrupt(value={"type": "missing_data", "fields": ["partId"]}, id="i1")
    events = mapper.feed(values_part([], NS, (pending,))) + mapper.feed(
        values_part([], (), (pending,))
    )
    assert events == [
        ChatEvent(
            "interrupt",
            {
                "id": "i1",
                "source": "order_agent",
                "value": {"type": "missing_data", "fields": ["partId"]},
            },
        )
    ]
    assert mapper.interrupt_ids == ["i1"]
    assert mapper.done(thread_id="t") == ChatEvent("done", {"thread_id": "t", "interrupted": True})


def test_mapper_interrupts_come_before_messages_of_the_same_snapshot() -> None:
    """Within one values part the interrupt event precedes the message confirmation."""
    mapper = ChatStreamMapper()
    mapper.feed(msg_part(AIMessageChunk(content="Checking", id="m1"), NS, MD))
    final = AIMessage(content="Checking", id="m1", response_metadata=VISIBLE)
    events = mapper.feed(values_part([final], NS, (Interrupt(value="?", id="i1"),)))
    assert names(events) == ["interrupt", "message"]


def test_mapper_custom_part_carries_source_and_data() -> None:
    """A custom part maps to a custom event with a readable source."""
    part = {"type": "custom", "ns": NS, "data": {"card": "order", "total": 3}}
    assert ChatStreamMapper().feed(part) == [
        ChatEvent("custom", {"source": "order_agent", "data": {"card": "order", "total": 3}})
    ]


def test_mapper_ignores_other_modes() -> None:
    """Parts of modes the chat does not use map to nothing."""
    assert ChatStreamMapper().feed({"type": "updates", "ns": (), "data": {"n": {}}}) == []


def test_mapper_rejects_v1_tuples() -> None:
    """A v1 (ns, mode, data) tuple raises TypeError naming the fix."""
    with pytest.raises(TypeError, match="version='v2'"):
        ChatStreamMapper().feed(((), "messages", None))  # type: ignore[arg-type]


def test_mapper_error_hides_exception_text() -> None:
    """The error event names the exception type but never its message."""
    event = ChatStreamMapper().error(RuntimeError("secret internal plan"))
    assert event == ChatEvent(
        "error",
        {
            "message": "The assistant failed while answering; please try again.",
            "type": "RuntimeError",
        },
    )


# -- whole-run helpers -------------------------------------------------------------------

RUN = [
    msg_part(AIMessageChunk(content="Hi", id="m1")),
    values_part([AIMessage(content="Hi", id="m1", response_metadata=VISIBLE)]),
]


def test_chat_events_ends_with_done() -> None:
    """chat_events maps a run and closes it with one done event."""
    assert names(list(chat_events(RUN, thread_id="t"))) == ["token", "message", "done"]


async def test_achat_events_ends_with_done() -> None:
    """achat_events maps a run and closes it with one done event."""

    async def parts() -> AsyncIterator[dict[str, Any]]:
        for part in RUN:
            yield part

    events = [event async for event in achat_events(parts(), thread_id="t")]
    assert names(events) == ["token", "message", "done"]
    assert events[-1] == ChatEvent("done", {"thread_id": "t", "interrupted": False})


def test_chat_events_turns_an_exception_into_error_then_done() -> None:
    """An exception from the stream yields error then done, and nothing escapes."""

    def parts() -> Iterator[dict[str, Any]]:
        yield RUN[0]
        raise ValueError("boom")

    assert names(list(chat_events(parts(), thread_id="t"))) == ["token", "error", "done"]


async def test_achat_events_turns_an_exception_into_error_then_done() -> None:
    """An exception from the async stream yields error then done."""

    async def parts() -> AsyncIterator[dict[str, Any]]:
        yield RUN[0]
        raise ValueError("boom")

    events = [event async for event in achat_events(parts(), thread_id="t")]
    assert names(events) == ["token", "error", "done"]


async def test_achat_events_lets_cancellation_through() -> None:
    """Cancellation is not turned into an error event: it propagates."""

    async def parts() -> AsyncIterator[dict[str, Any]]:
        yield RUN[0]
        raise asyncio.CancelledError

    seen: list[str] = []
    with pytest.raises(asyncio.CancelledError):
        async for event in achat_events(parts(), thread_id="t"):
            seen.append(event.event)
    assert seen == ["token"]


# -- against a real graph ----------------------------------------------------------------


async def test_mapper_on_a_real_subgraph_run_with_interrupt_and_resume() -> None:
    """A real v2 run through a create_agent subgraph maps to the seed-003 event order."""
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.types import Command, interrupt

    from lg_visibility.testing import FakeChatModel

    @tool
    def request_info(field: str) -> str:
        """Ask the user for a missing field."""
        return f"got {interrupt({'type': 'missing_data', 'field': field})}"

    sub_model = FakeChatModel(
        responses=[
            AIMessage(
                content="Checking.",
                tool_calls=[{"name": "request_info", "args": {"field": "partId"}, "id": "c1"}],
            ),
            "Order placed.",
        ]
    )
    main_model = FakeChatModel(responses=["Sure."])

    def main(state: MessagesState) -> dict[str, Any]:
        return {"messages": [main_model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("main", main)
    builder.add_node(
        "order_agent", create_agent(sub_model, tools=[request_info], name="order_agent")
    )
    builder.add_edge(START, "main")
    builder.add_edge("main", "order_agent")
    builder.add_edge("order_agent", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t"}}

    async def run(payload: Any) -> list[ChatEvent]:
        parts = graph.astream(
            payload, config, stream_mode=["messages", "values"], subgraphs=True, version="v2"
        )
        return [event async for event in achat_events(parts, thread_id="t")]

    first = await asyncio.wait_for(run({"messages": [{"role": "user", "content": "order"}]}), 10)
    assert [(e.event, e.data.get("source")) for e in first] == [
        ("token", "main"),
        ("message", "main"),
        ("token", "order_agent"),
        ("tool_start", "order_agent"),
        ("tool_args", "order_agent"),
        ("tool_args", "order_agent"),
        ("tool_args", "order_agent"),
        ("message", "order_agent"),
        ("interrupt", "order_agent"),
        ("done", None),
    ]
    assert first[-1].data == {"thread_id": "t", "interrupted": True}
    second = await asyncio.wait_for(run(Command(resume="partId=100")), 10)
    assert names(second) == ["tool_result", "tool_end", "token", "token", "message", "done"]
    assert second[-2].data["content"] == "Order placed."
    assert second[-1].data == {"thread_id": "t", "interrupted": False}


class _TypedState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class _ModelState(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages] = []


@dataclasses.dataclass
class _DataclassState:
    messages: Annotated[list[AnyMessage], add_messages] = dataclasses.field(default_factory=list)


@pytest.mark.parametrize("schema", [_ModelState, _DataclassState])
async def test_mapper_reads_the_snapshot_of_a_typed_state_as_of_a_dict(schema: type) -> None:
    """An enforced v2 snapshot keeps the state's type: with a Pydantic or dataclass state
    the run maps to the same events as with a TypedDict one, final messages (their tool
    calls and provenance) included."""
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from lg_visibility import VisibilityPolicy, with_visibility
    from lg_visibility.testing import FakeChatModel

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return "shipped"

    def build(state: type) -> Any:
        call = {"name": "lookup", "args": {"order": "A1"}, "id": "call-1"}
        model = FakeChatModel(responses=[AIMessage("", tool_calls=[call]), "It shipped."])

        def agent(s: Any) -> dict[str, Any]:
            messages = s["messages"] if isinstance(s, dict) else s.messages
            return {"messages": [model.invoke(messages)]}

        builder = StateGraph(state)
        builder.add_node("agent", agent)
        builder.add_node("tools", ToolNode([lookup]))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        return with_visibility(builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy())

    async def run(state: type) -> list[tuple[str, dict[str, Any]]]:
        parts = build(state).astream(
            {"messages": [HumanMessage("where is A1", id="h1")]},
            {"configurable": {"thread_id": "t"}},
            stream_mode=["messages", "values"],
            subgraphs=True,
            version="v2",
        )
        events = [event async for event in achat_events(parts, thread_id="t")]
        # message ids are made per run (the model's, the tool message's): compared by place
        return [
            (e.event, {k: v for k, v in e.data.items() if k not in ("id", "message_id")})
            for e in events
        ]

    expected = await asyncio.wait_for(run(_TypedState), 10)
    finals = [data for event, data in expected if event == "message"]
    assert [f["tool_calls"] or f["content"] for f in finals] == [
        [{"id": "call-1", "name": "lookup", "args": {"order": "A1"}}],
        "It shipped.",
    ]  # control: the TypedDict run confirms both
    assert await asyncio.wait_for(run(schema), 10) == expected
