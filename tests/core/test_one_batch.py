"""The deferred puts of an enforced `astream` share one batch (`_compat.loop_thread_put`):
the messages handler's tokens, the tools handler's events and the `custom` writer's writes
made in one run of a task, with nothing awaited between them, leave exactly as raw, in the
same order. A put of LangGraph's own between two of a batch's would fall behind the
batch's later ones; the control builds the tools handler with LangGraph's put."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode, ToolRuntime

from lg_visibility import _compat, with_visibility
from lg_visibility.testing import FakeChatModel
from tests._support.core import EVERYTHING_VISIBLE, TIMEOUT, State, pytestmark, user_input
from tests._support.oracle import canon, event_parts

__all__ = ["pytestmark"]

MODES = ["messages", "tools", "custom", "updates"]


def _builder() -> StateGraph[Any]:
    """An agent calling a tool twice; the tool streams a model's tokens, then writes (the
    custom writer) and puts an output delta (the tools handler), twice, in one run of its
    task."""
    model = FakeChatModel(responses=["one two", "three four"])

    @tool
    async def lookup(q: str, runtime: ToolRuntime) -> str:
        """Look `q` up."""
        text = ""
        async for chunk in model.astream(q):
            text += str(chunk.content)
        runtime.stream_writer({"read": q})
        runtime.emit_output_delta({"text": text})
        runtime.stream_writer({"delta_put": q})
        runtime.emit_output_delta({"done": q})
        return f"found {q}"

    def agent(state: State) -> dict[str, Any]:
        calls = [{"name": "lookup", "args": {"q": q}, "id": f"call-{q}"} for q in "ab"]
        return {"messages": [AIMessage("", id="agent", tool_calls=calls)]}

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    return builder


def _parts(graph: Any, version: str) -> list[Any]:
    async def collect() -> list[Any]:
        return [
            event_parts(item, MODES, True, version)
            async for item in graph.astream(
                user_input(), stream_mode=MODES, subgraphs=True, version=version
            )
        ]

    return canon(asyncio.run(asyncio.wait_for(collect(), TIMEOUT)))


def _tools_with_langgraphs_put(monkeypatch: pytest.MonkeyPatch) -> None:
    """A control: the run's tools handler built with LangGraph's own put, outside the batch."""
    build = _compat._HandlerSlot.__call__

    def call(self: Any, stream: Any, subgraphs: bool, *, parent_ns: Any = None) -> Any:
        if self._original is _compat.StreamToolCallHandler:
            return _compat.StreamToolCallHandler(stream, subgraphs, parent_ns=parent_ns)
        return build(self, stream, subgraphs, parent_ns=parent_ns)

    monkeypatch.setattr(_compat._HandlerSlot, "__call__", call)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_tokens_tool_events_and_writes_of_one_task_run_leave_as_raw(version: str) -> None:
    raw = _parts(_builder().compile(), version)
    enforced = _parts(with_visibility(_builder().compile(), EVERYTHING_VISIBLE), version)
    modes = {p[1] for p in raw}
    assert {"messages", "tools", "custom"} <= modes, modes
    assert enforced == raw


def test_the_order_check_fails_on_tool_events_outside_the_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Control: every part still leaves, but a tool event lands after tokens put later."""
    _tools_with_langgraphs_put(monkeypatch)
    raw = _parts(_builder().compile(), "v2")
    enforced = _parts(with_visibility(_builder().compile(), EVERYTHING_VISIBLE), "v2")
    assert sorted(map(repr, enforced)) == sorted(map(repr, raw))
    assert enforced != raw
