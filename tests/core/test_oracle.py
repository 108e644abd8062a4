"""Oracle tests: for the same graph and input, the enforced stream equals the raw stream
minus internal events, in the same order, with nothing user-visible lost and every
interrupt kept — for every stream mode, v1 and v2, sync and async, subgraphs on and off."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph, add_messages
from langgraph.types import Command
from pydantic import BaseModel

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility.demo.graphs import (
    INCIDENT_POLICY,
    ORDER_POLICY,
    incident_builder,
    order_builder,
)
from lg_visibility.testing import FakeChatModel
from tests._support.cases import (
    INCIDENT,
    MODES,
    ORDER,
    ORDER_CLOSED,
    ORDER_CLOSED_POLICY,
    mode_id,
)
from tests._support.oracle import (
    Case,
    Recorder,
    all_text,
    canon,
    event_parts,
    expected_stream,
    interrupt_values,
    message_text,
)

INCIDENT_INPUTS = [{"messages": [HumanMessage("I want a refund for my order", id="u1")]}]
ORDER_INPUTS = [
    {"messages": [HumanMessage("Please order 2 widgets for ACME", id="u1")]},
    Command(resume={"phone": "555-0100"}),
    Command(resume="approve"),
]


class Verdict(BaseModel):
    label: str


def tool_strategy_builder() -> StateGraph[Any]:
    """An agent with ToolStrategy structured output, added as a node of an internal subgraph.

    Its structured output is a tool call (args carry TSARGS) answered by a ToolMessage
    ("Returning structured response: ... TSARGS ..."); both land in the shared messages.
    """
    call = {"name": "Verdict", "args": {"label": "TSARGS refund"}, "id": "call_verdict"}
    judge = create_agent(
        FakeChatModel(responses=[AIMessage(content="", tool_calls=[call])]),
        tools=[],
        response_format=ToolStrategy(Verdict),
        name="judge",
    )
    sub: StateGraph[Any] = StateGraph(MessagesState)
    sub.add_node("judge", judge)
    sub.add_edge(START, "judge")
    answer_model = FakeChatModel(responses=["TSVISIBLE We will refund you."])

    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [answer_model.invoke(state["messages"])]}

    root: StateGraph[Any] = StateGraph(MessagesState)
    root.add_node("classify", sub.compile())
    root.add_node("answer", answer)
    root.add_edge(START, "classify")
    root.add_edge("classify", "answer")
    return root


TOOL_STRATEGY = Case(
    internal_markers=("TSARGS",), visible_markers=("TSVISIBLE",), internal_prefixes=("classify",)
)
TOOL_STRATEGY_POLICY = VisibilityPolicy(internal=["classify"])


@dataclasses.dataclass
class UnsetFieldState:
    """A dataclass state whose `field(init=False)` no node sets: LangGraph's own handler
    cannot read its input (it logs that, raw), and the enforced graph must run as raw."""

    messages: Annotated[list[AnyMessage], add_messages] = dataclasses.field(default_factory=list)
    later: str = dataclasses.field(init=False)


class ConstructedState(BaseModel):
    """A Pydantic state; the nodes return it built with `model_construct`, without `later`,
    which LangGraph's handler then cannot read (it logs that, raw)."""

    messages: Annotated[list[AnyMessage], add_messages]
    later: str


def _returning_states(schema: Any, make: Callable[..., Any], marker: str) -> StateGraph[Any]:
    """An internal model (`plan`), then a visible one (`answer`), over `schema`, each
    returning the state object `make(messages=...)` builds, which LangGraph's handler
    cannot read at the node's end either. (No subgraph: a checkpointer cannot store such
    a state as a subgraph's input, raw or enforced.)"""
    plan_model = FakeChatModel(responses=[f"{marker}SECRET look up the order"])
    answer_model = FakeChatModel(responses=[f"{marker}VISIBLE Your refund is on its way."])
    root: StateGraph[Any] = StateGraph(schema)
    root.add_node("plan", lambda state: make(messages=[plan_model.invoke(state.messages)]))
    root.add_node("answer", lambda state: make(messages=[answer_model.invoke(state.messages)]))
    root.add_edge(START, "plan")
    root.add_edge("plan", "answer")
    return root


def unset_field_builder() -> StateGraph[Any]:
    return _returning_states(UnsetFieldState, UnsetFieldState, "DC")


def constructed_builder() -> StateGraph[Any]:
    return _returning_states(ConstructedState, ConstructedState.model_construct, "PC")


CONSTRUCTED = Case(
    internal_markers=("PCSECRET",), visible_markers=("PCVISIBLE",), internal_prefixes=("plan",)
)

UNSET_FIELD = Case(
    internal_markers=("DCSECRET",), visible_markers=("DCVISIBLE",), internal_prefixes=("plan",)
)

GRAPHS = {
    "constructed": (
        constructed_builder,
        CONSTRUCTED,
        VisibilityPolicy(internal=["plan"]),
        [{"messages": [HumanMessage("I want a refund for my order", id="u1")], "later": "x"}],
    ),
    "unset_field": (
        unset_field_builder,
        UNSET_FIELD,
        VisibilityPolicy(internal=["plan"]),
        INCIDENT_INPUTS,
    ),
    "incident": (incident_builder, INCIDENT, INCIDENT_POLICY, INCIDENT_INPUTS),
    "tool_strategy": (tool_strategy_builder, TOOL_STRATEGY, TOOL_STRATEGY_POLICY, INCIDENT_INPUTS),
    "order": (order_builder, ORDER, ORDER_POLICY, ORDER_INPUTS),
    "order_closed": (order_builder, ORDER_CLOSED, ORDER_CLOSED_POLICY, ORDER_INPUTS),
}


def _run(graph: Any, inputs: list[Any], *, sync: bool, callbacks: Any = None, **kw: Any) -> list:
    from tests._support.oracle import run_stream

    # Raw and enforced runs use their own checkpointers and the same thread id, so that
    # the metadata they stream is the same.
    items = run_stream(graph, inputs, thread_id="thread-1", sync=sync, callbacks=callbacks, **kw)
    mode = kw["stream_mode"] if kw["stream_mode"] is not None else graph.stream_mode
    return [event_parts(i, mode, kw["subgraphs"], kw["version"]) for i in items]


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("subgraphs", [True, False], ids=["subgraphs", "root-only"])
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize("stream_mode", MODES, ids=mode_id)
@pytest.mark.parametrize("name", list(GRAPHS))
def test_enforced_stream_equals_raw_minus_internal(
    name: str, stream_mode: Any, sync: bool, subgraphs: bool, version: str
) -> None:
    """The enforced stream is the raw stream minus internal events, nothing more or less."""
    build, case, policy, inputs = GRAPHS[name]
    raw_graph = build().compile(checkpointer=InMemorySaver())
    enforced_graph = with_visibility(build().compile(checkpointer=InMemorySaver()), policy)
    kw = {"stream_mode": stream_mode, "subgraphs": subgraphs, "version": version}
    raw = _run(raw_graph, inputs, sync=sync, **kw)
    recorder = Recorder()
    enforced = _run(enforced_graph, inputs, sync=sync, callbacks=[recorder], **kw)

    # 2. same events, same order, internal ones removed, snapshots redacted
    expected = expected_stream(case, raw)
    assert canon(enforced) == canon(expected)

    # 1. no internal content and no internal id anywhere in the output
    text = all_text(enforced)
    assert [m for m in case.internal_markers if m in text] == []
    internal_ids = {
        m.id
        for m in recorder.messages
        if m.id and any(marker in message_text(m) for marker in case.internal_markers)
    }
    assert internal_ids, "the recorder saw the run's internal messages"
    assert [i for i in internal_ids if i in text] == []

    # nothing user-visible lost: every visible marker the oracle keeps is shown
    expected_text = all_text(expected)
    assert [m for m in case.visible_markers if (m in expected_text) != (m in text)] == []
    if "messages" in _modes(stream_mode, raw_graph) and (subgraphs or name == "incident"):
        answers = [m for m in case.visible_markers if m.endswith("VISIBLE")]
        assert [m for m in answers if m not in text] == []

    # 3. every interrupt the raw graph surfaces in values or updates is surfaced there
    raw_interrupts = set(map(repr, interrupt_values(raw)))
    assert set(map(repr, interrupt_values(enforced))) == raw_interrupts
    if name.startswith("order") and {"values", "updates"} & set(_modes(stream_mode, raw_graph)):
        assert len(raw_interrupts) == 2, "the order flow raises two interrupts"


def _modes(stream_mode: Any, graph: Any) -> list[str]:
    mode = stream_mode if stream_mode is not None else graph.stream_mode
    return [mode] if isinstance(mode, str) else list(mode)


def test_oracle_detects_a_leak() -> None:
    """With a policy that marks nothing internal, the oracle comparison fails: it can fail."""
    build, case, _, inputs = GRAPHS["incident"]
    kw = {"stream_mode": ["messages", "values"], "subgraphs": True, "version": "v2"}
    raw = _run(build().compile(checkpointer=InMemorySaver()), inputs, sync=True, **kw)
    leaky = with_visibility(build().compile(checkpointer=InMemorySaver()), VisibilityPolicy())
    enforced = _run(leaky, inputs, sync=True, **kw)
    assert canon(enforced) != canon(expected_stream(case, raw))
    assert [m for m in case.internal_markers if m in all_text(enforced)] == list(
        case.internal_markers
    )


def _long_history() -> list[Any]:
    """40 earlier messages, one assistant message in five an internal one persisted by an
    earlier turn (tagged, and carrying an internal marker), then the user's question."""
    history: list[Any] = []
    for i in range(40):
        if i % 5 == 4:
            history.append(
                AIMessage(
                    f"RTRJSON earlier {i}",
                    id=f"old{i}",
                    response_metadata={"visibility": "internal"},
                )
            )
        elif i % 2:
            history.append(AIMessage(f"earlier answer {i}", id=f"old{i}"))
        else:
            history.append(HumanMessage(f"earlier question {i}", id=f"old{i}"))
    return [*history, HumanMessage("I want a refund for my order", id="u1")]


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("subgraphs", [True, False], ids=["subgraphs", "root-only"])
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize("stream_mode", [["messages", "values"], "values", "debug"], ids=mode_id)
def test_long_history_snapshots_equal_raw_minus_internal(
    stream_mode: Any, sync: bool, subgraphs: bool, version: str
) -> None:
    """With a history long enough for the filter's list memo (each snapshot judged against
    the last), every snapshot is the raw one minus internal messages, in the same order."""
    from lg_visibility._output_filter import _MEMO_MIN

    inputs = [{"messages": _long_history()}]
    assert len(inputs[0]["messages"]) > _MEMO_MIN
    raw_graph = incident_builder().compile(checkpointer=InMemorySaver())
    enforced_graph = with_visibility(
        incident_builder().compile(checkpointer=InMemorySaver()), INCIDENT_POLICY
    )
    kw = {"stream_mode": stream_mode, "subgraphs": subgraphs, "version": version}
    raw = _run(raw_graph, inputs, sync=sync, **kw)
    enforced = _run(enforced_graph, inputs, sync=sync, **kw)
    expected = expected_stream(INCIDENT, raw)
    assert canon(enforced) == canon(expected)
    text = all_text(enforced)
    assert [m for m in INCIDENT.internal_markers if m in text] == []
    assert "earlier answer 37" in text and "earlier question 38" in text
