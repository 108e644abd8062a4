"""What a node produced, told from what it received by pointer (`_compat.new_messages`).

The oracle: over random node behaviours on a random dict state (return it, return an
`add_messages`-like new list of the old objects plus new ones, append, replace, insert or
remove in place, return a message or another key), every message that
`iter_messages(output)` finds and `new_messages` leaves out is an object the node
received at the same key when it started, and what it keeps comes in the same order.
Ground truth is the node's record of what it made, never our own bookkeeping. A control
shows the oracle fails on a skip that compares with the live input (which the node may
have changed in place) instead of what the node received.

End to end: an internal node that appends a message without an id to its input's list in
place and returns the list still has that message judged internal.
"""

from __future__ import annotations

import asyncio
import dataclasses
import operator
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Annotated, Any, TypedDict

import pydantic
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph, add_messages
from langgraph.types import Command, Send

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility._compat import (
    added_in_place,
    iter_messages,
    last_message,
    new_messages,
    received_state,
)
from tests._support.core import State, pytestmark, thread, user_input

__all__ = ["pytestmark"]


def _history(rng: random.Random, n: int) -> list[BaseMessage]:
    return [
        (HumanMessage if rng.random() < 0.5 else AIMessage)(
            f"old {i}", id=None if rng.random() < 0.2 else f"old-{i}"
        )
        for i in range(n)
    ]


def _node(rng: random.Random, state: dict[str, Any], made: list[BaseMessage]) -> Any:
    """A random node behaviour on `state`; every message it builds goes into `made`."""

    def new() -> BaseMessage:
        made.append(
            AIMessage(f"new {len(made)}", id=None if rng.random() < 0.5 else f"n{len(made)}")
        )
        return made[-1]

    messages = state["messages"]
    kind = rng.choice(
        ["same", "added", "append", "replace", "insert", "remove", "message", "other", "list"]
    )
    if kind == "same":
        return state
    if kind == "added":
        return {"messages": [*messages, new(), new()]}
    if kind == "append":
        messages.append(new())
        return rng.choice([state, {"messages": messages}])
    if kind == "replace" and messages:
        messages[rng.randrange(len(messages))] = new()
        return {"messages": messages}
    if kind == "insert":
        messages.insert(rng.randrange(len(messages) + 1), new())
        return state
    if kind == "remove" and messages:
        del messages[rng.randrange(len(messages))]
        return {"messages": [*messages, new()]}
    if kind == "message":
        return {"last": rng.choice([state["last"], new()])}
    if kind == "other":
        return {"notes": [new()], "messages": messages}
    return [new(), *messages[:2]]  # a list, not a dict state: everything is judged


def _check(
    skipper: Callable[[Any, Any], Iterable[BaseMessage]], seed: int
) -> list[str]:  # problems found
    rng = random.Random(seed)
    problems = []
    for case in range(60):
        state = {
            "messages": _history(rng, rng.randrange(0, 50)),
            "last": AIMessage("last", id="last"),
            "steps": 3,
        }
        at_start = {k: (list(v) if isinstance(v, list) else v) for k, v in state.items()}
        received = received_state(state)
        made: list[BaseMessage] = []
        output = _node(rng, state, made)
        kept = list(skipper(output, received))
        # Where each message of the output is: (key, message) for a dict state, else (None, m).
        if type(output) is dict:
            every = [(k, m) for k, v in output.items() for m in iter_messages({k: v})]
        else:
            every = [(None, m) for m in iter_messages(output)]
        rest = iter(every)
        for m in kept:  # in the order iter_messages finds them
            if not any(x is m for _, x in rest):
                problems.append(f"{seed}/{case}: kept {m.content!r} out of order")
        kept_ids = {id(m) for m in kept}
        for key, m in every:
            if id(m) in kept_ids:
                continue
            there = at_start.get(key) if key is not None else None
            received_there = there is m or (isinstance(there, list) and any(x is m for x in there))
            if any(m is x for x in made) or not received_there:
                problems.append(
                    f"{seed}/{case}: skipped {m.content!r} at {key!r}, not received there"
                )
    return problems


@pytest.mark.parametrize("seed", range(5))
def test_what_is_skipped_was_received_where_it_is(seed: int) -> None:
    assert _check(new_messages, seed) == []


def _live_skip(value: Any, received: Any) -> Iterator[BaseMessage]:
    """A leaky skip: it trusts the input's list as it is now, not as the node received it."""
    if received is None or type(value) is not dict:
        yield from iter_messages(value)
        return
    for key, item in value.items():
        before = received.get(key)
        live = _LIVE.get(key)
        if type(item) is list and type(live) is list:
            same = list(map(operator.is_, item, live))
            item = item[same.index(False) if False in same else len(same) :]
        elif item is before:
            continue
        yield from iter_messages({key: item})


_LIVE: dict[str, Any] = {}


def test_the_oracle_fails_a_skip_that_trusts_the_live_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Control: comparing with the input's list as the node left it skips what it appended
    or inserted in place."""
    import tests.core.test_new_messages as me

    original = me._node

    def node(rng: random.Random, state: dict[str, Any], made: list[BaseMessage]) -> Any:
        _LIVE.clear()
        _LIVE.update(state)  # the live objects, which the node may change in place
        return original(rng, state, made)

    monkeypatch.setattr(me, "_node", node)
    assert any(_check(_live_skip, seed) for seed in range(5))


def test_a_list_not_changed_or_extended_is_skipped_without_reading_a_message() -> None:
    """The skip compares pointers: a history of objects whose every attribute read fails
    is skipped; only the new message is read."""

    class Unreadable(AIMessage):
        def __getattribute__(self, name: str) -> Any:
            if name in ("content", "response_metadata", "id"):
                raise AssertionError(f"read {name}")
            return super().__getattribute__(name)

    history = [Unreadable(f"old {i}", id=f"o{i}") for i in range(100)]
    state = {"messages": history, "steps": 1}
    received = received_state(state)
    new = AIMessage("new", id="n")
    assert list(new_messages(state, received)) == []
    assert list(new_messages({"messages": [*history, new]}, received)) == [new]
    assert new_messages({"messages": [new, *history]}, received)[0] is new


def _in_place_builder() -> StateGraph[Any]:
    def router(state: State) -> dict[str, Any]:
        # Appends to its input's own list, in place, a message without an id, and returns it.
        state["messages"].append(AIMessage("ROUTERSECRET route=refund"))
        return {"messages": state["messages"]}

    def answer(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage("Your refund is on its way.", id="answer")]}

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("router", router)
    builder.add_node("answer", answer)
    builder.add_edge(START, "router")
    builder.add_edge("router", "answer")
    return builder


@pytest.mark.parametrize("sync", [True, False])
@pytest.mark.parametrize("stream_mode", ["values", "updates"])
def test_an_internal_node_appending_in_place_does_not_leak(sync: bool, stream_mode: str) -> None:
    """What leaves, written out as each item arrives (as a server sends it), and the state
    read afterwards never hold the message; the raw state does (tagged internal).

    (Written out on arrival: a values snapshot delivered before the node ran is LangGraph's
    own list, which the node then changes in place, in the raw stream too.)"""
    graph = with_visibility(
        _in_place_builder().compile(checkpointer=InMemorySaver()),
        VisibilityPolicy(internal=["router"]),
    )
    if sync:
        sent = [
            repr(item) for item in graph.stream(user_input(), thread(), stream_mode=stream_mode)
        ]
    else:

        async def collect() -> list[str]:
            stream = graph.astream(user_input(), thread(), stream_mode=stream_mode)
            return [repr(item) async for item in stream]

        sent = asyncio.run(asyncio.wait_for(collect(), 30))
    assert "ROUTERSECRET" not in "".join(sent)
    assert "refund is on its way" in "".join(sent)
    assert "ROUTERSECRET" not in repr(graph.get_state(thread()).values)
    assert "ROUTERSECRET" in repr(graph.raw_state.get_state(thread()).values)


def test_added_in_place_is_what_the_input_did_not_hold_as_it_arrived() -> None:
    """`added_in_place`, the pass over a node's input at its end: an object put into a
    sequence that the input held nowhere as it arrived counts; what the node trims,
    reorders, moves from another key or rebinds does not, nor a key rebound to something
    that is not a sequence (the node's own dict, not the state)."""
    history = [HumanMessage(f"m{i}") for i in range(3)]  # no ids: told apart by pointer
    other = [AIMessage("kept under another key")]
    state: dict[str, Any] = {"messages": history, "other": other, "steps": 1}
    arrived = received_state(state)
    assert arrived is not None
    new = AIMessage("new")
    assert added_in_place(state, arrived) == []
    assert added_in_place({**state, "steps": 2}, arrived) == []
    for unchanged in (
        list(history),  # a copy, the same items
        history[:2],  # trimmed
        [history[1], history[0], history[2]],  # reordered
        [*history, other[0]],  # moved from another key
        None,
        "not a sequence of messages",
    ):
        assert added_in_place({**state, "messages": unchanged}, arrived) == [], unchanged
    for changed in ([*history, new], [new, *history], [history[0], new, history[2]]):
        assert added_in_place({**state, "messages": changed}, arrived) == [new]
    history.insert(1, new)
    assert added_in_place(state, arrived) == [new]


@pytest.mark.parametrize("change", ["rebinds", "trims", "inserts"])
@pytest.mark.parametrize("channel", ["operator.add", "plain list"])
def test_an_internal_node_changing_a_list_without_ids_keeps_what_it_received(
    channel: str, change: str
) -> None:
    """Found in review: a channel without `add_messages` gives no ids, so only pointers
    tell what an internal node received. One that rebinds its input's list for a prompt,
    trims it in place or inserts into it in place leaves the user's messages as they were
    (visible, untagged); only what it inserted is internal."""
    if channel == "operator.add":

        class Chat(TypedDict):
            messages: Annotated[list[BaseMessage], operator.add]

    else:

        class Chat(TypedDict):  # type: ignore[no-redef]
            messages: list[BaseMessage]

    def router(state: Chat) -> dict[str, Any]:
        if change == "rebinds":  # its own prompt, on its own input dict: no state change
            state["messages"] = [SystemMessage("ROUTERSECRET prompt"), *state["messages"]]
        elif change == "trims":
            del state["messages"][:-1]
        else:
            state["messages"].insert(0, SystemMessage("ROUTERSECRET inserted"))
        return {}

    def answer(state: Chat) -> dict[str, Any]:
        added = [AIMessage("VISIBLE answer")]
        return {"messages": added if channel == "operator.add" else [*state["messages"], *added]}

    builder: StateGraph[Any] = StateGraph(Chat)
    builder.add_node("router", router)
    builder.add_node("answer", answer)
    builder.add_edge(START, "router")
    builder.add_edge("router", "answer")
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy(internal=["router"])
    )
    turn = {"messages": [HumanMessage("VISIBLE user 1"), HumanMessage("VISIBLE user 2")]}
    last = list(graph.stream(turn, thread(), stream_mode="values"))[-1]
    raw = [m.content for m in graph.raw_state.get_state(thread()).values["messages"]]
    visible = [c for c in raw if "ROUTERSECRET" not in c]
    assert [m.content for m in last["messages"]] == visible
    assert [m.content for m in graph.get_state(thread()).values["messages"]] == visible
    assert any("VISIBLE user" in c for c in visible)
    if change == "inserts":
        assert any("ROUTERSECRET" in c for c in raw)  # there to find, and not shown


def _appends_in_place_builder(*, then_interrupt: bool, sent: bool = False) -> StateGraph[Any]:
    """`router` appends to its input's own list in place (with `sent`, the state's list
    handed to it in a `Send`'s input) and returns nothing."""
    from langgraph.types import interrupt

    def router(state: State) -> dict[str, Any]:
        # Appends to its input's own list, which is the channel's value, in place, and
        # returns nothing: no write carries the message, yet the state holds it.
        state["messages"].append(AIMessage("INPLACESECRET route=refund"))
        if then_interrupt:
            interrupt("confirm the route?")
        return {}

    def answer(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage("Your refund is on its way.", id="answer")]}

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("router", router)
    builder.add_node("answer", answer)
    if sent:
        builder.add_node("start", lambda s: {})
        builder.add_edge(START, "start")
        builder.add_conditional_edges(
            "start", lambda s: [Send("router", {"messages": s["messages"]})], ["router"]
        )
    else:
        builder.add_edge(START, "router")
    builder.add_edge("router", "answer")
    return builder


def _sent_and_read(graph: Any, then_interrupt: bool) -> tuple[str, str]:
    """Every part written out as it arrives (a resume too), and the state read after."""
    from langgraph.types import Command

    modes = ["values", "checkpoints", "debug", "updates"]
    sent = "".join(repr(part) for part in graph.stream(user_input(), thread(), stream_mode=modes))
    if then_interrupt:
        resume = Command(resume="yes")
        sent += "".join(repr(part) for part in graph.stream(resume, thread(), stream_mode=modes))
    return sent, repr(graph.get_state(thread()).values)


@pytest.mark.parametrize("sent", [False, True])
@pytest.mark.parametrize("then_interrupt", [False, True])
def test_an_internal_node_appending_in_place_without_returning_does_not_leak(
    then_interrupt: bool, sent: bool
) -> None:
    """The in-place append is in the raw state (the marker is there to find), and in no
    part of the enforced stream and no state read; the visible answer still leaves. With
    an interrupt after the append, the node's run ends in an error, and the state still
    holds what it appended. With `sent`, the node is a `Send`'s receiver, handed the
    state's own list."""
    builder = _appends_in_place_builder(then_interrupt=then_interrupt, sent=sent)
    raw_sent, _ = _sent_and_read(builder.compile(checkpointer=InMemorySaver()), then_interrupt)
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy(internal=["router"])
    )
    out, read = _sent_and_read(graph, then_interrupt)
    assert "INPLACESECRET" in raw_sent  # the raw graph shows it: there is something to find
    assert "INPLACESECRET" not in out
    assert "INPLACESECRET" not in read
    assert "refund is on its way" in out


@pytest.mark.parametrize("sent", [False, True])
@pytest.mark.parametrize("then_interrupt", [False, True])
def test_a_visible_node_appending_in_place_keeps_its_message(
    then_interrupt: bool, sent: bool
) -> None:
    """The same graph with the node visible: what it appended in place leaves as the raw
    graph shows it (nothing lost)."""
    builder = _appends_in_place_builder(then_interrupt=then_interrupt, sent=sent)
    raw = builder.compile(checkpointer=InMemorySaver())
    graph = with_visibility(builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy())
    raw_sent, raw_read = _sent_and_read(raw, then_interrupt)
    out, read = _sent_and_read(graph, then_interrupt)
    assert raw_sent.count("INPLACESECRET") > 0
    assert out.count("INPLACESECRET") == raw_sent.count("INPLACESECRET")
    assert read.count("INPLACESECRET") == raw_read.count("INPLACESECRET")


# -- what leaves holds the state as it was when the event was put ----------------------------


class _PlainList(TypedDict):
    messages: list[BaseMessage]


def _later_append_builder(
    *, sub: bool, seen: list[Any] | None = None, channel: str = "add_messages"
) -> StateGraph[Any]:
    """`first` answers, `router` appends to its input's list in place and returns nothing,
    `answer` answers: as the graph, or as a subgraph node `sub` of it. The snapshot after
    `first` is put before `router` runs and holds the list `router` appends to; with a
    `channel` that keeps what is written ("plain": a list key without a reducer,
    "overwrite": `Overwrite` on an `add_messages` key), so does `first`'s update. `router`
    writes into `seen` the messages of its input as it starts."""
    from langgraph.types import Overwrite

    def first(state: Any) -> dict[str, Any]:
        made = AIMessage("Looking into it.", id="first")
        if channel == "add_messages":
            return {"messages": [made]}
        whole = [*state["messages"], made]
        return {"messages": whole if channel == "plain" else Overwrite(whole)}

    def answer(state: Any) -> dict[str, Any]:
        made = AIMessage("Refund sent.", id="answer")
        return {"messages": [made] if channel != "plain" else [*state["messages"], made]}

    def router(state: Any) -> dict[str, Any]:
        if seen is not None:
            seen.append([(m.type, m.content) for m in state["messages"]])
        state["messages"].append(AIMessage("LATERSECRET route=refund"))
        return {}

    schema: Any = _PlainList if channel == "plain" else State
    inner: StateGraph[Any] = StateGraph(schema)
    inner.add_node("first", first)
    inner.add_node("router", router)
    inner.add_node("answer", answer)
    inner.add_edge(START, "first")
    inner.add_edge("first", "router")
    inner.add_edge("router", "answer")
    if not sub:
        return inner
    outer: StateGraph[Any] = StateGraph(schema)
    outer.add_node("sub", inner.compile())
    outer.add_edge(START, "sub")
    return outer


def _parts(
    graph: Any, sync: bool, *, on_arrival: bool, write: Callable[[Any], Any] = repr, **kw: Any
) -> list[Any]:
    """Every part of a run, written out (`write`) as it arrives, or kept and written out
    after the run (as a consumer that collects the parts reads them)."""
    if sync:
        if on_arrival:
            return [write(item) for item in graph.stream(user_input(), thread(), **kw)]
        return [write(item) for item in list(graph.stream(user_input(), thread(), **kw))]

    async def collect() -> list[Any]:
        items = graph.astream(user_input(), thread(), **kw)
        if on_arrival:
            return [write(item) async for item in items]
        return [write(item) for item in [item async for item in items]]

    return asyncio.run(asyncio.wait_for(collect(), 30))


def _snapshot(part: Any) -> tuple[tuple[str, ...], list[tuple[str, Any]]]:
    """A `values` part with subgraphs: its graph path (task ids removed) and its messages."""
    ns, values = part
    return (
        tuple(step.partition(":")[0] for step in ns),
        [(m.type, m.content) for m in values["messages"]],
    )


_ALL_STATE_MODES = ["values", "checkpoints", "debug", "tasks", "updates"]


@pytest.mark.parametrize("channel", ["add_messages", "plain", "overwrite"])
@pytest.mark.parametrize("sub", [False, True], ids=["root", "subgraph"])
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_part_read_later_does_not_show_an_internal_nodes_later_in_place_append(
    sync: bool, sub: bool, channel: str
) -> None:
    """Parts kept and read after the run (and, with subgraphs, parts read while the
    subgraph's nodes run) hold the state as it was when each was put: an internal node's
    in-place append made after a part was put is not in it (nor in `first`'s update, which
    a channel that keeps what is written holds as its list). The raw graph shows the
    route: its `values` snapshot from before the answer (the router's step writes nothing,
    so the one put after `first`), kept, holds what the router appended later."""
    policy = VisibilityPolicy(internal=["sub/router" if sub else "router"])
    kw = {"stream_mode": _ALL_STATE_MODES, "subgraphs": True}

    def fresh() -> Any:
        builder = _later_append_builder(sub=sub, channel=channel)
        return builder.compile(checkpointer=InMemorySaver())

    raw = _parts(fresh(), sync, on_arrival=False, write=lambda part: part, **kw)
    before_answer = [
        repr(payload)
        for _, mode, payload in raw
        if mode == "values" and "Refund sent." not in repr(payload)
    ]
    assert any("LATERSECRET" in snapshot for snapshot in before_answer)
    kept = "".join(_parts(with_visibility(fresh(), policy), sync, on_arrival=False, **kw))
    assert "LATERSECRET" not in kept
    assert "Looking into it." in kept and "Refund sent." in kept


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_custom_write_read_later_does_not_show_a_later_in_place_append(sync: bool) -> None:
    """A visible node writes its state's list to the `custom` stream; the internal node
    after it appends to that list in place. The write, kept and read after the run, holds
    the list as it was written; the raw graph's shows the append."""
    from langgraph.config import get_stream_writer

    def first(state: State) -> dict[str, Any]:
        get_stream_writer()({"history": state["messages"]})
        return {}

    def router(state: State) -> dict[str, Any]:
        state["messages"].append(AIMessage("WRITTENSECRET route=refund"))
        return {}

    def fresh() -> Any:
        builder: StateGraph[Any] = StateGraph(State)
        builder.add_node("first", first)
        builder.add_node("router", router)
        builder.add_edge(START, "first")
        builder.add_edge("first", "router")
        return builder.compile(checkpointer=InMemorySaver())

    kw: dict[str, Any] = {"stream_mode": ["custom", "updates"]}
    raw = "".join(_parts(fresh(), sync, on_arrival=False, **kw))
    assert "WRITTENSECRET" in raw
    graph = with_visibility(fresh(), VisibilityPolicy(internal=["router"]))
    kept = _parts(graph, sync, on_arrival=False, **kw)
    assert "WRITTENSECRET" not in "".join(kept)
    assert any("'history'" in part for part in kept)


def test_a_checkpoint_saved_after_an_in_place_append_does_not_keep_it() -> None:
    """The checkpoint after `first` is saved in the background (durability "async", the
    default) from the channel's own list; `router` appends to it in place before that save
    and ends after it. The saved state does not hold the message, untagged (state reads,
    the next turn); the raw graph's does. The order is forced by a saver that waits for
    the append before it saves that checkpoint, and a router that waits for the save."""
    import threading

    appended, saved = threading.Event(), threading.Event()

    class Gated(InMemorySaver):
        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            gated = metadata.get("source") == "loop" and not saved.is_set()
            if gated:
                assert appended.wait(5)
            out = super().put(config, checkpoint, metadata, new_versions)
            if gated:
                saved.set()
            return out

    def router(state: State) -> dict[str, Any]:
        state["messages"].append(AIMessage("SAVEDSECRET route=refund"))
        appended.set()
        assert saved.wait(5)
        return {}

    def builder() -> StateGraph[Any]:
        graph: StateGraph[Any] = StateGraph(State)
        graph.add_node("first", lambda s: {"messages": [AIMessage("Looking.", id="first")]})
        graph.add_node("router", router)
        graph.add_edge(START, "first")
        graph.add_edge("first", "router")
        return graph

    def turns(graph: Any) -> tuple[str, str]:
        appended.clear()
        saved.clear()
        list(graph.stream(user_input(), thread(), stream_mode="values"))
        again = "".join(
            repr(p) for p in graph.stream(user_input("and?"), thread(), stream_mode="values")
        )
        read = repr(graph.get_state(thread())) + repr(list(graph.get_state_history(thread())))
        return again, read

    raw_again, raw_read = turns(builder().compile(checkpointer=Gated()))
    # Saved by the raw graph, and read back by its next turn: there is something to find.
    assert "SAVEDSECRET" in raw_read and "SAVEDSECRET" in raw_again
    graph = with_visibility(
        builder().compile(checkpointer=Gated()), VisibilityPolicy(internal=["router"])
    )
    again, read = turns(graph)
    assert "SAVEDSECRET" not in again and "SAVEDSECRET" not in read
    assert "SAVEDSECRET" not in repr(graph.raw_state.get_state(thread()).values)


@pytest.mark.parametrize("channel", ["add_messages", "plain", "overwrite"])
@pytest.mark.parametrize("sub", [False, True], ids=["root", "subgraph"])
def test_events_read_later_do_not_show_an_internal_nodes_later_in_place_append(
    sub: bool, channel: str
) -> None:
    """`astream_events(version="v2")`, its events kept and read after the run: a chain's
    input and output (`first`'s, which a channel that keeps what is written holds as its
    list) are held as the event was made. The raw graph shows the route: its `first`
    events, kept, hold what the router appended later (with those channels)."""
    policy = VisibilityPolicy(internal=["sub/router" if sub else "router"])

    def fresh() -> Any:
        builder = _later_append_builder(sub=sub, channel=channel)
        return builder.compile(checkpointer=InMemorySaver())

    def kept(graph: Any) -> list[dict[str, Any]]:
        async def collect() -> list[dict[str, Any]]:
            events = graph.astream_events(user_input(), thread(), version="v2")
            return [event async for event in events]

        return asyncio.run(asyncio.wait_for(collect(), 30))

    if channel != "add_messages":
        raw = [e for e in kept(fresh()) if e["name"] == "first" and "LATERSECRET" in repr(e)]
        assert {e["event"] for e in raw} >= {"on_chain_end"}
    out = repr(kept(with_visibility(fresh(), policy)))
    assert "LATERSECRET" not in out
    assert "Looking into it." in out and "Refund sent." in out


@pytest.mark.parametrize("sub", [False, True], ids=["root", "subgraph"])
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_kept_snapshots_hold_the_state_as_it_was_at_each_step(sync: bool, sub: bool) -> None:
    """With the appending node visible, the `values` parts of its graph, kept and read
    after the run, are the input, the state `router` started with (as it wrote it down),
    and that with its append and the answer: nothing lost, the same order. The control:
    the raw graph's kept parts are not (the snapshot before `router` shows its append)."""
    kw: dict[str, Any] = {"stream_mode": "values", "subgraphs": True, "write": _snapshot}
    where = ("sub",) if sub else ()

    def kept(graph: Any) -> list[Any]:
        parts = _parts(graph, sync, on_arrival=False, **kw)
        return [messages for ns, messages in parts if ns == where]

    seen: list[Any] = []
    builder = _later_append_builder(sub=sub, seen=seen)
    out = kept(with_visibility(builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy()))
    assert seen == [[("human", "hi"), ("ai", "Looking into it.")]]
    expected = [
        [("human", "hi")],
        seen[0],
        [*seen[0], ("ai", "LATERSECRET route=refund"), ("ai", "Refund sent.")],
    ]
    assert out == expected
    assert kept(builder.compile(checkpointer=InMemorySaver())) != expected


def _wait_judged(message: BaseMessage) -> None:
    """Until `message` has been tagged (by another node's end), at most 5 s."""
    import threading

    for _ in range(500):
        if "visibility" in message.response_metadata:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"{message.content!r} was not judged")


def _assert_internal_throughout(graph: Any, sync: bool, made: list[Any], secret: str) -> None:
    """The message made was judged internal: no part of a run of `graph` (written out as
    each arrives) and no state read after it holds `secret`; the answer still leaves."""
    modes = ["values", "updates", "checkpoints", "tasks"]
    out = "".join(_parts(graph, sync, on_arrival=True, stream_mode=modes, subgraphs=True))
    assert made and made[0].response_metadata.get("visibility") == "internal"
    assert secret not in out
    assert secret not in repr(graph.get_state(thread()).values)
    assert "Refund sent." in out


class _PlainState(TypedDict):
    messages: list[BaseMessage]


@pytest.mark.parametrize("where", ["sibling", "subgraph", "invoked"])
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_an_in_place_append_found_by_a_visible_node_first_stays_internal(
    sync: bool, where: str
) -> None:
    """The internal `router` appends in place to a list a visible node holds too, and the
    visible one ends first, finding the message in its input: with `router` still
    running, it is taken as internal (either could have appended it). The visible node is
    `router`'s sibling, or the node of a subgraph beside it, or of a graph a node beside
    it invokes (a plain list key: the subgraph's channel keeps the very list it is given).
    The order is forced: `router` appends once the visible node has started, that node
    returns once the message is there, and `router` returns once it has been judged."""
    import threading

    started, appended = threading.Event(), threading.Event()
    made: list[AIMessage] = []

    def router(state: Any) -> dict[str, Any]:
        assert started.wait(5)
        made.append(AIMessage("SIBLINGSECRET route=refund"))
        state["messages"].append(made[0])
        appended.set()
        _wait_judged(made[0])
        return {}

    def visible(state: Any) -> dict[str, Any]:
        started.set()
        assert appended.wait(5)
        answer = AIMessage("Refund sent.", id="answer")
        return {"messages": [answer] if where == "sibling" else [*state["messages"], answer]}

    schema: Any = State if where == "sibling" else _PlainState
    builder: StateGraph[Any] = StateGraph(schema)
    builder.add_node("router", router)
    if where == "sibling":
        builder.add_node("visible", visible)
    else:
        inner: StateGraph[Any] = StateGraph(schema)
        inner.add_node("visible", visible)
        inner.add_edge(START, "visible")
        sub = inner.compile()
        builder.add_node("visible", sub if where == "subgraph" else (lambda s: sub.invoke(s)))
    builder.add_edge(START, "router")
    builder.add_edge(START, "visible")
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy(internal=["router"])
    )
    _assert_internal_throughout(graph, sync, made, "SIBLINGSECRET")


class _SentWork(TypedDict, total=False):
    messages: list[BaseMessage]
    kind: str


def test_an_in_place_append_by_a_sent_task_found_beside_it_stays_internal() -> None:
    """Two `Send`s to the internal `worker` share the sender's list: task "a" runs a graph
    whose node `reply` is declared visible, task "b" appends to the list in place while
    `reply` runs, and `reply` ends first. Task "b" is `reply`'s task's sibling, not a task
    it runs inside (their namespaces differ only in task ids): the message is internal."""
    import threading

    started, appended = threading.Event(), threading.Event()
    made: list[AIMessage] = []

    def reply(state: Any) -> dict[str, Any]:
        started.set()
        assert appended.wait(5)
        return {}

    inner: StateGraph[Any] = StateGraph(_PlainState)
    inner.add_node("reply", reply)
    inner.add_edge(START, "reply")
    sub = inner.compile()

    def worker(state: Any) -> dict[str, Any]:
        if state["kind"] == "a":
            sub.invoke({"messages": state["messages"]})
            return {}
        assert started.wait(5)
        made.append(AIMessage("SENTSECRET route=refund"))
        state["messages"].append(made[0])
        appended.set()
        _wait_judged(made[0])
        return {}

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("fan", lambda s: {})
    builder.add_node("worker", worker, input_schema=_SentWork)
    builder.add_node("after", lambda s: {"messages": [AIMessage("Refund sent.", id="after")]})
    builder.add_edge(START, "fan")
    builder.add_conditional_edges(
        "fan", lambda s: [Send("worker", {"messages": s["messages"], "kind": k}) for k in "ab"]
    )
    builder.add_edge("worker", "after")
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()),
        VisibilityPolicy(internal=["worker"], user_visible=["worker/reply"]),
    )
    _assert_internal_throughout(graph, True, made, "SENTSECRET")


class _WithDocs(TypedDict, total=False):
    messages: Annotated[list[BaseMessage], add_messages]
    docs: list[str]


class _DocsOnly(TypedDict, total=False):
    docs: list[str]


@pytest.mark.parametrize("how", ["in place", "rebound"])
def test_a_visible_nodes_own_message_beside_a_running_internal_node_stays_visible(
    how: str,
) -> None:
    """Beside an internal node still running, a visible node's own message stays visible:
    appended in place to a list the internal node does not hold (it reads `docs` only), or
    in a new list the node binds in its input and returns (the internal node holds the
    old one, and `docs`)."""
    import threading

    started = threading.Event()
    made: list[AIMessage] = []

    def router(state: Any) -> dict[str, Any]:
        started.set()
        for _ in range(500):  # until `visible` has made its answer, then until it ended
            if made:
                break
            threading.Event().wait(0.01)
        _wait_judged(made[0])
        return {}

    def visible(state: Any) -> Any:
        assert started.wait(5)
        answer = AIMessage("Refund sent.", id="answer")
        if how == "in place":
            state["messages"].append(answer)
            made.append(answer)
            return {}
        state["messages"] = [*state["messages"], answer]
        made.append(answer)
        return state

    builder: StateGraph[Any] = StateGraph(_WithDocs)
    if how == "in place":
        builder.add_node("router", router, input_schema=_DocsOnly)
    else:
        builder.add_node("router", router)
    builder.add_node("visible", visible)
    builder.add_node("after", lambda s: {"messages": [AIMessage("Anything else?", id="after")]})
    builder.add_edge(START, "router")
    builder.add_edge(START, "visible")
    builder.add_edge(["router", "visible"], "after")  # (a write: the in-place one is saved)
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy(internal=["router"])
    )
    graph.invoke({**user_input(), "docs": ["d1"]}, thread())
    assert made[0].response_metadata.get("visibility") == "user_visible"
    assert "Refund sent." in repr(graph.get_state(thread()).values)


def test_a_message_an_internal_node_passes_on_stays_its_producers() -> None:
    """The user's message without an id, in a plain list channel that an internal node
    returns with its own message added, is not re-attributed to that node: it stays
    untagged (visible), and only the node's message is internal."""
    from typing import TypedDict

    class Plain(TypedDict):
        messages: list[BaseMessage]

    def rewriter(state: Plain) -> dict[str, Any]:
        return {"messages": [*state["messages"], AIMessage("REWRITESECRET better query")]}

    builder: StateGraph[Any] = StateGraph(Plain)
    builder.add_node("rewriter", rewriter)
    builder.add_edge(START, "rewriter")
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy(internal=["rewriter"])
    )
    out = list(
        graph.stream({"messages": [HumanMessage("my question")]}, thread(), stream_mode="values")
    )
    assert [m.content for m in out[-1]["messages"]] == ["my question"]
    assert [m.content for m in graph.get_state(thread()).values["messages"]] == ["my question"]
    raw = graph.raw_state.get_state(thread()).values["messages"]
    assert [(m.content, m.response_metadata.get("visibility")) for m in raw] == [
        ("my question", None),
        ("REWRITESECRET better query", "internal"),
    ]


# -- found in review: what counts as received ------------------------------------------------


def _leaks(graph: Any, inputs: list[Any], secret: str, **kw: Any) -> list[str]:
    """Where `secret` leaves `graph` over the turns `inputs` on one thread: the streams
    (written out as each item arrives) and the state read after the last turn."""
    found = []
    for i, inp in enumerate(inputs):
        sent = "".join(repr(x) for x in graph.stream(inp, thread(), **kw))
        if secret in sent:
            found.append(f"stream of turn {i}")
    if secret in repr(graph.get_state(thread()).values):
        found.append("get_state")
    if secret not in repr(graph.raw_state.get_state(thread())):
        found.append("nothing to find: the raw state lacks it (the test is broken)")
    return found


@pytest.mark.parametrize("worker", ["function", "subgraph"])
@pytest.mark.parametrize("stream_mode", ["values", "updates"])
def test_a_message_sent_to_an_internal_node_is_not_received(worker: str, stream_mode: str) -> None:
    """A `Send`'s input is built by its sender, not read from the channels: an internal
    worker passing on the message it was sent (or a subgraph returning it) has it judged."""
    from langgraph.types import Send

    sub: StateGraph[Any] = StateGraph(State)
    sub.add_node("inner", lambda s: {})
    sub.add_edge(START, "inner")
    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("router", lambda s: {})
    builder.add_node(
        "worker", sub.compile() if worker == "subgraph" else (lambda s: {"messages": s["messages"]})
    )
    builder.add_edge(START, "router")
    builder.add_conditional_edges(
        "router",
        lambda s: [Send("worker", {"messages": [AIMessage("SENDSECRET brief")]})],
        ["worker"],
    )
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()),
        VisibilityPolicy(internal=["router", "worker"]),
    )
    assert _leaks(graph, [user_input()], "SENDSECRET", stream_mode=stream_mode) == []


def test_what_an_internal_node_appends_in_place_is_its_own() -> None:
    """Appended in place to the input's list (a message with an id), or to a list subclass
    in a plain channel (one without): judged as the node's, not passed through."""
    from typing import TypedDict

    class History(list):  # type: ignore[type-arg]
        pass

    class Plain(TypedDict):
        messages: Any

    def with_id(state: State) -> dict[str, Any]:
        state["messages"].append(AIMessage("ROUTERSECRET a", id="r-1"))
        return {"messages": state["messages"]}

    def into_subclass(state: Plain) -> dict[str, Any]:
        state["messages"].append(AIMessage("ROUTERSECRET b"))
        return {"messages": state["messages"]}

    for schema, node, first in (
        (State, with_id, user_input()),
        (Plain, into_subclass, {"messages": History([HumanMessage("hi", id="h1")])}),
    ):
        builder: StateGraph[Any] = StateGraph(schema)
        builder.add_node("router", node)
        builder.add_edge(START, "router")
        graph = with_visibility(
            builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy(internal=["router"])
        )
        assert _leaks(graph, [first], "ROUTERSECRET", stream_mode="values") == [], schema


@pytest.mark.parametrize("route", ["conditional edge", "edge", "interrupt_before"])
def test_an_internal_tool_call_answered_after_a_resume_stays_internal(route: str) -> None:
    """An internal node's tool call, approved across an interrupt and answered by a visible
    tools node in the resumed run: the tool's result and its `tools` events stay internal
    (the resumed run learns the call from the tools node's input)."""
    from langchain_core.tools import tool
    from langgraph.prebuilt import ToolNode
    from langgraph.types import Command, interrupt

    @tool
    def search(q: str) -> str:
        """Search."""
        return f"TOOLSECRET result for {q}"

    def plan(state: State) -> dict[str, Any]:
        call = {"name": "search", "args": {"q": "x"}, "id": "c1", "type": "tool_call"}
        return {"messages": [AIMessage("PLANSECRET", id="plan-1", tool_calls=[call])]}

    def approve(state: State) -> dict[str, Any]:
        interrupt("approve the search?")
        return {}

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("tools", ToolNode([search]))
    builder.add_edge(START, "plan")
    kw: dict[str, Any] = {}
    if route == "interrupt_before":
        builder.add_edge("plan", "tools")
        kw["interrupt_before"] = ["tools"]
    else:
        builder.add_node("approve", approve)
        builder.add_edge("plan", "approve")
        if route == "edge":
            builder.add_edge("approve", "tools")
        else:
            builder.add_conditional_edges("approve", lambda s: "tools", ["tools"])
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver(), **kw), VisibilityPolicy(internal=["plan"])
    )
    resume = None if route == "interrupt_before" else Command(resume=True)
    modes = ["values", "tools", "updates"]
    assert _leaks(graph, [user_input(), resume], "TOOLSECRET", stream_mode=modes) == []
    assert _leaks(graph, [], "PLANSECRET") == []


@pytest.mark.parametrize("route", ["conditional edge", "edge"])
def test_a_copy_of_an_earlier_turns_internal_message_stays_internal(route: str) -> None:
    """Turn 2's visible node rebuilds the history without its metadata, keeping the ids
    (`add_messages` replaces by id): the copy of turn 1's internal message is internal."""

    def plan(state: State) -> dict[str, Any]:
        if sum(isinstance(m, HumanMessage) for m in state["messages"]) == 1:
            return {"messages": [AIMessage("PLANSECRET", id="plan-1")]}
        return {}

    def compact(state: State) -> dict[str, Any]:
        return {"messages": [type(m)(content=m.content, id=m.id) for m in state["messages"]]}

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("compact", compact)
    builder.add_edge(START, "plan")
    if route == "edge":
        builder.add_edge("plan", "compact")
    else:
        builder.add_conditional_edges("plan", lambda s: "compact", ["compact"])
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy(internal=["plan"])
    )
    turns = [user_input(), {"messages": [HumanMessage("again", id="h2")]}]
    assert _leaks(graph, turns, "PLANSECRET", stream_mode="values") == []


# -- found in the second review ----------------------------------------------------------


@pytest.mark.parametrize("how", ["conditional edge", "Command(goto=Send)"])
@pytest.mark.parametrize("brief_id", [None, "brief-1"])
def test_what_an_internal_router_sends_is_its_own(how: str, brief_id: str | None) -> None:
    """A message an internal router builds for a `Send` is the router's, tagged where it is
    sent (its conditional edge, or its `Command`), so a visible worker passing it on does
    not make it visible."""

    def send(state: State) -> list[Send]:
        return [Send("worker", {"messages": [AIMessage("SENDSECRET brief", id=brief_id)]})]

    builder: StateGraph[Any] = StateGraph(State)
    if how == "conditional edge":
        builder.add_node("router", lambda s: {})
        builder.add_conditional_edges("router", send, ["worker"])
    else:
        builder.add_node("router", lambda s: Command(goto=send(s)), destinations=("worker",))
    builder.add_node("worker", lambda s: {"messages": s["messages"]})
    builder.add_edge(START, "router")
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy(internal=["router"])
    )
    assert _leaks(graph, [user_input()], "SENDSECRET", stream_mode="values") == []


@pytest.mark.parametrize("schema", ["pydantic", "dataclass"])
def test_what_a_node_appends_in_place_to_a_model_state_is_its_own(schema: str) -> None:
    """The input kept as it arrived covers a Pydantic or dataclass state too."""

    class PState(pydantic.BaseModel):
        messages: Annotated[list[BaseMessage], add_messages] = []

    @dataclasses.dataclass
    class DState:
        messages: Annotated[list[BaseMessage], add_messages] = dataclasses.field(
            default_factory=list
        )

    def router(state: Any) -> dict[str, Any]:
        state.messages.append(AIMessage("ROUTERSECRET", id="r-1"))
        return {"messages": state.messages}

    builder: StateGraph[Any] = StateGraph(PState if schema == "pydantic" else DState)
    builder.add_node("router", router)
    builder.add_edge(START, "router")
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy(internal=["router"])
    )
    assert _leaks(graph, [user_input()], "ROUTERSECRET", stream_mode="values") == []


def test_a_list_subclass_an_internal_node_passes_on_unchanged_stays_visible() -> None:
    """The user's message without an id, in a list subclass an internal node returns as it
    received it, is not re-attributed to the node."""
    from typing import TypedDict

    class History(list):  # type: ignore[type-arg]
        pass

    class Plain(TypedDict):
        messages: Any

    builder: StateGraph[Any] = StateGraph(Plain)
    builder.add_node("check", lambda s: {"messages": s["messages"]})
    builder.add_edge(START, "check")
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy(internal=["check"])
    )
    first = {"messages": History([HumanMessage("USER QUESTION")])}
    values = list(graph.stream(first, thread(), stream_mode="values"))
    assert [m.content for m in values[-1]["messages"]] == ["USER QUESTION"]
    assert [m.content for m in graph.get_state(thread()).values["messages"]] == ["USER QUESTION"]


_VALUE_KINDS = (
    "message",
    "list",
    "tuple",
    "deque",
    "sublist",
    "command",
    "dict",
    "int",
    "str",
    "mixed",
)


class _Messages(list[Any]):
    """A list subclass, as a custom reducer may return."""


def _random_input(rng: random.Random) -> Any:
    """A node input of any shape `iter_messages` reads: a state dict whose values are
    messages, lists or tuples of them (mixed with other values), dicts, plain values; or a
    list of tool-call-like dicts, a message, a `Command`."""

    def message() -> BaseMessage:
        return (AIMessage if rng.random() < 0.4 else HumanMessage)(f"m{rng.random()}")

    def value() -> Any:
        kind = rng.choice(_VALUE_KINDS)
        if kind == "message":
            return message()
        if kind in ("list", "tuple", "deque", "sublist"):
            items = [message() for _ in range(rng.randint(0, 4))]
            shape: Any = {"list": list, "tuple": tuple, "deque": deque, "sublist": _Messages}
            return shape[kind](items)
        if kind == "command":
            return Command(update={"messages": [message()]})
        if kind == "mixed":
            return [message() if rng.random() < 0.5 else {"x": message()} for _ in range(3)]
        if kind == "dict":
            return {"inner": message()}
        return 1 if kind == "int" else "text"

    shape = rng.choice(["dict", "dict", "dict", "list", "message", "command"])
    if shape == "dict":
        return {f"k{i}": value() for i in range(rng.randint(0, 5))}
    if shape == "list":
        return [value() for _ in range(rng.randint(0, 3))]
    if shape == "message":
        return message()
    return Command(update={"messages": [message() for _ in range(rng.randint(0, 3))]})


@pytest.mark.parametrize("seed", range(4))
def test_last_message_finds_what_the_generic_walk_finds(seed: int) -> None:
    """`last_message` (read in place for a dict state) returns the very object the generic
    reverse walk of `iter_messages` finds first, over random inputs of every shape."""
    rng = random.Random(seed)
    for _ in range(500):
        value = _random_input(rng)
        for cls in (AIMessage, HumanMessage, BaseMessage):
            walk = next((m for m in iter_messages(value, reverse=True) if isinstance(m, cls)), None)
            assert last_message(value, cls) is walk
