"""A graph that a visible node's function invokes, made internal at run time.

`sub.invoke(state, {"tags": ["kn_internal"]})` inside a visible node: the graph runs under
the node's task namespace (a later graph of the same task under `<task>|1`, `|2`, ...), so
its snapshots name no run of their own. Recorded when the graph's run starts, before its
loop emits anything, they are judged internal; the node's own output still leaves.

Ground truth is the secret the inner node writes, never our tags; the control shows the
check fails when the record is not made.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility._run import Decider
from tests._support.core import SYNC_ASYNC, State, pytestmark, run, thread, user_input

__all__ = ["pytestmark"]

MODES = ["values", "updates", "checkpoints", "debug", "messages"]
POLICY = VisibilityPolicy(tags={"kn_internal": "internal"})


class Noted(State):
    note: str


def _graph_writing(note: str) -> Any:
    inner: StateGraph[Any] = StateGraph(Noted)
    inner.add_node("inner", lambda s: {"note": note})
    inner.add_edge(START, "inner")
    return inner.compile()


def _builder(how: str, *, then_visible: bool = False) -> StateGraph[Any]:
    secret, plain = _graph_writing("NOTESECRET"), _graph_writing("PLAIN note")
    config: Any = (
        {"tags": ["kn_internal"]} if how == "tag" else {"metadata": {"visibility": "internal"}}
    )

    def research(state: Noted) -> dict[str, Any]:
        secret.invoke(state, config)
        if then_visible:
            plain.invoke(state)
        return {"messages": [AIMessage("ANSWER done", id="d")]}

    builder: StateGraph[Any] = StateGraph(Noted)
    builder.add_node("research", research)
    builder.add_edge(START, "research")
    return builder


def _sent(graph: Any, *, sync: bool, subgraphs: bool = True) -> str:
    items = run(graph, user_input(), thread(), sync=sync, stream_mode=MODES, subgraphs=subgraphs)
    return repr(items)


@SYNC_ASYNC
@pytest.mark.parametrize("how", ["tag", "declaration"])
def test_an_internal_invoked_graphs_snapshots_stay_internal(how: str, sync: bool) -> None:
    raw = _builder(how).compile(checkpointer=InMemorySaver())
    assert "NOTESECRET" in _sent(raw, sync=sync)  # the secret is there to be found
    graph = with_visibility(_builder(how).compile(checkpointer=InMemorySaver()), POLICY)
    sent = _sent(graph, sync=sync)
    assert "NOTESECRET" not in sent
    assert "ANSWER done" in sent  # the node's own output leaves


@SYNC_ASYNC
def test_the_other_graphs_of_that_task_lose_their_snapshots_not_their_updates(
    sync: bool,
) -> None:
    """Fails closed: a visible graph the same task runs later (`<task>|1`) cannot be told
    apart by its namespace, so its snapshots are dropped too; its updates, judged by its
    own node's run, still leave."""
    graph = with_visibility(
        _builder("tag", then_visible=True).compile(checkpointer=InMemorySaver()), POLICY
    )
    items = run(graph, user_input(), thread(), sync=sync, stream_mode=MODES, subgraphs=True)
    assert "NOTESECRET" not in repr(items)
    assert [mode for ns, mode, payload in items if "PLAIN note" in repr(payload)] == [
        "updates",
        "debug",
    ]


def test_the_check_fails_when_the_record_is_not_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: without the record at the graph's start, its snapshots leak."""
    monkeypatch.setattr(Decider, "_note_internal_within", lambda *args: None)
    graph = with_visibility(_builder("tag").compile(checkpointer=InMemorySaver()), POLICY)
    assert "NOTESECRET" in _sent(graph, sync=True)


@SYNC_ASYNC
def test_a_visible_graph_before_the_internal_one_keeps_its_snapshots_whatever_the_timing(
    sync: bool,
) -> None:
    """The visible node runs in an executor thread (a second task beside it) and invokes a
    visible graph, then an internal one; the consumer is slower than the node. Where the
    graphs push into the run's queue their namespaces are judged on the node's thread, in
    the order their events are made: the first graph's snapshots leave (its namespace was
    judged before the second graph started), the second's do not."""
    import time

    from langgraph.config import get_stream_writer

    plain, secret = _graph_writing("PLAIN note"), _graph_writing("NOTESECRET")

    def research(state: Noted) -> dict[str, Any]:
        get_stream_writer()("started")
        plain.invoke(state)
        secret.invoke(state, {"tags": ["kn_internal"]})
        return {"messages": [AIMessage("ANSWER done", id="d")]}

    builder: StateGraph[Any] = StateGraph(Noted)
    builder.add_node("research", research)
    builder.add_node("other", lambda s: time.sleep(0.3) or {})
    builder.add_edge(START, "research")
    builder.add_edge(START, "other")
    graph = with_visibility(builder.compile(checkpointer=InMemorySaver()), POLICY)
    kw: dict[str, Any] = {"stream_mode": ["values", "custom"], "subgraphs": True}
    if sync:
        items = []
        for item in graph.stream(user_input(), thread(), **kw):
            if item[1] == "custom":
                time.sleep(0.2)  # slower than the node: it runs both graphs meanwhile
            items.append(item)
    else:
        items = run(graph, user_input(), thread(), sync=False, **kw)
    assert "NOTESECRET" not in repr(items)
    inner = [p.get("note") for ns, mode, p in items if mode == "values" and len(ns) == 1]
    assert inner == [None, "PLAIN note"]


class _Secret(State):
    secret: str


def _stable_graph() -> Any:
    """A graph compiled with `checkpointer=True`: it runs under a namespace without task ids
    (`('research',)`, not `('research:<id>',)`)."""
    inner: StateGraph[Any] = StateGraph(_Secret)
    inner.add_node("inner", lambda s: {"secret": "NOTESECRET"})
    inner.add_edge(START, "inner")
    return inner.compile(checkpointer=True)


@SYNC_ASYNC
@pytest.mark.parametrize("how", ["invoked with a tag", "declared internal", "by pattern"])
def test_a_checkpointer_true_graphs_snapshots_follow_its_decision(how: str, sync: bool) -> None:
    """Its key `secret` is its own (the root's state has none)."""
    builder: StateGraph[Any] = StateGraph(State)
    policy = POLICY
    if how == "invoked with a tag":
        sub = _stable_graph()

        def research(state: State) -> dict[str, Any]:
            sub.invoke(state, {"tags": ["kn_internal"]})
            return {"messages": [AIMessage("ANSWER done", id="d")]}

        builder.add_node("research", research)
    elif how == "declared internal":
        builder.add_node("research", _stable_graph(), metadata={"visibility": "internal"})
    else:
        builder.add_node("research", _stable_graph())
        policy = VisibilityPolicy(internal=["research"])
    builder.add_edge(START, "research")
    raw = builder.compile(checkpointer=InMemorySaver())
    assert "NOTESECRET" in _sent(raw, sync=sync)  # there to be found, under ('research',)
    graph = with_visibility(builder.compile(checkpointer=InMemorySaver()), policy)
    assert "NOTESECRET" not in _sent(graph, sync=sync)


class _Turned(State):
    secret: str
    turn: int


@SYNC_ASYNC
@pytest.mark.parametrize("how", ["node invokes", "node runs"])
def test_inside_a_checkpointer_true_graph_a_run_time_internal_graph_stays_internal(
    how: str, sync: bool
) -> None:
    """Inside a visible `checkpointer=True` graph (namespace `('research', 'worker:<id>')`),
    `worker` invokes a graph with an internal tag, or is a subgraph made internal by one."""
    leaf: StateGraph[Any] = StateGraph(_Secret)
    leaf.add_node("leaf", lambda s: {"secret": "NOTESECRET"})
    leaf.add_edge(START, "leaf")
    tagged = leaf.compile()
    inner: StateGraph[Any] = StateGraph(State)
    if how == "node invokes":

        def worker(state: State) -> dict[str, Any]:
            tagged.invoke(state, {"tags": ["kn_internal"]})
            return {}

        inner.add_node("worker", worker)
    else:
        inner.add_node("worker", tagged.with_config(tags=["kn_internal"]))
    inner.add_edge(START, "worker")
    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("research", inner.compile(checkpointer=True))
    builder.add_edge(START, "research")
    assert "NOTESECRET" in _sent(builder.compile(checkpointer=InMemorySaver()), sync=sync)
    graph = with_visibility(builder.compile(checkpointer=InMemorySaver()), POLICY)
    assert "NOTESECRET" not in _sent(graph, sync=sync)


@SYNC_ASYNC
def test_a_checkpointer_true_graph_in_a_loop_follows_each_runs_decision(sync: bool) -> None:
    """A visible node in a loop invokes the same `checkpointer=True` graph, visibly, then
    with an internal tag: both run under `('research',)`; the second's snapshots stay
    internal, the first's leave."""
    inner: StateGraph[Any] = StateGraph(_Turned)
    inner.add_node("inner", lambda s: {"secret": "NOTESECRET" if s.get("turn") else "PLAIN"})
    inner.add_edge(START, "inner")
    sub = inner.compile(checkpointer=True)

    def research(state: _Turned) -> dict[str, Any]:
        turn = state.get("turn", 0)
        sub.invoke({"messages": [], "turn": turn}, {"tags": ["kn_internal"]} if turn else None)
        return {"turn": turn + 1}

    class Outer(State):
        turn: int

    builder: StateGraph[Any] = StateGraph(Outer)
    builder.add_node("research", research)
    builder.add_edge(START, "research")
    builder.add_conditional_edges("research", lambda s: "research" if s["turn"] < 2 else "__end__")
    assert "NOTESECRET" in _sent(builder.compile(checkpointer=InMemorySaver()), sync=sync)
    sent = _sent(with_visibility(builder.compile(checkpointer=InMemorySaver()), POLICY), sync=sync)
    assert "NOTESECRET" not in sent and "'PLAIN'" in sent
