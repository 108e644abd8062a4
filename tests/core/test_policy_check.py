"""The policy is checked against the graph at wrap time: a typo'd pattern is an error."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.graph import START, StateGraph

from lg_visibility import (
    VisibilityConfigError,
    VisibilityPolicy,
    compile_with_visibility,
    with_visibility,
)
from lg_visibility.demo.graphs import incident_builder
from tests._support.core import State, hand_node

INCIDENT_KEYS = ["cards", "knowledge", "question", "scenario"]


def incident() -> object:
    return incident_builder().compile()


def test_policy_check_rejects_a_typo_at_the_root_naming_the_nearest_node() -> None:
    """A root-level typo names the pattern, the level and the nearest real names, nearest first."""
    with pytest.raises(VisibilityConfigError) as info:
        with_visibility(incident(), VisibilityPolicy(internal=["router_subgrah"]))
    assert str(info.value) == (
        "VisibilityPolicy(internal=[...]): pattern 'router_subgrah': segment 1 "
        "'router_subgrah' names no node under the root graph; did you mean "
        "'router_subgraph', 'knowledge_subgraph', 'insight_subgraph'? (A pattern names "
        "nodes from the root graph down; below a node that invokes a graph from its function "
        "it is not checked. A `@task` is named under the node or entrypoint that calls it: "
        "'<caller>/<task>'.)"
    )


def test_policy_check_rejects_a_typo_inside_a_subgraph() -> None:
    """A segment is checked against the nodes of the subgraph it stands in."""
    with pytest.raises(
        VisibilityConfigError,
        match=r"segment 2 'answr' names no node under "
        r"'knowledge_subgraph'; did you mean 'answer'\?",
    ):
        with_visibility(incident(), VisibilityPolicy(user_visible=["knowledge_subgraph/answr"]))


def test_policy_check_rejects_a_typo_in_compile_with_visibility() -> None:
    """compile_with_visibility checks the same way."""
    with pytest.raises(VisibilityConfigError, match="'respons_node'"):
        compile_with_visibility(incident_builder(), VisibilityPolicy(internal=["respons_node"]))


@pytest.mark.parametrize(
    "pattern",
    [
        "router_subgraph",
        "knowledge_subgraph/answer",
        "*/answer",
        "**/answer",
        "router_subgraph/**",
        "input_parser_node/anything/below",
    ],
)
def test_policy_check_accepts_patterns_that_name_real_nodes(pattern: str) -> None:
    """Real names, wildcards, and segments below a function node (whose children cannot be
    known before a run) are accepted."""
    policy = VisibilityPolicy(internal=[pattern], user_visible_keys=INCIDENT_KEYS)
    graph = with_visibility(incident(), policy)
    assert graph.visibility_policy.internal == (pattern,)


def test_policy_check_rejects_a_wildcard_where_there_are_no_nodes() -> None:
    """`*` needs a node at its level: below a leaf of a subgraph there is none to match."""
    builder = StateGraph(State)
    builder.add_node("say", hand_node(AIMessage("hi")))
    builder.add_edge(START, "say")
    inner = builder.compile()
    outer = StateGraph(State)
    outer.add_node("inner", inner)
    outer.add_edge(START, "inner")
    with pytest.raises(
        VisibilityConfigError,
        match=r"segment 2 'nope' names no node under "
        r"'inner'; the nodes there are 'say'\.",
    ):
        with_visibility(outer.compile(), VisibilityPolicy(internal=["inner/nope"]))


def test_policy_check_rejects_an_internal_subgraphs_undeclared_shared_key() -> None:
    """A state key an internal subgraph returns into the root state must be declared."""
    with pytest.raises(VisibilityConfigError) as info:
        with_visibility(incident(), VisibilityPolicy(internal=["router_subgraph"]))
    assert str(info.value) == (
        "node 'router_subgraph' is internal (internal (pattern 'router_subgraph')) and returns "
        "the state key 'question' into the root state, where every snapshot and state read "
        "would carry it. Declare it: VisibilityPolicy(internal_keys=['question']) to keep it "
        "in, or user_visible_keys=['question'] to let it out."
    )


def test_policy_check_accepts_a_nested_internal_subgraphs_shared_keys() -> None:
    """Below the root, an internal subgraph's output keys are not asked for: with one state
    type shared by every graph they include keys it only hands back as it got them, which
    no static check can tell from a key it writes (README, known limits)."""

    class Shared(State):
        notes: str

    research = StateGraph(Shared)
    research.add_node("look", lambda s: {"messages": [AIMessage("SECRET research")]})
    research.add_edge(START, "look")
    team = StateGraph(Shared)
    team.add_node("research", research.compile())
    team.add_edge(START, "research")
    root = StateGraph(Shared)
    root.add_node("team", team.compile())
    root.add_edge(START, "team")
    with_visibility(root.compile(), VisibilityPolicy(internal=["team/research"]))
    with pytest.raises(VisibilityConfigError):  # the same subgraph at the root is asked for
        with_visibility(team.compile(), VisibilityPolicy(internal=["research"]))


def test_policy_check_judges_a_subgraph_by_the_tags_it_carries() -> None:
    """A subgraph made internal by a tag rule, its tag set with `with_config`: its shared
    key is asked for as under a pattern (the tag is in its config before any run)."""

    class Shared(State):
        notes: str

    research = StateGraph(Shared)
    research.add_node("look", lambda s: {"notes": "SECRET notes"})
    research.add_edge(START, "look")
    root = StateGraph(Shared)
    root.add_node("research", research.compile().with_config(tags=["hush"]))
    root.add_edge(START, "research")
    with pytest.raises(VisibilityConfigError) as info:
        with_visibility(root.compile(), VisibilityPolicy(tags={"hush": "internal"}))
    assert "node 'research' is internal (internal (tag 'hush'))" in str(info.value)
    with_visibility(root.compile(), VisibilityPolicy(tags={"other": "internal"}))


def test_policy_check_refuses_a_pattern_below_a_remote_graph_node() -> None:
    """A `RemoteGraph` node's streamed parts are judged as that node's (its inside is not
    known before a run): a rule below it would not hold, so it is refused, naming the node
    and the fix. The node itself, and patterns that only pass by it, are accepted. (No
    server is needed to wrap; `tests/integration/test_langgraph_server.py` runs one.)"""
    from langgraph.pregel.remote import RemoteGraph

    builder = StateGraph(State)
    builder.add_node("remote", RemoteGraph("agent", url="http://127.0.0.1:9"))
    builder.add_node("answer", lambda s: {"messages": [AIMessage("VISIBLE")]})
    builder.add_edge(START, "remote")
    builder.add_edge("remote", "answer")
    graph = builder.compile()
    for below in ("remote/router", "remote/*", "remote/router/model"):
        with pytest.raises(VisibilityConfigError, match="reaches below 'remote', a RemoteGraph"):
            with_visibility(graph, VisibilityPolicy(internal=[below]))
    for accepted in ("remote", "*", "**/answer", "*/router"):
        with_visibility(graph, VisibilityPolicy(internal=[accepted]))


def test_policy_check_rejects_an_unknown_key_naming_the_nearest() -> None:
    """A key that is no state key of the graph or its subgraphs is refused with the nearest."""
    policy = VisibilityPolicy(internal_keys=["knowlege"])
    with pytest.raises(VisibilityConfigError) as info:
        with_visibility(incident(), policy)
    assert str(info.value) == (
        "VisibilityPolicy(internal_keys=[...]): 'knowlege' is not a state key of this graph "
        "or of its subgraphs; did you mean 'knowledge'?"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"internal_keys": "notes"},
            "internal_keys must be a list of state keys, got the str 'notes'; write "
            "internal_keys=['notes'].",
        ),
        (
            {"internal_keys": ["messages"]},
            "internal_keys: 'messages' is judged message by message, by tag and id; list only "
            "the other state keys here.",
        ),
        (
            {"internal_keys": ["a"], "user_visible_keys": ["a"]},
            "key 'a' is listed both in internal_keys and in user_visible_keys; keep it in one "
            "list.",
        ),
        (
            {"user_visible_keys": [3]},
            "user_visible_keys: a state key must be a non-empty str, got 3.",
        ),
    ],
)
def test_policy_keys_bad_input_is_refused_at_construction(
    kwargs: dict[str, object], message: str
) -> None:
    """Bad key options fail when the policy is built, naming the value and the fix."""
    with pytest.raises(VisibilityConfigError) as info:
        VisibilityPolicy(**kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message


def _node_invoking_two_graphs() -> StateGraph:
    """`work`'s function invokes two graphs (LangGraph lists only the first as its
    subgraph); the second one's node `second` says the secret."""

    def graph_of(name: str, text: str) -> Any:
        builder = StateGraph(State)
        builder.add_node(name, hand_node(AIMessage(text, id=f"{name}-1")))
        builder.add_edge(START, name)
        return builder.compile()

    first, second = graph_of("first", "shown"), graph_of("second", "SECRET")

    def work(state: State) -> dict[str, object]:
        first.invoke(state)
        second.invoke(state)
        return {}

    outer = StateGraph(State)
    outer.add_node("work", work)
    outer.add_edge(START, "work")
    return outer


def test_policy_check_accepts_a_node_of_any_graph_a_function_invokes() -> None:
    """Below a node whose function invokes graphs, a name the first graph lacks may be a
    node of another it invokes: accepted (and enforced), where a graph added as a node
    itself still has its names checked."""
    policy = VisibilityPolicy(internal=["work/second"])
    graph = with_visibility(_node_invoking_two_graphs().compile(), policy)
    items = list(graph.stream({"messages": []}, stream_mode="updates", subgraphs=True))
    raw = list(
        _node_invoking_two_graphs()
        .compile()
        .stream({"messages": []}, stream_mode="updates", subgraphs=True)
    )
    assert "SECRET" in repr(raw) and "shown" in repr(raw)
    assert "SECRET" not in repr(items) and "shown" in repr(items)
