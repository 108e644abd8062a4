"""The output filter's list memo: a run's long message lists are judged against the last one.

The oracle: over random sequences of the changes a run's state goes through between two
snapshots (messages added, replaced by id, removed, re-tagged internal by a later node, a
reducer extending the list in place, a consumer changing what it was handed), a run's
filter (with the memo) returns, for every snapshot, exactly what a fresh filter (without
it) returns for the same list. Ground truth for "internal" is the message's own marker in
its text, checked against the fresh filter too. A control shows the oracle catches a memo
that forgets to re-check kept messages whose id became internal.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from lg_visibility import VisibilityPolicy
from lg_visibility._output_filter import _MEMO_MIN, OutputFilter, _ListMemo
from lg_visibility._run import RunState

SECRET = "SECRET"


def _visible(i: int) -> BaseMessage:
    cls = HumanMessage if i % 2 else AIMessage
    return cls(f"visible {i}", id=f"v{i}")


def _internal(i: int) -> AIMessage:
    return AIMessage(f"{SECRET} {i}", id=f"s{i}", response_metadata={"visibility": "internal"})


def _fresh(run: RunState, messages: list[Any]) -> Any:
    """What a filter with no memory of earlier lists makes of `messages`."""
    return OutputFilter(run)._redact_items(messages, 0)


def _texts(messages: list[Any]) -> list[str]:
    return [str(m.content) for m in messages]


def _random_run(seed: int, flt: OutputFilter, run: RunState) -> list[str]:
    """Random state changes, a snapshot after each; returns a description of any mismatch."""
    rng = random.Random(seed)
    state: list[Any] = [
        _internal(i) if rng.random() < 0.1 else _visible(i) for i in range(_MEMO_MIN + 8)
    ]
    counter = len(state)
    problems: list[str] = []
    for step in range(12):
        change = rng.choice(
            ["add", "add", "replace", "remove", "retag", "inplace", "mutate", "idless", "ids"]
        )
        if change == "idless":  # a message without an id (an operator.add channel, Overwrite)
            state = [*state, HumanMessage(f"visible idless {counter}")]
            counter += 1
        elif change == "ids":  # add_messages gives every message without one an id, in place
            for message in state:
                if message.id is None:
                    message.id = f"assigned{counter}"
                    counter += 1
        elif change == "add":
            new = [
                _internal(counter + k) if rng.random() < 0.3 else _visible(counter + k)
                for k in range(rng.randint(1, 3))
            ]
            counter += len(new)
            state = [*state, *new]
        elif change == "replace":  # add_messages' update by id: a new object at the place
            i = rng.randrange(len(state))
            old = state[i]
            cls = AIMessage if rng.random() < 0.5 else HumanMessage
            meta = {"visibility": "internal"} if rng.random() < 0.5 else {}
            # An id the run noted internal stays internal, whatever now carries it.
            text = f"{SECRET} replaced" if meta or old.id in run.internal_ids else "visible"
            state = [*state[:i], cls(text, id=old.id, response_metadata=meta), *state[i + 1 :]]
        elif change == "remove":
            i = rng.randrange(len(state))
            state = state[:i] + state[i + 1 :]
        elif change == "retag":
            # A later node decided internal returns an untagged message it did not receive:
            # the handler tags that very object and notes its id.
            i = rng.randrange(len(state))
            message = state[i]
            if "visibility" not in message.response_metadata and message.id is not None:
                message.response_metadata["visibility"] = "internal"
                message.content = f"{SECRET} retagged"
                run.note_internal(message)
        elif change == "inplace":  # a reducer that extends the state's own list
            state.append(_internal(counter) if rng.random() < 0.5 else _visible(counter))
            counter += 1
        out = flt._redact_sequence(state, 0)
        expected = _fresh(run, state)
        if out != expected:
            problems.append(f"seed {seed} step {step} ({change}): memo and fresh filter differ")
        if any(SECRET in text for text in _texts(out)):
            problems.append(f"seed {seed} step {step} ({change}): an internal message left")
        if len(out) != sum(SECRET not in t for t in _texts(state)):
            problems.append(f"seed {seed} step {step} ({change}): a visible message lost")
        if change == "mutate" and isinstance(out, list) and out is not state and out:
            out.pop()  # what the consumer does to the list it was handed changes nothing
    return problems


def test_memo_equals_a_fresh_filter_on_random_state_changes() -> None:
    """200 random runs of 12 snapshots: with the memo, every snapshot is what a fresh
    filter makes of it, no internal message leaves and no visible one is lost; the memo
    was used (it followed lists, not only started them)."""
    followed = 0
    original = _ListMemo.follow

    def counting(self: _ListMemo, value: list[Any], run: RunState) -> Any:
        nonlocal followed
        out = original(self, value, run)
        followed += out is not None
        return out

    problems: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_ListMemo, "follow", counting)
        for seed in range(200):
            run = RunState(VisibilityPolicy())
            problems += _random_run(seed, OutputFilter(run), run)
    assert problems == []
    assert followed > 500


def test_oracle_catches_a_memo_that_ignores_new_internal_ids() -> None:
    """Control: a memo that never re-checks kept messages (as if no id became internal)
    lets a re-tagged message through, and the oracle says so."""

    class Forgetful(list):  # type: ignore[type-arg]
        """An internal log that always looks empty to the memo's length check."""

        def __len__(self) -> int:
            return 0

    problems: list[str] = []
    for seed in range(200):
        run = RunState(VisibilityPolicy())
        run.internal_log = Forgetful()
        problems += _random_run(seed, OutputFilter(run), run)
    assert any("differ" in p for p in problems)
    assert any("internal message left" in p for p in problems)


def test_memo_judges_only_lists_of_messages_and_only_in_a_run() -> None:
    """A long list with anything but messages is judged item by item (no memo); a state
    read's long-lived filter keeps no memo."""
    from lg_visibility._state import StateRedactor

    run = RunState(VisibilityPolicy())
    flt = OutputFilter(run)
    mixed: list[Any] = [_visible(i) for i in range(_MEMO_MIN)] + [{"messages": [_internal(1)]}]
    assert flt._redact_sequence(mixed, 0) == [*mixed[:-1], {"messages": []}]
    assert flt._memos == {}
    only = [_visible(i) for i in range(_MEMO_MIN)] + [_internal(2)]
    assert flt._redact_sequence(only, 0) == only[:-1]
    assert len(flt._memos or {}) == 1
    redactor = StateRedactor(VisibilityPolicy(), {})
    assert redactor._filter._memos is None


def test_oracle_catches_a_memo_that_keeps_the_state_list_itself() -> None:
    """Control: a memo that keeps the state's own list instead of a copy misses what a
    reducer appends in place, and the oracle says so."""
    original_init, original_follow = _ListMemo.__init__, _ListMemo.follow

    def init(self: _ListMemo, value: list[Any], ids: list[Any], drops: list[int], log: int) -> None:
        original_init(self, value, ids, drops, log)
        self._seen = value

    def follow(self: _ListMemo, value: list[Any], run: RunState) -> Any:
        out = original_follow(self, value, run)
        if out is not None:
            self._seen = value
        return out

    problems: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_ListMemo, "__init__", init)
        mp.setattr(_ListMemo, "follow", follow)
        for seed in range(200):
            run = RunState(VisibilityPolicy())
            problems += _random_run(seed, OutputFilter(run), run)
    assert any("(inplace): an internal message left" in p for p in problems)


def test_memo_sees_ids_given_in_place_after_it_started() -> None:
    """A list whose messages have no id yet (add_messages gives them one in place later)
    is never memoised: when such a message's new id becomes internal, it is dropped."""
    from langgraph.graph.message import add_messages

    run = RunState(VisibilityPolicy())
    flt = OutputFilter(run)
    state: list[Any] = [HumanMessage(f"h{i}") for i in range(_MEMO_MIN + 8)]
    assert flt._redact_sequence(state, 0) == state
    run.note_internal(AIMessage("unrelated", id="x1"))
    assert flt._redact_sequence(state, 0) == state
    state = add_messages(state, [AIMessage("next", id="a1")])  # ids given in place
    run.note_internal(AIMessage(f"{SECRET} rewrite", id=state[3].id))
    out = flt._redact_sequence(state, 0)
    assert out == _fresh(run, state)
    assert state[3] not in out and len(out) == len(state) - 1


def test_memo_checks_an_id_noted_while_it_judged() -> None:
    """Sync `stream` notes internal ids in node threads while snapshots are judged: an id
    noted between the memo's reads of the log is still checked at the next snapshot."""
    state: list[Any] = [HumanMessage(f"h{i}", id=f"h{i}") for i in range(_MEMO_MIN + 8)]
    run = RunState(VisibilityPolicy())
    other_thread: list[AIMessage] = []

    class Log(list):  # type: ignore[type-arg]
        """A log on which another thread notes an id while the memo slices it."""

        def __getitem__(self, key: Any) -> Any:
            out = list.__getitem__(self, key)
            if isinstance(key, slice) and other_thread:
                run.note_internal(other_thread.pop())
            return out

    run.internal_log = Log()
    flt = OutputFilter(run)
    flt._redact_sequence(state, 0)
    run.note_internal(AIMessage("unrelated", id="z"))
    other_thread.append(AIMessage(SECRET, id="h5"))
    flt._redact_sequence(state, 0)  # h5 is noted while this snapshot is judged
    out = flt._redact_sequence(state, 0)
    assert out == _fresh(run, state)
    assert [m.id for m in out if m.id == "h5"] == []
