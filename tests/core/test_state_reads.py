"""State reads of a wrapped graph (get_state, aget_state, subgraphs=True, get_state_history,
aget_state_history, reads at a subgraph checkpoint found in history): the oracle (the raw
snapshot minus internal content, nothing visible lost, every interrupt kept, keys dropped
rather than nulled), the raw view for the app, the dict form of messages, resumes that
never call the redacted reads, and a control that fails on a leaky wrapper."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import StateSnapshot

import lg_visibility._state
from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility._compat import pregel_base
from lg_visibility._state import StateRedactor
from tests._support.oracle import (
    Case,
    canon,
    expected_snapshot,
    snapshot_pointers,
    snapshot_text,
)
from tests.core.test_events import GRAPHS

TIMEOUT = 60.0
pytestmark = pytest.mark.timeout(TIMEOUT)


def _thread(ns: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": "thread-1"}
    if ns is not None:
        conf["checkpoint_ns"] = ns
    return {"configurable": conf}


def _run_async(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def _wrapped(name: str) -> Any:
    build, _, policy, _ = GRAPHS[name]
    return with_visibility(build().compile(checkpointer=InMemorySaver()), policy)


def _reads(graph: Any, *, sync: bool) -> dict[str, list[Any]]:
    """Every state read a client can make, by name, each as a list of snapshots."""
    if sync:
        reads = {
            "get_state": [graph.get_state(_thread())],
            "get_state(subgraphs)": [graph.get_state(_thread(), subgraphs=True)],
            "get_state_history": list(graph.get_state_history(_thread())),
        }
    else:

        async def collect() -> dict[str, list[Any]]:
            return {
                "get_state": [await graph.aget_state(_thread())],
                "get_state(subgraphs)": [await graph.aget_state(_thread(), subgraphs=True)],
                "get_state_history": [s async for s in graph.aget_state_history(_thread())],
            }

        reads = _run_async(collect())
    raw = graph.raw_state
    history = [*raw.get_state_history(_thread()), raw.get_state(_thread(), subgraphs=True)]
    for ns in snapshot_pointers(history):
        if sync:
            reads[f"get_state@{ns.split(':')[0]}"] = [graph.get_state(_thread(ns))]
            reads[f"history@{ns.split(':')[0]}"] = list(graph.get_state_history(_thread(ns)))
        else:

            async def at(ns: str = ns) -> tuple[list[Any], list[Any]]:
                return [await graph.aget_state(_thread(ns))], [
                    s async for s in graph.aget_state_history(_thread(ns))
                ]

            one, many = _run_async(at())
            reads[f"get_state@{ns.split(':')[0]}"] = one
            reads[f"history@{ns.split(':')[0]}"] = many
    return reads


def _raw_reads(graph: Any) -> dict[str, list[Any]]:
    """The same reads through `graph.raw_state`, LangGraph's own answers."""
    raw = graph.raw_state
    reads = {
        "get_state": [raw.get_state(_thread())],
        "get_state(subgraphs)": [raw.get_state(_thread(), subgraphs=True)],
        "get_state_history": list(raw.get_state_history(_thread())),
    }
    history = reads["get_state_history"] + reads["get_state(subgraphs)"]
    for ns in snapshot_pointers(history):
        reads[f"get_state@{ns.split(':')[0]}"] = [raw.get_state(_thread(ns))]
        reads[f"history@{ns.split(':')[0]}"] = list(raw.get_state_history(_thread(ns)))
    return reads


def _drive(graph: Any, value: Any) -> None:
    async def go() -> None:
        async for _ in graph.astream(value, _thread(), stream_mode=["messages", "values"]):
            pass

    _run_async(go())


def _check(case: Case, name: str, reads: dict[str, list[Any]], raw: dict[str, list[Any]]) -> None:
    assert list(reads) == list(raw)
    for read, snapshots in reads.items():
        expected = [expected_snapshot(case, s) for s in raw[read]]
        assert canon([((), read, s) for s in snapshots]) == canon(
            [((), read, s) for s in expected]
        ), read
        for got, source in zip(snapshots, raw[read], strict=True):
            text = snapshot_text(got)
            leaked = [m for m in case.internal_markers if m in text]
            assert leaked == [], read
            shown = snapshot_text(expected_snapshot(case, source))
            assert [m for m in case.visible_markers if m in shown] == [
                m for m in case.visible_markers if m in text
            ]
            # kept as they are: next, config, metadata, interrupts; keys dropped, never None
            assert (got.next, got.config, got.metadata, got.interrupts) == (
                source.next,
                source.config,
                source.metadata,
                source.interrupts,
            )
            if isinstance(got.values, dict) and got.values:
                assert set(got.values) <= set(source.values)
                assert [k for k, v in got.values.items() if v is None and source.values[k]] == []


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize("name", list(GRAPHS))
def test_state_reads_equal_raw_minus_internal(name: str, sync: bool) -> None:
    """After every input (interrupts and resumes included), every state read is the raw read
    minus internal content, with next, config, metadata and interrupts kept."""
    _, case, _, inputs = GRAPHS[name]
    graph = _wrapped(name)
    seen_pointers = 0
    for value in inputs:
        _drive(graph, value)
        reads, raw = _reads(graph, sync=sync), _raw_reads(graph)
        _check(case, name, reads, raw)
        seen_pointers += sum(1 for read in reads if read.startswith("get_state@"))
    raw_text = " ".join(snapshot_text(s) for read in _raw_reads(graph).values() for s in read)
    # The order flow's nodes keep internal LLM output out of state (markers stripped), so
    # only the incident and the root agent persist internal content for the reads to drop.
    leaks_in_raw = [m for m in case.internal_markers if m in raw_text]
    assert leaks_in_raw == {
        "incident": ["KNWJSON", "TOOLARGS", "TOOLRESULT"],
        "root_agent": ["TRIAGEJSON"],
    }.get(name, [])
    if name != "root_agent":
        assert seen_pointers > 0, "history points into a subgraph checkpoint"


def test_state_read_at_an_internal_subgraph_checkpoint_has_empty_values() -> None:
    """Following a history task's pointer into the internal knowledge subgraph gives {}."""
    graph = _wrapped("incident")
    _drive(graph, GRAPHS["incident"][3][0])
    pointers = snapshot_pointers(list(graph.raw_state.get_state_history(_thread())))
    assert sorted(p.split(":")[0] for p in pointers) == [
        "insight_subgraph",
        "knowledge_subgraph",
        "router_subgraph",
    ]
    for ns in pointers:
        raw = graph.raw_state.get_state(_thread(ns))
        got = graph.get_state(_thread(ns))
        assert (bool(raw.values), got.values) == (True, {})
        assert [s.values for s in graph.get_state_history(_thread(ns))] == [{}] * len(
            list(graph.raw_state.get_state_history(_thread(ns)))
        )


@pytest.mark.parametrize("declare", ["tag", "declaration"])
def test_state_read_at_a_subgraph_internal_by_its_own_config_has_empty_values(
    declare: str,
) -> None:
    """A subgraph made internal only by its own config (`with_config`: a tag rule's tag, or
    a declaration) is known to be internal before any run: a pointer into it reads {}, as
    one internal by pattern does. Ground truth: the secret its node writes."""
    inner: StateGraph[Any] = StateGraph(MessagesState)
    inner.add_node("draft", lambda s: {"messages": [AIMessage("SECRET draft", id="d1")]})
    inner.add_edge(START, "draft")
    config = (
        {"tags": ["kn_internal"]} if declare == "tag" else {"metadata": {"visibility": "internal"}}
    )
    outer: StateGraph[Any] = StateGraph(MessagesState)
    outer.add_node("drafter", inner.compile().with_config(**config))
    outer.add_node("answer", lambda s: {"messages": [AIMessage("VISIBLE answer", id="a1")]})
    outer.add_edge(START, "drafter")
    outer.add_edge("drafter", "answer")
    policy = VisibilityPolicy(tags={"kn_internal": "internal"})
    graph = with_visibility(outer.compile(checkpointer=InMemorySaver()), policy)
    graph.invoke({"messages": [HumanMessage("hi", id="h1")]}, _thread())

    pointers = snapshot_pointers(list(graph.raw_state.get_state_history(_thread())))
    assert [p.split(":")[0] for p in pointers] == ["drafter"]
    raw = graph.raw_state.get_state(_thread(pointers[0]))
    assert "SECRET" in repr(raw.values)  # the control: the read below can fail
    assert graph.get_state(_thread(pointers[0])).values == {}
    history = list(graph.get_state_history(_thread(pointers[0])))
    assert history and all(s.values == {} for s in history)
    assert "VISIBLE answer" in repr(graph.get_state(_thread()).values)


@pytest.mark.parametrize("default", ["internal", "user_visible"])
def test_state_history_keeps_the_input_task_of_a_graph_internal_by_default(default: str) -> None:
    """The input checkpoint's `__start__` task holds the caller's input: it is judged as the
    graph's values are (by tag), not as a node at a path no pattern names, so a policy with
    `default="internal"` does not hide the human's message there. Inside an internal
    subgraph it is removed with everything else."""
    inner: StateGraph[Any] = StateGraph(MessagesState)
    inner.add_node("draft", lambda s: {"messages": [AIMessage("SECRET draft", id="d1")]})
    inner.add_edge(START, "draft")
    outer: StateGraph[Any] = StateGraph(MessagesState)
    outer.add_node("drafter", inner.compile())
    outer.add_node("answer", lambda s: {"messages": [AIMessage("VISIBLE answer", id="a1")]})
    outer.add_edge(START, "drafter")
    outer.add_edge("drafter", "answer")
    policy = VisibilityPolicy(default=default, internal=["drafter"], user_visible=["answer"])  # type: ignore[arg-type]
    graph = with_visibility(outer.compile(checkpointer=InMemorySaver()), policy)
    graph.invoke({"messages": [HumanMessage("HUMAN question", id="h1")]}, _thread())

    def start_results(snapshots: list[Any]) -> list[str]:
        return [repr(t.result) for s in snapshots for t in s.tasks if t.name == START]

    raw = start_results(list(graph.raw_state.get_state_history(_thread())))
    assert len(raw) == 1 and "HUMAN question" in raw[0]  # the control
    assert start_results(list(graph.get_state_history(_thread()))) == raw
    (pointer,) = snapshot_pointers(list(graph.raw_state.get_state_history(_thread())))
    inside = list(graph.raw_state.get_state_history(_thread(pointer)))
    assert any("HUMAN question" in r for r in start_results(inside))  # the control
    redacted = list(graph.get_state_history(_thread(pointer)))
    assert [t.result for s in redacted for t in s.tasks if t.name == START] == [None]


class _LeakyReads:
    """A wrapped graph whose state reads are LangGraph's own."""

    def get_state(self, *args: Any, **kwargs: Any) -> Any:
        return pregel_base().get_state(self, *args, **kwargs)  # type: ignore[attr-defined]


def test_state_oracle_detects_a_leaky_wrapper() -> None:
    """Against a wrapper that does not redact state reads, the state oracle fails."""
    _, case, _, inputs = GRAPHS["incident"]
    wrapped = _wrapped("incident")
    leaky = type("Leaky", (_LeakyReads, type(wrapped)), {})(**wrapped.__dict__)
    _drive(leaky, inputs[0])
    got = leaky.get_state(_thread())
    expected = expected_snapshot(case, leaky.raw_state.get_state(_thread()))
    assert canon([((), "s", got)]) != canon([((), "s", expected)])
    assert [m for m in case.internal_markers if m in snapshot_text(got)] == [
        "KNWJSON",
        "TOOLARGS",
        "TOOLRESULT",
    ]


def test_state_redactor_drops_messages_in_their_dict_form() -> None:
    """Messages the server's checkpoint reader turned into dicts are judged by their tag."""
    internal = AIMessage("DICTSECRET", id="a1", response_metadata={"visibility": "internal"})
    visible = AIMessage("shown", id="a2", response_metadata={"visibility": "user_visible"})
    human = HumanMessage("hi", id="h1")
    snap = StateSnapshot(
        values={
            "messages": [m.model_dump() for m in (human, internal, visible)],
            "last": internal.model_dump(),
            "note": "kept",
        },
        next=(),
        config={"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
        metadata=None,
        created_at=None,
        parent_config=None,
        tasks=(),
        interrupts=(),
    )
    got = StateRedactor(VisibilityPolicy(), {}).snapshot(snap)
    assert got.values == {
        "messages": [human.model_dump(), visible.model_dump()],
        "note": "kept",
    }


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_state_reads_are_not_called_inside_a_run_or_a_resume(
    sync: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streaming, invoking, resuming and update_state never go through the redacted reads;
    a client read does."""
    calls: list[str] = []
    original = StateRedactor.snapshot

    def spy(self: StateRedactor, snap: Any) -> Any:
        calls.append(snap.config["configurable"].get("checkpoint_ns", ""))
        return original(self, snap)

    monkeypatch.setattr(lg_visibility._state.StateRedactor, "snapshot", spy)
    _, _, _, inputs = GRAPHS["order_closed"]
    graph = _wrapped("order_closed")
    first, *resumes = inputs
    if sync:
        list(graph.stream(first, _thread(), stream_mode=["updates", "values"], subgraphs=True))
        graph.invoke(resumes[0], _thread())
        list(graph.stream(resumes[1], _thread(), stream_mode="messages"))
        graph.update_state(_thread(), {"messages": [HumanMessage("note", id="n1")]})
    else:

        async def go() -> None:
            async for _ in graph.astream(first, _thread(), stream_mode=["updates", "values"]):
                pass
            await graph.ainvoke(resumes[0], _thread())
            async for _ in graph.astream(resumes[1], _thread(), stream_mode="messages"):
                pass
            await graph.aupdate_state(_thread(), {"messages": [HumanMessage("note", id="n1")]})

        _run_async(go())
    assert calls == []
    final = graph.raw_state.get_state(_thread())
    assert final.next == ()
    assert "MAINVISIBLE" in snapshot_text(final)
    graph.get_state(_thread())
    assert calls == [""]


def test_state_read_written_back_keeps_the_raw_state() -> None:
    """A redacted read written back with aupdate_state (as AG-UI does) loses nothing."""
    graph = _wrapped("incident")
    _drive(graph, GRAPHS["incident"][3][0])
    before = graph.raw_state.get_state(_thread()).values

    async def write_back() -> None:
        state = await graph.aget_state(_thread())
        await graph.aupdate_state(_thread(), state.values)

    _run_async(write_back())
    after = graph.raw_state.get_state(_thread()).values
    assert [m.id for m in after["messages"]] == [m.id for m in before["messages"]]
    # (list keys with an adding reducer, like `cards`, grow: that is the reducer's doing)
    assert set(after) == set(before)
    assert [k for k, v in after.items() if v is None] == []
