"""Sub-agents under a visibility policy: the researcher internal, the writer visible."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from lg_visibility import VisibilityConfigError, VisibilityPolicy, visibility_of, with_visibility
from lg_visibility.subagent import as_subagent
from lg_visibility.testing import FakeChatModel, split_tokens
from tests._support.subagents import (
    QUERIES,
    REPORT,
    RESEARCH,
    RESEARCHER_TRACE,
    WRITER_INSTRUCTION,
    Pipeline,
    PipelineState,
    make_pipeline,
    pipeline_input,
    search_calls,
    subagent_state,
    summary,
)

TIMEOUT = 10.0
pytestmark = pytest.mark.timeout(TIMEOUT)  # bounds the sync streams; async ones use wait_for

POLICY = VisibilityPolicy(internal=["researcher"], internal_keys=["research_data"])
MODES = ["messages", "updates", "values"]
WRITER_TOKENS = [*split_tokens(REPORT), ""]


def visible(pipeline: Pipeline) -> Any:
    return with_visibility(pipeline.graph, POLICY)


_WRAPS = {
    "as is": lambda node: node,
    "with_config": lambda node: node.with_config(tags=["research"]),
    "with_retry": lambda node: node.with_retry(stop_after_attempt=2),
    "with_fallbacks": lambda node: RunnableLambda(lambda s: {}).with_fallbacks([node]),
}


@pytest.mark.parametrize("rule", ["node path", "agent name"])
@pytest.mark.parametrize("wrap", list(_WRAPS))
def test_an_internal_subagents_undeclared_output_key_is_refused(wrap: str, rule: str) -> None:
    """The researcher hands its answer back under `research_data` too: internal, it would
    carry the research into every snapshot and state read, so the key must be declared
    either way; declared, the graph is accepted. Bound (`with_config`, `with_retry`) or a
    fallback, the sub-agent is found all the same, and so is its agent name."""
    pipeline = make_pipeline(wrap=_WRAPS[wrap])
    internal: dict[str, Any] = (
        {"internal": ["researcher"]}
        if rule == "node path"
        else {"agents": {"researcher": "internal"}}
    )
    with pytest.raises(VisibilityConfigError) as info:
        with_visibility(pipeline.graph, VisibilityPolicy(**internal))
    assert "returns the state key 'research_data' into the root state" in str(info.value)
    with_visibility(pipeline.graph, VisibilityPolicy(agents={"researcher": "user_visible"}))
    with_visibility(pipeline.graph, POLICY)
    with_visibility(
        pipeline.graph,
        VisibilityPolicy(internal=["researcher"], user_visible_keys=["research_data"]),
    )


def _team() -> Any:
    """The researcher sub-agent (`output_key="research_data"`) inside a subgraph `team`,
    which hands `research_data` on to the root."""

    @tool
    def search(query: str) -> str:
        """Search the web."""
        return f"results for {query}"

    model = FakeChatModel(responses=[*search_calls(QUERIES), RESEARCH])
    agent = create_agent(model, [search], name="researcher")
    inner = StateGraph(PipelineState)
    node = as_subagent(agent, instruction="Research {topic}", output_key="research_data")
    inner.add_node("researcher", node)
    inner.add_edge(START, "researcher")
    inner.add_edge("researcher", END)
    root = StateGraph(PipelineState)
    root.add_node("team", inner.compile())
    root.add_edge(START, "team")
    root.add_edge("team", END)
    return root.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize(
    "internal",
    [{"internal": ["team/researcher"]}, {"agents": {"researcher": "internal"}}],
    ids=["node path", "agent name"],
)
def test_a_nested_internal_subagents_undeclared_output_key_is_refused(
    internal: dict[str, Any],
) -> None:
    """Inside a visible subgraph, the internal researcher's `research_data` lands in that
    subgraph's state, whose snapshots and state reads carry it (and the root's, which it is
    handed on to): refused, as at the root. Declared internal, it is accepted and the
    research is in no snapshot; the raw graph's root state holds it (the control)."""
    raw = _team()
    config = {"configurable": {"thread_id": "nested"}}
    assert raw.invoke(pipeline_input(), config)["research_data"] == RESEARCH
    with pytest.raises(VisibilityConfigError) as info:
        with_visibility(_team(), VisibilityPolicy(**internal))
    assert "'team/researcher' is internal" in str(info.value)
    assert "returns the state key 'research_data' into the state of 'team'" in str(info.value)
    graph = with_visibility(_team(), VisibilityPolicy(**internal, internal_keys=["research_data"]))
    parts = stream(graph, pipeline_input(), config)
    assert "7499 CNY" not in repr(parts)
    assert "7499 CNY" not in repr(graph.get_state(config, subgraphs=True))


def test_an_internal_subgraphs_own_subagent_is_judged_where_the_subgraph_returns() -> None:
    """In an internal `team`, the researcher's key stays in team's dropped snapshots: the
    check asks about what `team` returns to the root, and names `team`."""
    with pytest.raises(VisibilityConfigError) as info:
        with_visibility(_team(), VisibilityPolicy(internal=["team"]))
    assert "node 'team' is internal" in str(info.value)
    assert "into the root state" in str(info.value)


def stream(graph: Any, input: Any, config: Any, *, subgraphs: bool = True) -> list[Any]:
    """(namespace, mode, payload) for every event the client receives."""
    events = graph.stream(input, config, stream_mode=MODES, subgraphs=subgraphs)
    if subgraphs:
        return list(events)
    return [((), mode, payload) for mode, payload in events]


async def astream(graph: Any, input: Any, config: Any) -> list[Any]:
    """Async twin of `stream`, bounded by TIMEOUT."""

    async def collect() -> list[Any]:
        return [e async for e in graph.astream(input, config, stream_mode=MODES, subgraphs=True)]

    return await asyncio.wait_for(collect(), TIMEOUT)


def streamed_messages(events: Iterable[Any]) -> list[tuple[str, BaseMessage]]:
    """(node path, message) of each `messages` event."""
    return [
        ("/".join(s.partition(":")[0] for s in ns) or meta["langgraph_node"], message)
        for ns, mode, (message, meta) in (e for e in events if e[1] == "messages")
    ]


def all_messages(events: Iterable[Any]) -> list[BaseMessage]:
    """Every message any event carries: streamed, in updates, in values snapshots."""
    found: list[BaseMessage] = []

    def walk(value: Any) -> None:
        if isinstance(value, BaseMessage):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    for _, _, payload in events:
        walk(payload)
    return found


def researcher_ids(pipeline: Pipeline, config: Any) -> set[str]:
    return {m.id for m in subagent_state(pipeline, config, "researcher").values["messages"]}


# -- streaming the pipeline ----------------------------------------------------------------


def test_stream_writer_answer_arrives_token_by_token() -> None:
    """The only streamed messages are the writer's answer, token by token; its first chunk
    carries the visible tag."""
    pipeline = make_pipeline()
    events = stream(visible(pipeline), pipeline_input(), pipeline.config())
    streamed = streamed_messages(events)
    assert [(path, m.text) for path, m in streamed] == [("writer", t) for t in WRITER_TOKENS]
    assert all(isinstance(m, AIMessageChunk) for _, m in streamed)
    assert [visibility_of(m) for _, m in streamed] == ["user_visible"] + [None] * (
        len(WRITER_TOKENS) - 1
    )


async def test_stream_writer_answer_arrives_token_by_token_async() -> None:
    """Async twin: only the writer's answer streams, token by token."""
    pipeline = make_pipeline()
    events = await astream(visible(pipeline), pipeline_input(), pipeline.config())
    streamed = streamed_messages(events)
    assert [(path, m.text) for path, m in streamed] == [("writer", t) for t in WRITER_TOKENS]


def test_stream_carries_nothing_of_the_researchers_reasoning() -> None:
    """No event comes from the researcher's namespace or carries one of its messages."""
    pipeline = make_pipeline()
    config = pipeline.config()
    events = stream(visible(pipeline), pipeline_input(), config)
    assert [ns for ns, _, _ in events if ns and ns[0].startswith("researcher:")] == []
    carried = all_messages(events)
    assert [m for m in carried if m.id in researcher_ids(pipeline, config)] == []
    assert [m for m in carried if isinstance(m, ToolMessage)] == []
    assert [q for q in QUERIES if q in repr(events)] == []


async def test_stream_carries_nothing_of_the_researchers_reasoning_async() -> None:
    """Async twin: nothing from the researcher's namespace or messages reaches the client."""
    pipeline = make_pipeline()
    config = pipeline.config()
    events = await astream(visible(pipeline), pipeline_input(), config)
    assert [ns for ns, _, _ in events if ns and ns[0].startswith("researcher:")] == []
    carried = all_messages(events)
    assert [m for m in carried if m.id in researcher_ids(pipeline, config)] == []


def test_stream_without_subgraphs_drops_the_handed_back_research() -> None:
    """With subgraphs=False the researcher's handed-back message is not re-emitted by its node."""
    pipeline = make_pipeline()
    events = stream(visible(pipeline), pipeline_input(), pipeline.config(), subgraphs=False)
    assert [(path, type(m).__name__, m.text) for path, m in streamed_messages(events)] == [
        ("writer", "AIMessage", REPORT)
    ]
    assert RESEARCH not in [m.text for m in all_messages(events)]


def test_stream_final_state_matches_the_counts() -> None:
    """After streaming, the parent has one message per sub-agent and the researcher eight."""
    pipeline = make_pipeline()
    config = pipeline.config()
    graph = visible(pipeline)
    stream(graph, pipeline_input(), config)
    assert summary(graph.raw_state.get_state(config).values["messages"]) == [
        ("HumanMessage", "Analyse the Pura X View"),
        ("AIMessage", RESEARCH),
        ("AIMessage", REPORT),
    ]
    assert summary(subagent_state(pipeline, config, "researcher").values["messages"]) == (
        RESEARCHER_TRACE
    )


async def test_stream_final_state_matches_the_counts_async() -> None:
    """Async twin: one message per sub-agent in the parent after streaming."""
    pipeline = make_pipeline()
    config = pipeline.config()
    graph = visible(pipeline)
    await astream(graph, pipeline_input(), config)
    state = await graph.raw_state.aget_state(config)
    assert summary(state.values["messages"]) == [
        ("HumanMessage", "Analyse the Pura X View"),
        ("AIMessage", RESEARCH),
        ("AIMessage", REPORT),
    ]


def test_handed_back_messages_keep_their_visibility_tags() -> None:
    """In the parent's state the researcher's answer is tagged internal, the writer's visible."""
    pipeline = make_pipeline()
    config = pipeline.config()
    stream(visible(pipeline), pipeline_input(), config)
    _, research, report = pipeline.graph.get_state(config).values["messages"]
    inner = subagent_state(pipeline, config, "researcher").values["messages"][-1]
    assert (research.id, visibility_of(research)) == (inner.id, "internal")
    assert visibility_of(report) == "user_visible"


def test_instruction_is_declared_internal() -> None:
    """The rendered instruction carries an internal declaration and never reaches the client."""
    pipeline = make_pipeline()
    config = pipeline.config()
    events = stream(visible(pipeline), pipeline_input(), config)
    instruction = subagent_state(pipeline, config, "writer").values["messages"][0]
    assert (instruction.text, visibility_of(instruction)) == (WRITER_INSTRUCTION, "internal")
    assert [m for m in all_messages(events) if m.id == instruction.id] == []


# -- interrupts under the policy ------------------------------------------------------------


def test_interrupt_in_internal_subagent_surfaces_and_resumes() -> None:
    """An interrupt in the internal researcher reaches the client; resuming streams the writer."""
    pipeline = make_pipeline(queries=QUERIES[:1], ask_before_search=True)
    config = pipeline.config()
    graph = visible(pipeline)
    first = stream(graph, pipeline_input(), config)
    interrupts = [p["__interrupt__"] for ns, mode, p in first if ns == () and mode == "updates"]
    assert [[i.value for i in batch] for batch in interrupts] == [[{"approve_search": QUERIES[0]}]]
    second = stream(graph, Command(resume="approved"), config)
    assert pipeline.searches == [(QUERIES[0], "approved")]
    assert [(p, m.text) for p, m in streamed_messages(second)] == [
        ("writer", t) for t in WRITER_TOKENS
    ]
    assert summary(graph.raw_state.get_state(config).values["messages"])[1:] == [
        ("AIMessage", RESEARCH),
        ("AIMessage", REPORT),
    ]


async def test_interrupt_in_internal_subagent_surfaces_and_resumes_async() -> None:
    """Async twin: the interrupt reaches the client and resuming streams the writer."""
    pipeline = make_pipeline(queries=QUERIES[:1], ask_before_search=True)
    config = pipeline.config()
    graph = visible(pipeline)
    first = await astream(graph, pipeline_input(), config)
    interrupts = [p["__interrupt__"] for ns, mode, p in first if ns == () and mode == "updates"]
    assert [[i.value for i in batch] for batch in interrupts] == [[{"approve_search": QUERIES[0]}]]
    second = await astream(graph, Command(resume="approved"), config)
    assert pipeline.searches == [(QUERIES[0], "approved")]
    assert [(p, m.text) for p, m in streamed_messages(second)] == [
        ("writer", t) for t in WRITER_TOKENS
    ]
