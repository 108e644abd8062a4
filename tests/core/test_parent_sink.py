"""The parent-side sink of an enforced `astream(subgraphs=True)`: an internal namespace's
events that the output filter would drop anyway are dropped where a subgraph pushes them
into the parent's queue. What leaves must be exactly what leaves without it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import Command

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility._output_filter import OutputFilter
from lg_visibility.demo.graphs import (
    INCIDENT_POLICY,
    ORDER_POLICY,
    incident_builder,
    order_builder,
)
from tests._support.cases import ALL_MODES, MODES, ORDER_CLOSED, ORDER_CLOSED_POLICY, mode_id
from tests._support.core import State, pytestmark, run, thread, user_input
from tests._support.oracle import canon, event_parts, interrupt_values, run_stream

__all__ = ["pytestmark"]

INCIDENT_FILTER_CUSTOM = VisibilityPolicy(
    internal=["router_subgraph", "knowledge_subgraph", "insight_subgraph"],
    user_visible=["knowledge_subgraph/answer"],
    user_visible_keys=["cards", "knowledge", "question", "scenario"],
    filter_custom=True,
)
GRAPHS = {
    "incident": (incident_builder, INCIDENT_POLICY),
    "incident_filter_custom": (incident_builder, INCIDENT_FILTER_CUSTOM),
    "order": (order_builder, ORDER_POLICY),
    "order_closed": (order_builder, ORDER_CLOSED_POLICY),
}


def _inputs(name: str) -> list[Any]:
    """The oracle's inputs for these graphs (tests/core/test_oracle.py)."""
    if name.startswith("incident"):
        return [{"messages": [HumanMessage("I want a refund for my order", id="u1")]}]
    return [
        {"messages": [HumanMessage("Please order 2 widgets for ACME", id="u1")]},
        Command(resume={"phone": "555-0100"}),
        Command(resume="approve"),
    ]


class SinkSpy:
    """Records, for every enforced astream, what its subgraphs offered the parent-side sink
    and what the sink passed on to LangGraph's put (the queue)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, enabled: bool = True) -> None:
        self.offered: list[tuple[tuple[str, ...], str, Any]] = []
        self.queued: list[tuple[tuple[str, ...], str, Any]] = []
        original = OutputFilter.sink
        spy = self

        def sink(flt: OutputFilter, put: Callable[[Any], None]) -> Callable[[Any], None]:
            def queue(chunk: Any) -> None:
                spy.queued.append(chunk)  # list.append: safe from the executor threads
                put(chunk)

            judged = original(flt, queue) if enabled else queue

            def offer(chunk: Any) -> None:
                spy.offered.append(chunk)
                judged(chunk)

            return offer

        monkeypatch.setattr(OutputFilter, "sink", sink)


def _stream(name: str, kw: dict[str, Any]) -> list[Any]:
    build, policy = GRAPHS[name]
    graph = with_visibility(build().compile(checkpointer=InMemorySaver()), policy)
    items = run_stream(graph, _inputs(name), thread_id="thread-1", sync=False, **kw)
    mode = kw["stream_mode"] if kw["stream_mode"] is not None else graph.stream_mode
    return [event_parts(i, mode, True, kw["version"]) for i in items]


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("stream_mode", MODES, ids=mode_id)
@pytest.mark.parametrize("name", list(GRAPHS))
def test_parent_sink_output_is_identical_without_it(
    name: str, stream_mode: Any, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The enforced astream(subgraphs=True) yields the same items, in the same order, with
    the sink dropping early as with every item left to the output filter."""
    kw = {"stream_mode": stream_mode, "subgraphs": True, "version": version}
    with monkeypatch.context() as off:
        without = SinkSpy(off, enabled=False)
        plain = _stream(name, kw)
    spy = SinkSpy(monkeypatch)
    early = _stream(name, kw)
    assert canon(early) == canon(plain)
    assert len(without.offered) == len(without.queued) == len(spy.offered)
    queued = {id(c) for c in spy.queued}  # the sink passes on the very chunk it was given
    dropped = [c for c in spy.offered if id(c) not in queued]
    assert len(dropped) == len(spy.offered) - len(spy.queued)
    # A subgraph's loop pushes these; messages, custom and tools go to the queue directly.
    assert {mode for _, mode, _ in spy.offered} <= {
        "values",
        "checkpoints",
        "updates",
        "tasks",
        "debug",
    }
    assert {mode for _, mode, _ in dropped} <= {"values", "checkpoints", "updates", "debug"}
    assert [c for c in dropped if c[1] == "debug" and c[2]["type"] != "checkpoint"] == []
    modes = ALL_MODES if stream_mode is None else stream_mode
    if "values" in modes or "checkpoints" in modes:
        assert dropped, "the sink dropped an internal subgraph's snapshots"


def _pair_builder() -> StateGraph[Any]:
    """A root running two subgraphs of the same shape, `work` (internal) and `show`
    (visible); their nodes are sync functions, which astream runs in executor threads."""

    def subgraph(text: str) -> Any:
        def step(state: State) -> dict[str, Any]:
            return {"messages": [AIMessage(text, id=f"{text}-{len(state['messages'])}")]}

        sub: StateGraph[Any] = StateGraph(State)
        sub.add_node("step", step)
        sub.add_node("again", step)
        sub.add_edge(START, "step")
        sub.add_edge("step", "again")
        return sub.compile()

    root: StateGraph[Any] = StateGraph(State)
    root.add_node("work", subgraph("WORKSECRET"))
    root.add_node("show", subgraph("SHOWN"))
    root.add_edge(START, "work")
    root.add_edge("work", "show")
    return root


@pytest.mark.parametrize("stream_mode", [["values", "updates"], ["values", "checkpoints", "debug"]])
def test_parent_sink_keeps_an_internal_subgraphs_snapshots_out_of_the_queue(
    stream_mode: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An internal subgraph's values, updates, checkpoints and debug checkpoints never reach
    the parent's queue; a visible subgraph of the same shape has every one queued."""
    spy = SinkSpy(monkeypatch)
    graph = with_visibility(
        _pair_builder().compile(checkpointer=InMemorySaver()), VisibilityPolicy(internal=["work"])
    )
    items = run(graph, user_input(), thread(), sync=False, stream_mode=stream_mode, subgraphs=True)

    def of(chunks: list[Any], node: str) -> list[tuple[str, Any]]:
        return [
            (mode, payload.get("type") if mode == "debug" else None)
            for ns, mode, payload in chunks
            if ns and ns[0].startswith(f"{node}:")
        ]

    shown = of(spy.offered, "show")
    assert of(spy.offered, "work") == shown
    assert of(spy.queued, "show") == shown
    # Left to the getter: task events (its judgment of them records decisions); the run
    # asks for `tasks` beside `updates` and never delivers them.
    kept = [
        k for k in shown if k[0] == "tasks" or k in (("debug", "task"), ("debug", "task_result"))
    ]
    assert kept
    assert of(spy.queued, "work") == kept
    assert {m for m, _ in shown} == set(stream_mode) | (
        {"tasks"} if "updates" in stream_mode else set()
    )
    assert "WORKSECRET" not in repr(items)
    assert "SHOWN" in repr(items)


def test_parent_sink_passes_an_update_of_a_visible_node_in_an_internal_subgraph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An update in an internal namespace from a node decided visible is queued and leaves;
    the internal node's update beside it in the same subgraph is dropped at the sink."""
    spy = SinkSpy(monkeypatch)
    policy = VisibilityPolicy(internal=["work"], user_visible=["work/again"])
    graph = with_visibility(_pair_builder().compile(), policy)
    items = run(graph, user_input(), thread(), sync=False, stream_mode="updates", subgraphs=True)

    def updates(chunks: list[Any]) -> list[list[str]]:
        return [
            list(p) for ns, m, p in chunks if m == "updates" and ns and ns[0].startswith("work:")
        ]

    queued, offered = updates(spy.queued), updates(spy.offered)
    assert offered == [["step"], ["again"]]
    assert queued == [["again"]]
    assert [list(p) for ns, p in items if ns and ns[0].startswith("work:")] == [["again"]]


def test_parent_sink_lets_an_internal_subgraphs_interrupts_surface(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The order flow with its sub-agent internal raises both interrupts inside it: with the
    sink dropping that namespace's snapshots, both still reach the client, as raw."""
    kw = {"stream_mode": ["updates", "values"], "subgraphs": True, "version": "v2"}
    raw_graph = order_builder().compile(checkpointer=InMemorySaver())
    raw_items = run_stream(raw_graph, _inputs("order"), thread_id="thread-1", sync=False, **kw)
    raw = [event_parts(i, kw["stream_mode"], True, "v2") for i in raw_items]
    spy = SinkSpy(monkeypatch)
    enforced = _stream("order_closed", kw)
    assert len(spy.queued) < len(spy.offered)
    surfaced = interrupt_values(enforced)
    assert len({repr(v) for v in surfaced}) == 2
    assert set(map(repr, surfaced)) == set(map(repr, interrupt_values(raw)))
    assert ORDER_CLOSED.internal_prefixes == ("main_agent", "order_agent")


@pytest.mark.parametrize(
    ("stream_mode", "records"),
    [
        (["messages", "custom", "values"], False),
        (["values", "checkpoints"], False),
        ("updates", True),
        ("tasks", True),
        ("debug", True),
    ],
)
def test_a_run_records_node_decisions_only_for_the_modes_that_read_them(
    stream_mode: Any, records: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`node_decisions` (read for updates, tasks and debug events, which name a node but not
    its task) stays empty in a run streaming none of those modes; task decisions, which
    every mode reads, are recorded either way."""
    import lg_visibility._wrap as wrap

    runs: list[Any] = []
    original = wrap._run_state

    def spy(graph: Any, policy: VisibilityPolicy) -> Any:
        runs.append(original(graph, policy))
        return runs[-1]

    monkeypatch.setattr(wrap, "_run_state", spy)
    graph = with_visibility(_pair_builder().compile(), VisibilityPolicy(internal=["work"]))
    items = run(graph, user_input(), thread(), sync=False, stream_mode=stream_mode, subgraphs=True)
    assert "WORKSECRET" not in repr(items)
    (state,) = runs
    assert state.task_decisions
    assert bool(state.node_decisions) is records
    if records:
        assert state.node_decisions[("", "work")] == "internal"


@pytest.mark.parametrize(
    "kw",
    [
        {"print_mode": "updates", "subgraphs": True},
        {"print_mode": ["updates", "custom"], "subgraphs": True},
    ],
)
def test_print_mode_prints_only_what_may_leave(
    kw: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`print_mode` (and `debug`) make LangGraph queue (and print, from the judged getter)
    updates that `stream_mode` does not ask for: the run records node decisions for them,
    so an update of a node decided internal only at run time (a tag on a graph a node's
    function invokes) is neither yielded nor printed."""
    from langgraph.graph import StateGraph as Builder

    class Noted(State):
        note: str

    inner: Builder[Any] = Builder(Noted)
    inner.add_node("inner", lambda s: {"note": "NOTESECRET"})
    inner.add_edge(START, "inner")
    sub = inner.compile()

    def research(state: Noted) -> dict[str, Any]:
        sub.invoke(state, {"tags": ["kn_internal"]})  # internal by a tag, known at run time
        return {"messages": [AIMessage("done", id="d")]}

    builder: Builder[Any] = Builder(Noted)
    builder.add_node("research", research)
    builder.add_edge(START, "research")
    graph = with_visibility(builder.compile(), VisibilityPolicy(tags={"kn_internal": "internal"}))
    items = list(graph.stream(user_input(), stream_mode="messages", **kw))
    printed = capsys.readouterr().out
    assert "NOTESECRET" not in repr(items)
    assert "NOTESECRET" not in printed
    assert "done" in repr(items)
    raw = list(builder.compile().stream(user_input(), stream_mode="messages", **kw))
    assert "NOTESECRET" in capsys.readouterr().out, "the raw graph prints it (control)"
    assert raw
