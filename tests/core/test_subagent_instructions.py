"""Issue 9 G and H: instructions made of several messages, and an `output_key` typo.

Internal content carries SECRET_G<n> markers, visible content VISIBLE_G<n>; a leak is a
SECRET marker in repr() of any output event, a false drop a missing VISIBLE one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph, add_messages
from langgraph.types import Command, StateSnapshot, interrupt
from typing_extensions import TypedDict

from lg_visibility import VisibilityPolicy, visibility_of, with_visibility
from lg_visibility.errors import VisibilityConfigError
from lg_visibility.subagent import add_subagent, as_subagent
from lg_visibility.testing import FakeChatModel
from tests._support.oracle import event_parts, run_stream
from tests._support.subagents import TIMEOUT, summary

WAYS = [
    pytest.param(True, "v1", id="sync-v1"),
    pytest.param(True, "v2", id="sync-v2"),
    pytest.param(False, "v1", id="async-v1"),
    pytest.param(False, "v2", id="async-v2"),
]
MODES = ["messages", "values", "updates"]


class Topic(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    topic: str
    research_data: str


def _go() -> dict[str, Any]:
    return {"messages": [HumanMessage("go", id="u1")], "topic": "tides"}


def _texts(graph: Any, *, sync: bool, version: str) -> str:
    """repr() of every payload streamed for one run in MODES with subgraphs: what a client sees."""
    items = run_stream(
        graph,
        [_go()],
        thread_id="t1",
        sync=sync,
        stream_mode=MODES,
        subgraphs=True,
        version=version,
    )
    return "\n".join(repr(event_parts(i, MODES, True, version)[2]) for i in items)


def _two_messages(state: Mapping[str, Any]) -> list[BaseMessage]:
    return [
        SystemMessage("SECRET_G1 you are a researcher"),
        HumanMessage(f"SECRET_G2 research {state['topic']}"),
    ]


def _researcher_graph(seen: list[list[BaseMessage]]) -> StateGraph[Any, Any, Any, Any]:
    def respond(messages: list[BaseMessage]) -> str:
        seen.append(list(messages))
        return "VISIBLE_G1 report"

    builder = StateGraph(Topic)
    add_subagent(
        builder,
        "researcher",
        create_agent(FakeChatModel(respond=respond)),
        instruction=_two_messages,
    )
    builder.add_edge(START, "researcher")
    return builder


# -- G: an instruction callable returning a list of messages ---------------------------------


@pytest.mark.parametrize("sync,version", WAYS)
def test_instruction_messages_reach_the_subagent_in_order(sync: bool, version: str) -> None:
    """An instruction callable's [system, human] reaches the sub-agent's model as is, in order."""
    seen: list[list[BaseMessage]] = []
    graph = with_visibility(
        _researcher_graph(seen).compile(checkpointer=InMemorySaver()), VisibilityPolicy()
    )
    _texts(graph, sync=sync, version=version)
    assert [summary(prompt) for prompt in seen] == [
        [
            ("SystemMessage", "SECRET_G1 you are a researcher"),
            ("HumanMessage", "SECRET_G2 research tides"),
        ]
    ]


@pytest.mark.parametrize("sync,version", WAYS)
def test_instruction_messages_never_leave_the_stream(sync: bool, version: str) -> None:
    """Every instruction message is internal: no SECRET marker leaves, the answer does."""
    graph = with_visibility(
        _researcher_graph([]).compile(checkpointer=InMemorySaver()), VisibilityPolicy()
    )
    text = _texts(graph, sync=sync, version=version)
    assert [m for m in ("SECRET_G1", "SECRET_G2", "VISIBLE_G1") if m in text] == ["VISIBLE_G1"]


@pytest.mark.parametrize("sync,version", WAYS)
def test_instruction_messages_leave_an_unwrapped_stream(sync: bool, version: str) -> None:
    """Control for the leak oracle: without with_visibility both SECRET markers do stream."""
    graph = _researcher_graph([]).compile(checkpointer=InMemorySaver())
    text = _texts(graph, sync=sync, version=version)
    assert [m for m in ("SECRET_G1", "SECRET_G2", "VISIBLE_G1") if m in text] == [
        "SECRET_G1",
        "SECRET_G2",
        "VISIBLE_G1",
    ]


def test_instruction_messages_are_declared_internal_with_their_own_ids() -> None:
    """Each instruction message is stored in the sub-agent declared internal, with its own id."""
    graph = _researcher_graph([]).compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t1"}}
    graph.invoke(_go(), config)
    snapshot = next(s for s in graph.get_state_history(config) if s.next == ("researcher",))
    (task,) = graph.get_state(snapshot.config, subgraphs=True).tasks
    assert isinstance(task.state, StateSnapshot)
    first, second, answer = task.state.values["messages"]
    assert [(visibility_of(m), m.id is not None) for m in (first, second)] == [
        ("internal", True),
        ("internal", True),
    ]
    assert len({first.id, second.id, answer.id, "u1"}) == 4


def test_instruction_message_keeps_its_own_declaration_and_id() -> None:
    """A message the callable already declared and named keeps its declaration and its id."""
    seen: list[list[BaseMessage]] = []
    own = HumanMessage(
        "VISIBLE_G2 quote", id="mine", response_metadata={"visibility": "user_visible"}
    )

    def respond(messages: list[BaseMessage]) -> str:
        seen.append(list(messages))
        return "done"

    builder = StateGraph(Topic)
    add_subagent(
        builder,
        "researcher",
        create_agent(FakeChatModel(respond=respond)),
        instruction=lambda state: (SystemMessage("SECRET_G3"), own),
    )
    builder.add_edge(START, "researcher")
    builder.compile().invoke(_go())
    assert [(m.text, m.id == "mine", visibility_of(m)) for m in seen[0]] == [
        ("SECRET_G3", False, "internal"),
        ("VISIBLE_G2 quote", True, "user_visible"),
    ]


def _interrupting_graph() -> tuple[Any, list[str]]:
    """A researcher with a two-message instruction whose tool asks for approval."""
    searched: list[str] = []

    @tool
    def search(query: str) -> str:
        """Search the web."""
        searched.append(interrupt({"approve": query}))
        return f"results for {query}"

    calls = [{"name": "search", "args": {"query": "tides"}, "id": "s1"}]
    model = FakeChatModel(responses=[AIMessage("", tool_calls=calls), "VISIBLE_G3 report"])
    builder = StateGraph(Topic)
    add_subagent(
        builder,
        "researcher",
        create_agent(model, [search]),
        instruction=_two_messages,
        return_reasoning=True,
    )
    builder.add_edge(START, "researcher")
    return builder.compile(checkpointer=InMemorySaver()), searched


RESUMED = [
    ("HumanMessage", "go"),
    ("AIMessage", ""),
    ("ToolMessage", "results for tides"),
    ("AIMessage", "VISIBLE_G3 report"),
]
"""The parent's messages after the resume: the instruction messages are not handed back."""


def test_instruction_messages_keep_their_ids_across_a_resume() -> None:
    """After a resume the re-run node names the same instruction messages: none is handed back."""
    graph, searched = _interrupting_graph()
    config: Any = {"configurable": {"thread_id": "t1"}}
    graph.invoke(_go(), config)
    result = graph.invoke(Command(resume="yes"), config)
    assert (searched, summary(result["messages"])) == (["yes"], RESUMED)


async def test_instruction_messages_keep_their_ids_across_a_resume_async() -> None:
    """Async twin: after a resume no instruction message is handed back to the parent."""
    graph, searched = _interrupting_graph()
    config: Any = {"configurable": {"thread_id": "t1"}}
    await asyncio.wait_for(graph.ainvoke(_go(), config), TIMEOUT)
    result = await asyncio.wait_for(graph.ainvoke(Command(resume="yes"), config), TIMEOUT)
    assert (searched, summary(result["messages"])) == (["yes"], RESUMED)


@pytest.mark.parametrize(
    "made,problem",
    [
        ([SystemMessage("x"), "y"], r"returned a list whose item 1 is str; it must return"),
        ({"role": "user", "content": "x"}, r"returned dict; it must return the instruction"),
        (None, r"returned NoneType; it must return the instruction text \(str\), a message"),
    ],
)
def test_instruction_callable_with_wrong_return_fails(made: Any, problem: str) -> None:
    """An instruction callable returning anything but text or messages names what it returned."""
    builder = StateGraph(Topic)
    add_subagent(
        builder,
        "researcher",
        create_agent(FakeChatModel(responses=["x"])),
        instruction=lambda state: made,
    )
    builder.add_edge(START, "researcher")
    with pytest.raises(TypeError, match=rf"sub-agent node 'researcher': .*{problem}"):
        builder.compile().invoke(_go())


def test_instruction_callable_returning_no_messages_fails() -> None:
    """An empty instruction with include_contents=False (no input at all) fails, naming the node."""
    builder = StateGraph(Topic)
    add_subagent(
        builder,
        "researcher",
        create_agent(FakeChatModel(responses=["x"])),
        instruction=lambda s: [],
    )
    builder.add_edge(START, "researcher")
    with pytest.raises(VisibilityConfigError, match=r"'researcher': .* returned no messages"):
        builder.compile().invoke(_go())


# -- H: an output_key typo --------------------------------------------------------------------


def _typo_builder(calls: list[str]) -> StateGraph[Any, Any, Any, Any]:
    """researcher's output_key has a typo; writer's template needs the intended key."""

    def respond(messages: list[BaseMessage]) -> str:
        calls.append(str(messages[-1].text))
        return "notes"

    builder = StateGraph(Topic)
    builder.add_node(
        "researcher",
        as_subagent(
            create_agent(FakeChatModel(respond=respond)),
            instruction="Research {topic}",
            output_key="research_dta",
        ),
    )
    builder.add_node(
        "writer",
        as_subagent(
            create_agent(FakeChatModel(respond=respond)),
            instruction="Write on {topic} from {research_data}",
        ),
    )
    builder.add_edge(START, "researcher")
    builder.add_edge("researcher", "writer")
    return builder


TYPO = r"sub-agent node 'researcher': output_key='research_dta' is not a key of the state"


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_output_key_typo_of_add_node_fails_naming_key_and_node(sync: bool) -> None:
    """Added with plain add_node, unwrapped: the typo fails before the sub-agent runs, named."""
    calls: list[str] = []
    graph = _typo_builder(calls).compile(checkpointer=InMemorySaver())
    with pytest.raises(VisibilityConfigError, match=TYPO):
        run_stream(graph, [_go()], thread_id="t1", sync=sync, stream_mode="values")
    assert calls == []


@pytest.mark.parametrize("sync,version", WAYS)
def test_output_key_typo_inside_a_subgraph_fails_naming_key_and_node(
    sync: bool, version: str
) -> None:
    """Sub-agents in a subgraph of a wrapped root: the typo fails on the first run, named."""
    calls: list[str] = []
    root = StateGraph(Topic)
    root.add_node("team", _typo_builder(calls).compile())
    root.add_edge(START, "team")
    graph = with_visibility(root.compile(checkpointer=InMemorySaver()), VisibilityPolicy())
    with pytest.raises(VisibilityConfigError, match=TYPO):
        run_stream(
            graph,
            [_go()],
            thread_id="t1",
            sync=sync,
            stream_mode="values",
            subgraphs=True,
            version=version,
        )
    assert calls == []


class Summary(TypedDict):
    summary: str


def test_output_key_of_a_channel_without_value_is_accepted() -> None:
    """An output_key that is a channel but not in the state schema (an output schema) is written."""
    builder = StateGraph(Topic, output_schema=Summary)
    builder.add_node(
        "researcher",
        as_subagent(
            create_agent(FakeChatModel(responses=["notes"])),
            instruction="Research {topic}",
            output_key="summary",
        ),
    )
    builder.add_edge(START, "researcher")
    assert builder.compile().invoke(_go()) == {"summary": "notes"}


def test_subagent_node_called_outside_a_graph_does_not_check_output_key() -> None:
    """Invoked directly, the node has no graph to ask, so it writes the unknown key (the limit)."""
    node = as_subagent(
        create_agent(FakeChatModel(responses=["notes"])),
        instruction="Research {topic}",
        output_key="research_dta",
    )
    update = node.invoke({"messages": [], "topic": "tides"})
    assert (summary(update["messages"]), update["research_dta"]) == (
        [("AIMessage", "notes")],
        "notes",
    )
