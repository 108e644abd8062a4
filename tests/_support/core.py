"""Shared test helpers for the core: a one-node State, runners and markers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
)
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph, add_messages

from lg_visibility import (
    VisibilityPolicy,
    visibility_of,
)
from lg_visibility.testing import FakeChatModel

TIMEOUT = 10.0
pytestmark = pytest.mark.timeout(TIMEOUT)  # bounds the sync streams; async ones use wait_for

EVERYTHING_VISIBLE = VisibilityPolicy()
SYNC_ASYNC = pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


def user_input(text: str = "hi") -> dict[str, Any]:
    return {"messages": [HumanMessage(text, id="human-1")]}


def thread(name: str = "t1") -> RunnableConfig:
    return {"configurable": {"thread_id": name}}


def run(graph: Any, input: Any, config: Any = None, *, sync: bool, **kwargs: Any) -> list[Any]:
    """Every item `stream` (sync) or `astream` (async, bounded by TIMEOUT) yields."""
    if sync:
        return list(graph.stream(input, config, **kwargs))

    async def collect() -> list[Any]:
        return [item async for item in graph.astream(input, config, **kwargs)]

    return asyncio.run(asyncio.wait_for(collect(), TIMEOUT))


def llm_node(model: Any, call_config: RunnableConfig | None = None) -> RunnableLambda:
    """A node that calls `model` on the messages, sync or async as the graph is run."""

    def call(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"], call_config)]}

    async def acall(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"], call_config)]}

    return RunnableLambda(call, acall)


def hand_node(*messages: BaseMessage) -> Callable[[State], dict[str, Any]]:
    """A node that returns messages it built itself (no LLM run behind them)."""
    return lambda state: {"messages": list(messages)}


def one_node_graph(
    node: Any, *, metadata: dict[str, Any] | None = None, checkpointer: Any = None
) -> Any:
    builder = StateGraph(State)
    builder.add_node("talk", node, metadata=metadata)
    builder.add_edge(START, "talk")
    return builder.compile(checkpointer=checkpointer)


def tokens(items: list[Any]) -> list[str]:
    """Contents of the `messages` events of a stream_mode="messages" stream."""
    return [message.content for message, _ in items]


def tagged(messages: list[BaseMessage]) -> list[tuple[str, Any, str | None]]:
    """(type, content, visibility tag) of each message."""
    return [(type(m).__name__, m.content, visibility_of(m)) for m in messages]


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order} shipped"


# The updates of an agent whose model is declared internal: its nodes are visible by path, so
# their updates are delivered, with every message removed.
AGENT_UPDATES_REDACTED = [
    ("updates", {"model": {"messages": []}}),
    ("updates", {"tools": {"messages": []}}),
    ("updates", {"model": {"messages": []}}),
]


def tool_script(*, metadata: dict[str, Any] | None = None) -> FakeChatModel:
    """A model that calls `lookup` once, then answers."""
    return FakeChatModel(
        responses=[
            AIMessage("", tool_calls=[{"name": "lookup", "args": {"order": "A1"}, "id": "call-1"}]),
            "it shipped",
        ],
        metadata=metadata,
    )


# -- declarations ------------------------------------------------------------------------
