"""The puts of an enforced `astream` that LangGraph queues one ready-queue callback each
are batched (`_compat.loop_thread_put`): one callback for a run of puts nothing else was
queued between. What leaves must be exactly what leaves raw, in the same order, wherever
LangGraph queues something between two puts: a `@task` call (whose scheduling puts its
`tasks` event, or a cached result's `updates`, straight into the queue), tool events from
LangGraph's own tools handler, writes and tokens. The control batches a task's puts blind
to the ready queue (`wrong_puts.batch_by_task`), as a first version of this did."""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.cache.memory import InMemoryCache
from langgraph.config import get_stream_writer
from langgraph.func import entrypoint, task
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode, ToolRuntime
from langgraph.types import CachePolicy

from lg_visibility import _compat, with_visibility
from lg_visibility.testing import FakeChatModel
from tests._support.core import EVERYTHING_VISIBLE, TIMEOUT, State, pytestmark, user_input
from tests._support.oracle import canon, event_parts
from tests._support.wrong_puts import batch_by_task

__all__ = ["pytestmark"]


def _tools() -> Any:
    """An agent calling a tool twice; the tool streams a model's tokens, then writes (the
    custom writer) and puts an output delta (LangGraph's tools handler), twice."""
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
    return builder.compile()


class _Fan(TypedDict):
    qs: list[str]
    out: list[str]


def _fan_out() -> Any:
    """A node that writes a status, then calls a `@task`, for each of three queries, in one
    run of its task, and a model's tokens after."""
    model = FakeChatModel(responses=["all found"])

    @task
    async def search(q: str) -> str:
        return q.upper()

    async def fan(state: _Fan) -> dict[str, Any]:
        write, calls = get_stream_writer(), []
        for q in state["qs"]:
            write(f"starting {q}")
            calls.append(search(q))
        async for _ in model.astream("done?"):
            pass
        return {"out": list(await asyncio.gather(*calls))}

    builder: StateGraph[Any] = StateGraph(_Fan)
    builder.add_node("fan", fan)
    builder.add_edge(START, "fan")
    return builder.compile()


def _cached_call() -> Any:
    """An entrypoint writing around a cached `@task` call: from the second run on, the
    call's scheduling puts the cached result's `updates` straight into the queue."""

    @task(cache_policy=CachePolicy())
    async def child(x: int) -> int:
        return x + 1

    @entrypoint(cache=InMemoryCache())
    async def main(x: int) -> int:
        write = get_stream_writer()
        write("before the call")
        called = child(x)
        write("after the call")
        return await called

    return main


CASES: dict[str, tuple[Any, Any, list[str], int]] = {
    # name: (graph, input, stream modes, runs: the last one's parts are compared)
    "tools": (_tools, user_input(), ["messages", "tools", "custom", "updates"], 1),
    "fan_out": (_fan_out, {"qs": ["a", "b", "c"]}, ["messages", "custom", "tasks", "debug"], 1),
    "cached_call": (_cached_call, 1, ["custom", "updates"], 2),
}


def _parts(case: str, enforced: bool, version: str) -> list[Any]:
    build, input, modes, runs = CASES[case]
    graph = build()
    if enforced:
        graph = with_visibility(graph, EVERYTHING_VISIBLE)

    async def collect() -> list[Any]:
        parts: list[Any] = []
        for _ in range(runs):
            parts = [
                event_parts(item, modes, True, version)
                async for item in graph.astream(
                    input, stream_mode=modes, subgraphs=True, version=version
                )
            ]
        return parts

    return canon(asyncio.run(asyncio.wait_for(collect(), TIMEOUT)))


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_batched_puts_leave_as_raw_in_order(case: str, version: str) -> None:
    raw = _parts(case, False, version)
    assert len({p[1] for p in raw}) >= 2, "the case streams more than one mode"
    assert _parts(case, True, version) == raw


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_order_check_fails_on_a_batch_blind_to_the_ready_queue(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: as many parts of each mode leave, but one lands after a part put later
    (ids are numbered by first appearance, so only the modes are compared as a multiset)."""
    raw = _parts(case, False, "v2")
    monkeypatch.setattr(_compat, "loop_thread_put", batch_by_task)
    enforced = _parts(case, True, "v2")
    assert sorted(p[1] for p in enforced) == sorted(p[1] for p in raw)
    assert enforced != raw
