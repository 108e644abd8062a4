"""The policy is checked against the graph at wrap time: a typo'd pattern is an error."""

from __future__ import annotations

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
        "it is not checked.)"
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
    graph = with_visibility(incident(), VisibilityPolicy(internal=[pattern]))
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
