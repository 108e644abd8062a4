"""Output LangGraph re-emits, renumbers or replays: rebuilt messages, tools events of
internal nodes, second subgraphs, cached updates."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph, add_messages
from langgraph.types import CachePolicy, Command, interrupt

from lg_visibility import VisibilityPolicy, visibility_of, with_visibility
from lg_visibility._provenance import path_of_checkpoint_ns
from lg_visibility.testing import FakeChatModel

pytestmark = pytest.mark.timeout(10.0)


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    note: str


def user_input(text: str = "hi", id: str = "human-1") -> dict[str, Any]:
    return {"messages": [HumanMessage(text, id=id)]}


@tool
def search(q: str) -> str:
    """Search."""
    return f"SECRET RESULT for {q}"


def test_message_accumulated_from_an_internal_stream_stays_internal_in_later_turns() -> None:
    """A node that sums an internal model's streamed chunks itself must not store the sum
    tagged user_visible (it would leak in the next turn's snapshots and in history)."""
    internal = FakeChatModel(responses=["SECRET PLAN"], metadata={"visibility": "internal"})

    def plan(state: State) -> dict[str, Any]:
        full: Any = None
        for chunk in internal.stream(state["messages"]):
            full = chunk if full is None else full + chunk
        return {"messages": [full]}

    builder = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_edge(START, "plan")
    g = with_visibility(builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy())
    config: Any = {"configurable": {"thread_id": "t"}}
    list(g.stream(user_input(), config, stream_mode=["messages", "values"]))

    stored = g.raw_state.get_state(config).values["messages"]
    assert [(m.content, visibility_of(m)) for m in stored] == [
        ("hi", None),
        ("SECRET PLAN", "internal"),
    ]
    second = list(g.stream({"messages": []}, config, stream_mode="values"))
    assert all("SECRET" not in str(m.content) for s in second for m in s["messages"])


def test_tools_events_of_a_node_declared_internal_are_dropped() -> None:
    """`tools` events of a tool a node declared internal calls must not leave the graph."""

    def research(state: State) -> dict[str, Any]:
        search.invoke({"q": "internal query"})
        return {"note": "done"}

    builder = StateGraph(State)
    builder.add_node("research", research, metadata={"visibility": "internal"})
    builder.add_edge(START, "research")
    g = with_visibility(builder.compile(), VisibilityPolicy())

    for modes in (["tools"], ["tools", "messages"]):
        assert list(g.stream(user_input(), stream_mode=modes, subgraphs=True)) == []


def test_tools_events_of_a_node_internal_by_pattern_are_dropped() -> None:
    """The `tools` events of an agent's tools node that the policy makes internal are
    dropped like its updates (the ToolMessage must not leak through `tools`)."""
    model = FakeChatModel(
        responses=[
            AIMessage("", tool_calls=[{"name": "search", "args": {"q": "x"}, "id": "c1"}]),
            "done",
        ]
    )
    g = with_visibility(create_agent(model, [search]), VisibilityPolicy(internal=["tools"]))

    items = list(g.stream(user_input(), stream_mode=["tools", "updates"]))

    assert [mode for mode, _ in items] == ["updates", "updates"]
    assert "SECRET" not in repr(items)


def test_second_subgraph_of_an_internal_node_is_dropped() -> None:
    """Snapshots of the second subgraph a node declared internal runs (LangGraph numbers its
    namespace `node:<id>|1`) are dropped like the first one's."""

    def sub(tag: str) -> Any:
        builder = StateGraph(State)
        builder.add_node("inner", lambda s: {"note": f"SECRET {tag}"})
        builder.add_edge(START, "inner")
        return builder.compile()

    first, second = sub("one"), sub("two")

    def research(state: State) -> dict[str, Any]:
        first.invoke(state)
        second.invoke(state)
        return {"note": "done"}

    builder = StateGraph(State)
    builder.add_node("research", research, metadata={"visibility": "internal"})
    builder.add_edge(START, "research")
    g = with_visibility(builder.compile(), VisibilityPolicy(user_visible_keys=["note"]))

    items = list(g.stream(user_input(), stream_mode=["values", "updates"], subgraphs=True))

    assert [ns for ns, _, _ in items] == [(), ()]
    assert "SECRET" not in repr(items)


def test_paths_leave_out_langgraphs_subgraph_counter() -> None:
    """The path of a node of a node's second subgraph is node names only, as documented
    (`research/inner`, not `research/1/inner`)."""
    assert path_of_checkpoint_ns("research:abc|1|inner:def") == "research/inner"


def test_cached_update_of_an_internal_node_leaves_no_event() -> None:
    """A cached update of an internal node is dropped whole, not delivered as a bare
    `{"__metadata__": {"cached": True}}`."""

    def router(state: State) -> dict[str, Any]:
        return {"note": "secret-route"}

    builder = StateGraph(State)
    builder.add_node("router", router, cache_policy=CachePolicy())
    builder.add_edge(START, "router")
    g = with_visibility(
        builder.compile(cache=InMemoryCache()), VisibilityPolicy(internal=["router"])
    )

    assert list(g.stream(user_input(), stream_mode="updates")) == []
    assert list(g.stream(user_input(), stream_mode="updates")) == []


def test_cached_update_of_a_visible_node_keeps_its_metadata() -> None:
    """A cached update of a visible node is delivered as LangGraph yields it."""
    builder = StateGraph(State)
    builder.add_node("router", lambda s: {"note": "route"}, cache_policy=CachePolicy())
    builder.add_edge(START, "router")
    g = with_visibility(builder.compile(cache=InMemoryCache()), VisibilityPolicy())

    list(g.stream(user_input(), stream_mode="updates"))

    assert list(g.stream(user_input(), stream_mode="updates")) == [
        {"router": {"note": "route"}, "__metadata__": {"cached": True}}
    ]


# -- a node made internal by its runnable's own config ------------------------------------


class Routed(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    route: str


def _bound_internal(declare: str, replay: str) -> Any:
    """`router` is internal only through `with_config` on its runnable (a tag rule's tag, or
    a declaration), which its task-start event does not carry; `asker` interrupts beside
    it (`replay` "resume": the resumed run replays router's write) or the cache answers it
    the second time (`replay` "cache"), or neither (`replay` "live")."""
    model = FakeChatModel(responses=["SECRET ROUTE MESSAGE"])

    def router(state: Routed) -> dict[str, Any]:
        return {"route": "SECRET-ROUTE", "messages": [model.invoke(state["messages"])]}

    def asker(state: Routed) -> dict[str, Any]:
        answer = interrupt("VISIBLE question") if replay == "resume" else "x"
        return {"messages": [AIMessage(f"VISIBLE ack {answer}", id=f"ack-{answer}")]}

    config = (
        {"tags": ["kn_internal"]} if declare == "tag" else {"metadata": {"visibility": "internal"}}
    )
    builder = StateGraph(Routed)
    cache = {"cache_policy": CachePolicy()} if replay == "cache" else {}
    # `live`: a function named otherwise, whose run is not taken for the node's own
    runnable = RunnableLambda(router, name="route_it" if replay == "live" else None)
    builder.add_node("router", runnable.with_config(**config), **cache)
    builder.add_node("asker", asker)
    builder.add_edge(START, "router")
    builder.add_edge(START, "asker")
    return builder.compile(
        checkpointer=InMemorySaver(), cache=InMemoryCache() if replay == "cache" else None
    )


def _without_router(items: list[Any], mode: str) -> list[Any]:
    """Raw minus the router's events: ground truth by the node the test made internal."""
    out = []
    for item in items:
        if mode == "updates":
            kept = {k: v for k, v in item.items() if k not in ("router", "__metadata__")}
            if not kept:
                continue
            if "__metadata__" in item and "router" not in item:
                kept["__metadata__"] = item["__metadata__"]
            out.append(kept)
        elif (item.get("payload") or item).get("name") != "router":
            out.append(item)
    return out


def _turns(graph: Any, replay: str, mode: str, thread_id: str) -> list[Any]:
    config: Any = {"configurable": {"thread_id": thread_id}}
    out = list(graph.stream(user_input(), config, stream_mode=mode))
    if replay == "live":
        return out
    second = Command(resume="yes") if replay == "resume" else user_input(id="human-2")
    if replay == "cache":
        config = {"configurable": {"thread_id": thread_id + "-again"}}
    return out + list(graph.stream(second, config, stream_mode=mode))


@pytest.mark.parametrize("mode", ["updates", "tasks", "debug"])
@pytest.mark.parametrize("replay", ["resume", "cache", "live"])
@pytest.mark.parametrize("declare", ["tag", "declaration"])
def test_a_node_internal_by_its_runnables_config_leaves_nothing(
    declare: str, replay: str, mode: str
) -> None:
    """Its task-start event, and its write replayed after a resume or answered by the node
    cache (no run of its own to be judged by), are dropped like its run's, and its run is
    internal whatever its function is called (`live`): the enforced stream is the raw one
    minus the router's events. Control: the raw stream has them."""
    policy = VisibilityPolicy(tags={"kn_internal": "internal"})
    raw = _turns(_bound_internal(declare, replay), replay, mode, "raw")
    enforced = _turns(with_visibility(_bound_internal(declare, replay), policy), replay, mode, "e")

    assert "SECRET ROUTE MESSAGE" in repr(raw)  # the control: the checks below can fail
    assert "SECRET ROUTE MESSAGE" not in repr(enforced)
    if mode == "debug":
        # A checkpoint holds the state, `route` too (an internal node's key is the state's
        # unless the policy names it in `internal_keys`), and ids and timestamps.
        enforced = [i for i in enforced if i["type"] != "checkpoint"]
        raw = [i for i in raw if i["type"] != "checkpoint"]
    assert "SECRET" in repr(raw)
    assert "SECRET" not in repr(enforced)
    assert _shape(enforced) == _shape(_without_router(raw, mode))


def _shape(items: list[Any]) -> list[Any]:
    """What is compared: node names and the visible text, not ids or timestamps."""
    out = []
    for item in items:
        payload = item.get("payload", item)
        if "name" in payload:
            asked = [i["value"] for i in payload.get("interrupts") or ()]
            out.append((payload["name"], "result" in payload, asked))
        else:
            out.append(sorted(item))
    return out


@pytest.mark.parametrize("declare", ["tag", "declaration"])
def test_a_node_internal_by_its_runnables_config_sends_the_events_of_one_by_pattern(
    declare: str,
) -> None:
    """`astream_events` of a node internal by its runnable's own config (its function named
    otherwise, so its own run has no config of its own) are those of the same node made
    internal by a pattern. Control: the raw graph sends the router's events."""
    tags = VisibilityPolicy(tags={"kn_internal": "internal"})

    async def events(graph: Any) -> list[tuple[str, str, str]]:
        config: Any = {"configurable": {"thread_id": "t"}}
        return [
            (e["event"], e["name"], repr(e.get("data")))
            async for e in graph.astream_events(user_input(), config, version="v2")
        ]

    raw = _bound_internal(declare, "live")
    by_config = with_visibility(_bound_internal(declare, "live"), tags)
    by_pattern = with_visibility(
        _bound_internal(declare, "live"),
        VisibilityPolicy(internal=["router"], tags={"other": "user_visible"}),
    )
    got, expected, control = (asyncio.run(events(g)) for g in (by_config, by_pattern, raw))
    assert "SECRET ROUTE MESSAGE" in repr(control)
    assert ("on_chain_start", "router") in [e[:2] for e in control]
    assert "SECRET ROUTE MESSAGE" not in repr(got)
    assert [e[:2] for e in got] == [e[:2] for e in expected]


def _alternatives(
    first: dict[str, Any],
    second: dict[str, Any],
    *,
    first_fails: bool,
    declared: str | None = None,
) -> Any:
    """A node `work` whose runnable is `a.with_config(**first).with_fallbacks([b...])`; the
    one that runs writes its marker: "SECRET" unless it is the one configured visible."""

    def text(config: dict[str, Any]) -> str:
        visible = config.get("metadata", {}).get("visibility") == "user_visible"
        return "VISIBLE answer" if visible else "SECRET draft"

    def a(state: Routed) -> dict[str, Any]:
        if first_fails:
            raise RuntimeError("first down")
        return {"messages": [AIMessage(text(first), id="a-1")]}

    def b(state: Routed) -> dict[str, Any]:
        return {"messages": [AIMessage(text(second), id="b-1")]}

    runnable = (
        RunnableLambda(a)
        .with_config(**first)
        .with_fallbacks([RunnableLambda(b).with_config(**second)])
    )
    builder = StateGraph(Routed)
    metadata = {"visibility": declared} if declared else None
    builder.add_node("work", runnable, metadata=metadata)
    builder.add_edge(START, "work")
    return builder.compile()


TAGGED = {"tags": ["kn_internal"]}
SHOWN = {"metadata": {"visibility": "user_visible"}}


@pytest.mark.parametrize(
    ("first", "second", "first_fails", "policy", "shows"),
    [
        # an internal alternative makes the node internal, whichever runs (fail closed)
        (TAGGED, {}, False, {}, False),
        (TAGGED, {}, True, {}, False),
        ({}, TAGGED, False, {}, False),
        # a visible declaration on one alternative only: the pattern decides
        (SHOWN, {}, True, {"internal": ["work"]}, False),
        ({}, SHOWN, False, {"internal": ["work"]}, False),
        # every alternative declared visible: visible
        (SHOWN, SHOWN, True, {"internal": ["work"]}, True),
        (SHOWN, SHOWN, False, {"internal": ["work"]}, True),
    ],
)
def test_alternatives_configured_differently_fail_closed(
    first: dict[str, Any],
    second: dict[str, Any],
    first_fails: bool,
    policy: dict[str, Any],
    shows: bool,
) -> None:
    """Which alternative of a `with_fallbacks` runs is known only at run time, so the node
    is internal if any alternative's own config says so, visible if all of theirs do, and
    otherwise decided by its other rules. Ground truth: the marker the alternative writes
    ("VISIBLE" only where its own config says so)."""
    graph = with_visibility(
        _alternatives(first, second, first_fails=first_fails),
        VisibilityPolicy(tags={"kn_internal": "internal"}, **policy),
    )
    raw = repr(list(_alternatives(first, second, first_fails=first_fails).stream(user_input())))
    out = repr(list(graph.stream(user_input(), stream_mode="updates")))
    assert "SECRET" in raw or "VISIBLE answer" in raw  # the control: a node answered
    assert "SECRET" not in out
    assert ("VISIBLE answer" in out) is shows


@pytest.mark.parametrize("first_fails", [False, True])
def test_the_wrapper_around_internal_alternatives_sends_no_event(first_fails: bool) -> None:
    """The `with_fallbacks` run between the node's run and its alternatives has no config
    of its own: its events are judged with the node's (its end carries the answer)."""

    async def events(graph: Any) -> str:
        return repr([e async for e in graph.astream_events(user_input(), version="v2")])

    policy = VisibilityPolicy(tags={"kn_internal": "internal"})
    raw = _alternatives(TAGGED, TAGGED, first_fails=first_fails)
    enforced = with_visibility(_alternatives(TAGGED, TAGGED, first_fails=first_fails), policy)
    assert "SECRET" in asyncio.run(events(raw))
    assert "SECRET" not in asyncio.run(events(enforced))


@pytest.mark.parametrize(
    ("first", "second", "declared", "shows"),
    [
        # visible by tags only: the node's add_node declaration beats them, as it beats a
        # single alternative's tag
        ({"tags": ["vis"]}, {"tags": ["vis2"]}, "internal", False),
        # internal by a tag only: the node's add_node declaration beats it too
        (TAGGED, {}, "user_visible", True),
    ],
)
def test_alternatives_verdicts_keep_their_place_under_a_node_declaration(
    first: dict[str, Any], second: dict[str, Any], declared: str, shows: bool
) -> None:
    policy = VisibilityPolicy(
        tags={"kn_internal": "internal", "vis": "user_visible", "vis2": "user_visible"}
    )
    graph = with_visibility(
        _alternatives(first, second, first_fails=True, declared=declared), policy
    )
    out = repr(list(graph.stream(user_input(), stream_mode="updates")))
    state_text = repr(list(graph.stream(user_input(), stream_mode="values"))[-1])
    # (the plain fallback runs and writes "SECRET draft": its marker says only that no
    # config of its own declares it visible; here the node's declaration decides)
    assert ("draft" in out + state_text) is shows


def test_an_alternative_is_judged_with_the_tags_its_run_gets_from_outside() -> None:
    """Each alternative is decided with the run's own tags too (here a call's, which sorts
    between the alternatives' ones): the fallback that runs is internal by them, as it is
    alone, whatever the first alternative's tags say."""
    policy = VisibilityPolicy(
        tags={"a_vis": "user_visible", "b_int": "internal", "c_vis": "user_visible"}
    )
    config: Any = {"tags": ["b_int"]}
    both = with_visibility(
        _alternatives({"tags": ["a_vis"]}, {"tags": ["c_vis"]}, first_fails=True), policy
    )
    alone = with_visibility(_alternatives({}, {}, first_fails=True), policy)
    for graph in (both, alone):
        out = repr(list(graph.stream(user_input(), config, stream_mode=["updates", "values"])))
        assert "SECRET" not in out
