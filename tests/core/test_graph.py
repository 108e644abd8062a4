"""with_visibility / compile_with_visibility: the wrapped graph as a graph (class, copies,
invoke, nesting, state types, other event APIs, early exit, interrupts, bad input)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import re
import warnings
from typing import Annotated, Any, TypedDict

import langgraph.pregel._messages
import langgraph.pregel.main
import pytest
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableLambda
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_stream_writer
from langgraph.graph import START, StateGraph, add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, GraphOutput, Interrupt, interrupt
from pydantic import BaseModel

from lg_visibility import (
    VisibilityConfigError,
    VisibilityPolicy,
    compile_with_visibility,
    visibility_of,
    with_visibility,
)
from lg_visibility.testing import FakeChatModel
from tests._support.cases import ALL_MODES, mode_id
from tests._support.core import (
    EVERYTHING_VISIBLE,
    SYNC_ASYNC,
    TIMEOUT,
    State,
    hand_node,
    llm_node,
    run,
    tagged,
    thread,
    user_input,
)

pytestmark = pytest.mark.timeout(TIMEOUT)  # bounds the sync streams; async ones use wait_for

POLICY = VisibilityPolicy(internal=["work"])
SECRET = "secret plan"
SHOWN = "shown answer"


def builder(*, delay: float = 0.0) -> StateGraph:
    """Root: `work` (a subgraph whose `think` node calls an LLM: internal under POLICY), then
    `answer` (an LLM at the root: user-visible)."""
    inner = StateGraph(State)
    inner.add_node("think", llm_node(FakeChatModel(responses=[SECRET], token_delay=delay)))
    inner.add_edge(START, "think")
    outer = StateGraph(State)
    outer.add_node("work", inner.compile())
    outer.add_node("answer", llm_node(FakeChatModel(responses=[SHOWN], token_delay=delay)))
    outer.add_edge(START, "work")
    outer.add_edge("work", "answer")
    return outer


def graph(*, checkpointer: Any = None, delay: float = 0.0) -> Any:
    return builder(delay=delay).compile(checkpointer=checkpointer)


RAW_TOKENS = ["secret ", "plan", "", "shown ", "answer", ""]
ENFORCED_TOKENS = ["shown ", "answer", ""]

_IDS = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b[0-9a-f]{32}\b")
_TIME = re.compile(r"'(ts|timestamp)': '[^']*'")


def untagged(value: Any, depth: int = 0) -> Any:
    """`value` with every message's tags (visibility, provenance) removed (new objects)."""
    if isinstance(value, BaseMessage):
        meta = {
            k: v
            for k, v in value.response_metadata.items()
            if k not in ("visibility", "provenance")
        }
        return value.model_copy(update={"response_metadata": meta})
    if depth > 10:
        return value
    if isinstance(value, dict):
        return {k: untagged(v, depth + 1) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return value._replace(**{f: untagged(getattr(value, f), depth + 1) for f in value._fields})
    if isinstance(value, (list, tuple)):
        return type(value)(untagged(v, depth + 1) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: untagged(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)
        }
        return dataclasses.replace(value, **changes)
    if isinstance(value, BaseModel):
        return value.model_copy(
            update={k: untagged(getattr(value, k), depth + 1) for k in type(value).model_fields}
        )
    return value


def comparable(value: Any) -> str:
    """repr of `value` without tags, with run-specific ids numbered by first appearance."""
    numbers: dict[str, str] = {}
    text = _TIME.sub(r"'\1': <t>", repr(untagged(value)))
    return _IDS.sub(lambda m: numbers.setdefault(m.group(0), f"<id{len(numbers)}>"), text)


def streamed(g: Any, config: Any = None) -> list[str]:
    """Contents of every `messages` event of a sync stream with subgraphs."""
    items = run(g, user_input(), config, sync=True, stream_mode="messages", subgraphs=True)
    return [message.content for _, (message, _) in items]


def messages_in(value: Any, depth: int = 0) -> list[BaseMessage]:
    """Every message anywhere in `value` (events, payloads, snapshots)."""
    if isinstance(value, BaseMessage):
        return [value]
    if depth > 10:
        return []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [m for v in value for m in messages_in(v, depth + 1)]
    return []


def run_async(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


# -- Guarantee 5: invoke and nesting ------------------------------------------------------


@SYNC_ASYNC
def test_invoke_returns_the_raw_state_with_tags(sync: bool) -> None:
    """`invoke`/`ainvoke` return the raw graph's state, internal messages included, tagged."""
    enforced = with_visibility(graph(), POLICY)
    if sync:
        raw_state, state = graph().invoke(user_input()), enforced.invoke(user_input())
    else:
        raw_state = run_async(graph().ainvoke(user_input()))
        state = run_async(enforced.ainvoke(user_input()))
    assert comparable(state) == comparable(raw_state)
    assert tagged(state["messages"]) == [
        ("HumanMessage", "hi", None),
        ("AIMessage", SECRET, "internal"),
        ("AIMessage", SHOWN, "user_visible"),
    ]


def test_invoke_v2_returns_the_raw_graph_output() -> None:
    """`invoke(version="v2")` returns the raw graph's GraphOutput, apart from the tags."""
    raw_out = graph().invoke(user_input(), version="v2")
    out = with_visibility(graph(), POLICY).invoke(user_input(), version="v2")
    assert isinstance(out, GraphOutput)
    assert comparable(out) == comparable(raw_out)


def outer_graph(node: Any) -> Any:
    """A raw graph whose only node `wrapped` is `node`."""
    outer = StateGraph(State)
    outer.add_node("wrapped", node)
    outer.add_edge(START, "wrapped")
    return outer.compile()


@SYNC_ASYNC
def test_wrapped_graph_as_a_node_streams_like_the_raw_one(sync: bool) -> None:
    """Inside a raw outer graph the wrapped graph is the raw graph: the outer stream leaks alike."""
    kw = {"stream_mode": ["messages", "values", "updates"], "subgraphs": True}
    raw = run(outer_graph(graph()), user_input(), sync=sync, **kw)
    nested = run(outer_graph(with_visibility(graph(), POLICY)), user_input(), sync=sync, **kw)
    assert comparable(nested) == comparable(raw)
    assert [p[0].content for _, mode, p in nested if mode == "messages"] == RAW_TOKENS
    assert [visibility_of(m) for m in messages_in(nested)] == [None] * len(messages_in(raw))


@SYNC_ASYNC
def test_wrapping_the_outer_graph_enforces_inside_the_nested_one(sync: bool) -> None:
    """The outer graph, wrapped, enforces its own policy on the nested graph's paths."""
    outer = with_visibility(
        outer_graph(with_visibility(graph(), POLICY)), VisibilityPolicy(internal=["wrapped/work"])
    )
    items = run(outer, user_input(), sync=sync, stream_mode="messages", subgraphs=True)
    assert [message.content for _, (message, _) in items] == ENFORCED_TOKENS


# -- Guarantee 6: the class, copies, no process-wide patch -------------------------------------


def test_with_visibility_returns_a_subclass_of_the_graphs_own_class() -> None:
    """The wrapped graph is an instance of a subclass of the compiled graph's class; the
    original graph is left as it was."""
    raw = graph()
    enforced = with_visibility(raw, POLICY)
    assert type(raw) is CompiledStateGraph
    assert type(enforced) is not CompiledStateGraph
    assert issubclass(type(enforced), CompiledStateGraph)
    assert enforced.visibility_policy == POLICY
    assert streamed(raw) == RAW_TOKENS


@pytest.mark.parametrize(
    "make_copy",
    [
        lambda g: g.copy(),
        lambda g: g.with_config(recursion_limit=10),
        lambda g: g.__class__(**g.__dict__),  # what the LangGraph server does per run
    ],
    ids=["copy", "with_config", "server"],
)
def test_copies_keep_the_class_and_the_policy(make_copy: Any) -> None:
    """`copy()`, `with_config()` and the server's `__class__(**__dict__)` keep enforcing."""
    enforced = with_visibility(graph(), POLICY)
    copied = make_copy(enforced)
    assert type(copied) is type(enforced)
    assert copied.visibility_policy == POLICY
    assert streamed(copied) == ENFORCED_TOKENS


def test_runs_read_the_static_tree_once_per_graph_and_a_copy_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What every run reads from the graph's static tree (add_node declarations, node
    agents) is made on a graph's first run, not per run; a copy (`with_config` may rename
    an agent, the server copies per run) makes its own, and both still enforce."""
    import lg_visibility._wrap as wrap

    read: list[Any] = []
    original = wrap.graph_tree
    monkeypatch.setattr(wrap, "graph_tree", lambda g: read.append(g) or original(g))
    enforced = with_visibility(graph(), POLICY)
    read.clear()  # wrapping reads it too, to check the policy
    assert [streamed(enforced) for _ in range(3)] == [ENFORCED_TOKENS] * 3
    assert read == [enforced]
    copied = enforced.with_config(recursion_limit=10)
    assert [streamed(copied) for _ in range(2)] == [ENFORCED_TOKENS] * 2
    assert read == [enforced, copied]


def test_wrapping_twice_replaces_the_policy() -> None:
    """Wrapping a wrapped graph replaces its policy; the class is not stacked."""
    once = with_visibility(graph(), POLICY)
    twice = with_visibility(once, EVERYTHING_VISIBLE)
    assert twice.visibility_policy == EVERYTHING_VISIBLE
    assert type(twice).__mro__[2] is CompiledStateGraph
    assert type(twice).__bases__[1] is CompiledStateGraph
    assert streamed(twice) == RAW_TOKENS
    assert streamed(once) == ENFORCED_TOKENS


def test_no_process_wide_patch_after_an_enforced_run() -> None:
    """After an enforced run, LangGraph's module global is its own handler and a plain graph
    streams internal tokens, untagged."""
    run(with_visibility(graph(), POLICY), user_input(), sync=True, stream_mode="messages")
    main, messages = langgraph.pregel.main, langgraph.pregel._messages
    assert main.StreamMessagesHandler is messages.StreamMessagesHandler
    assert main.StreamMessagesHandlerV2 is messages.StreamMessagesHandlerV2
    plain = run(graph(), user_input(), sync=True, stream_mode="messages", subgraphs=True)
    assert [m.content for _, (m, _) in plain] == RAW_TOKENS
    assert [visibility_of(m) for _, (m, _) in plain] == [None] * 6


async def test_plain_graph_streams_unchanged_beside_an_enforced_run() -> None:
    """A plain graph streamed concurrently with an enforced one keeps every token, untagged;
    the enforced one tags the first chunk of its message."""

    async def collect(g: Any) -> list[BaseMessage]:
        return [
            m async for _, (m, _) in g.astream(user_input(), stream_mode="messages", subgraphs=True)
        ]

    plain, enforced = await asyncio.wait_for(
        asyncio.gather(
            collect(graph(delay=0.005)), collect(with_visibility(graph(delay=0.005), POLICY))
        ),
        TIMEOUT,
    )
    assert [(m.content, visibility_of(m)) for m in plain] == [(t, None) for t in RAW_TOKENS]
    assert [(m.content, visibility_of(m)) for m in enforced] == [
        (t, "user_visible" if i == 0 else None) for i, t in enumerate(ENFORCED_TOKENS)
    ]


# -- Guarantee 4: custom events ---------------------------------------------------------------


def _writes(payload: dict[str, Any]) -> Any:
    """A node that writes `payload` as a custom event."""

    def node(state: State) -> dict[str, Any]:
        get_stream_writer()(payload)
        return {}

    return node


def custom_graph() -> Any:
    """`work/card` writes {"card": "inner"}; root `card` writes {"card": "outer"}."""
    inner = StateGraph(State)
    inner.add_node("card", _writes({"card": "inner"}))
    inner.add_edge(START, "card")
    outer = StateGraph(State)
    outer.add_node("work", inner.compile())
    outer.add_node("card", _writes({"card": "outer"}))
    outer.add_edge(START, "work")
    outer.add_edge("work", "card")
    return outer.compile()


@SYNC_ASYNC
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_custom_events_pass_by_default(sync: bool, version: str) -> None:
    """Custom events of an internal namespace are delivered: they are explicit pushes."""
    items = run(
        with_visibility(custom_graph(), POLICY),
        user_input(),
        sync=sync,
        stream_mode="custom",
        subgraphs=True,
        version=version,
    )
    if version == "v2":
        items = [(i["ns"], i["data"]) for i in items]
    assert [(tuple(s.split(":")[0] for s in ns), data) for ns, data in items] == [
        (("work",), {"card": "inner"}),
        ((), {"card": "outer"}),
    ]


@SYNC_ASYNC
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_filter_custom_drops_custom_events_of_internal_namespaces(sync: bool, version: str) -> None:
    """With `filter_custom=True` only the root's custom event is delivered."""
    policy = VisibilityPolicy(internal=["work"], filter_custom=True)
    items = run(
        with_visibility(custom_graph(), policy),
        user_input(),
        sync=sync,
        stream_mode="custom",
        subgraphs=True,
        version=version,
    )
    if version == "v2":
        items = [(i["ns"], i["data"]) for i in items]
    assert items == [((), {"card": "outer"})]


def _root_writers() -> Any:
    """Root nodes `secret` and `shown` each write a custom event; `sub/inner` too."""
    inner = StateGraph(State)
    inner.add_node("inner", _writes({"from": "SUBSECRET"}))
    inner.add_edge(START, "inner")
    builder = StateGraph(State)
    builder.add_node("secret", _writes({"from": "ROOTSECRET"}))
    builder.add_node("shown", _writes({"from": "shown"}))
    builder.add_node("sub", inner.compile())
    builder.add_edge(START, "secret")
    builder.add_edge("secret", "shown")
    builder.add_edge("shown", "sub")
    return builder.compile()


@SYNC_ASYNC
@pytest.mark.parametrize("subgraphs", [True, False], ids=["subgraphs", "root"])
@pytest.mark.parametrize("filter_custom", [True, False], ids=["filtered", "default"])
def test_filter_custom_drops_the_writes_of_an_internal_root_node(
    sync: bool, subgraphs: bool, filter_custom: bool
) -> None:
    """A root node's write names only the root graph: with `filter_custom` it is judged by
    the task that writes it, so an internal root node's events are dropped (and a node
    inside an internal subgraph's too); by default every one passes, as raw."""
    policy = VisibilityPolicy(internal=["secret", "sub/inner"], filter_custom=filter_custom)
    kw: dict[str, Any] = {"sync": sync, "stream_mode": ["custom"], "subgraphs": subgraphs}

    def labels(items: list[Any]) -> list[tuple[tuple[str, ...], str]]:
        # (namespace without task ids, writer); an item is (ns, mode, data) or (mode, data)
        ns = [tuple(seg.split(":")[0] for seg in i[0]) if len(i) == 3 else () for i in items]
        return [(at, item[-1]["from"]) for at, item in zip(ns, items, strict=True)]

    raw = labels(run(_root_writers(), user_input(), **kw))
    enforced = labels(run(with_visibility(_root_writers(), policy), user_input(), **kw))
    assert len(raw) == (3 if subgraphs else 2)
    assert enforced == (raw if not filter_custom else [((), "shown")])


def _writes_from_a_bare_thread() -> Any:
    """A node hands its writer to a thread started without the node's context."""

    def node(state: State) -> dict[str, Any]:
        write = get_stream_writer()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(write, {"from": "a bare thread"}).result()
        return {}

    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    return builder.compile()


def _outcome(graph: Any, **kw: Any) -> str:
    try:
        run(graph, user_input(), **kw)
    except Exception as error:  # the outcome is what is compared
        return f"{type(error).__name__}: {error}"
    return "ok"


@SYNC_ASYNC
@pytest.mark.parametrize("stream_mode", [["values"], ["custom"]], ids=mode_id)
def test_filter_custom_keeps_a_write_outside_a_task_as_langgraph_does(
    sync: bool, stream_mode: list[str]
) -> None:
    """A write made outside any task's context does what LangGraph's writer does there:
    nothing when the stream has no `custom` mode, LangGraph's own error when it has;
    judging it for `filter_custom` adds no error of its own."""
    kw: dict[str, Any] = {"sync": sync, "stream_mode": stream_mode, "subgraphs": True}
    raw = _outcome(_writes_from_a_bare_thread(), **kw)
    policy = VisibilityPolicy(filter_custom=True)
    assert _outcome(with_visibility(_writes_from_a_bare_thread(), policy), **kw) == raw
    assert (raw == "ok") is (stream_mode == ["values"])


def _two_invoked_graphs(*, blocking_async: bool = False) -> Any:
    """A visible node invokes a visible graph, then the same graph with an internal tag:
    both run under the node's task namespace (the second under its `|1`), and each writes
    two custom events. With `blocking_async`, the node is async and invokes both with the
    sync `invoke`, holding the event loop, so an `astream` consumer reads every event only
    after both graphs ran (as sync `stream` does, which runs a lone node inline)."""

    def inner(label: str) -> Any:
        def work(state: State) -> dict[str, Any]:
            for n in range(2):
                get_stream_writer()({"from": label, "n": n})
            return {}

        builder = StateGraph(State)
        builder.add_node("work", work)
        builder.add_edge(START, "work")
        return builder.compile()

    shown, hidden = inner("shown"), inner("CUSTOMSECRET")

    def node(state: State) -> dict[str, Any]:
        shown.invoke(state)
        hidden.invoke(state, {"tags": ["kn_internal"]})
        return {}

    async def anode(state: State) -> dict[str, Any]:
        return node(state)

    builder = StateGraph(State)
    builder.add_node("node", anode if blocking_async else node)
    builder.add_edge(START, "node")
    return builder.compile()


@SYNC_ASYNC
@pytest.mark.parametrize("stream_mode", [["custom"], ["custom", "values"]], ids=mode_id)
def test_filter_custom_judges_a_write_by_its_namespace_when_it_is_made(
    sync: bool, stream_mode: list[str]
) -> None:
    """The consumer reads the visible graph's events only after the internal graph started
    under the same task namespace, and nothing else (a custom-only stream) judged that
    namespace before: the visible graph's events are kept, the internal graph's dropped."""
    policy = VisibilityPolicy(tags={"kn_internal": "internal"}, filter_custom=True)
    kw: dict[str, Any] = {"sync": sync, "stream_mode": stream_mode, "subgraphs": True}
    raw = run(_two_invoked_graphs(blocking_async=not sync), user_input(), **kw)
    assert [data["from"] for _, mode, data in raw if mode == "custom"] == (
        ["shown", "shown", "CUSTOMSECRET", "CUSTOMSECRET"]
    )
    graph = with_visibility(_two_invoked_graphs(blocking_async=not sync), policy)
    items = run(graph, user_input(), **kw)
    events = [data for _, mode, data in items if mode == "custom"]
    assert events == [{"from": "shown", "n": 0}, {"from": "shown", "n": 1}]
    assert "CUSTOMSECRET" not in repr(items)


def _writes_in_a_tagged_chain(chain_config: dict[str, Any]) -> Any:
    """A visible node writes, runs a chain with `chain_config` (its body writes, and so
    does a chain inside it, started with the body's config or with none), then writes
    again."""

    def leaf(x: Any) -> Any:
        get_stream_writer()({"from": "CUSTOMSECRET-inner"})
        return x

    def body(x: Any, config: Any) -> Any:
        get_stream_writer()({"from": "CUSTOMSECRET-body"})
        RunnableLambda(leaf).invoke(x, config)
        RunnableLambda(leaf).invoke(x)
        return x

    def node(state: State) -> dict[str, Any]:
        write = get_stream_writer()
        write({"from": "before"})
        RunnableLambda(body).invoke(1, chain_config)  # type: ignore[arg-type]
        write({"from": "after"})
        return {}

    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    return builder.compile()


@SYNC_ASYNC
@pytest.mark.parametrize("filter_custom", [True, False], ids=["filtered", "default"])
@pytest.mark.parametrize(
    "chain_config",
    [{"tags": ["kn_internal"]}, {"metadata": {"visibility": "internal"}}],
    ids=["tag", "declaration"],
)
def test_filter_custom_drops_the_writes_of_a_chain_tagged_internal_in_a_visible_node(
    sync: bool, filter_custom: bool, chain_config: dict[str, Any]
) -> None:
    """A chain a visible node runs with an internal run-time tag (or declaration) is
    internal, and so is its body: with `filter_custom` its writes (and those of the runs
    inside it) are dropped, the node's own before and after it kept; by default every one
    passes, as raw."""
    policy = VisibilityPolicy(tags={"kn_internal": "internal"}, filter_custom=filter_custom)
    kw: dict[str, Any] = {"sync": sync, "stream_mode": ["custom"], "subgraphs": True}
    raw_graph = _writes_in_a_tagged_chain(chain_config)
    raw = [data["from"] for *_, data in run(raw_graph, user_input(), **kw)]
    secret = ["CUSTOMSECRET-body", "CUSTOMSECRET-inner", "CUSTOMSECRET-inner"]
    assert raw == ["before", *secret, "after"]
    graph = with_visibility(_writes_in_a_tagged_chain(chain_config), policy)
    enforced = [data["from"] for *_, data in run(graph, user_input(), **kw)]
    assert enforced == (raw if not filter_custom else ["before", "after"])


TAGGED = {"tags": ["kn_internal"]}


def _node_around_a_tagged_chain(case: str) -> Any:
    """A visible node whose output is all visible, and which runs a helper chain with an
    internal run-time tag along the way (the chain's body runs a chain of its own)."""
    shown = FakeChatModel(
        responses=["SHOWN by declaration"], metadata={"visibility": "user_visible"}
    )
    sub_builder = StateGraph(State)
    sub_builder.add_node("step", hand_node(AIMessage("SHOWN by a visible graph", id="sub-1")))
    sub_builder.add_edge(START, "step")
    sub = sub_builder.compile()

    def node(state: State) -> dict[str, Any]:
        if case == "declared":  # a model declared user_visible inside it: the innermost wins
            return {"messages": [RunnableLambda(shown.invoke).invoke(state["messages"], TAGGED)]}
        mine = AIMessage("SHOWN, built by the node", id="mine-1")
        count = RunnableLambda(len)
        if case == "closure":  # the node's message reaches a chain inside it by closure
            RunnableLambda(lambda _: count.invoke([mine])).invoke(1, TAGGED)
        elif case == "stream":  # `.stream()` reports the chain's input as {"input": ""}
            for _ in RunnableLambda(count.invoke).stream([mine], TAGGED):
                pass
        else:  # a visible graph the node invokes after it
            RunnableLambda(lambda x: count.invoke([x])).invoke(1, TAGGED)
            return {"messages": sub.invoke(state)["messages"][-1:]}
        return {"messages": [mine]}

    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    return builder.compile()


@SYNC_ASYNC
@pytest.mark.parametrize("case", ["declared", "closure", "stream", "graph_after"])
@pytest.mark.parametrize(
    "kw",
    [
        {"stream_mode": ["messages", "updates", "tasks"], "subgraphs": True},
        {"stream_mode": ["values", "updates"]},
    ],
    ids=["events", "state"],
)
def test_a_chain_tagged_internal_takes_nothing_visible_with_it(
    sync: bool, case: str, kw: dict[str, Any]
) -> None:
    """A helper chain tagged internal inside a visible node makes no visible output of the
    node's internal: a model declared user_visible inside it, a message the node built that
    reaches a chain inside it, the tasks of a visible graph the node invokes after it. The
    enforced stream is the raw one (the tag rule and `filter_custom` set)."""
    policy = VisibilityPolicy(tags={"kn_internal": "internal"}, filter_custom=True)
    raw = run(_node_around_a_tagged_chain(case), user_input(), sync=sync, **kw)
    graph = with_visibility(_node_around_a_tagged_chain(case), policy)
    enforced = run(graph, user_input(), sync=sync, **kw)
    assert "SHOWN" in repr(raw)
    assert comparable(enforced) == comparable(raw)


@SYNC_ASYNC
@pytest.mark.parametrize(
    "printing", [{"print_mode": ["values", "messages"]}, {"debug": True}], ids=["print", "debug"]
)
def test_print_mode_prints_only_what_may_leave(
    sync: bool, printing: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """LangGraph's `print_mode` (and `debug=True`) printing of an enforced run shows the
    visible answer and never the internal subgraph's text; the raw run prints both (control)."""
    kw = {"stream_mode": "updates", "subgraphs": True, **printing}
    run(graph(), user_input(), sync=sync, **kw)
    raw = capsys.readouterr().out
    run(with_visibility(graph(), POLICY), user_input(), sync=sync, **kw)
    enforced = capsys.readouterr().out
    assert SECRET in raw and SHOWN in raw
    assert SECRET not in enforced
    assert SHOWN in enforced


# -- Guarantee 8: nothing internal, state types, other event APIs, early exit ----------------


@SYNC_ASYNC
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_nothing_internal_stream_equals_raw_apart_from_the_tag(sync: bool, version: str) -> None:
    """With a policy that makes nothing internal, every event of every mode is the raw one."""
    kw = {"stream_mode": ALL_MODES, "subgraphs": True, "version": version}
    raw = run(graph(checkpointer=InMemorySaver()), user_input(), thread(), sync=sync, **kw)
    enforced_graph = with_visibility(graph(checkpointer=InMemorySaver()), EVERYTHING_VISIBLE)
    enforced = run(enforced_graph, user_input(), thread(), sync=sync, **kw)
    assert len(enforced) == len(raw)
    assert comparable(enforced) == comparable(raw)


class PydanticState(BaseModel):
    messages: Annotated[list[BaseMessage], add_messages] = []
    note: str = ""


@dataclasses.dataclass
class DataclassState:
    messages: Annotated[list[BaseMessage], add_messages] = dataclasses.field(default_factory=list)
    note: str = ""


def typed_graph(schema: type) -> Any:
    """Root `think` (an LLM, internal by policy) then `reply` (a hand-built visible message)."""
    model = FakeChatModel(responses=[SECRET])

    def think(state: Any) -> dict[str, Any]:
        return {"messages": [model.invoke(state.messages)], "note": "thought"}

    builder = StateGraph(schema)
    builder.add_node("think", think)
    builder.add_node("reply", hand_node(AIMessage(SHOWN, id="reply-1")))
    builder.add_edge(START, "think")
    builder.add_edge("think", "reply")
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("schema", [PydanticState, DataclassState])
def test_v2_values_keep_the_state_type_when_redacted(schema: type) -> None:
    """v2 values of a Pydantic or dataclass state are that type, as raw, without the internal
    message; the graph's state still holds it."""
    raw = [
        i["data"]
        for i in typed_graph(schema).stream(
            user_input(), thread(), stream_mode="values", version="v2"
        )
    ]
    enforced_graph = with_visibility(typed_graph(schema), VisibilityPolicy(internal=["think"]))
    snapshots = [
        i["data"]
        for i in enforced_graph.stream(user_input(), thread(), stream_mode="values", version="v2")
    ]
    assert [type(s) for s in raw] == [schema] * 3
    assert [type(s) for s in snapshots] == [schema] * 3
    assert [(tagged(s.messages), s.note) for s in snapshots] == [
        ([("HumanMessage", "hi", None)], ""),
        ([("HumanMessage", "hi", None)], "thought"),
        ([("HumanMessage", "hi", None), ("AIMessage", SHOWN, "user_visible")], "thought"),
    ]
    assert tagged(enforced_graph.raw_state.get_state(thread()).values["messages"]) == [
        ("HumanMessage", "hi", None),
        ("AIMessage", SECRET, "internal"),
        ("AIMessage", SHOWN, "user_visible"),
    ]


@pytest.mark.parametrize("schema", [PydanticState, DataclassState])
def test_v2_values_of_a_typed_state_never_carry_an_internal_key(schema: type) -> None:
    """An internal key is dropped before LangGraph builds the v2 state object, so the
    snapshot holds the field's default, never the value a node wrote."""
    raw = [
        i["data"].note
        for i in typed_graph(schema).stream(
            user_input(), thread(), stream_mode="values", version="v2"
        )
    ]
    enforced_graph = with_visibility(
        typed_graph(schema), VisibilityPolicy(internal=["think"], internal_keys=["note"])
    )
    notes = [
        (type(i["data"]), i["data"].note)
        for i in enforced_graph.stream(user_input(), thread(), stream_mode="values", version="v2")
    ]
    assert raw == ["", "thought", "thought"]  # control: the raw stream carries it
    assert notes == [(schema, "")] * 3


@pytest.mark.parametrize("schema", [PydanticState, DataclassState])
def test_task_inputs_of_a_typed_state_never_carry_an_internal_key(schema: type) -> None:
    """A node's task input is the state object itself: its internal key holds the field's
    default in task starts (`tasks`, `debug`) and in `astream_events`' chain events."""
    policy = VisibilityPolicy(internal=["think"], internal_keys=["note"])

    def outputs(graph: Any) -> str:
        items = list(graph.stream(user_input(), thread(), stream_mode=["tasks", "debug"]))

        async def events() -> list[Any]:
            return [e async for e in graph.astream_events(user_input(), thread("t2"))]

        return repr(items) + repr(run_async(events()))

    assert "thought" in outputs(typed_graph(schema))  # control: raw task inputs carry it
    enforced = outputs(with_visibility(typed_graph(schema), policy))
    assert "thought" not in enforced
    assert f"{schema.__name__}(" in enforced  # the task inputs are still the state type
    assert SHOWN in enforced


class OuterState(BaseModel):
    q: str = ""
    note: str = ""  # (so that the policy may name it: keys are checked against the tree)
    answer: str = ""


class LookedUpState(BaseModel):
    q: str = ""
    note: str = ""
    answer: str = ""


def looked_up_graph() -> Any:
    """A node's function invokes a graph it looks up (not in the static tree): that graph's
    `think` returns its state object with the internal key `note`; `reply` starts with it
    in its input."""
    inner = StateGraph(LookedUpState)
    inner.add_node("think", lambda state: LookedUpState(q=state.q, note="thought"))
    inner.add_node("reply", lambda state: {"answer": SHOWN})
    inner.add_edge(START, "think")
    inner.add_edge("think", "reply")
    registry = [inner.compile()]

    def outer(state: OuterState) -> dict[str, Any]:
        return {"answer": registry[0].invoke(LookedUpState(q=state.q))["answer"]}

    builder = StateGraph(OuterState)
    builder.add_node("outer", outer)
    builder.add_edge(START, "outer")
    return builder.compile(checkpointer=InMemorySaver())


def test_task_inputs_of_a_looked_up_graphs_typed_state_never_carry_an_internal_key() -> None:
    """A task's input is its graph's state object, whether or not the static tree shows
    that graph, and so may a node's output be: the internal key holds the default in task
    starts and in chain events."""
    policy = VisibilityPolicy(internal_keys=["note"])

    def outputs(graph: Any) -> str:
        items = list(
            graph.stream({"q": "hi"}, thread(), stream_mode=["tasks", "debug"], subgraphs=True)
        )

        async def events() -> list[Any]:
            return [e async for e in graph.astream_events({"q": "hi"}, thread("t2"))]

        return repr(items) + repr(run_async(events()))

    assert "thought" in outputs(looked_up_graph())  # control: raw task inputs carry it
    enforced = outputs(with_visibility(looked_up_graph(), policy))
    assert "thought" not in enforced
    assert "LookedUpState(" in enforced
    assert SHOWN in enforced


class RequiredNotePydantic(BaseModel):
    messages: Annotated[list[BaseMessage], add_messages] = []
    note: str


@dataclasses.dataclass(kw_only=True)
class RequiredNoteDataclass:
    messages: Annotated[list[BaseMessage], add_messages] = dataclasses.field(default_factory=list)
    note: str


@pytest.mark.parametrize("schema", [RequiredNotePydantic, RequiredNoteDataclass])
def test_with_visibility_refuses_an_internal_key_the_typed_state_requires(schema: type) -> None:
    """An internal key that the Pydantic or dataclass state requires is refused at wrap time,
    naming the key, the schema and the fix: v2 snapshots could not be built without it."""
    with pytest.raises(VisibilityConfigError) as info:
        with_visibility(typed_graph(schema), VisibilityPolicy(internal_keys=["note"]))
    assert str(info.value) == (
        f"VisibilityPolicy(internal_keys=['note']): 'note' is a required field of the graph's "
        f"output_schema {schema.__name__}; enforced v2 snapshots are built as "
        f"{schema.__name__} without it. Give the field a default (for example `None`), "
        "which the snapshots then show."
    )
    # Control: with a default the same policy is accepted.
    with_visibility(typed_graph(PydanticState), VisibilityPolicy(internal_keys=["note"]))


class RouteState(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    route: str


def route_graph() -> Any:
    """`router` (internal) writes the internal key `route`, then `reply` (visible) writes it
    too, beside its message."""
    builder = StateGraph(RouteState)
    builder.add_node("router", lambda state: {"route": "ROUTESECRET billing"})
    builder.add_node(
        "reply",
        lambda state: {"route": "ROUTESECRET done", "messages": [AIMessage(SHOWN, id="r1")]},
    )
    builder.add_edge(START, "router")
    builder.add_edge("router", "reply")
    return builder.compile()


ROUTE_POLICY = VisibilityPolicy(internal=["router"], internal_keys=["route"])


def _route_items(graph: Any, how: str, **kw: Any) -> list[Any]:
    if how == "stream":
        return list(graph.stream(user_input(), **kw))

    async def collect() -> list[Any]:
        if how == "astream":
            return [i async for i in graph.astream(user_input(), **kw)]
        return [e async for e in graph.astream_events(user_input(), version="v2", **kw)]

    return run_async(collect())


def canon_messages(payload: Any) -> Any:
    """(class, content, id) of each message in a bare message list or an update of one."""
    if isinstance(payload, dict):
        return {k: canon_messages(v) for k, v in payload.items()}
    return [(type(m).__name__, m.content, m.id) for m in payload]


@pytest.mark.parametrize("how", ["stream", "astream", "astream_events"])
def test_output_keys_naming_one_internal_key_is_refused(how: str) -> None:
    """`output_keys="route"` (one key, a string) makes LangGraph stream the key's value
    itself, with no key to drop: refused, naming the key and the fix. A list of keys streams
    snapshots and updates without it."""
    kw = {"stream_mode": ["values", "updates"], "output_keys": "route"}
    # Control: what the raw graph streams is the internal value itself.
    assert "ROUTESECRET" in repr(_route_items(route_graph(), how, **kw))
    enforced = with_visibility(route_graph(), ROUTE_POLICY)
    with pytest.raises(VisibilityConfigError) as info:
        _route_items(enforced, how, **kw)
    assert str(info.value) == (
        "output_keys='route' names a key of VisibilityPolicy(internal_keys=...): LangGraph "
        "streams that key's value itself, and an internal key's value never leaves an "
        "enforced graph. Pass a list (output_keys=['route']) for snapshots and updates "
        "without it, or stream another key."
    )
    listed = _route_items(enforced, how, **{**kw, "output_keys": ["route", "messages"]})
    assert "ROUTESECRET" not in repr(listed)
    assert SHOWN in repr(listed)
    # A string naming a key that may leave streams as raw does, less the internal node's
    # update.
    if how != "astream_events":
        one = {**kw, "output_keys": "messages"}
        raw = [i for i in _route_items(route_graph(), how, **one) if i[1] != {"router": None}]
        assert [(m, canon_messages(p)) for m, p in _route_items(enforced, how, **one)] == [
            (m, canon_messages(p)) for m, p in raw
        ]


def test_v1_values_of_a_typed_dict_state_are_redacted_dicts() -> None:
    """A TypedDict state's snapshot is a dict, in v1 and v2, without the internal message."""
    enforced = with_visibility(graph(), POLICY)
    v1 = list(enforced.stream(user_input(), stream_mode="values"))
    v2 = [i["data"] for i in enforced.stream(user_input(), stream_mode="values", version="v2")]
    for snapshots in (v1, v2):
        assert [type(s) for s in snapshots] == [dict] * 3
        assert [tagged(s["messages"]) for s in snapshots] == [
            [("HumanMessage", "hi", None)],
            [("HumanMessage", "hi", None)],
            [("HumanMessage", "hi", None), ("AIMessage", SHOWN, "user_visible")],
        ]


def events_v2(g: Any) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [e async for e in g.astream_events(user_input(), version="v2")]

    return run_async(collect())


def test_astream_events_v2_drops_the_internal_subgraphs_events() -> None:
    """`astream_events(v2)` on a wrapped graph: the raw events without those of the internal
    `work` subgraph (and without its update in the root stream); visible tokens only."""
    raw, enforced = events_v2(graph()), events_v2(with_visibility(graph(), POLICY))

    def root_chunks(events: list[dict[str, Any]]) -> list[list[str]]:
        return [
            list(e["data"]["chunk"])
            for e in events
            if e["event"] == "on_chain_stream" and e["name"] == "LangGraph" and not e["parent_ids"]
        ]

    def shape(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [(e["event"], e["name"]) for e in events]

    assert root_chunks(raw) == [["work"], ["answer"]]
    assert root_chunks(enforced) == [["answer"]]
    in_work = [
        e for e in raw if (e["metadata"].get("langgraph_checkpoint_ns") or "").startswith("work:")
    ]
    assert len(in_work) == 16
    expected = shape([e for e in raw if e not in in_work])
    expected.remove(("on_chain_stream", "LangGraph"))  # the first: the internal `work` update
    assert shape(enforced) == expected
    streamed = [
        e["data"]["chunk"].content for e in enforced if e["event"] == "on_chat_model_stream"
    ]
    assert streamed == ENFORCED_TOKENS
    assert SECRET not in repr(enforced)


def test_stream_events_v3_carries_no_internal_event() -> None:
    """`stream_events(version="v3")` on a wrapped graph: root values and the visible message's
    events only; no event of the internal subgraph, not even its lifecycle."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LangChainBetaWarning: v3 is experimental
        raw = list(graph().stream_events(user_input(), version="v3"))
        enforced = list(with_visibility(graph(), POLICY).stream_events(user_input(), version="v3"))

    def shape(events: list[dict[str, Any]]) -> list[tuple[str, int, str | None]]:
        return [
            (
                e["method"],
                len(e["params"]["namespace"]),
                e["params"]["data"][0]["event"] if e["method"] == "messages" else None,
            )
            for e in events
        ]

    message_events = [
        ("messages", 0, "message-start"),
        ("messages", 0, "content-block-start"),
        ("messages", 0, "content-block-delta"),
        ("messages", 0, "content-block-delta"),
        ("messages", 0, "content-block-finish"),
        ("messages", 0, "message-finish"),
    ]
    assert shape(enforced) == [
        ("values", 0, None),
        ("values", 0, None),
        *message_events,
        ("values", 0, None),
    ]
    assert SECRET in repr(raw)
    assert SECRET not in repr(enforced)
    assert [len(e["params"]["namespace"]) for e in raw if e["method"] == "lifecycle"] == [0, 0]


async def test_astream_events_v3_carries_no_internal_event() -> None:
    """The async v3 API yields the same methods as the sync one, without internal content."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stream = await with_visibility(graph(), POLICY).astream_events(user_input(), version="v3")

        async def collect() -> list[dict[str, Any]]:
            return [e async for e in stream]

        events = await asyncio.wait_for(collect(), TIMEOUT)
    assert [e["method"] for e in events] == ["values", "values", *["messages"] * 6, "values"]
    assert SECRET not in repr(events)


def early_exit_graph(enforced: bool) -> Any:
    g = graph(checkpointer=InMemorySaver(), delay=0.01)
    return with_visibility(g, POLICY) if enforced else g


def state_of(g: Any) -> tuple[tuple[str, ...], list[str]]:
    """The thread's next nodes and message contents."""
    snapshot = getattr(g, "raw_state", g).get_state(thread())
    return snapshot.next, [m.content for m in snapshot.values["messages"]]


CUT = "shown "  # the first user-visible token: raw and enforced consumers stop at the same point


def test_sync_break_closes_the_run_like_the_raw_graph() -> None:
    """Breaking out of `stream` leaves the thread as raw does, and it streams again."""
    after_break, after_again = [], []
    for g in (early_exit_graph(False), early_exit_graph(True)):
        for message, _ in g.stream(user_input(), thread(), stream_mode="messages"):
            if message.content == CUT:
                break
        after_break.append(state_of(g))
        again = list(
            g.stream(user_input("again"), thread(), stream_mode="messages", subgraphs=True)
        )
        after_again.append((state_of(g), [m.content for _, (m, _) in again]))
    assert after_break[1] == after_break[0]
    assert after_again[1][0] == after_again[0][0]
    assert [after_again[0][1], after_again[1][1]] == [RAW_TOKENS, ENFORCED_TOKENS]


async def astate_of(g: Any) -> tuple[tuple[str, ...], list[str]]:
    snapshot = await getattr(g, "raw_state", g).aget_state(thread())
    return snapshot.next, [m.content for m in snapshot.values["messages"]]


async def test_async_break_closes_the_run_like_the_raw_graph() -> None:
    """Breaking out of `astream` and closing it leaves no task behind and the thread as raw
    does; the thread streams again."""
    states, tokens_again = [], []
    for g in (early_exit_graph(False), early_exit_graph(True)):
        before = asyncio.all_tasks()
        stream = g.astream(user_input(), thread(), stream_mode="messages")
        async for message, _ in stream:
            if message.content == CUT:
                break
        await asyncio.wait_for(stream.aclose(), TIMEOUT)
        assert asyncio.all_tasks() - before == set()
        states.append(await astate_of(g))

        async def collect(g: Any = g) -> list[str]:
            again = g.astream(user_input("again"), thread(), stream_mode="messages", subgraphs=True)
            return [m.content async for _, (m, _) in again]

        tokens_again.append(await asyncio.wait_for(collect(), TIMEOUT))
    assert states[1] == states[0]
    assert tokens_again == [RAW_TOKENS, ENFORCED_TOKENS]


async def test_cancelled_consumer_closes_the_run_like_the_raw_graph() -> None:
    """Cancelling the consuming task mid-answer leaves no task behind, the thread where raw
    leaves it (`answer` still to run), and resuming finishes it."""
    states, resumed = [], []
    for g in (early_exit_graph(False), early_exit_graph(True)):
        before = asyncio.all_tasks()
        cut = asyncio.Event()

        async def consume(g: Any = g, cut: asyncio.Event = cut) -> None:
            async for message, _ in g.astream(user_input(), thread(), stream_mode="messages"):
                if message.content == CUT:
                    cut.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(cut.wait(), TIMEOUT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert asyncio.all_tasks() - before == set()
        states.append(await astate_of(g))

        async def resume(g: Any = g) -> list[str]:
            return [m.content async for m, _ in g.astream(None, thread(), stream_mode="messages")]

        resumed.append((await asyncio.wait_for(resume(), TIMEOUT), await astate_of(g)))
    assert states == [(("answer",), ["hi", SECRET])] * 2
    assert resumed == [(ENFORCED_TOKENS, ((), ["hi", SECRET, SHOWN]))] * 2


# -- HITL inside an internal subgraph ---------------------------------------------------------


def hitl_graph() -> Any:
    """Root `work` (internal: `plan` an LLM, then `ask` an interrupt) then `done`."""
    inner = StateGraph(State)
    inner.add_node("plan", llm_node(FakeChatModel(responses=[SECRET])))

    def ask(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "approve?"})
        return {"messages": [AIMessage(f"approved: {answer}", id="ack-1")]}

    inner.add_node("ask", ask)
    inner.add_edge(START, "plan")
    inner.add_edge("plan", "ask")
    outer = StateGraph(State)
    outer.add_node("work", inner.compile())
    outer.add_node("done", hand_node(AIMessage("all done", id="done-1")))
    outer.add_edge(START, "work")
    outer.add_edge("work", "done")
    return with_visibility(outer.compile(checkpointer=InMemorySaver()), POLICY)


def parts(items: list[Any], version: str, subgraphs: bool) -> list[tuple[int, str, Any]]:
    """(namespace depth, mode, payload) of each item of a ["updates", "values"] stream; a v2
    values part's interrupts are put back under "__interrupt__" as v1 has them."""
    out = []
    for item in items:
        if version == "v2":
            payload = item["data"]
            if item["type"] == "values" and item["interrupts"]:
                payload = {**payload, "__interrupt__": item["interrupts"]}
            out.append((len(item["ns"]), item["type"], payload))
        elif subgraphs:
            out.append((len(item[0]), item[1], item[2]))
        else:
            out.append((0, *item))
    return out


@pytest.mark.parametrize("subgraphs", [True, False], ids=["subgraphs", "root-only"])
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_interrupt_in_an_internal_subgraph_surfaces_and_resumes(
    version: str, subgraphs: bool
) -> None:
    """The interrupt of an internal subgraph reaches updates and root values; resume finishes."""
    g = hitl_graph()
    kw = {"stream_mode": ["updates", "values"], "subgraphs": subgraphs, "version": version}
    first = parts(list(g.stream(user_input(), thread(), **kw)), version, subgraphs)
    interrupts = [
        (depth, mode, [i.value for i in payload["__interrupt__"]])
        for depth, mode, payload in first
        if isinstance(payload, dict) and "__interrupt__" in payload
    ]
    question = [{"question": "approve?"}]
    assert interrupts == [
        *([(1, "updates", question)] if subgraphs else []),
        (0, "updates", question),
        (0, "values", question),
    ]
    assert all(
        isinstance(i, Interrupt)
        for _, _, p in first
        if "__interrupt__" in p
        for i in p["__interrupt__"]
    )
    assert SECRET not in repr(first)
    resumed = parts(list(g.stream(Command(resume="yes"), thread(), **kw)), version, subgraphs)
    assert tagged(resumed[-1][2]["messages"]) == [
        ("HumanMessage", "hi", None),
        ("AIMessage", "all done", "user_visible"),
    ]
    assert SECRET not in repr(resumed)
    assert "approved: yes" not in repr(resumed)


# -- Guarantee 9: bad input -------------------------------------------------------------------


def test_with_visibility_rejects_an_uncompiled_builder() -> None:
    """A StateGraph raises TypeError saying to compile it first."""
    with pytest.raises(TypeError) as info:
        with_visibility(builder(), POLICY)
    message = str(info.value)
    assert message.startswith("with_visibility takes a compiled LangGraph graph, got StateGraph")
    assert (
        "call builder.compile() first, or use compile_with_visibility(builder, policy)." in message
    )


def test_with_visibility_rejects_a_runnable_that_is_not_a_graph() -> None:
    """Any other object raises TypeError naming its type."""
    with pytest.raises(TypeError, match=r"got RunnableLambda .*pass the result of builder.compile"):
        with_visibility(RunnableLambda(lambda x: x), POLICY)


def test_with_visibility_rejects_a_non_policy() -> None:
    """A policy that is not a VisibilityPolicy raises VisibilityConfigError showing the fix."""
    with pytest.raises(VisibilityConfigError) as info:
        with_visibility(graph(), {"internal": ["work"]})  # type: ignore[arg-type]
    assert str(info.value) == (
        "with_visibility takes a VisibilityPolicy, got dict {'internal': ['work']}; write "
        "with_visibility(graph, VisibilityPolicy(internal=[...]))."
    )


def test_with_visibility_rejects_a_class_that_overrides_stream() -> None:
    """A compiled graph whose class replaces `stream` cannot be enforced and raises."""

    class Custom(CompiledStateGraph):  # type: ignore[type-arg]
        def stream(self, *args: Any, **kwargs: Any) -> Any:
            return super().stream(*args, **kwargs)

    g = graph()
    with pytest.raises(TypeError, match=r"Custom overrides stream\(\)"):
        with_visibility(Custom(**g.__dict__), POLICY)


@pytest.mark.parametrize("where", ["root", "subgraph"])
def test_with_visibility_rejects_an_unknown_declaration_on_a_node(where: str) -> None:
    """`add_node(..., metadata={"visibility": "hidden"})` raises when wrapping, naming the node."""
    inner = StateGraph(State)
    inner.add_node(
        "think", hand_node(), metadata={"visibility": "hidden"} if where != "root" else None
    )
    inner.add_edge(START, "think")
    outer = StateGraph(State)
    outer.add_node(
        "work", inner.compile(), metadata={"visibility": "hidden"} if where == "root" else None
    )
    outer.add_edge(START, "work")
    with pytest.raises(VisibilityConfigError) as info:
        with_visibility(outer.compile(), EVERYTHING_VISIBLE)
    node, path = ("work", "work") if where == "root" else ("think", "work/think")
    assert str(info.value) == (
        f"add_node({node!r}, metadata={{'visibility': ...}}) at {path!r}: unknown visibility "
        "'hidden'; use one of 'user_visible', 'internal'."
    )


def test_compile_with_visibility_rejects_a_compiled_graph() -> None:
    """`compile_with_visibility` takes a builder; a compiled graph raises TypeError with the fix."""
    with pytest.raises(TypeError) as info:
        compile_with_visibility(RunnableLambda(lambda x: x), POLICY)
    assert str(info.value) == (
        "compile_with_visibility takes a graph builder such as StateGraph, got RunnableLambda; "
        "for a compiled graph use with_visibility(graph, policy)."
    )


def test_compile_with_visibility_rejects_a_non_policy() -> None:
    """`compile_with_visibility` checks the policy before compiling."""
    with pytest.raises(
        VisibilityConfigError, match="compile_with_visibility takes a VisibilityPolicy"
    ):
        compile_with_visibility(builder(), "work")  # type: ignore[arg-type]


def test_compile_with_visibility_passes_compile_options() -> None:
    """`compile_with_visibility(builder, policy, checkpointer=...)` compiles with them."""
    saver = InMemorySaver()
    g = compile_with_visibility(builder(), POLICY, checkpointer=saver)
    assert g.checkpointer is saver
    assert g.visibility_policy == POLICY
    assert streamed(g, thread()) == ENFORCED_TOKENS


def test_with_visibility_classes_do_not_pile_up_per_policy() -> None:
    """Wrapping with many policies leaves no class behind once those graphs are gone."""
    import gc

    from lg_visibility._wrap import _CLASSES
    from lg_visibility.demo.graphs import incident_builder

    graph = incident_builder().compile()
    policies = [
        VisibilityPolicy(
            internal=["router_subgraph"],
            tags={f"t{i}": "internal"},
            user_visible_keys=["question", "scenario"],
        )
        for i in range(20)
    ]
    wrapped = [with_visibility(graph, policy) for policy in policies]
    keys = [(type(graph), policy) for policy in policies]
    assert [key in _CLASSES for key in keys] == [True] * 20
    del wrapped
    gc.collect()
    assert [key in _CLASSES for key in keys] == [False] * 20
