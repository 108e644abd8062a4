"""Tests for lg_visibility.subagent: what a sub-agent sees and what it hands back."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Annotated, Any, cast

import pytest
from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph, add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot
from pydantic import BaseModel
from typing_extensions import TypedDict

from lg_visibility.errors import VisibilityConfigError
from lg_visibility.subagent import SubagentNode, add_subagent, as_subagent
from lg_visibility.testing import FakeChatModel
from tests._support.subagents import (
    QUERIES,
    REPORT,
    RESEARCH,
    RESEARCHER_TRACE,
    TIMEOUT,
    TOPIC,
    WRITER_INSTRUCTION,
    PipelineState,
    asubagent_state,
    make_pipeline,
    pipeline_input,
    subagent_state,
    summary,
)


def test_pipeline_writer_prompt_holds_only_its_instruction() -> None:
    """With include_contents off, the writer's model sees one message: its rendered instruction."""
    pipeline = make_pipeline()
    pipeline.graph.invoke(pipeline_input(), pipeline.config())
    assert [summary(p) for p in pipeline.writer_prompts] == [[("HumanMessage", WRITER_INSTRUCTION)]]


async def test_pipeline_writer_prompt_holds_only_its_instruction_async() -> None:
    """Async twin: the writer's model sees only its rendered instruction."""
    pipeline = make_pipeline()
    await asyncio.wait_for(pipeline.graph.ainvoke(pipeline_input(), pipeline.config()), TIMEOUT)
    assert [summary(p) for p in pipeline.writer_prompts] == [[("HumanMessage", WRITER_INSTRUCTION)]]


def test_pipeline_parent_messages_grow_by_one_per_subagent() -> None:
    """The parent's messages gain exactly the researcher's and the writer's final messages."""
    pipeline = make_pipeline()
    result = pipeline.graph.invoke(pipeline_input(), pipeline.config())
    assert summary(result["messages"]) == [
        ("HumanMessage", "Analyse the Pura X View"),
        ("AIMessage", RESEARCH),
        ("AIMessage", REPORT),
    ]


async def test_pipeline_parent_messages_grow_by_one_per_subagent_async() -> None:
    """Async twin: the parent's messages gain exactly one message per sub-agent."""
    pipeline = make_pipeline()
    result = await asyncio.wait_for(
        pipeline.graph.ainvoke(pipeline_input(), pipeline.config()), TIMEOUT
    )
    assert summary(result["messages"]) == [
        ("HumanMessage", "Analyse the Pura X View"),
        ("AIMessage", RESEARCH),
        ("AIMessage", REPORT),
    ]


def test_pipeline_output_key_receives_final_text() -> None:
    """output_key receives the researcher's final message text."""
    pipeline = make_pipeline()
    result = pipeline.graph.invoke(pipeline_input(), pipeline.config())
    assert result["research_data"] == RESEARCH


def test_pipeline_research_stays_in_researcher_namespace() -> None:
    """The researcher's three searches live only in its own checkpoint namespace."""
    pipeline = make_pipeline()
    config = pipeline.config()
    pipeline.graph.invoke(pipeline_input(), config)
    inner = subagent_state(pipeline, config, "researcher")
    assert inner.config["configurable"]["checkpoint_ns"].startswith("researcher:")
    assert summary(inner.values["messages"]) == RESEARCHER_TRACE
    assert [q for q, _ in pipeline.searches] == QUERIES
    parent = pipeline.graph.get_state(config).values["messages"]
    assert [m for m in parent if isinstance(m, ToolMessage)] == []
    assert [m for m in parent if isinstance(m, AIMessage) and m.tool_calls] == []


async def test_pipeline_research_stays_in_researcher_namespace_async() -> None:
    """Async twin: the searches live only in the researcher's namespace."""
    pipeline = make_pipeline()
    config = pipeline.config()
    await asyncio.wait_for(pipeline.graph.ainvoke(pipeline_input(), config), TIMEOUT)
    inner = await asubagent_state(pipeline, config, "researcher")
    assert summary(inner.values["messages"]) == RESEARCHER_TRACE
    parent = (await pipeline.graph.aget_state(config)).values["messages"]
    assert summary(parent) == [
        ("HumanMessage", "Analyse the Pura X View"),
        ("AIMessage", RESEARCH),
        ("AIMessage", REPORT),
    ]


def test_pipeline_handed_back_message_is_the_subagents_own() -> None:
    """The message handed back keeps the id and response_metadata it has in the sub-agent."""
    pipeline = make_pipeline()
    config = pipeline.config()
    result = pipeline.graph.invoke(pipeline_input(), config)
    inner_final = subagent_state(pipeline, config, "researcher").values["messages"][-1]
    handed = result["messages"][1]
    assert (handed.id, handed.response_metadata) == (inner_final.id, inner_final.response_metadata)
    assert handed.id.startswith("lc_run--")


def test_subagent_is_a_subgraph_of_the_parent() -> None:
    """langgraph sees each wrapped graph as its node's subgraph."""
    pipeline = make_pipeline()
    assert [name for name, _ in pipeline.graph.get_subgraphs()] == ["researcher", "writer"]
    assert dict(pipeline.graph.get_subgraphs())["researcher"] is pipeline.researcher


# -- the switches ---------------------------------------------------------------------------


def test_include_contents_appends_instruction_to_parent_messages() -> None:
    """With include_contents on, the writer sees the parent's messages, then its instruction."""
    pipeline = make_pipeline(writer={"include_contents": True})
    pipeline.graph.invoke(pipeline_input(), pipeline.config())
    assert [summary(p) for p in pipeline.writer_prompts] == [
        [
            ("HumanMessage", "Analyse the Pura X View"),
            ("AIMessage", RESEARCH),
            ("HumanMessage", WRITER_INSTRUCTION),
        ]
    ]


def test_include_contents_without_instruction_passes_parent_messages() -> None:
    """With include_contents on and no instruction, the writer sees just the parent's messages."""
    pipeline = make_pipeline(writer={"include_contents": True, "instruction": None})
    result = pipeline.graph.invoke(pipeline_input(), pipeline.config())
    assert [summary(p) for p in pipeline.writer_prompts] == [
        [("HumanMessage", "Analyse the Pura X View"), ("AIMessage", RESEARCH)]
    ]
    assert summary(result["messages"])[-1] == ("AIMessage", REPORT)


def test_include_contents_does_not_duplicate_parent_messages() -> None:
    """With include_contents and return_reasoning on, the parent's messages come back once."""
    pipeline = make_pipeline(writer={"include_contents": True, "return_reasoning": True})
    result = pipeline.graph.invoke(pipeline_input(), pipeline.config())
    assert summary(result["messages"]) == [
        ("HumanMessage", "Analyse the Pura X View"),
        ("AIMessage", RESEARCH),
        ("AIMessage", REPORT),
    ]


def test_return_reasoning_hands_back_every_produced_message() -> None:
    """With return_reasoning on, the parent gets all seven messages the researcher produced."""
    pipeline = make_pipeline(researcher={"return_reasoning": True})
    result = pipeline.graph.invoke(pipeline_input(), pipeline.config())
    assert summary(result["messages"]) == [
        ("HumanMessage", "Analyse the Pura X View"),
        *RESEARCHER_TRACE[1:],
        ("AIMessage", REPORT),
    ]


def test_return_reasoning_leaves_writer_prompt_unchanged() -> None:
    """Reasoning handed back to the parent still does not reach a writer without contents."""
    pipeline = make_pipeline(researcher={"return_reasoning": True})
    pipeline.graph.invoke(pipeline_input(), pipeline.config())
    assert [summary(p) for p in pipeline.writer_prompts] == [[("HumanMessage", WRITER_INSTRUCTION)]]


def test_instruction_callable_receives_parent_state() -> None:
    """A callable instruction is called once with the parent state and its text is the prompt."""
    received: list[dict[str, Any]] = []

    def instruction(state: Mapping[str, Any]) -> str:
        received.append(dict(state))
        return f"Write about {state['topic']} in one line."

    pipeline = make_pipeline(writer={"instruction": instruction})
    pipeline.graph.invoke(pipeline_input(), pipeline.config())
    assert [(r["topic"], r["research_data"], len(r["messages"])) for r in received] == [
        (TOPIC, RESEARCH, 2)
    ]
    assert [summary(p) for p in pipeline.writer_prompts] == [
        [("HumanMessage", f"Write about {TOPIC} in one line.")]
    ]


def test_instruction_callable_may_return_a_message() -> None:
    """A callable instruction may return a message, which is sent as is."""
    pipeline = make_pipeline(
        writer={"instruction": lambda state: SystemMessage(f"You report on {state['topic']}.")}
    )
    pipeline.graph.invoke(pipeline_input(), pipeline.config())
    assert [summary(p) for p in pipeline.writer_prompts] == [
        [("SystemMessage", f"You report on {TOPIC}.")]
    ]


def test_instruction_callable_with_wrong_return_type_fails() -> None:
    """A callable instruction returning neither text nor a message raises TypeError naming it."""
    pipeline = make_pipeline(writer={"instruction": lambda state: 42})
    with pytest.raises(TypeError, match=r"returned int; it must return the instruction text"):
        pipeline.graph.invoke(pipeline_input(), pipeline.config())


class Report(BaseModel):
    title: str
    score: int


def structured_pipeline(
    response_format: Any, model: FakeChatModel
) -> CompiledStateGraph[Any, Any, Any, Any]:
    agent = create_agent(model, response_format=response_format, name="rater")
    builder = StateGraph(PipelineState)
    builder.add_node(
        "rater", as_subagent(agent, instruction="Rate {topic}", output_key="research_data")
    )
    builder.add_edge(START, "rater")
    return builder.compile()


def test_output_key_receives_structured_response() -> None:
    """With a structured response, output_key receives the parsed object, not the text."""
    model = FakeChatModel(
        responses=['{"title": "Pura X View", "score": 8}'], profile={"structured_output": True}
    )
    graph = structured_pipeline(Report, model)
    result = graph.invoke({"messages": [], "topic": TOPIC})
    assert result["research_data"] == Report(title="Pura X View", score=8)
    assert summary(result["messages"]) == [("AIMessage", '{"title": "Pura X View", "score": 8}')]


def test_tool_strategy_hands_back_the_call_with_its_result() -> None:
    """An agent ending on a tool result hands back its final AI message and that tool message."""
    call = AIMessage(
        content="",
        tool_calls=[{"name": "Report", "args": {"title": "Pura X View", "score": 8}, "id": "r1"}],
    )
    graph = structured_pipeline(ToolStrategy(Report), FakeChatModel(responses=[call]))
    result = graph.invoke({"messages": [], "topic": TOPIC})
    assert [type(m).__name__ for m in result["messages"]] == ["AIMessage", "ToolMessage"]
    assert result["messages"][1].tool_call_id == result["messages"][0].tool_calls[0]["id"]
    assert result["research_data"] == Report(title="Pura X View", score=8)


def test_pydantic_parent_state_is_read_by_attribute() -> None:
    """A pydantic parent state works: the template reads its fields."""

    class ParentModel(BaseModel):
        messages: Annotated[list[AnyMessage], add_messages] = []
        topic: str = ""

    prompts: list[list[BaseMessage]] = []

    def write(messages: list[BaseMessage]) -> str:
        prompts.append(list(messages))
        return REPORT

    agent = create_agent(FakeChatModel(respond=write), name="writer")
    builder = StateGraph(ParentModel)
    add_subagent(builder, "writer", agent, instruction="Write on {topic}")
    builder.add_edge(START, "writer")
    parent_input: Any = {"topic": TOPIC}
    result = builder.compile().invoke(parent_input)
    assert [summary(p) for p in prompts] == [[("HumanMessage", f"Write on {TOPIC}")]]
    assert summary(result["messages"]) == [("AIMessage", REPORT)]


# -- interrupts -------------------------------------------------------------------------------


def test_interrupt_inside_subagent_surfaces_at_parent() -> None:
    """An interrupt raised by the researcher's tool surfaces in the parent's result and state."""
    pipeline = make_pipeline(queries=QUERIES[:1], ask_before_search=True)
    config = pipeline.config()
    result = pipeline.graph.invoke(pipeline_input(), config)
    assert [i.value for i in result["__interrupt__"]] == [{"approve_search": QUERIES[0]}]
    state = pipeline.graph.get_state(config, subgraphs=True)
    assert state.next == ("researcher",)
    (task,) = state.tasks
    assert isinstance(task.state, StateSnapshot)
    assert summary(task.state.values["messages"]) == RESEARCHER_TRACE[:2]
    assert pipeline.searches == []


def test_interrupt_inside_subagent_resumes() -> None:
    """Resuming runs the tool once with the resume value and finishes both sub-agents."""
    pipeline = make_pipeline(
        queries=QUERIES[:1], ask_before_search=True, researcher={"return_reasoning": True}
    )
    config = pipeline.config()
    pipeline.graph.invoke(pipeline_input(), config)
    result = pipeline.graph.invoke(Command(resume="approved"), config)
    assert pipeline.searches == [(QUERIES[0], "approved")]
    assert summary(result["messages"]) == [
        ("HumanMessage", "Analyse the Pura X View"),
        ("AIMessage", ""),
        ("ToolMessage", f"results for {QUERIES[0]}"),
        ("AIMessage", RESEARCH),
        ("AIMessage", REPORT),
    ]
    assert result["research_data"] == RESEARCH
    assert [summary(p) for p in pipeline.writer_prompts] == [[("HumanMessage", WRITER_INSTRUCTION)]]


async def test_interrupt_inside_subagent_resumes_async() -> None:
    """Async twin: the interrupt surfaces, and resuming finishes the pipeline once."""
    pipeline = make_pipeline(queries=QUERIES[:1], ask_before_search=True)
    config = pipeline.config()
    first = await asyncio.wait_for(pipeline.graph.ainvoke(pipeline_input(), config), TIMEOUT)
    assert [i.value for i in first["__interrupt__"]] == [{"approve_search": QUERIES[0]}]
    result = await asyncio.wait_for(
        pipeline.graph.ainvoke(Command(resume="approved"), config), TIMEOUT
    )
    assert pipeline.searches == [(QUERIES[0], "approved")]
    assert summary(result["messages"]) == [
        ("HumanMessage", "Analyse the Pura X View"),
        ("AIMessage", RESEARCH),
        ("AIMessage", REPORT),
    ]


# -- errors: raised while the parent graph is built --------------------------------------------


def model_agent() -> CompiledStateGraph[Any, Any, Any, Any]:
    return create_agent(FakeChatModel(responses=["ok"]), name="helper")


@pytest.mark.parametrize(
    ("graph", "type_name", "fix"),
    [
        (FakeChatModel(responses=["ok"]), "lg_visibility.testing.FakeChatModel", "create_agent"),
        (lambda state: state, "builtins.function", "create_agent"),
        (StateGraph(MessagesState), "langgraph.graph.state.StateGraph", "Compile it first"),
    ],
)
def test_as_subagent_rejects_non_graph(graph: Any, type_name: str, fix: str) -> None:
    """A non-graph raises TypeError naming its type and the fix."""
    with pytest.raises(TypeError, match=rf"got {type_name}\. .*{fix}"):
        as_subagent(graph, instruction="x")


def test_as_subagent_rejects_graph_without_messages() -> None:
    """A graph whose state has no 'messages' key is rejected, naming its keys."""

    class Counter(TypedDict):
        count: int

    builder = StateGraph(Counter)
    builder.add_node("inc", lambda s: {"count": s["count"] + 1})
    builder.add_edge(START, "inc")
    with pytest.raises(VisibilityConfigError, match=r"'messages' key .* has 'count'"):
        as_subagent(builder.compile(), instruction="x")


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("Research {topic", "not a valid str.format template"),
        ("Research {}", r"has the field \{\}"),
        ("Research {0}", r"has the field \{0\}"),
    ],
)
def test_as_subagent_rejects_malformed_template(template: str, problem: str) -> None:
    """A malformed instruction template is rejected, quoting it."""
    with pytest.raises(VisibilityConfigError, match=problem):
        as_subagent(model_agent(), instruction=template)


def test_as_subagent_requires_some_input() -> None:
    """include_contents off and no instruction is rejected: the sub-agent would get nothing."""
    with pytest.raises(VisibilityConfigError, match=r"no messages at all\. Pass an instruction"):
        as_subagent(model_agent())


def test_as_subagent_rejects_messages_as_output_key() -> None:
    """output_key='messages' is rejected because the hand-back already writes there."""
    with pytest.raises(VisibilityConfigError, match=r"output_key='messages'\) collides"):
        as_subagent(model_agent(), instruction="x", output_key="messages")


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"include_contents": "yes"}, r"include_contents=\.\.\.\) must be True or False"),
        ({"return_reasoning": 1}, r"return_reasoning=\.\.\.\) must be True or False"),
        ({"output_key": ""}, r"output_key=\.\.\.\) must be a non-empty state key"),
        ({"instruction": 3}, r"instruction=\.\.\.\) must be a template string or a callable"),
    ],
)
def test_as_subagent_rejects_option_of_wrong_type(options: dict[str, Any], problem: str) -> None:
    """An option of the wrong type raises TypeError naming the option."""
    with pytest.raises(TypeError, match=problem):
        as_subagent(model_agent(), **{"instruction": "x", **options})


def test_add_subagent_rejects_output_key_missing_from_parent_state() -> None:
    """add_subagent rejects an output_key the parent state lacks, before compile."""
    builder = StateGraph(PipelineState)
    with pytest.raises(
        VisibilityConfigError,
        match=r"output_key='summary' is not a key of the parent state PipelineState "
        r"\(keys: 'messages', 'topic', 'research_data'\)",
    ):
        add_subagent(builder, "researcher", model_agent(), instruction="x", output_key="summary")
    assert "researcher" not in builder.nodes


def test_add_subagent_rejects_template_key_missing_from_parent_state() -> None:
    """add_subagent rejects an instruction template naming a key the parent state lacks."""
    builder = StateGraph(PipelineState)
    with pytest.raises(
        VisibilityConfigError,
        match=r"instruction template 'Research \{subject\}' names 'subject', not a key",
    ):
        add_subagent(builder, "researcher", model_agent(), instruction="Research {subject}")
    assert "researcher" not in builder.nodes


def test_add_subagent_rejects_parent_without_messages() -> None:
    """add_subagent rejects a parent state with no 'messages' key to hand the answer back to."""

    class Plain(TypedDict):
        topic: str

    with pytest.raises(VisibilityConfigError, match=r"parent state Plain has no 'messages' key"):
        add_subagent(StateGraph(Plain), "researcher", model_agent(), instruction="{topic}")


def test_add_subagent_rejects_messages_without_reducer() -> None:
    """add_subagent rejects a parent 'messages' key without a reducer."""

    class NoReducer(TypedDict):
        messages: list[AnyMessage]

    with pytest.raises(VisibilityConfigError, match=r"'messages' in the parent state NoReducer"):
        add_subagent(StateGraph(NoReducer), "researcher", model_agent(), instruction="x")


def test_add_subagent_adds_a_subagent_node() -> None:
    """add_subagent adds a SubagentNode under the given name and returns the builder."""
    builder = StateGraph(PipelineState)
    returned = add_subagent(builder, "researcher", model_agent(), instruction="Research {topic}")
    assert returned is builder
    assert isinstance(builder.nodes["researcher"].runnable, SubagentNode)


def test_add_subagent_rejects_non_builder() -> None:
    """add_subagent given a compiled graph instead of a builder says to call it before compile."""
    compiled: Any = make_pipeline().graph
    with pytest.raises(TypeError, match=r"got CompiledStateGraph\. Call it before"):
        add_subagent(compiled, "researcher", model_agent(), instruction="x")


def test_add_node_template_key_without_value_fails_on_first_run() -> None:
    """Through plain add_node, a template key with no value fails on the first run, naming it."""
    builder = StateGraph(PipelineState)
    builder.add_node("writer", as_subagent(model_agent(), instruction="From {research_data}"))
    builder.add_edge(START, "writer")
    graph = builder.compile()
    with pytest.raises(
        VisibilityConfigError,
        match=r"sub-agent node 'writer': .* names 'research_data', which has no value",
    ):
        graph.invoke(cast(Any, {"messages": [], "topic": TOPIC}))


def test_add_subagent_rejects_input_schema() -> None:
    """add_subagent refuses input_schema, since its checks are made against the state schema."""
    with pytest.raises(TypeError, match=r"input_schema=\.\.\.\) is not supported"):
        add_subagent(
            StateGraph(PipelineState),
            "researcher",
            model_agent(),
            instruction="x",
            input_schema=PipelineState,
        )


def test_check_parent_runs_the_build_checks_for_add_node() -> None:
    """check_parent gives a node added with plain add_node the same checks as add_subagent."""
    builder = StateGraph(PipelineState)
    node = as_subagent(model_agent(), instruction="x", output_key="summary")
    with pytest.raises(VisibilityConfigError, match=r"output_key='summary' is not a key"):
        node.check_parent(builder, "researcher")


def test_subagent_node_is_hashable_by_identity() -> None:
    """Two nodes over the same graph are distinct, hashable objects."""
    graph = model_agent()
    first, second = as_subagent(graph, instruction="x"), as_subagent(graph, instruction="x")
    assert (first == first, first == second, len({first, second})) == (True, False, 2)


def test_subagent_with_memory_hands_back_only_this_runs_messages() -> None:
    """A sub-agent with checkpointer=True remembers earlier runs but hands back only this run."""
    prompts: list[list[str]] = []

    def answer(messages: list[BaseMessage]) -> str:
        prompts.append([str(m.text) for m in messages])
        return f"answer {len(prompts)}"

    agent = create_agent(FakeChatModel(respond=answer), name="helper", checkpointer=True)
    builder = StateGraph(MessagesState)
    add_subagent(builder, "helper", agent, instruction="Help.", return_reasoning=True)
    builder.add_edge(START, "helper")
    graph = builder.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "memory"}}
    graph.invoke({"messages": [HumanMessage("turn 1")]}, config)
    result = graph.invoke({"messages": [HumanMessage("turn 2")]}, config)
    assert prompts == [["Help."], ["Help.", "answer 1", "Help."]]
    assert summary(result["messages"]) == [
        ("HumanMessage", "turn 1"),
        ("AIMessage", "answer 1"),
        ("HumanMessage", "turn 2"),
        ("AIMessage", "answer 2"),
    ]
