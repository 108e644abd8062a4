"""OutputFilter on hand-made events: what it keeps of a payload."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Interrupt

from lg_visibility import VisibilityPolicy
from lg_visibility._output_filter import OutputFilter
from lg_visibility._run import RunState
from lg_visibility.chat._mapper import source_name


def _internal(text: str, id: str) -> AIMessage:
    return AIMessage(text, id=id, response_metadata={"visibility": "internal"})


def test_filter_keeps_interrupt_values_whole_in_values() -> None:
    """An interrupt's value is delivered as raised, even if it holds an internal message."""
    draft = _internal("DRAFT", "d1")
    interrupt = Interrupt(value={"draft": draft, "question": "ok?"}, id="i1")
    state = {"messages": [HumanMessage("hi", id="h1"), draft], "__interrupt__": (interrupt,)}
    ns, mode, out = OutputFilter(RunState(VisibilityPolicy()))(((), "values", state))
    assert (ns, mode) == ((), "values")
    assert out == {"messages": [HumanMessage("hi", id="h1")], "__interrupt__": (interrupt,)}
    assert out["__interrupt__"][0] is interrupt


def test_filter_redacts_values_without_touching_the_state() -> None:
    """Redaction builds new containers: the snapshot's own list keeps the internal message."""
    messages = [HumanMessage("hi", id="h1"), _internal("SECRET", "s1")]
    state = {"messages": messages}
    out = OutputFilter(RunState(VisibilityPolicy()))(((), "values", state))
    assert out == ((), "values", {"messages": [HumanMessage("hi", id="h1")]})
    assert [m.id for m in messages] == ["h1", "s1"]


def test_source_name_skips_langgraph_counter_segments() -> None:
    """A task's second subgraph namespace ('research:<id>', '1') is named after 'research'."""
    assert source_name(("main:a1", "research:b2", "1")) == "research"
    assert source_name(("1",)) == "main"
