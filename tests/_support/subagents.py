"""Shared test helpers for sub-agents: the researcher/writer pipeline."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import StateSnapshot, interrupt
from typing_extensions import TypedDict

from lg_visibility.subagent import as_subagent
from lg_visibility.testing import FakeChatModel

TIMEOUT = 10.0
TOPIC = "Pura X View"
QUERIES = ["pura x view specs", "pura x view price", "pura x view reviews"]
RESEARCH = "The Pura X View is a wide foldable; it sells from 7499 CNY and reviews praise it."
REPORT = "Report: the Pura X View leads the wide-foldable class."
RESEARCH_INSTRUCTION = f"Research {TOPIC}"
WRITER_INSTRUCTION = f"Write a report on {TOPIC} from: {RESEARCH}"


class PipelineState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    topic: str
    research_data: str


@dataclass
class Pipeline:
    """Seed 004's research -> write pipeline and what its parts recorded."""

    graph: CompiledStateGraph[Any, Any, Any, Any]
    researcher: CompiledStateGraph[Any, Any, Any, Any]
    writer_prompts: list[list[BaseMessage]] = field(default_factory=list)
    searches: list[tuple[str, Any]] = field(default_factory=list)

    def config(self, thread: str = "t1") -> Any:
        return {"configurable": {"thread_id": thread}}


def search_calls(queries: list[str]) -> list[AIMessage]:
    return [
        AIMessage(
            content="",
            tool_calls=[{"name": "search", "args": {"query": q}, "id": f"s{i}"}],
        )
        for i, q in enumerate(queries, 1)
    ]


def make_pipeline(
    *,
    researcher: Mapping[str, Any] | None = None,
    writer: Mapping[str, Any] | None = None,
    queries: list[str] = QUERIES,
    ask_before_search: bool = False,
    wrap: Callable[[Any], Any] = lambda node: node,
) -> Pipeline:
    """Researcher (searches `queries`, then answers RESEARCH) -> writer (answers REPORT);
    `wrap` is applied to the researcher's node (`with_config`, `with_retry`, ...)."""
    searches: list[tuple[str, Any]] = []

    @tool
    def search(query: str) -> str:
        """Search the web."""
        approval = interrupt({"approve_search": query}) if ask_before_search else None
        searches.append((query, approval))
        return f"results for {query}"

    writer_prompts: list[list[BaseMessage]] = []

    def write(messages: list[BaseMessage]) -> str:
        writer_prompts.append(list(messages))
        return REPORT

    researcher_agent = create_agent(
        FakeChatModel(responses=[*search_calls(queries), RESEARCH]), [search], name="researcher"
    )
    writer_agent = create_agent(FakeChatModel(respond=write), name="writer")
    builder = StateGraph(PipelineState)
    builder.add_node(
        "researcher",
        wrap(
            as_subagent(
                researcher_agent,
                **{
                    "instruction": "Research {topic}",
                    "output_key": "research_data",
                    **(researcher or {}),
                },
            )
        ),
    )
    builder.add_node(
        "writer",
        as_subagent(
            writer_agent,
            **{"instruction": "Write a report on {topic} from: {research_data}", **(writer or {})},
        ),
    )
    builder.add_edge(START, "researcher")
    builder.add_edge("researcher", "writer")
    builder.add_edge("writer", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    return Pipeline(graph, researcher_agent, writer_prompts, searches)


def pipeline_input() -> dict[str, Any]:
    return {"messages": [HumanMessage("Analyse the Pura X View", id="u1")], "topic": TOPIC}


def summary(messages: Sequence[BaseMessage]) -> list[tuple[str, str]]:
    return [(type(m).__name__, str(m.text)) for m in messages]


def subagent_state(pipeline: Pipeline, config: Any, node: str) -> StateSnapshot:
    """The sub-agent's own final state, from the parent checkpoint where `node` was next."""
    for snapshot in pipeline.graph.get_state_history(config):
        if snapshot.next == (node,):
            (task,) = pipeline.graph.get_state(snapshot.config, subgraphs=True).tasks
            assert isinstance(task.state, StateSnapshot)
            return task.state
    raise AssertionError(f"no checkpoint with {node!r} next")


async def asubagent_state(pipeline: Pipeline, config: Any, node: str) -> StateSnapshot:
    """Async twin of `subagent_state`."""
    async for snapshot in pipeline.graph.aget_state_history(config):
        if snapshot.next == (node,):
            (task,) = (await pipeline.graph.aget_state(snapshot.config, subgraphs=True)).tasks
            assert isinstance(task.state, StateSnapshot)
            return task.state
    raise AssertionError(f"no checkpoint with {node!r} next")


RESEARCHER_TRACE = [
    ("HumanMessage", RESEARCH_INSTRUCTION),
    ("AIMessage", ""),
    ("ToolMessage", f"results for {QUERIES[0]}"),
    ("AIMessage", ""),
    ("ToolMessage", f"results for {QUERIES[1]}"),
    ("AIMessage", ""),
    ("ToolMessage", f"results for {QUERIES[2]}"),
    ("AIMessage", RESEARCH),
]


# -- seed 004's pipeline, both switches off -----------------------------------------------
