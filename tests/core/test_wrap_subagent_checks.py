"""with_visibility / compile_with_visibility check sub-agents added with plain add_node."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AnyMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from lg_visibility import (
    VisibilityConfigError,
    VisibilityPolicy,
    as_subagent,
    compile_with_visibility,
    with_visibility,
)
from lg_visibility.testing import FakeChatModel


class Parent(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    topic: str


def _builder(**options: Any) -> StateGraph[Any]:
    agent = create_agent(FakeChatModel(responses=["done"]), tools=[], name="helper")
    builder: StateGraph[Any] = StateGraph(Parent)
    builder.add_node("helper", as_subagent(agent, **options))
    builder.add_edge(START, "helper")
    return builder


def test_compile_with_visibility_rejects_unknown_output_key() -> None:
    """An output_key the parent state lacks fails when the graph is built, naming it."""
    with pytest.raises(VisibilityConfigError, match="summary"):
        compile_with_visibility(
            _builder(instruction="Do {topic}", output_key="summary"), VisibilityPolicy()
        )


def test_with_visibility_rejects_template_key_missing_from_parent() -> None:
    """An instruction naming a key the parent state lacks fails at with_visibility."""
    graph = _builder(instruction="Do {subject}").compile()
    with pytest.raises(VisibilityConfigError, match="subject"):
        with_visibility(graph, VisibilityPolicy())


def test_with_visibility_accepts_a_fitting_subagent() -> None:
    """A sub-agent whose instruction and output key fit the parent wraps without error."""
    graph = with_visibility(_builder(instruction="Do {topic}").compile(), VisibilityPolicy())
    out = graph.invoke({"messages": [], "topic": "x"})
    assert [m.text for m in out["messages"]] == ["done"]
