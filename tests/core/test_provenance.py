"""Provenance travels with the message: its producer's path (and agent) in state."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility.demo.graphs import INCIDENT_POLICY, incident_builder
from lg_visibility.testing import FakeChatModel
from tests._support.core import (
    SYNC_ASYNC,
    State,
    llm_node,
    lookup,
    one_node_graph,
    run,
    thread,
    tool_script,
    user_input,
)


def producers(messages: list[Any]) -> list[tuple[str, Any]]:
    return [(type(m).__name__, m.response_metadata.get("provenance")) for m in messages]


@SYNC_ASYNC
def test_provenance_of_a_final_message_names_its_node(sync: bool) -> None:
    """A model's final message and a node-built message carry {"path": node path}."""
    graph = with_visibility(
        one_node_graph(llm_node(FakeChatModel(responses=["hello"])), checkpointer=InMemorySaver()),
        VisibilityPolicy(),
    )
    run(graph, user_input(), thread(), sync=sync, stream_mode="values")
    state = graph.raw_state.get_state(thread())
    assert producers(state.values["messages"]) == [
        ("HumanMessage", None),
        ("AIMessage", {"path": "talk"}),
    ]


def test_provenance_names_the_agent_and_the_path_inside_subgraphs() -> None:
    """Messages an agent subgraph produced keep its name and their node path in the
    parent's state; the policy does not change what is recorded."""
    builder = StateGraph(State)
    builder.add_node("research", create_agent(tool_script(), tools=[lookup], name="kn"))
    builder.add_edge(START, "research")
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy(internal=["research"])
    )
    graph.invoke(user_input(), thread())
    state = graph.raw_state.get_state(thread())
    assert producers(state.values["messages"]) == [
        ("HumanMessage", None),
        ("AIMessage", {"path": "research/model", "agent": "kn"}),
        ("ToolMessage", {"path": "research/tools", "agent": "kn"}),
        ("AIMessage", {"path": "research/model", "agent": "kn"}),
    ]


def test_provenance_is_in_the_redacted_state_read_of_a_visible_message() -> None:
    """The enforced state read keeps the provenance of what it delivers."""
    graph = with_visibility(
        incident_builder().compile(checkpointer=InMemorySaver()), INCIDENT_POLICY
    )
    graph.invoke({"messages": [HumanMessage("What is the Pura X price?")]}, thread())
    delivered = producers(graph.get_state(thread()).values["messages"])
    assert delivered[0] == ("HumanMessage", None)
    assert delivered[-1] == ("AIMessage", {"path": "response_node"})


def test_runs_inside_matches_task_ids_where_both_segments_have_one() -> None:
    """A task runs inside the tasks its namespace begins with; a segment without a task id
    (a `checkpointer=True` graph's) stands for any task of its name; two tasks of one node
    (`Send`s) are siblings, not one inside the other."""
    from lg_visibility._provenance import runs_inside

    assert runs_inside("sub:1|inner:2", "sub:1")
    assert runs_inside("outer|answer:2", "outer:1")  # checkpointer=True drops the id
    assert runs_inside("a:1|1|b:2", "a:1")  # a counter segment after a later graph
    assert not runs_inside("worker:a|reply:3", "worker:b")  # Send siblings
    assert not runs_inside("sub:1", "sub:1")  # not inside itself
    assert not runs_inside("sub:1", "sub:1|inner:2")
    assert not runs_inside("x:1|y:2", "z:1")
