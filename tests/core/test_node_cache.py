"""A node cache (`CachePolicy`) answers an enforced run only with entries written under the
same verdicts: never with one the raw graph, a staff view's policy or an older policy
wrote, whose messages carry that run's tags (or none). Ground truth: the SECRET and
VISIBLE markers in what the nodes write."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import warnings
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableLambda
from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph, add_messages
from langgraph.types import CachePolicy, Send

import lg_visibility._wrap as wrap_module
from lg_visibility import VisibilityHandler, VisibilityPolicy, with_visibility
from lg_visibility._cache import ScopedCache, cache_scope
from lg_visibility._compat import CONF, CONFIG_KEY_CACHE, ensure_config, with_run_cache
from lg_visibility._run import RunState
from lg_visibility.testing import FakeChatModel

pytestmark = pytest.mark.timeout(20.0)

CLIENT = VisibilityPolicy(internal=["router"])
STAFF = VisibilityPolicy()
MODES = ["values", "updates", "messages", "tasks", "debug", "checkpoints", "custom"]


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _graph(cache: InMemoryCache | None, runs: list[str], *, saver: bool = True) -> Any:
    """`router` (cached) asks a model for a SECRET plan; `answer` writes the VISIBLE one."""
    model = FakeChatModel(responses=["SECRET plan"])

    def router(state: State) -> dict[str, Any]:
        runs.append("router")
        return {"messages": [model.invoke(state["messages"])]}

    def answer(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage("VISIBLE answer", id=f"answer-{len(runs)}")]}

    builder = StateGraph(State)
    builder.add_node("router", router, cache_policy=CachePolicy())
    builder.add_node("answer", answer)
    builder.add_edge(START, "router")
    builder.add_edge("router", "answer")
    return builder.compile(cache=cache, checkpointer=InMemorySaver() if saver else None)


def _input() -> dict[str, Any]:
    return {"messages": [HumanMessage("hi", id="human-1")]}


def _config(thread: str, **extra: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}, **extra}


def _all_modes(graph: Any, config: dict[str, Any]) -> str:
    return repr(list(graph.stream(_input(), config, stream_mode=MODES, subgraphs=True)))


def _assert_enforced(out: str) -> None:
    assert "SECRET" not in out
    assert "VISIBLE answer" in out


@pytest.mark.parametrize("writer", ["raw", "staff view", "older policy"])
def test_a_cache_entry_written_under_other_verdicts_does_not_answer_a_client(
    writer: str,
) -> None:
    cache, runs = InMemoryCache(), []
    raw = _graph(cache, runs)
    client = with_visibility(raw, CLIENT)
    if writer == "raw":
        raw.invoke(_input(), _config("w"))
    elif writer == "staff view":
        client.invoke(_input(), _config("w", callbacks=[VisibilityHandler(STAFF)]))
    else:
        with_visibility(raw, STAFF).invoke(_input(), _config("w"))
    assert runs == ["router"]

    out = _all_modes(client, _config("c"))

    _assert_enforced(out)
    assert runs == ["router", "router"]  # its own entry: the node ran
    assert "SECRET" not in repr(client.get_state(_config("c")).values)


def test_the_control_without_scoped_keys_leaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same run on a wrapper that hands the run the cache unscoped: the raw graph's
    entry answers and its SECRET leaves (what the test above would catch)."""
    monkeypatch.setattr(wrap_module, "with_run_cache", lambda graph, config, *_: (graph, config))
    cache, runs = InMemoryCache(), []
    raw = _graph(cache, runs)
    raw.invoke(_input(), _config("w"))

    out = _all_modes(with_visibility(raw, CLIENT), _config("c"))

    assert "SECRET" in out
    assert runs == ["router"]


def test_runs_under_the_same_verdicts_share_entries_and_clear_cache_clears_them() -> None:
    cache, runs = InMemoryCache(), []
    raw = _graph(cache, runs)
    client = with_visibility(raw, CLIENT)
    _assert_enforced(_all_modes(client, _config("a")))
    # another wrapper with an equal policy, and the same call: the entry answers
    _assert_enforced(
        _all_modes(with_visibility(raw, VisibilityPolicy(internal=["router"])), _config("b"))
    )
    assert runs == ["router"]

    client.clear_cache()
    _assert_enforced(_all_modes(client, _config("c")))
    assert runs == ["router", "router"]


def test_a_staff_view_is_not_answered_by_a_client_entry() -> None:
    """The other way round: a staff view still sees what the node wrote, run for it."""
    cache, runs = InMemoryCache(), []
    client = with_visibility(_graph(cache, runs), CLIENT)
    client.invoke(_input(), _config("c"))

    out = _all_modes(client, _config("s", callbacks=[VisibilityHandler(STAFF)]))

    assert "SECRET plan" in out
    assert runs == ["router", "router"]


def test_async_runs_read_and_write_scoped_entries() -> None:
    cache, runs = InMemoryCache(), []
    raw = _graph(cache, runs)
    client = with_visibility(raw, CLIENT)

    async def main() -> tuple[str, str]:
        await raw.ainvoke(_input(), _config("w"))
        first = [c async for c in client.astream(_input(), _config("a"), stream_mode=MODES)]
        second = [c async for c in client.astream(_input(), _config("b"), stream_mode=MODES)]
        return repr(first), repr(second)

    first, second = asyncio.run(main())
    _assert_enforced(first)
    _assert_enforced(second)
    assert runs == ["router", "router"]  # raw's entry, then the client's own, hit once


def test_a_call_tag_the_policy_rules_is_a_scope_of_its_own() -> None:
    """A ruled tag on the call changes every run's verdict: its entries are its own."""
    cache, runs = InMemoryCache(), []
    policy = VisibilityPolicy(tags={"staff": "user_visible", "kn_internal": "internal"})
    graph = with_visibility(_graph(cache, runs), policy)
    graph.invoke(_input(), _config("a"))  # router visible: its entry keeps the plan visible

    out = _all_modes(graph, _config("b", tags=["kn_internal"]))

    assert "SECRET" not in out  # (the whole run is internal: so is the answer)
    assert runs == ["router", "router"]
    graph.invoke(_input(), _config("c", tags=["unruled"]))  # no verdict changes: shared
    assert runs == ["router", "router"]


def test_a_cache_lent_through_the_config_is_scoped_too() -> None:
    """`Pregel._defaults` takes a cache lent in the config it runs with over the graph's:
    so does the scope, lent by the call, by a bound config or by a parent runnable."""
    cache, lent = InMemoryCache(), InMemoryCache()
    graph = _graph(cache, [])
    scoped = lambda c: ScopedCache(c, lambda: "s")  # noqa: E731
    call = {"configurable": {"thread_id": "t"}}
    bound = graph.with_config({CONF: {CONFIG_KEY_CACHE: lent}})
    same, out = with_run_cache(bound, call, ensure_config(bound.config, call), scoped, False)
    assert same is bound
    assert out[CONF]["thread_id"] == "t"
    assert isinstance(out[CONF][CONFIG_KEY_CACHE], ScopedCache)
    assert out[CONF][CONFIG_KEY_CACHE].inner is lent
    same, out = with_run_cache(graph, call, ensure_config(graph.config, call), scoped, False)
    assert same is not graph and same.cache.inner is cache and graph.cache is cache
    assert out is call
    none = _graph(cache, [])
    none.cache = None
    assert with_run_cache(none, None, ensure_config(), scoped, False) == (none, None)


def test_a_cache_a_parent_runnable_lends_is_scoped() -> None:
    """A run inside a parent runnable whose config lends a cache holding the raw graph's
    entry (the run's own config names none: LangGraph takes the parent's): the entry does
    not answer it."""
    lent, runs = InMemoryCache(), []
    raw = _graph(None, runs, saver=False)
    lend = {"configurable": {CONFIG_KEY_CACHE: lent}}
    raw.invoke(_input(), lend)
    client = with_visibility(raw, CLIENT)

    def run(inp: Any) -> str:
        return repr(list(client.stream(inp, stream_mode=MODES, subgraphs=True)))

    out = RunnableLambda(run).invoke(_input(), lend)

    _assert_enforced(out)
    assert runs == ["router", "router"]


def test_scoped_keys_reach_the_inner_cache_and_come_back_as_asked() -> None:
    inner = InMemoryCache()
    scoped = ScopedCache(inner, lambda: "abc")
    key = (("ns", "node"), "k")
    scoped.set({key: ({"v": 1}, None)})
    assert inner.get([key]) == {}
    assert scoped.get([key]) == {key: {"v": 1}}
    assert ScopedCache(inner, lambda: "other").get([key]) == {}
    scoped.clear([("ns", "node")])
    assert scoped.get([key]) == {}


def test_the_scope_is_the_same_in_another_process() -> None:
    """A cache that outlives the process (SqliteCache, Redis) is read under the same keys
    after a restart: the scope is a digest, not a hash the interpreter seeds."""
    code = (
        "from lg_visibility import VisibilityPolicy\n"
        "from lg_visibility._cache import cache_scope\n"
        "from lg_visibility._run import RunState\n"
        "p = VisibilityPolicy(internal=['a', 'b/**'],\n"
        "                     tags={'x': 'internal', 'y': 'user_visible'})\n"
        "run = RunState(p, {'n': 'internal', 'm': 'user_visible'},\n"
        "               bound={'n': ((None, frozenset({'t1', 't2', 't3'})),)})\n"
        "print(cache_scope(run, {'tags': ['y', 'x', 'z']}))\n"
    )
    scopes = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(scopes) == 1
    policy = VisibilityPolicy(internal=["a", "b/**"], tags={"x": "internal", "y": "user_visible"})
    run = RunState(
        policy,
        {"n": "internal", "m": "user_visible"},
        bound={"n": ((None, frozenset({"t1", "t2", "t3"})),)},
    )
    assert scopes == {cache_scope(run, {"tags": ["z", "x", "y"]})}
    assert cache_scope(run, {"tags": ["y"]}) != cache_scope(run, {"tags": ["x", "y"]})


# -- an internal node's id-less message is named at its end, as LangGraph's handler names it


def _named_at_reduce(ids: list[Any]) -> Any:
    """add_messages, recording the ids of what a node wrote as the reducer receives it."""

    def reduce(left: Any, right: Any) -> Any:
        ids.extend(getattr(m, "id", "?") for m in (right if isinstance(right, list) else [right]))
        return add_messages(left, right)

    return reduce


@pytest.mark.parametrize("internal", [False, True])
def test_an_internal_nodes_id_less_message_is_named_as_the_raw_graphs_is(
    internal: bool,
) -> None:
    """In `messages` mode LangGraph's handler gives an id-less message of a node's output an
    id as it sends it, before the write is stored (the node cache's entry, then state). An
    internal node's is not sent, but named the same: its cached entry then updates the
    message on a hit instead of adding it again. (Without `messages` mode nothing names it
    before `add_messages` does, and whether the cache's background write stores it before
    or after is LangGraph's race, raw or enforced alike.)"""
    mode = "messages"
    seen: dict[str, list[Any]] = {}
    for label in ("raw", "enforced"):
        ids: list[Any] = []

        recorded = Annotated[list[AnyMessage], _named_at_reduce(ids)]
        Recorded = TypedDict("Recorded", {"messages": recorded})  # type: ignore[misc]  # noqa: UP013

        def work(arg: dict[str, Any]) -> dict[str, Any]:
            return {"messages": [AIMessage("SECRET part")]}

        builder = StateGraph(Recorded)
        builder.add_node("fan", lambda s: {})
        builder.add_node("work", work, cache_policy=CachePolicy(key_func=lambda a: str(a)))
        builder.add_edge(START, "fan")
        builder.add_conditional_edges("fan", lambda s: [Send("work", {"i": 0})], ["work"])
        graph: Any = builder.compile(cache=InMemoryCache(), checkpointer=InMemorySaver())
        if label == "enforced":
            policy = VisibilityPolicy(internal=["work"] if internal else [])
            graph = with_visibility(graph, policy)
        for turn in range(2):
            inp = {"messages": [HumanMessage(f"q{turn}", id=f"u{turn}")]}
            list(graph.stream(inp, _config("t"), stream_mode=mode))
        state = graph.get_state(_config("t")).values["messages"]
        seen[label] = [m.content for m in state]
        written = [i for i in ids if i not in ("u0", "u1")]
        assert written and None not in written, (label, written)
    # the second turn's cache hit updates the message by its id: no second copy
    assert seen["raw"] == ["q0", "SECRET part", "q1"]
    assert seen["enforced"] == (["q0", "q1"] if internal else seen["raw"])


# -- a subgraph compiled with a cache of its own ----------------------------------------------


def _with_cached_subgraph(runs: list[str], *, listed: bool = True) -> Any:
    """`research` is a subgraph compiled with its own cache, whose cached `plan` asks a
    model for a SECRET plan; `answer` writes the VISIBLE one. The root has no cache."""
    model = FakeChatModel(responses=["SECRET plan"])

    def plan(state: State) -> dict[str, Any]:
        runs.append("plan")
        return {"messages": [model.invoke(state["messages"])]}

    inner = StateGraph(State)
    inner.add_node("plan", plan, cache_policy=CachePolicy())
    inner.add_edge(START, "plan")
    builder = StateGraph(State)
    # (`checkpointer=False`: LangGraph does not list it in the node's `subgraphs`)
    sub = inner.compile(cache=InMemoryCache(), **({} if listed else {"checkpointer": False}))
    builder.add_node("research", sub)
    builder.add_node("answer", lambda s: {"messages": [AIMessage("VISIBLE answer")]})
    builder.add_edge(START, "research")
    builder.add_edge("research", "answer")
    return builder.compile()


SUB_CLIENT = VisibilityPolicy(internal=["research/plan"])


def _streamed(graph: Any, config: Any = None, *, sync: bool = True) -> str:
    if sync:
        return repr(list(graph.stream(_input(), config, stream_mode=MODES, subgraphs=True)))

    async def main() -> list[Any]:
        return [c async for c in graph.astream(_input(), config, stream_mode=MODES, subgraphs=True)]

    return repr(asyncio.run(main()))


@pytest.mark.parametrize("listed", [True, False])
@pytest.mark.parametrize("sync", [True, False])
def test_a_subgraphs_own_cache_answers_only_runs_under_the_same_verdicts(
    sync: bool, listed: bool
) -> None:
    runs: list[str] = []
    raw = _with_cached_subgraph(runs, listed=listed)
    client = with_visibility(raw, SUB_CLIENT)
    raw.invoke(_input())  # the raw graph's entry, untagged
    _assert_enforced(_streamed(client, sync=sync))
    assert runs == ["plan", "plan"]
    _assert_enforced(_streamed(client, sync=sync))  # the client's own entry answers
    assert runs == ["plan", "plan"]
    staff = _streamed(client, {"callbacks": [VisibilityHandler(STAFF)]}, sync=sync)
    assert "SECRET plan" in staff
    assert runs == ["plan", "plan", "plan"]
    raw.invoke(_input())  # the raw graph keeps its own entries and keys
    assert runs == ["plan", "plan", "plan"]


def test_the_control_with_the_subgraphs_cache_unscoped_leaks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wrap_module, "held", lambda cache: cache)
    monkeypatch.setattr(wrap_module, "_has_subgraph_cache", lambda graph: False)
    runs: list[str] = []
    raw = _with_cached_subgraph(runs)
    raw.invoke(_input())

    assert "SECRET" in _streamed(with_visibility(raw, SUB_CLIENT))
    assert runs == ["plan"]


def test_a_subgraphs_own_cache_is_left_alone_where_no_run_is_enforced() -> None:
    """The enforced graph as a node of a graph nobody wrapped: its run decides nothing, so
    the subgraph's cache is neither read (an entry could be anyone's) nor written."""
    runs: list[str] = []
    raw = _with_cached_subgraph(runs)
    client = with_visibility(raw, SUB_CLIENT)
    client.invoke(_input())
    outer = StateGraph(State)
    outer.add_node("app", client)
    outer.add_edge(START, "app")
    plain = outer.compile()

    plain.invoke(_input())
    plain.invoke(_input())

    assert runs == ["plan", "plan", "plan"]


def _parallel_cached_subgraph(runs: list[str]) -> Any:
    """`research`, with a cache of its own, sends four SECRET workers in parallel: in a
    sync run LangGraph stores each one's entry from a worker thread, with no runnable
    config in its context."""

    def worker(state: State) -> dict[str, Any]:
        text = state["messages"][-1].content
        runs.append(str(text))
        return {"messages": [AIMessage(f"SECRET work {text}")]}

    inner = StateGraph(State)
    inner.add_node("work", worker, cache_policy=CachePolicy())
    inner.add_conditional_edges(
        START,
        lambda s: [
            Send("work", {"messages": [HumanMessage(f"x{i}", id=f"x{i}")]}) for i in range(4)
        ],
    )
    builder = StateGraph(State)
    builder.add_node("research", inner.compile(cache=InMemoryCache()))
    builder.add_edge(START, "research")
    return builder.compile()


@pytest.mark.parametrize("how", ["stream", "astream", "events v1", "events v2"])
def test_a_subgraphs_own_cache_answers_a_second_client_run_in_every_way(how: str) -> None:
    """Every way of running the enforced graph stores and reads the subgraph's entries:
    parallel workers' included, and under `astream_events` v1 (whose tagging handler sits
    inside LangChain's log handler)."""
    runs: list[str] = []
    client = with_visibility(
        _parallel_cached_subgraph(runs), VisibilityPolicy(internal=["research/work"])
    )

    def once() -> str:
        if how == "stream":
            return repr(list(client.stream(_input(), stream_mode=MODES, subgraphs=True)))

        async def main() -> list[Any]:
            if how == "astream":
                stream = client.astream(_input(), stream_mode=MODES, subgraphs=True)
            else:
                stream = client.astream_events(_input(), version=how.split()[1])
            return [item async for item in stream]

        return repr(asyncio.run(main()))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # astream_events v1 is deprecated
        first = once()
        assert sorted(runs) == ["x0", "x1", "x2", "x3"]
        second = once()
    assert sorted(runs) == ["x0", "x1", "x2", "x3"]  # all four answered by the cache
    assert "SECRET" not in first + second
