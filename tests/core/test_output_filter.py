"""OutputFilter on hand-made events: what it keeps of a payload."""

from __future__ import annotations

import random
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Interrupt, Overwrite

from lg_visibility import VisibilityPolicy
from lg_visibility._output_filter import _MEMO_MIN, DROP, HeldPut, OutputFilter, _only_messages
from lg_visibility._run import RunState
from lg_visibility._state import _StateFilter
from lg_visibility.chat._mapper import source_name

SECRET = "SECRET"


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


def _long_lists(
    seed: int, *, dict_messages: bool
) -> list[tuple[list[Any] | tuple[Any, ...], set[str], set[int]]]:
    """Random state lists, short and long (the all-message fast path starts at _MEMO_MIN),
    a quarter of them with nothing internal: messages tagged internal, messages whose id the
    run noted internal, untagged and visible-tagged ones, and in half of the lists now and
    then an item that is not a message (a list holding a visible message; with
    `dict_messages`, a message in its dict form, as the LangGraph server's checkpoint reader
    makes it, tagged or not).
    Returns (items, the run's internal ids, the positions whose marker says internal: the
    ground truth)."""
    rng = random.Random(seed)
    out = []
    for _ in range(40):
        n = rng.choice([0, 1, 5, _MEMO_MIN - 1, _MEMO_MIN, _MEMO_MIN + 17, 300])
        clean = rng.random() < 0.25
        mixed = rng.random() < 0.5
        items: list[Any] = []
        ids: set[str] = set()
        secret: set[int] = set()
        for i in range(n):
            roll = rng.random()
            if roll < 0.08 and not clean:
                items.append(_internal(f"{SECRET} tagged {i}", f"t{i}"))
                secret.add(i)
            elif roll < 0.14 and not clean:
                items.append(AIMessage(f"{SECRET} by id {i}", id=f"n{i}"))
                ids.add(f"n{i}")
                secret.add(i)
            elif roll < 0.15 and mixed:
                items.append([HumanMessage(f"nested {i}", id=f"l{i}")])  # not a message
            elif roll < 0.16 and mixed and dict_messages:
                hidden = not clean and rng.random() < 0.5
                message = _internal(f"{SECRET} dict {i}", f"d{i}") if hidden else None
                items.append((message or AIMessage(f"visible dict {i}", id=f"d{i}")).model_dump())
                if hidden:
                    secret.add(i)
            elif roll < 0.3:
                tag = {"visibility": "user_visible"}
                items.append(AIMessage(f"visible {i}", id=f"u{i}", response_metadata=tag))
            else:
                items.append(HumanMessage(f"visible {i}", id=f"h{i}"))
        out.append((tuple(items) if rng.random() < 0.2 else items, ids, secret))
    return out


def _list_problems(redact: Any, seed: int, *, state_reads: bool = False) -> list[str]:
    """What `redact(filter, items)` gets wrong on `_long_lists(seed)`: the output filter's,
    or (`state_reads`) the state reads' filter, which also knows dict-form messages."""
    problems = []
    fast = 0
    for items, ids, secret in _long_lists(seed, dict_messages=state_reads):
        run = RunState(VisibilityPolicy())
        run.internal_ids.update(ids)
        got = redact(_StateFilter(run) if state_reads else OutputFilter(run), items)
        want = [x for i, x in enumerate(items) if i not in secret]
        fast += len(items) >= _MEMO_MIN and not secret and _only_messages(items)
        if not secret:
            if got is not items:
                problems.append(f"{len(items)} items, none internal: not returned as is")
        elif type(got) is not type(items) or len(got) != len(want):
            problems.append(f"{len(items)} items: {len(got)} kept, {len(want)} expected")
        elif any(a is not b for a, b in zip(got, want, strict=True)):
            problems.append(f"{len(items)} items: other objects kept, or reordered")
    assert fast, "no long list without internal messages: the oracle would miss a copy"
    return problems


@pytest.mark.parametrize("state_reads", [False, True], ids=["stream", "state_reads"])
@pytest.mark.parametrize("seed", range(5))
def test_a_state_list_loses_exactly_its_internal_messages(seed: int, state_reads: bool) -> None:
    """Long lists take the all-message path, short or mixed ones the item loop: either way
    exactly the messages whose marker says internal go (by tag or by the run's noted id;
    for state reads, dict-form messages by tag too), the rest stay the same objects in
    order, and a list with nothing internal comes back as is. Ground truth: the markers,
    not the tags."""
    problems = _list_problems(
        lambda flt, items: flt._redact_items(items, 0), seed, state_reads=state_reads
    )
    assert problems == []


def test_the_state_list_oracle_catches_a_filter_that_forgets_noted_ids() -> None:
    """Control: a filter that judges by tag alone leaks the messages noted by id."""

    def by_tag_only(flt: OutputFilter, items: Any) -> Any:
        flt._run.internal_ids.clear()
        return flt._redact_items(items, 0)

    assert _list_problems(by_tag_only, 0)


def _put_then_appended(mode: str, payload: Any, history: Any) -> Any:
    """What `HeldPut` hands on for `payload`, read after `history` had a message appended in
    place (as a node does to its input's list after the event was put)."""
    got: list[Any] = []
    HeldPut(got.append)(((), mode, payload))
    history.append(AIMessage(SECRET, id="s1"))
    assert len(got) == 1 and got[0][:2] == ((), mode)
    return got[0][2]


@pytest.mark.parametrize(
    "mode, make",
    [
        ("values", lambda h: {"messages": h, "n": 1}),
        ("values", lambda h: h),
        ("values", lambda h: {"ctx": {"log": h}}),
        ("checkpoints", lambda h: {"values": {"ctx": {"log": h}}}),
        ("checkpoints", lambda h: {"values": {"messages": h}, "next": ["a"]}),
        ("tasks", lambda h: {"id": "t", "name": "a", "input": {"messages": h}, "triggers": ()}),
        ("tasks", lambda h: {"id": "t", "name": "a", "input": ((h,), {"m": h}), "triggers": ()}),
        ("tasks", lambda h: {"id": "t", "name": "a", "result": {"messages": h}}),
        ("tasks", lambda h: {"id": "t", "name": "a", "result": {"messages": Overwrite(h)}}),
        ("updates", lambda h: {"a": {"messages": h}}),
        ("updates", lambda h: {"a": {"messages": Overwrite(h)}}),
        ("debug", lambda h: {"type": "checkpoint", "payload": {"values": {"messages": h}}}),
        ("debug", lambda h: {"type": "task", "payload": {"id": "t", "input": {"messages": h}}}),
        ("debug", lambda h: {"type": "task_result", "payload": {"result": {"messages": h}}}),
    ],
)
def test_a_held_put_hands_on_an_event_as_it_was_put(mode: str, make: Any) -> None:
    """Snapshots, task starts (a `@task`'s `(args, kwargs)` too), task results and
    updates (a plain list key's, an `Overwrite`'s): what LangGraph made shows a later
    in-place append, what `HeldPut` handed on does not."""
    history = [HumanMessage("hi", id="h1")]
    payload = make(history)
    before = repr(payload)
    held = _put_then_appended(mode, payload, history)
    assert SECRET in repr(payload)
    assert repr(held) == before


def test_a_held_put_copies_a_model_or_dataclass_state_and_any_mutable_sequence() -> None:
    """A Pydantic model keeps the fields it had set (`model_dump(exclude_unset=True)`)."""
    import collections
    import dataclasses

    import pydantic

    class Model(pydantic.BaseModel):
        messages: list[Any] = []
        n: int = 1

    @dataclasses.dataclass
    class Data:
        messages: Any
        n: int = 1

    for state in (
        Model(messages=[HumanMessage("hi", id="h1")]),
        Data(messages=[HumanMessage("hi", id="h1")]),
        {"messages": collections.deque([HumanMessage("hi", id="h1")])},
    ):
        history = state["messages"] if isinstance(state, dict) else state.messages
        payload = {"id": "t", "name": "a", "input": state, "triggers": ()}
        held = _put_then_appended("tasks", payload, history)
        assert SECRET not in repr(held), type(state)
        assert SECRET in repr(state)
        if isinstance(state, Model):
            assert held["input"].model_fields_set == {"messages"}

    class History(list[Any]):
        pass

    history = History([HumanMessage("hi", id="h1")])
    held = _put_then_appended("values", {"ctx": {"log": history}}, history)
    assert type(held["ctx"]["log"]) is History and SECRET not in repr(held)


def test_a_held_put_passes_list_free_events_and_messages_as_they_are() -> None:
    """An event holding no list, and any message (its own lists are its own), are handed
    on as the same objects: nothing copied."""
    message = AIMessage("hi", id="a1", tool_calls=[{"name": "t", "args": {}, "id": "c1"}])
    for mode, payload in (
        ("updates", {"a": {"messages": message, "n": 1}}),
        ("tasks", {"id": "t", "name": "a", "result": {"messages": message}}),
        ("messages", ([message], {})),
        ("values", {"n": 1, "s": "x", "m": message}),
        ("custom", [message]),
    ):
        got: list[Any] = []
        HeldPut(got.append)(((), mode, payload))
        assert got[0][2] is payload, mode


def test_filter_gives_a_state_objects_internal_key_its_default_or_drops_it() -> None:
    """A Pydantic or dataclass state (a schema of the graph) in a task's input: an internal
    key holds the field's default; where the field has none, the object is dropped (fail
    closed)."""
    import dataclasses

    from pydantic import BaseModel, Field

    class Defaulted(BaseModel):
        notes: list[str] = Field(default_factory=list)
        topic: str = "t"

    class Required(BaseModel):
        notes: str

    @dataclasses.dataclass
    class Plain:
        notes: str = ""
        topic: str = "t"

    @dataclasses.dataclass
    class PlainRequired:
        notes: str

    policy = VisibilityPolicy(internal_keys=["notes"])
    states = frozenset({Defaulted, Required, Plain, PlainRequired})
    flt = OutputFilter(RunState(policy, state_types=states))
    task = {"id": "1", "name": "answer", "input": None, "triggers": ()}

    def task_input(state: Any) -> Any:
        out = flt(((), "tasks", {**task, "input": state}))
        return out[2].get("input", "dropped")

    assert task_input(Defaulted(notes=[SECRET], topic="x")) == Defaulted(topic="x")
    assert task_input(Plain(notes=SECRET, topic="x")) == Plain(topic="x")
    assert task_input(Required(notes=SECRET)) == "dropped"
    assert task_input(PlainRequired(notes=SECRET)) == "dropped"
    # Control: without internal keys the state passes as it is.
    state = Plain(notes=SECRET)
    plain = OutputFilter(RunState(VisibilityPolicy()))
    assert plain(((), "tasks", {**task, "input": state}))[2]["input"] is state
    # A task's input is a state whatever its type; elsewhere an object that is no state
    # schema of the graph (a model a visible key holds) keeps a field named like an
    # internal key: it is its own.
    other = OutputFilter(RunState(policy))
    assert task_input(Defaulted(notes=[SECRET], topic="x")) == Defaulted(topic="x")
    assert "input" not in other(((), "tasks", {**task, "input": Required(notes=SECRET)}))[2]
    answer = Required(notes="VISIBLE")
    assert other(((), "values", {"result": answer}))[2]["result"] is answer


def test_filter_keeps_an_internal_tasks_interrupts_and_nothing_else_of_it() -> None:
    """A task result carrying interrupts: an internal task's is delivered with its result
    emptied (LangGraph's server reads a thread's interrupts from these events); a visible
    task's interrupts are kept as raised, even with an internal key named like a field."""
    interrupt = Interrupt(value={"question": "ok?", "value": "v"}, id="i1")
    run = RunState(VisibilityPolicy(internal=["think"], internal_keys=["value"]))
    flt = OutputFilter(run)
    result = {"id": "1", "name": "think", "error": None, "result": {"notes": SECRET}}
    internal = flt(((), "tasks", {**result, "interrupts": (interrupt,)}))
    assert internal[2] == {**result, "result": {}, "interrupts": (interrupt,)}
    debug = {"type": "task_result", "step": 1, "payload": {**result, "result": [("notes", 1)]}}
    debug["payload"]["interrupts"] = [interrupt]
    assert flt(((), "debug", debug))[2]["payload"]["result"] == []
    assert flt(((), "tasks", result)) is DROP  # no interrupt: dropped whole, as before
    as_dicts = [{"value": {"question": "ok?"}, "id": "i1"}]
    visible = {**result, "name": "ask", "result": {}, "interrupts": as_dicts}
    assert flt(((), "tasks", visible))[2]["interrupts"] is as_dicts
