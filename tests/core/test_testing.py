"""Tests for lg_visibility.testing.FakeChatModel."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.tools import tool
from pydantic import BaseModel

from lg_visibility.testing import FakeChatModel, split_tokens

TIMEOUT = 10.0


class Route(BaseModel):
    scenario: str
    confidence: float


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


class TokenRecorder(BaseCallbackHandler):
    """Collects every on_llm_new_token call."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.chunks: list[ChatGenerationChunk] = []

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        self.tokens.append(token)
        self.chunks.append(kwargs["chunk"])


class AsyncTokenRecorder(AsyncCallbackHandler):
    """Collects every on_llm_new_token call, asynchronously."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.chunks: list[ChatGenerationChunk] = []

    async def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        self.tokens.append(token)
        self.chunks.append(kwargs["chunk"])


def tool_reply(args: dict[str, Any], *, name: str = "lookup", id: str | None = "c1") -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": id}])


async def collect(stream: AsyncIterator[AIMessageChunk]) -> list[AIMessageChunk]:
    return [chunk async for chunk in stream]


# -- tokens -------------------------------------------------------------------------------


def test_split_tokens_preserves_whitespace() -> None:
    """Tokens keep trailing whitespace, the first keeps leading whitespace, and join back."""
    assert split_tokens('\n  {"a": 1,  "b": 2}\n') == ['\n  {"a": ', "1,  ", '"b": ', "2}\n"]
    assert split_tokens("   ") == ["   "]
    assert split_tokens("") == []


def test_stream_tokens_reach_callback_handler() -> None:
    """Text streams as whitespace tokens plus a final empty token through on_llm_new_token."""
    model = FakeChatModel(responses=["Hello big  world"])
    recorder = TokenRecorder()
    chunks = list(model.stream("hi", config={"callbacks": [recorder]}))
    assert recorder.tokens == ["Hello ", "big  ", "world", ""]
    assert [c.content for c in chunks] == ["Hello ", "big  ", "world", ""]


async def test_astream_tokens_reach_callback_handler() -> None:
    """Async twin: text streams as whitespace tokens plus a final empty token."""
    model = FakeChatModel(responses=["Hello big  world"])
    recorder = AsyncTokenRecorder()
    chunks = await asyncio.wait_for(
        collect(model.astream("hi", config={"callbacks": [recorder]})), TIMEOUT
    )
    assert recorder.tokens == ["Hello ", "big  ", "world", ""]
    assert [c.content for c in chunks] == ["Hello ", "big  ", "world", ""]


def test_stream_first_token_keeps_leading_whitespace() -> None:
    """A reply starting with a newline streams a first token that does not start with '{'."""
    model = FakeChatModel(responses=['\n {"scenario": "x"}'])
    chunks = list(model.stream("hi"))
    assert [c.content for c in chunks] == ['\n {"scenario": ', '"x"}', ""]


def test_stream_last_chunk_has_position_and_finish_reason() -> None:
    """The closing chunk is empty, marked last, and says finish_reason stop."""
    model = FakeChatModel(responses=["a b"])
    last = list(model.stream("hi"))[-1]
    assert last.content == ""
    assert last.chunk_position == "last"
    assert last.response_metadata == {"finish_reason": "stop"}


def test_stream_ids_are_stamped_by_langchain_core() -> None:
    """Every chunk of one call carries the same lc_run-- id stamped by langchain-core."""
    model = FakeChatModel(responses=["a b c"])
    ids = {c.id for c in model.stream("hi")}
    assert len(ids) == 1
    (only,) = ids
    assert only is not None
    assert only.startswith("lc_run--")


# -- tool calls ---------------------------------------------------------------------------


def test_stream_tool_call_chunks_concatenate_to_args() -> None:
    """Tool-call chunks carry name/id/index first, then args pieces joining to the JSON."""
    args = {"query": "TOOLARGS order 42"}
    model = FakeChatModel(responses=[tool_reply(args)], tool_args_chunk_size=5)
    recorder = TokenRecorder()
    chunks = list(model.stream("hi", config={"callbacks": [recorder]}))
    expected = json.dumps(args)
    pieces = [expected[i : i + 5] for i in range(0, len(expected), 5)]
    tool_chunks = [c.tool_call_chunks for c in chunks[:-1]]
    assert tool_chunks[0] == [
        {"name": "lookup", "args": pieces[0], "id": "c1", "index": 0, "type": "tool_call_chunk"}
    ]
    assert [tc[0]["args"] for tc in tool_chunks] == pieces
    assert [(tc[0]["name"], tc[0]["id"]) for tc in tool_chunks[1:]] == [(None, None)] * (
        len(pieces) - 1
    )
    assert len(recorder.chunks) == len(pieces) + 1
    assert chunks[-1].response_metadata == {"finish_reason": "tool_calls"}


async def test_astream_tool_call_chunks_concatenate_to_args() -> None:
    """Async twin: the aggregated stream parses back to the scripted tool call."""
    args = {"query": "TOOLARGS order 42", "limit": 3}
    model = FakeChatModel(responses=[tool_reply(args)])
    chunks = await asyncio.wait_for(collect(model.astream("hi")), TIMEOUT)
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert total.tool_calls == [{"name": "lookup", "args": args, "id": "c1", "type": "tool_call"}]
    assert "".join(c.tool_call_chunks[0]["args"] or "" for c in chunks[:-1]) == json.dumps(args)


def test_stream_text_then_tool_calls() -> None:
    """A reply with text and two tool calls streams text tokens, then each call's chunks."""
    reply = AIMessage(
        content="Let me check",
        tool_calls=[
            {"name": "lookup", "args": {"q": "a"}, "id": "c1"},
            {"name": "lookup", "args": {"q": "b"}, "id": "c2"},
        ],
    )
    model = FakeChatModel(responses=[reply], tool_args_chunk_size=100)
    chunks = list(model.stream("hi"))
    assert [c.content for c in chunks] == ["Let ", "me ", "check", "", "", ""]
    assert [[(t["id"], t["index"], t["args"]) for t in c.tool_call_chunks] for c in chunks] == [
        [],
        [],
        [],
        [("c1", 0, '{"q": "a"}')],
        [("c2", 1, '{"q": "b"}')],
        [],
    ]


def test_invoke_fills_missing_tool_call_id() -> None:
    """A scripted tool call without an id gets call_<call number>_<index>."""
    model = FakeChatModel(responses=["first", tool_reply({"q": "x"}, id=None)])
    model.invoke("hi")
    reply = model.invoke("hi")
    assert reply.tool_calls == [
        {"name": "lookup", "args": {"q": "x"}, "id": "call_1_0", "type": "tool_call"}
    ]
    assert reply.response_metadata == {"finish_reason": "tool_calls"}


def test_bind_tools_binds_openai_format_tools() -> None:
    """bind_tools returns a binding whose kwargs hold the OpenAI-format tools and options."""
    model = FakeChatModel(responses=["ok"])
    bound = model.bind_tools([lookup], tool_choice="any")
    kwargs = bound.kwargs  # type: ignore[attr-defined]
    assert [t["function"]["name"] for t in kwargs["tools"]] == ["lookup"]
    assert kwargs["tool_choice"] == "any"
    assert bound.invoke("hi").content == "ok"


# -- script -------------------------------------------------------------------------------


def test_responses_cycle_when_exhausted() -> None:
    """Replies are taken in order and start over after the last one."""
    model = FakeChatModel(responses=["one", "two"])
    assert [model.invoke("hi").content for _ in range(5)] == ["one", "two", "one", "two", "one"]
    assert model.call_count == 5


async def test_responses_cycle_when_exhausted_async() -> None:
    """Async twin: replies cycle across ainvoke calls."""
    model = FakeChatModel(responses=["one", "two"])
    replies = [(await asyncio.wait_for(model.ainvoke("hi"), TIMEOUT)).content for _ in range(3)]
    assert replies == ["one", "two", "one"]


def test_respond_receives_messages() -> None:
    """A respond function is called with the input messages and its reply is returned."""
    seen: list[list[BaseMessage]] = []

    def respond(messages: list[BaseMessage]) -> str:
        seen.append(messages)
        return f"echo {messages[-1].text}"

    model = FakeChatModel(respond=respond)
    assert model.invoke("ping").content == "echo ping"
    assert seen == [[HumanMessage(content="ping")]]


def test_callable_reply_in_responses() -> None:
    """A callable element of responses is called for its turn only."""
    model = FakeChatModel(responses=["fixed", lambda msgs: AIMessage(content=str(len(msgs)))])
    assert [model.invoke(["a", "b"]).content for _ in range(2)] == ["fixed", "2"]


def test_call_counter_is_thread_safe() -> None:
    """Concurrent calls from many threads each take a distinct reply."""
    replies = [f"r{i}" for i in range(64)]
    model = FakeChatModel(responses=replies)
    got: list[str] = []
    lock = threading.Lock()

    def call() -> None:
        text = model.invoke("hi").text
        with lock:
            got.append(text)

    threads = [threading.Thread(target=call) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert sorted(got) == sorted(replies)
    assert model.call_count == 64


async def test_token_delay_allows_cancellation_mid_stream() -> None:
    """With token_delay, cancelling a consumer after the first chunk stops the stream there."""
    model = FakeChatModel(responses=["a b c d e f"], token_delay=0.05)
    received: list[str] = []
    first = asyncio.Event()

    async def consume() -> None:
        async for chunk in model.astream("hi"):
            received.append(chunk.text)
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), TIMEOUT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, TIMEOUT)
    assert received == ["a "]


def test_llm_type() -> None:
    """The model reports its own _llm_type."""
    assert FakeChatModel(responses=["x"])._llm_type == "lg-visibility-fake"


# -- bad arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of `responses`"),
        ({"responses": ["a"], "respond": lambda m: "b"}, "exactly one of `responses`"),
        ({"responses": []}, "nothing to say"),
        ({"responses": "abc"}, "wrap a single reply in a list"),
        ({"responses": [1]}, "has type int"),
        ({"responses": ["a"], "token_delay": -1.0}, "token_delay must be >= 0"),
        ({"responses": ["a"], "tool_args_chunk_size": 0}, "tool_args_chunk_size must be >= 1"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    """Bad constructor arguments raise a ValueError naming the problem."""
    with pytest.raises(ValueError, match=message):
        FakeChatModel(**kwargs)


def test_responder_returning_wrong_type_raises() -> None:
    """A responder returning something other than str/AIMessage raises TypeError."""
    model = FakeChatModel(respond=lambda m: 42)  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="responder returned int"):
        model.invoke("hi")


# -- create_agent -------------------------------------------------------------------------


def provider_model() -> FakeChatModel:
    return FakeChatModel(
        responses=[
            tool_reply({"query": "refund"}),
            '\n  {"scenario": "billing", "confidence": 0.9}',
        ],
        profile={"structured_output": True},
    )


def tool_strategy_model() -> FakeChatModel:
    return FakeChatModel(
        responses=[
            tool_reply({"query": "refund"}),
            tool_reply({"scenario": "billing", "confidence": 0.9}, name="Route", id="c2"),
        ]
    )


def test_create_agent_provider_strategy() -> None:
    """ProviderStrategy parses leading-whitespace JSON text into structured_response."""
    agent = create_agent(provider_model(), tools=[lookup], response_format=Route)
    result = agent.invoke({"messages": [HumanMessage("hi")]})
    assert result["structured_response"] == Route(scenario="billing", confidence=0.9)
    assert [m.type for m in result["messages"]] == ["human", "ai", "tool", "ai"]
    assert result["messages"][2].content == "found refund"


async def test_create_agent_provider_strategy_async() -> None:
    """Async twin: ProviderStrategy gives the right structured_response."""
    agent = create_agent(provider_model(), tools=[lookup], response_format=Route)
    result = await asyncio.wait_for(agent.ainvoke({"messages": [HumanMessage("hi")]}), TIMEOUT)
    assert result["structured_response"] == Route(scenario="billing", confidence=0.9)
    assert [m.type for m in result["messages"]] == ["human", "ai", "tool", "ai"]


def test_create_agent_tool_strategy() -> None:
    """ToolStrategy parses the structured-output tool call into structured_response."""
    agent = create_agent(tool_strategy_model(), tools=[lookup], response_format=Route)
    result = agent.invoke({"messages": [HumanMessage("hi")]})
    assert result["structured_response"] == Route(scenario="billing", confidence=0.9)
    assert [m.type for m in result["messages"]] == ["human", "ai", "tool", "ai", "tool"]
    assert result["messages"][-1].content == (
        "Returning structured response: scenario='billing' confidence=0.9"
    )


async def test_create_agent_tool_strategy_async() -> None:
    """Async twin: ToolStrategy gives the right structured_response."""
    agent = create_agent(tool_strategy_model(), tools=[lookup], response_format=Route)
    result = await asyncio.wait_for(agent.ainvoke({"messages": [HumanMessage("hi")]}), TIMEOUT)
    assert result["structured_response"] == Route(scenario="billing", confidence=0.9)
    assert [m.type for m in result["messages"]] == ["human", "ai", "tool", "ai", "tool"]


def test_create_agent_streams_tokens_in_messages_mode() -> None:
    """Under stream_mode="messages" the agent's tool call and JSON arrive as exact chunks."""
    agent = create_agent(provider_model(), tools=[lookup], response_format=Route)
    events = [
        (type(msg).__name__, msg.text, [t["args"] for t in getattr(msg, "tool_call_chunks", [])])
        for msg, _meta in cast(
            "Iterator[tuple[BaseMessage, dict[str, Any]]]",
            agent.stream({"messages": [HumanMessage("hi")]}, stream_mode="messages"),
        )
    ]
    assert events == [
        ("AIMessageChunk", "", ['{"query"']),
        ("AIMessageChunk", "", [': "refun']),
        ("AIMessageChunk", "", ['d"}']),
        ("AIMessageChunk", "", []),
        ("ToolMessage", "found refund", []),
        ("AIMessageChunk", '\n  {"scenario": ', []),
        ("AIMessageChunk", '"billing", ', []),
        ("AIMessageChunk", '"confidence": ', []),
        ("AIMessageChunk", "0.9}", []),
        ("AIMessageChunk", "", []),
    ]
