"""The `custom` writer of an enforced `astream`: LangGraph's writer rebuilt to put on the
event loop's thread (`_compat._loop_thread_writer`), as the visible tokens are put. What
leaves must be exactly what leaves raw, in the same order, from async and sync nodes, at
the root and in subgraphs; a write made on the loop's thread makes no wake-up write."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.config import get_config, get_stream_writer
from langgraph.graph import START, StateGraph

from lg_visibility import _compat, with_visibility
from lg_visibility.testing import FakeChatModel
from tests._support.core import EVERYTHING_VISIBLE, TIMEOUT, State, pytestmark, user_input
from tests._support.oracle import canon, event_parts

__all__ = ["pytestmark"]

MODES = ["messages", "custom", "values", "updates"]


def _builder() -> StateGraph[Any]:
    """An async node writing around its model's tokens, a sync node writing from LangGraph's
    executor thread, and a subgraph whose async node writes too."""
    model = FakeChatModel(responses=["one two three"])

    async def talk(state: State) -> dict[str, Any]:
        write = get_stream_writer()
        write({"at": "talk", "n": 1})
        message = await model.ainvoke(state["messages"])
        write({"at": "talk", "n": 2})
        return {"messages": [message]}

    async def between(state: State) -> dict[str, Any]:
        # a write after each token: its place among the handler's puts is the order's test
        write, text = get_stream_writer(), ""
        async for chunk in model.astream(state["messages"]):
            write({"after": chunk.content})
            text += str(chunk.content)
        return {"messages": [AIMessage(text, id="between")]}

    def note(state: State) -> dict[str, Any]:
        write = get_stream_writer()
        for n in range(3):
            write({"at": "note", "n": n})
        return {"messages": [AIMessage("noted", id="noted")]}

    async def deep(state: State) -> dict[str, Any]:
        get_stream_writer()({"at": "deep"})
        await asyncio.sleep(0)
        get_stream_writer()({"at": "deep", "again": True})
        return {"messages": [AIMessage("deep", id="deep")]}

    inner: StateGraph[Any] = StateGraph(State)
    inner.add_node("deep", deep)
    inner.add_edge(START, "deep")
    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("talk", talk)
    builder.add_node("between", between)
    builder.add_node("note", note)
    builder.add_node("sub", inner.compile())
    builder.add_edge(START, "talk")
    builder.add_edge("talk", "between")
    builder.add_edge("between", "note")
    builder.add_edge("note", "sub")
    return builder


def _parts(graph: Any, subgraphs: bool, version: str) -> list[Any]:
    async def collect() -> list[Any]:
        return [
            event_parts(item, MODES, subgraphs, version)
            async for item in graph.astream(
                user_input(), stream_mode=MODES, subgraphs=subgraphs, version=version
            )
        ]

    return canon(asyncio.run(asyncio.wait_for(collect(), TIMEOUT)))


def _wrong_rebuild(how: str) -> Any:
    """A control: `_loop_thread_writer` rebuilt wrongly, putting each write one hop of the
    loop's ready queue later than LangGraph does, or at once, skipping the queue."""
    rebuild = _compat._loop_thread_writer

    def wrong(writer: Any, *_: Any) -> Any:
        if rebuild(writer) is writer:
            return writer
        cells = dict(zip(writer.__code__.co_freevars, writer.__closure__, strict=True))
        loop, queue = cells["aioloop"].cell_contents, cells["stream"].cell_contents

        def write(chunk: Any) -> None:
            item = (tuple(get_config()["configurable"]["checkpoint_ns"].split("|")[:-1]), "custom")
            if how == "later":
                loop.call_soon(loop.call_soon, queue.put_nowait, (*item, chunk))
            else:
                queue.put_nowait((*item, chunk))

        return write

    return wrong


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("subgraphs", [True, False], ids=["subgraphs", "root"])
def test_custom_writes_leave_as_raw_in_order(subgraphs: bool, version: str) -> None:
    """Every custom event, from the async node, the sync node (an executor thread) and the
    subgraph, leaves as the raw graph yields it, in the same place among the tokens,
    updates and snapshots."""
    raw = _parts(_builder().compile(), subgraphs, version)
    enforced = _parts(with_visibility(_builder().compile(), EVERYTHING_VISIBLE), subgraphs, version)
    assert [p for p in raw if p[1] == "custom"], "the graph writes custom events"
    assert enforced == raw


@pytest.mark.parametrize("how", ["later", "at_once"])
def test_the_order_check_fails_on_a_writer_that_reorders(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: a rebuilt writer whose writes land a hop later, or at once, than LangGraph's
    is caught; every write still arrives, only the order differs."""
    monkeypatch.setattr(_compat, "_loop_thread_writer", _wrong_rebuild(how))
    raw = _parts(_builder().compile(), True, "v2")
    enforced = _parts(with_visibility(_builder().compile(), EVERYTHING_VISIBLE), True, "v2")
    assert sorted(map(repr, enforced)) == sorted(map(repr, raw))
    assert enforced != raw


def test_an_unknown_writer_is_kept_as_is() -> None:
    """A writer that is not LangGraph's (another tool's, a guarded one) is not rebuilt."""

    def writer(chunk: Any) -> None:
        pass

    assert _compat._loop_thread_writer(writer) is writer


def test_a_writer_global_rebound_after_import_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test or tool that rebinds `get_config` in LangGraph's module after import sees it
    called by an enforced run's writer too, as by the raw one: such a writer is not rebuilt."""
    import langgraph.pregel.main

    calls = []
    original = langgraph.pregel.main.get_config

    def counting() -> Any:
        calls.append(1)
        return original()

    monkeypatch.setattr(langgraph.pregel.main, "get_config", counting)
    raw = _parts(_writer_graph(), True, "v2")
    raw_calls, calls[:] = len(calls), []
    enforced = _parts(with_visibility(_writer_graph(), EVERYTHING_VISIBLE), True, "v2")
    assert raw_calls == len(calls) == 5
    assert enforced == raw


def _wake_up_writes(graph: Any, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many self-pipe wake-up writes the event loop makes while `graph` streams."""
    count = 0

    async def collect() -> None:
        nonlocal count
        loop: Any = asyncio.get_running_loop()
        original = loop._write_to_self

        def write_to_self() -> None:
            nonlocal count
            count += 1
            original()

        monkeypatch.setattr(loop, "_write_to_self", write_to_self)
        async for _ in graph.astream(user_input(), stream_mode="custom", subgraphs=True):
            pass

    asyncio.run(asyncio.wait_for(collect(), TIMEOUT))
    return count


def _writer_graph(*, sync: bool = False) -> Any:
    """One node writing five custom events: async (on the loop's thread), or sync (on
    LangGraph's executor thread)."""

    def write(state: State) -> dict[str, Any]:
        for n in range(5):
            get_stream_writer()({"n": n})
        return {}

    async def awrite(state: State) -> dict[str, Any]:
        return write(state)

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("write", write if sync else awrite)
    builder.add_edge(START, "write")
    return builder.compile()


@pytest.mark.parametrize("rebuilt", [True, False], ids=["rebuilt", "control"])
def test_a_write_on_the_loop_thread_makes_no_wake_up_write(
    rebuilt: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five writes from an async node: raw LangGraph writes the loop's self-pipe once per
    write, the enforced run not at all for them. The control (the writer not recognised,
    so not rebuilt) writes as raw does."""
    if not rebuilt:
        monkeypatch.setattr(_compat, "_ASTREAM_WRITERS", frozenset())
    raw = _wake_up_writes(_writer_graph(), monkeypatch)
    enforced = _wake_up_writes(with_visibility(_writer_graph(), EVERYTHING_VISIBLE), monkeypatch)
    assert raw - enforced == (5 if rebuilt else 0)


def test_a_write_from_another_thread_still_wakes_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Five writes from a sync node, on LangGraph's executor thread: each still wakes the
    loop (`call_soon_threadsafe`), exactly as raw LangGraph's do."""
    raw = _wake_up_writes(_writer_graph(sync=True), monkeypatch)
    enforced = _wake_up_writes(
        with_visibility(_writer_graph(sync=True), EVERYTHING_VISIBLE), monkeypatch
    )
    assert raw >= 5
    assert enforced == raw


def test_a_write_from_a_loop_of_its_own_reaches_the_consumer_at_once() -> None:
    """A sync node runs an event loop of its own (`asyncio.run`, on LangGraph's executor
    thread) and writes there, then waits until the consumer has the write: the run's loop
    must be woken for it (not `call_soon`, which only a write on the run's own loop may
    use), or the node waits out its timeout."""
    got = threading.Event()
    waited: list[bool] = []

    def node(state: State) -> dict[str, Any]:
        async def inner() -> None:
            get_stream_writer()({"from": "a loop of its own"})

        asyncio.run(inner())
        waited.append(got.wait(TIMEOUT / 4))
        return {}

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")

    async def collect(graph: Any) -> list[Any]:
        out = []
        async for chunk in graph.astream(user_input(), stream_mode="custom"):
            out.append(chunk)
            got.set()
        return out

    for graph in (builder.compile(), with_visibility(builder.compile(), EVERYTHING_VISIBLE)):
        got.clear()
        assert asyncio.run(asyncio.wait_for(collect(graph), TIMEOUT)) == [
            {"from": "a loop of its own"}
        ]
    assert waited == [True, True], "each consumer got the write while the node waited"
