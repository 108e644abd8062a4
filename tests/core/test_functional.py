"""The functional API: `@task`s called from an `@entrypoint`, from a task, from a graph's
node, and an entrypoint run as a subgraph.

A `@task` runs under its caller's namespace (`app/research`), where its models' runs are,
but LangGraph streams its `tasks`, `updates` and debug events at its graph's namespace,
named by the task alone. Ground truth is the test's: the tasks it names internal, and the
`SECRET` marker in what they make; never lg_visibility's tags.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_stream_writer
from langgraph.func import entrypoint, task
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from lg_visibility import VisibilityConfigError, VisibilityPolicy, with_visibility
from lg_visibility.testing import FakeChatModel
from tests._support.cases import ALL_MODES, mode_id
from tests._support.core import TIMEOUT, State, run, user_input
from tests._support.oracle import canon

pytestmark = pytest.mark.timeout(TIMEOUT)

MARKER = "SECRET"
INTERNAL_TASKS = frozenset({"research", "lookup"})
"""The tasks each graph here runs internally (by the test's policy), and only they."""


def _tasks(*, asynchronous: bool) -> tuple[Any, Any]:
    """`research` (internal: it writes a custom event, calls `lookup`, a task of its own,
    and an internal model) and `answer` (visible: it is handed a count, never the notes)."""
    secret = FakeChatModel(responses=[f"{MARKER} plan"])
    shown = FakeChatModel(responses=["shown answer"])

    @task
    def lookup(q: str) -> str:
        return f"{MARKER} fact about {q}"

    if asynchronous:

        @task
        async def research(q: str) -> str:
            get_stream_writer()({"from": f"{MARKER} research"})
            fact = await lookup(q)
            return (await secret.ainvoke([HumanMessage(q)])).content + fact

        @task
        async def answer(n: int) -> AIMessage:
            get_stream_writer()({"from": "shown answer"})
            return await shown.ainvoke([HumanMessage(f"{n} notes")])

    else:

        @task
        def research(q: str) -> str:
            get_stream_writer()({"from": f"{MARKER} research"})
            fact = lookup(q).result()
            return secret.invoke([HumanMessage(q)]).content + fact

        @task
        def answer(n: int) -> AIMessage:
            get_stream_writer()({"from": "shown answer"})
            return shown.invoke([HumanMessage(f"{n} notes")])

    return research, answer


def _entrypoint(*, asynchronous: bool) -> Any:
    research, answer = _tasks(asynchronous=asynchronous)
    if asynchronous:

        @entrypoint(checkpointer=InMemorySaver())
        async def app(inputs: dict[str, Any]) -> dict[str, Any]:
            notes = await research(inputs["messages"][-1].content)
            return {"messages": [await answer(len(notes))]}

        return app

    @entrypoint(checkpointer=InMemorySaver())
    def app(inputs: dict[str, Any]) -> dict[str, Any]:  # type: ignore[no-redef]
        notes = research(inputs["messages"][-1].content).result()
        return {"messages": [answer(len(notes)).result()]}

    return app


def _node_calling_tasks(*, asynchronous: bool) -> Any:
    """A graph's node `work` calls the tasks."""
    research, answer = _tasks(asynchronous=asynchronous)

    def work(state: State) -> dict[str, Any]:
        notes = research(state["messages"][-1].content).result()
        return {"messages": [answer(len(notes)).result()]}

    async def awork(state: State) -> dict[str, Any]:
        notes = await research(state["messages"][-1].content)
        return {"messages": [await answer(len(notes))]}

    builder = StateGraph(State)
    builder.add_node("work", awork if asynchronous else work)
    builder.add_edge(START, "work")
    return builder.compile(checkpointer=InMemorySaver())


def _entrypoint_as_subgraph(*, asynchronous: bool) -> Any:
    """The entrypoint runs as the node `outer` of a graph."""
    app = _entrypoint(asynchronous=asynchronous)
    builder = StateGraph(State)
    builder.add_node("outer", app)
    builder.add_edge(START, "outer")
    return builder.compile(checkpointer=InMemorySaver())


GRAPHS = {
    "entrypoint": (lambda a: _entrypoint(asynchronous=a), ["app/research"]),
    "node": (lambda a: _node_calling_tasks(asynchronous=a), ["work/research"]),
    "subgraph": (
        lambda a: _entrypoint_as_subgraph(asynchronous=a),
        ["outer/app/research"],
    ),
}


def _expected(raw: list[tuple], *, filter_custom: bool) -> list[tuple]:
    """The raw parts less those of the internal tasks: by name where LangGraph streams them,
    their model's tokens by the node LangGraph's metadata names, custom events by marker."""
    out = []
    for ns, mode, payload in raw:
        if mode == "messages" and payload[1].get("langgraph_node") in INTERNAL_TASKS:
            continue  # LangGraph's own metadata: the task the model ran in
        if mode == "custom" and filter_custom and MARKER in repr(payload):
            continue
        if mode in ("tasks", "debug"):
            task_payload = payload.get("payload", {}) if mode == "debug" else payload
            if task_payload.get("name") in INTERNAL_TASKS:
                continue
        if mode == "updates":
            payload = {k: v for k, v in payload.items() if k not in INTERNAL_TASKS}
            if not payload:
                continue
        out.append((ns, mode, payload))
    return out


def _parts(items: list[Any], subgraphs: bool, modes: Any) -> list[tuple]:
    """Each item as (namespace, mode, payload)."""
    if isinstance(modes, str):
        if subgraphs:
            return [(ns, modes, payload) for ns, payload in items]
        return [((), modes, item) for item in items]
    if subgraphs:
        return [tuple(item) for item in items]
    return [((), mode, payload) for mode, payload in items]


# (stream, tasks): async tasks run under astream only
STREAMS = pytest.mark.parametrize(
    ("sync", "asynchronous"),
    [(True, False), (False, False), (False, True)],
    ids=["sync", "async-sync_tasks", "async-async_tasks"],
)


@STREAMS
@pytest.mark.parametrize("graph_kind", list(GRAPHS))
@pytest.mark.parametrize("subgraphs", [True, False], ids=["subgraphs", "root"])
@pytest.mark.parametrize("stream_mode", [ALL_MODES, "updates", ["tasks"]], ids=mode_id)
@pytest.mark.parametrize("filter_custom", [True, False], ids=["filtered", "default"])
@pytest.mark.parametrize("default", ["user_visible", "internal"])
def test_a_task_is_judged_by_its_callers_path_wherever_its_events_leave(
    sync: bool,
    graph_kind: str,
    asynchronous: bool,
    subgraphs: bool,
    stream_mode: Any,
    filter_custom: bool,
    default: str,
) -> None:
    """An internal `@task` (by a pattern under its caller, `app/research`) and the task it
    calls leave nothing: not their tokens, updates, task starts and results, nor (with
    `filter_custom`) their custom events; everything else is raw's, in raw's order. With
    `default="internal"` the caller is declared visible by a pattern: the visible task's
    updates, which name it alone, are judged by its run too, not by its bare name."""
    build, internal = GRAPHS[graph_kind]
    caller = internal[0].rpartition("/")[0]
    visible = [caller.partition("/")[0]] if default == "internal" else []
    policy = VisibilityPolicy(
        internal=internal, user_visible=visible, default=default, filter_custom=filter_custom
    )
    kw = {"sync": sync, "stream_mode": stream_mode, "subgraphs": subgraphs}
    config = {"configurable": {"thread_id": "t"}}
    raw = _parts(run(build(asynchronous), user_input(), config, **kw), subgraphs, stream_mode)
    graph = with_visibility(build(asynchronous), policy)
    enforced = _parts(run(graph, user_input(), config, **kw), subgraphs, stream_mode)
    expected = _expected(raw, filter_custom=filter_custom)
    assert canon(enforced) == canon(expected)
    judged = [part for part in enforced if filter_custom or part[1] != "custom"]
    assert MARKER not in repr(canon(judged))  # by default custom events pass, as raw
    if subgraphs or graph_kind != "subgraph":
        assert canon(expected) != canon(raw), "control: raw has internal parts to drop"


def test_a_pattern_naming_a_task_at_the_root_is_refused_with_where_tasks_are_named() -> None:
    """A `@task` is no node of the entrypoint's graph: a pattern naming it at the root is a
    typo the check reports, saying that tasks are named under their caller."""
    with pytest.raises(VisibilityConfigError, match=r"segment 1 'research' names no node") as info:
        with_visibility(_entrypoint(asynchronous=False), VisibilityPolicy(internal=["research"]))
    assert "the nodes there are 'app'" in str(info.value)
    assert "A `@task` is named under the node or entrypoint that calls it" in str(info.value)


@pytest.mark.parametrize("graph_kind", ["entrypoint", "node"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync_tasks", "async_tasks"])
def test_astream_events_of_an_internal_task_do_not_leave(
    graph_kind: str, asynchronous: bool
) -> None:
    """`astream_events` (v2) drops the internal task's runs (its model, the task it calls)
    and the root's stream items of them; the visible task's model streams as raw's does."""
    build, internal = GRAPHS[graph_kind]
    policy = VisibilityPolicy(internal=internal, filter_custom=True)

    async def events(graph: Any) -> list[dict[str, Any]]:
        config = {"configurable": {"thread_id": "t"}}
        return [e async for e in graph.astream_events(user_input(), config, version="v2")]

    def tokens(found: list[dict[str, Any]]) -> list[str]:
        """The visible task's model's tokens (by the task LangGraph's metadata names)."""
        return [
            e["data"]["chunk"].content
            for e in found
            if e["event"] == "on_chat_model_stream"
            and e["metadata"].get("langgraph_node") not in INTERNAL_TASKS
        ]

    raw = asyncio.run(asyncio.wait_for(events(build(asynchronous)), TIMEOUT))
    enforced = asyncio.run(
        asyncio.wait_for(events(with_visibility(build(asynchronous), policy)), TIMEOUT)
    )
    assert MARKER in repr(raw)
    assert MARKER not in repr(enforced)
    assert tokens(enforced) == tokens(raw)
    assert "".join(tokens(raw)) == "shown answer"
    names = {e["name"] for e in enforced}
    assert "answer" in names and not names & INTERNAL_TASKS


def _interrupted_entrypoint() -> Any:
    """The internal task runs, then the entrypoint asks for approval; on resume LangGraph
    replays the task's result from the checkpoint (its start event again, no new run)."""

    @task
    def research(q: str) -> str:
        return f"{MARKER} fact about {q}"

    @entrypoint(checkpointer=InMemorySaver())
    def app(inputs: dict[str, Any]) -> dict[str, Any]:
        notes = research(inputs["messages"][-1].content).result()
        approved = interrupt("approve?")
        return {"notes": len(notes), "approved": approved}

    return app


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_an_interrupt_after_an_internal_task_leaves_and_its_replay_does_not(sync: bool) -> None:
    """The interrupt leaves; the internal task's events do not, neither when it runs nor when
    the resumed run replays it."""
    policy = VisibilityPolicy(internal=["app/research"])
    kw = {"sync": sync, "stream_mode": ["updates", "tasks", "debug", "values"], "subgraphs": True}
    config = {"configurable": {"thread_id": "t"}}
    raw_graph, graph = _interrupted_entrypoint(), with_visibility(_interrupted_entrypoint(), policy)
    interrupted = []
    for value in (user_input(), Command(resume=True)):
        raw = [tuple(p) for p in run(raw_graph, value, config, **kw)]
        enforced = [tuple(p) for p in run(graph, value, config, **kw)]
        assert canon(enforced) == canon(_expected(raw, filter_custom=False))
        assert MARKER not in repr(canon(enforced))
        tasks = [p[2]["name"] for p in raw if p[1] == "tasks"]
        assert "research" in tasks  # control: the start is there to drop, run and replay
        interrupted.append(any("__interrupt__" in p[2] for p in enforced if p[1] == "updates"))
    assert interrupted == [True, False]


def _task_called_by(caller: str) -> Any:
    """A visible node (or the tools node) calls an internal-by-context `@task` that gets
    the marker as input: from a chain it runs with an internal tag, or from a tool that
    answers an internal model's call."""

    @task
    def research(q: str) -> str:
        return f"{MARKER} result"

    if caller == "tagged_chain":

        def work(state: State) -> dict[str, Any]:
            count = RunnableLambda(lambda q: len(research(q).result()))
            count.invoke(f"{MARKER} input", {"tags": ["kn_internal"]})
            return {}

        builder = StateGraph(State)
        builder.add_node("work", work)
        builder.add_edge(START, "work")
        return builder.compile(checkpointer=InMemorySaver())

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return str(len(research(f"{MARKER} order {order}").result()))

    call = {"name": "lookup", "args": {"order": "A1"}, "id": "call-1"}
    model = FakeChatModel(responses=[AIMessage("", tool_calls=[call])])
    builder = StateGraph(State)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize("caller", ["tagged_chain", "internal_tool"])
@pytest.mark.parametrize("slow_consumer", [False, True], ids=["eager", "slow"])
def test_a_task_called_in_an_internal_context_is_internal_from_its_start(
    sync: bool, caller: str, slow_consumer: bool
) -> None:
    """A `@task` called inside a chain tagged internal, or by a tool answering an internal
    call, is internal as its run is, its start event (which carries its input) too, however
    late the consumer reads it: decided where LangGraph puts it, in the caller's context."""
    policy = (
        VisibilityPolicy(tags={"kn_internal": "internal"})
        if caller == "tagged_chain"
        else VisibilityPolicy(internal=["agent"])
    )
    kw: dict[str, Any] = {"stream_mode": ["tasks", "updates"], "subgraphs": True}
    config = {"configurable": {"thread_id": "t"}}
    raw = run(_task_called_by(caller), user_input(), config, sync=sync, **kw)
    assert any(p[2].get("name") == "research" and "input" in p[2] for p in raw if p[1] == "tasks")
    graph = with_visibility(_task_called_by(caller), policy)

    async def slowly() -> list[Any]:
        out = []
        async for item in graph.astream(user_input(), config, **kw):
            out.append(item)
            await asyncio.sleep(0.05 if slow_consumer else 0)
        return out

    if sync:
        enforced = []
        for item in graph.stream(user_input(), config, **kw):
            enforced.append(item)
            time.sleep(0.05 if slow_consumer else 0)
    else:
        enforced = asyncio.run(asyncio.wait_for(slowly(), TIMEOUT))
    assert MARKER not in repr(enforced)
    assert not [p for p in enforced if p[1] == "tasks" and p[2].get("name") == "research"]


def _two_lookups() -> Any:
    """The entrypoint calls `lookup` itself (visible) and through `research` (internal),
    both in flight at once: two tasks of one name at the graph's level."""

    @task
    def lookup(q: str) -> str:
        return f"{MARKER} fact" if q == "deep" else "public fact"

    @task
    def research() -> int:
        return len(lookup("deep").result())

    @entrypoint(checkpointer=InMemorySaver())
    def app(inputs: dict[str, Any]) -> dict[str, Any]:
        shown, hidden = lookup("shallow"), research()
        return {"n": hidden.result(), "shown": shown.result()}

    return app


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_updates_of_two_tasks_of_one_name_fail_closed(sync: bool) -> None:
    """An update names its task by name alone: where an internal and a visible task share
    a name at one graph's level, the internal one's update never leaves, and the visible
    one's is dropped once the internal one has started (fail closed: README, known gaps);
    their task starts and results, which carry the task's id, are judged each by its own
    run."""
    policy = VisibilityPolicy(internal=["app/research"])
    kw: dict[str, Any] = {"stream_mode": ["tasks", "updates"], "subgraphs": True}
    config = {"configurable": {"thread_id": "t"}}
    raw = run(_two_lookups(), user_input(), config, sync=sync, **kw)
    assert MARKER in repr(raw)
    enforced = run(with_visibility(_two_lookups(), policy), user_input(), config, sync=sync, **kw)
    assert MARKER not in repr(enforced)
    # The visible one's leaves only if read before the internal one started.
    assert [p[2] for p in enforced if p[1] == "updates" and "lookup" in p[2]] in (
        [],
        [{"lookup": "public fact"}],
    )
    lookups = [p[2] for p in enforced if p[1] == "tasks" and p[2]["name"] == "lookup"]
    assert [t["input"] for t in lookups if "input" in t] == [(("shallow",), {})]
    assert [t["result"] for t in lookups if "result" in t] == [{"__return__": "public fact"}]


def _task_in_a_declared_chain_in_a_tagged_chain() -> Any:
    @task
    def research(q: str) -> AIMessage:
        return FakeChatModel(responses=["shown research"]).invoke([HumanMessage(q)])

    def work(state: State) -> dict[str, Any]:
        inner = RunnableLambda(lambda q: research(q).result().content)
        shown = RunnableLambda(
            lambda q: inner.invoke(q, {"metadata": {"visibility": "user_visible"}})
        )
        shown.invoke("q", {"tags": ["kn_internal"]})
        return {}

    builder = StateGraph(State)
    builder.add_node("work", work)
    builder.add_edge(START, "work")
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_task_declared_visible_inside_a_tagged_chain_keeps_every_event(sync: bool) -> None:
    """The innermost declaration wins: a `@task` called in a chain declared user_visible
    inside a chain tagged internal is visible, its start, tokens, update and result alike."""
    policy = VisibilityPolicy(tags={"kn_internal": "internal"})
    kw: dict[str, Any] = {"stream_mode": ["tasks", "updates", "messages"], "subgraphs": True}
    config = {"configurable": {"thread_id": "t"}}
    raw = run(_task_in_a_declared_chain_in_a_tagged_chain(), user_input(), config, sync=sync, **kw)
    graph = with_visibility(_task_in_a_declared_chain_in_a_tagged_chain(), policy)
    enforced = run(graph, user_input(), config, sync=sync, **kw)
    assert "shown research" in repr(raw)
    assert canon([tuple(p) for p in enforced]) == canon([tuple(p) for p in raw])
