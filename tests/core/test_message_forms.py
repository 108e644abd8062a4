"""Messages a node writes in the forms `add_messages` accepts besides message objects (a
dict, a `(role, content)` pair, a string, LangChain's serialised envelope), and messages a
node hands its parent graph with `Command(graph=Command.PARENT)`: an internal node's stay
internal at every exit, a visible node's are kept.

Ground truth is the marker in the content: SECRET in what an internal node writes, VISIBLE
in what a visible one writes. Each case first checks that the raw graph's state holds the
internal message (the case really writes one)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph, add_messages
from langgraph.types import Command

from lg_visibility import VisibilityPolicy, with_visibility
from tests._support.oracle import all_text, snapshot_text


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


# What the internal node `planner` returns, by case.
FORMS: dict[str, Callable[[], Any]] = {
    "dict, role user": lambda: {"messages": [{"role": "user", "content": "SECRET user dict"}]},
    "dict, role assistant": lambda: {
        "messages": [{"role": "assistant", "content": "SECRET assistant dict"}]
    },
    "dict, type ai, with metadata": lambda: {
        "messages": [{"type": "ai", "content": "SECRET typed", "response_metadata": {"a": 1}}]
    },
    "dict, an assistant's tool call": lambda: {
        "messages": [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"name": "look", "args": {"q": "SECRET args"}, "id": "c1"}],
            },
            {"role": "tool", "content": "SECRET result", "tool_call_id": "c1"},
        ]
    },
    "dict, the serialised envelope": lambda: {
        "messages": [
            {
                "lc": 1,
                "type": "constructor",
                "id": ["langchain", "schema", "messages", "AIMessage"],
                "kwargs": {"content": "SECRET envelope"},
            }
        ]
    },
    "dict alone under the key": lambda: {"messages": {"role": "user", "content": "SECRET one"}},
    "pair in a list": lambda: {"messages": [("assistant", "SECRET pair")]},
    "string in a list": lambda: {"messages": ["SECRET string"]},
    "Command update, dicts and pairs": lambda: Command(
        goto="answer",
        update={"messages": [{"role": "user", "content": "SECRET cmd"}, ("ai", "SECRET cmd2")]},
    ),
}


def _graph(form: Callable[[], Any], *, enforced: bool) -> Any:
    def planner(state: State) -> Any:
        return form()

    def answer(state: State) -> dict[str, Any]:
        return {"messages": [{"role": "assistant", "content": "VISIBLE answer"}]}

    builder = StateGraph(State)
    builder.add_node("planner", planner, destinations=("answer",))
    builder.add_node("answer", answer)
    builder.add_edge(START, "planner")
    builder.add_edge("planner", "answer")
    graph = builder.compile(checkpointer=InMemorySaver())
    return with_visibility(graph, VisibilityPolicy(internal=["planner"])) if enforced else graph


def _handoff_graph(update: dict[str, Any], *, enforced: bool) -> Any:
    """`planner` is an internal subgraph whose node hands the root an update."""

    def inner(state: State) -> Command:
        return Command(graph=Command.PARENT, goto="answer", update=update)

    sub = StateGraph(State)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")

    def answer(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage("VISIBLE answer")]}

    builder = StateGraph(State)
    builder.add_node("planner", sub.compile(), destinations=("answer",))
    builder.add_node("answer", answer)
    builder.add_edge(START, "planner")
    graph = builder.compile(checkpointer=InMemorySaver())
    return with_visibility(graph, VisibilityPolicy(internal=["planner"])) if enforced else graph


HANDOFFS: dict[str, dict[str, Any]] = {
    "message objects": {"messages": [AIMessage("SECRET handoff"), HumanMessage("SECRET human")]},
    "dicts": {"messages": [{"role": "user", "content": "SECRET dict handoff"}]},
}

CONFIG = {"configurable": {"thread_id": "t"}}


def _exits(graph: Any, *, sync: bool) -> tuple[str, str]:
    """The text of every part the enforced stream yields, and of its state reads."""
    kw: dict[str, Any] = {
        "stream_mode": ["values", "updates", "messages", "debug"],
        "subgraphs": True,
        "version": "v2",
    }
    value = {"messages": [HumanMessage("hi", id="h1")]}
    if sync:
        parts = list(graph.stream(value, CONFIG, **kw))
        snaps = [graph.get_state(CONFIG, subgraphs=True), *graph.get_state_history(CONFIG)]
    else:

        async def run() -> tuple[list[Any], list[Any]]:
            parts = [p async for p in graph.astream(value, CONFIG, **kw)]
            snaps = [await graph.aget_state(CONFIG, subgraphs=True)]
            return parts, snaps + [s async for s in graph.aget_state_history(CONFIG)]

        parts, snaps = asyncio.run(run())
    stream = all_text([((), p["type"], p["data"]) for p in parts])
    return stream, "\n".join(snapshot_text(s) for s in snaps)


def _check(raw: Any, enforced: Any, sync: bool) -> None:
    _, raw_state = _exits(raw, sync=sync)
    assert "SECRET" in raw_state, "the case writes no internal message into the state"
    stream, state = _exits(enforced, sync=sync)
    assert "SECRET" not in stream
    assert "SECRET" not in state
    assert "VISIBLE answer" in stream and "VISIBLE answer" in state


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize("form", list(FORMS))
def test_an_internal_node_s_messages_in_any_form_stay_internal(form: str, sync: bool) -> None:
    _check(_graph(FORMS[form], enforced=False), _graph(FORMS[form], enforced=True), sync)


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize("update", list(HANDOFFS))
def test_a_handoff_from_an_internal_subgraph_stays_internal(update: str, sync: bool) -> None:
    raw = _handoff_graph(HANDOFFS[update], enforced=False)
    _check(raw, _handoff_graph(HANDOFFS[update], enforced=True), sync)


def test_a_visible_node_s_dict_message_is_tagged_visible() -> None:
    """What a visible node writes as a dict is tagged as its own, so that readers that
    show only tagged model output (the chat history) show it."""
    graph = _graph(FORMS["dict, role user"], enforced=True)
    list(graph.stream({"messages": [HumanMessage("hi", id="h1")]}, CONFIG))
    answer = graph.raw_state.get_state(CONFIG).values["messages"][-1]
    assert answer.content == "VISIBLE answer"
    assert answer.response_metadata["visibility"] == "user_visible"
    assert answer.response_metadata["provenance"] == {"path": "answer"}


def test_a_pair_that_is_not_a_message_is_left_alone() -> None:
    """Pairs and strings become messages only in a list under a key whose input holds
    messages (where add_messages would make them messages): elsewhere they stay as written."""

    class Notes(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]
        notes: list[Any]

    def planner(state: Notes) -> dict[str, Any]:
        return {"notes": [("user", "a note"), "another"]}

    builder = StateGraph(Notes)
    builder.add_node("planner", planner)
    builder.add_edge(START, "planner")
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()),
        VisibilityPolicy(internal=["planner"], user_visible_keys=["notes"]),
    )
    list(graph.stream({"messages": [HumanMessage("hi")], "notes": []}, CONFIG))
    notes = graph.get_state(CONFIG).values["notes"]
    # (the checkpointer stores a tuple as a list)
    assert [list(n) if isinstance(n, list | tuple) else n for n in notes] == [
        ["user", "a note"],
        "another",
    ]
