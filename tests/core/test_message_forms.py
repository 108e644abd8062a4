"""Messages a node writes in the forms `add_messages` accepts besides message objects (a
dict, a `(role, content)` pair, a string, LangChain's serialised envelope), and messages a
node hands its parent graph with `Command(graph=Command.PARENT)`: an internal node's stay
internal at every exit, a visible node's are kept.

Ground truth is the marker in the content: SECRET in what an internal node writes, VISIBLE
in what a visible one writes. Each case first checks that the raw graph's state holds the
internal message (the case really writes one)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph, add_messages
from langgraph.types import Command, Send
from pydantic import BaseModel

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
    "Command update as (key, value) pairs": lambda: Command(
        update=[
            ("messages", [AIMessage("SECRET object"), ("ai", "SECRET pair")]),
            ("messages", [{"role": "ai", "content": "SECRET dict"}]),
        ]
    ),
    "a list of Commands": lambda: [
        Command(update={"messages": [("ai", "SECRET first")]}),
        Command(update={"messages": ["SECRET second"]}),
    ],
}


def _graph(form: Callable[[], Any], *, enforced: bool, send: bool = False) -> Any:
    def planner(state: State) -> Any:
        return form()

    def answer(state: State) -> dict[str, Any]:
        return {"messages": [{"role": "assistant", "content": "VISIBLE answer"}]}

    builder = StateGraph(State)
    builder.add_node("planner", planner, destinations=("answer",))
    builder.add_node("answer", answer)
    builder.add_edge(START, "planner")
    if send:  # the planner's edge sends the answer node what it wrote: a task input
        builder.add_conditional_edges("planner", lambda s: [Send("answer", form())])
    else:
        builder.add_edge("planner", "answer")
    graph = builder.compile(checkpointer=InMemorySaver())
    return with_visibility(graph, VisibilityPolicy(internal=["planner"])) if enforced else graph


def _finished(builder: Any, enforced: bool, internal: list[str] | None = None) -> Any:
    """`builder` compiled with a checkpointer: raw, or enforced with `internal` (the
    planner) internal."""
    graph = builder.compile(checkpointer=InMemorySaver())
    if not enforced:
        return graph
    return with_visibility(graph, VisibilityPolicy(internal=internal or ["planner"]))


def _answering(schema: Any) -> StateGraph[Any]:
    """A graph of `schema` whose one node answers VISIBLE."""
    builder: StateGraph[Any] = StateGraph(schema)
    builder.add_node("answer", lambda s: {"messages": [AIMessage("VISIBLE answer")]})
    builder.add_edge(START, "answer")
    return builder


def _sends_a_pair(sender: str) -> StateGraph[Any]:
    """`sender` sends `worker` `{"messages": ("ai", "SECRET pair")}`; `worker` answers."""
    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node(sender, lambda s: {})
    builder.add_node("worker", lambda s: {"messages": [AIMessage("VISIBLE answer")]})
    builder.add_edge(START, sender)
    route = lambda s: [Send("worker", {"messages": ("ai", "SECRET pair")})]  # noqa: E731
    builder.add_conditional_edges(sender, route, ["worker"])
    return builder


def _handoff_graph(
    update: dict[str, Any],
    *,
    enforced: bool,
    schema: Any = State,
    policy: VisibilityPolicy | None = None,
) -> Any:
    """`planner`, a subgraph of `schema` (internal unless `policy` says otherwise), whose
    node `inner` hands the root `update` and sends it on to the visible `answer`."""

    def inner(state: Any) -> Command:
        return Command(graph=Command.PARENT, goto="answer", update=update)

    sub = StateGraph(schema)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")

    def answer(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage("VISIBLE answer")]}

    builder = StateGraph(State)
    builder.add_node("planner", sub.compile(), destinations=("answer",))
    builder.add_node("answer", answer)
    builder.add_edge(START, "planner")
    graph = builder.compile(checkpointer=InMemorySaver())
    policy = policy or VisibilityPolicy(internal=["planner"])
    return with_visibility(graph, policy) if enforced else graph


HANDOFFS: dict[str, dict[str, Any]] = {
    "message objects": {"messages": [AIMessage("SECRET handoff"), HumanMessage("SECRET human")]},
    "dicts": {"messages": [{"role": "user", "content": "SECRET dict handoff"}]},
}

CONFIG = {"configurable": {"thread_id": "t"}}


def _then_answer(
    schema: Any, name: str, node: Callable[[Any], Any], *, internal: list[str]
) -> Callable[[bool], Any]:
    """`build(enforced)`: START -> `name` -> a visible `answer`, raw or enforced."""

    def build(enforced: bool) -> Any:
        builder = StateGraph(schema)
        builder.add_node(name, node)
        builder.add_node("answer", lambda s: {"messages": [AIMessage("VISIBLE answer")]})
        builder.add_edge(START, name)
        builder.add_edge(name, "answer")
        graph = builder.compile(checkpointer=InMemorySaver())
        return with_visibility(graph, VisibilityPolicy(internal=internal)) if enforced else graph

    return build


def _exits(graph: Any, *, sync: bool, value: Any = None) -> tuple[str, str]:
    """The text of every part the enforced stream yields, and of its state reads."""
    kw: dict[str, Any] = {
        "stream_mode": ["values", "updates", "messages", "debug", "tasks"],
        "subgraphs": True,
        "version": "v2",
    }
    value = value if value is not None else {"messages": [HumanMessage("hi", id="h1")]}

    def text(part: Any) -> str:
        # As the consumer sees it on arrival: a snapshot shares its lists with the state,
        # which a node that appends in place changes afterwards (raw LangGraph's too).
        return all_text([((), part["type"], part["data"])])

    if sync:
        parts = [text(p) for p in graph.stream(value, CONFIG, **kw)]
        snaps = [graph.get_state(CONFIG, subgraphs=True), *graph.get_state_history(CONFIG)]
    else:

        async def run() -> tuple[list[str], list[Any]]:
            parts = [text(p) async for p in graph.astream(value, CONFIG, **kw)]
            snaps = [await graph.aget_state(CONFIG, subgraphs=True)]
            return parts, snaps + [s async for s in graph.aget_state_history(CONFIG)]

        parts, snaps = asyncio.run(run())
    return "\n".join(parts), "\n".join(snapshot_text(s) for s in snaps)


def _assert_kept_internal(
    raw: Any, enforced: Any, sync: bool, value: Any = None, where: str = "state"
) -> None:
    """The raw graph writes internal content (SECRET) into `where`; the enforced one lets
    none of it out of the stream or the state reads, and keeps the visible answer."""
    raw_stream, raw_state = _exits(raw, sync=sync, value=value)
    wrote = raw_state if where == "state" else raw_stream
    assert "SECRET" in wrote, f"the case writes no internal message into the {where}"
    stream, state = _exits(enforced, sync=sync, value=value)
    assert "SECRET" not in stream
    assert "SECRET" not in state
    assert "VISIBLE answer" in stream and "VISIBLE answer" in state


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize("form", list(FORMS))
def test_an_internal_node_s_messages_in_any_form_stay_internal(form: str, sync: bool) -> None:
    _assert_kept_internal(
        _graph(FORMS[form], enforced=False), _graph(FORMS[form], enforced=True), sync
    )


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize("update", list(HANDOFFS))
def test_a_handoff_from_an_internal_subgraph_stays_internal(update: str, sync: bool) -> None:
    raw = _handoff_graph(HANDOFFS[update], enforced=False)
    _assert_kept_internal(raw, _handoff_graph(HANDOFFS[update], enforced=True), sync)


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


@pytest.mark.parametrize("form", ["pair in a list", "string in a list", "dict, role user"])
def test_an_internal_node_s_messages_stay_internal_before_any_message(form: str) -> None:
    """The first messages of a thread: the node's input holds none under the key yet."""
    empty = {"messages": []}
    _assert_kept_internal(
        _graph(FORMS[form], enforced=False), _graph(FORMS[form], enforced=True), True, empty
    )


def test_an_internal_edge_s_send_of_dict_messages_stays_internal() -> None:
    """A dict message in a `Send`'s input shows in the receiving task's start (`tasks`,
    `debug`): tagged where it is sent, it is dropped there."""
    form = FORMS["dict, role user"]
    raw, enforced = _graph(form, enforced=False, send=True), _graph(form, enforced=True, send=True)
    _assert_kept_internal(raw, enforced, True, where="stream")


@pytest.mark.parametrize("shape", ["pair", "string"])
def test_a_visible_node_s_handoff_inside_an_internal_subgraph_stays_visible(shape: str) -> None:
    """The internal subgraph's task, which the command passes through on its way up, does
    not take the visible node's messages for its own."""
    said = ("ai", "VISIBLE handed") if shape == "pair" else "VISIBLE handed"
    policy = VisibilityPolicy(internal=["planner"], user_visible=["planner/inner"])
    graph = _handoff_graph({"messages": [said]}, enforced=True, policy=policy)
    stream, state = _exits(graph, sync=True)
    assert "VISIBLE handed" in stream and "VISIBLE handed" in state


def test_dicts_under_a_key_add_messages_does_not_reduce_are_left_alone() -> None:
    """OpenAI-style dicts a node keeps under a plain list key are not messages to
    add_messages: they are stored exactly as written, untagged, and malformed ones raise
    nothing."""

    class Chat(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]
        wire: Annotated[list[dict[str, Any]], operator.add]

    bad_call = {"id": "c1", "function": {"name": "f"}}  # no "arguments"
    written = [
        {"role": "assistant", "content": "VISIBLE"},
        {"role": "assistant", "content": "", "tool_calls": [bad_call]},
    ]

    def node(state: Chat) -> dict[str, Any]:
        return {"wire": [dict(d) for d in written]}

    builder = StateGraph(Chat)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    for internal in ([], ["node"]):
        graph = with_visibility(
            builder.compile(checkpointer=InMemorySaver()),
            VisibilityPolicy(internal=internal, user_visible_keys=["wire"]),
        )
        list(graph.stream({"messages": [HumanMessage("hi")], "wire": []}, CONFIG))
        assert graph.raw_state.get_state(CONFIG).values["wire"] == written


def test_a_shared_list_of_pairs_still_adds_a_message_at_every_run() -> None:
    """A node returning the same list object at every run (a module-level constant): the
    pair it holds is replaced by a dict in place, from which add_messages still makes a new
    message (and id) at every run, as from the pair."""
    canned = [("ai", "SECRET ack")]
    graph = _graph(lambda: {"messages": canned}, enforced=True)
    for _ in range(2):
        list(graph.stream({"messages": [HumanMessage("hi", id="h1")]}, CONFIG))
    texts = [m.content for m in graph.raw_state.get_state(CONFIG).values["messages"]]
    assert texts.count("SECRET ack") == 2
    _, state = _exits(graph, sync=True)
    assert "SECRET" not in state


FORMS_MORE: dict[str, Callable[[], Any]] = {
    "Command update as a tuple of pairs": lambda: Command(
        update=(("messages", [("ai", "SECRET pair"), {"role": "ai", "content": "SECRET d"}]),)
    ),
    "a tuple of Commands": lambda: (
        Command(update={"messages": [{"role": "ai", "content": "SECRET first"}]}),
        Command(goto="answer"),
    ),
}


@pytest.mark.parametrize("form", list(FORMS_MORE))
def test_an_internal_node_s_tuple_updates_stay_internal(form: str) -> None:
    _assert_kept_internal(
        _graph(FORMS_MORE[form], enforced=False), _graph(FORMS_MORE[form], enforced=True), True
    )


class Scratch(TypedDict):
    scratch: Annotated[list[AnyMessage], add_messages]


def test_a_visible_node_s_handoff_send_inside_an_internal_subgraph_stays_visible() -> None:
    """The same for a handoff that sends: the internal subgraph's task does not take the
    visible node's Send for its own (its pair shows in the receiving task's start)."""

    def inner(state: State) -> Command:
        sent = Send("answer", {"messages": [("ai", "VISIBLE sent")]})
        return Command(graph=Command.PARENT, goto=[sent])

    sub = StateGraph(State)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    builder = StateGraph(State)
    builder.add_node("planner", sub.compile(), destinations=("answer",))
    builder.add_node("answer", lambda s: {})
    builder.add_edge(START, "planner")
    policy = VisibilityPolicy(internal=["planner"], user_visible=["planner/inner"])
    graph = with_visibility(builder.compile(checkpointer=InMemorySaver()), policy)
    starts = [
        p["data"]
        for p in graph.stream(
            {"messages": [HumanMessage("hi")]}, CONFIG, stream_mode="tasks", version="v2"
        )
        if p["data"].get("name") == "answer" and "input" in p["data"]
    ]
    assert starts and "VISIBLE sent" in repr(starts)


@pytest.mark.parametrize("shape", ["dict", "pair"])
def test_a_handoff_is_read_by_the_parent_graph_s_message_keys(shape: str) -> None:
    """The subgraph reduces `scratch`, its parent `messages`: the update is the parent's."""
    said: Any = (
        {"role": "ai", "content": "SECRET handed"} if shape == "dict" else ("ai", "SECRET handed")
    )
    update = {"messages": [said]}
    raw = _handoff_graph(update, enforced=False, schema=Scratch)
    _assert_kept_internal(raw, _handoff_graph(update, enforced=True, schema=Scratch), True)


def test_handoffs_without_an_update_are_each_judged_by_their_own_node() -> None:
    """A visible node's handoff without an update, then an internal node's handoff that
    sends: the second is tagged by its own node (its Send's input is internal)."""

    def visible_hop(state: State) -> Command:
        return Command(graph=Command.PARENT, goto="mid")

    def internal_hop(state: State) -> Command:
        sent = {"messages": [*state["messages"], AIMessage("SECRET plan")]}
        return Command(graph=Command.PARENT, goto=[Send("answer", sent)])

    def build(enforced: bool) -> Any:
        def sub(node: Callable[[State], Command]) -> Any:
            g = StateGraph(State)
            g.add_node("hop", node)
            g.add_edge(START, "hop")
            return g.compile()

        builder = StateGraph(State)
        builder.add_node("first", sub(visible_hop), destinations=("mid",))
        builder.add_node("mid", sub(internal_hop), destinations=("answer",))
        builder.add_node("answer", lambda s: {"messages": [AIMessage("VISIBLE answer")]})
        builder.add_edge(START, "first")
        graph = builder.compile(checkpointer=InMemorySaver())
        policy = VisibilityPolicy(internal=["mid"])
        return with_visibility(graph, policy) if enforced else graph

    _assert_kept_internal(build(False), build(True), True, where="stream")


def test_a_node_invoking_two_graphs_judges_each_by_its_node_s_input() -> None:
    """A function node invokes a graph that reduces `messages` and one that reduces `notes`:
    neither's keys are the node's graph's, known before the run."""

    class Notes(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]
        notes: Annotated[list[AnyMessage], add_messages]

    class OnlyNotes(TypedDict):
        notes: Annotated[list[AnyMessage], add_messages]

    def one(schema: Any, writes: dict[str, Any]) -> Any:
        g = StateGraph(schema)
        g.add_node("i", lambda s: writes)
        g.add_edge(START, "i")
        return g.compile()

    g1 = one(State, {"messages": [AIMessage("VISIBLE from g1")]})  # LangGraph finds this one
    g2 = one(OnlyNotes, {"notes": [{"role": "ai", "content": "SECRET note"}]})

    def work(state: Notes) -> dict[str, Any]:
        a, b = g1.invoke({"messages": state["messages"]}), g2.invoke({"notes": state["notes"]})
        return {"messages": a["messages"][-1:], "notes": b["notes"][-1:]}

    build = _then_answer(Notes, "work", work, internal=["work/i"])
    value = {"messages": [HumanMessage("hi", id="h1")], "notes": [HumanMessage("n", id="n1")]}
    _assert_kept_internal(build(False), build(True), True, value=value)


def test_a_send_s_input_reaches_its_node_as_written() -> None:
    """Nothing in a Send's input is changed (it is never reduced): the receiver sees the
    pair and the dict as the sender wrote them, while the task-start events drop them."""
    seen: list[Any] = []

    def planner(state: State) -> dict[str, Any]:
        return {}

    def worker(state: dict[str, Any]) -> dict[str, Any]:
        seen.append(list(state["messages"]))
        return {"messages": [AIMessage("VISIBLE answer")]}

    def build(enforced: bool) -> Any:
        builder = StateGraph(State)
        builder.add_node("planner", planner)
        builder.add_node("worker", worker)
        builder.add_edge(START, "planner")
        sent = {"messages": [("ai", "SECRET pair"), {"role": "ai", "content": "SECRET dict"}]}
        builder.add_conditional_edges("planner", lambda s: [Send("worker", sent)])
        return _finished(builder, enforced)

    _assert_kept_internal(build(False), build(True), True, where="stream")
    assert (
        seen[0]
        == seen[-1]
        == [
            ("ai", "SECRET pair"),
            {"role": "ai", "content": "SECRET dict"},
        ]
    )


@pytest.mark.parametrize("shape", ["pair", "string"])
def test_a_visible_node_s_pairs_below_an_internal_subgraph_stay_visible(shape: str) -> None:
    """A visible node inside an internal subgraph writes a pair or string: the subgraph's
    node, which returns it to the root, does not take it for its own product."""

    def said(state: State) -> dict[str, Any]:
        return {"messages": [("ai", "VISIBLE said") if shape == "pair" else "VISIBLE said"]}

    inner = StateGraph(State)
    inner.add_node("said", said)
    inner.add_edge(START, "said")
    outer = StateGraph(State)
    outer.add_node("inner", inner.compile())
    outer.add_edge(START, "inner")
    builder = StateGraph(State)
    builder.add_node("team", outer.compile())
    builder.add_edge(START, "team")
    policy = VisibilityPolicy(internal=["team"], user_visible=["team/inner/said"])
    graph = with_visibility(builder.compile(checkpointer=InMemorySaver()), policy)
    stream, state = _exits(graph, sync=True)
    assert "VISIBLE said" in stream and "VISIBLE said" in state


def _sender_graph(
    send: Callable[[dict[str, Any]], Any],
    worker: Callable[[dict[str, Any]], dict[str, Any]],
    schema: Any = State,
    **nodes: Callable[[Any], Any],
) -> Any:
    """`planner` (internal) does nothing; its edge sends `worker` what `send` builds."""
    builder = StateGraph(schema)
    builder.add_node("planner", lambda s: {})
    builder.add_node("worker", worker)
    for name, node in nodes.items():
        builder.add_node(name, node)
        builder.add_edge(START, name)
    builder.add_edge(START, "planner")
    builder.add_conditional_edges("planner", lambda s: [Send("worker", send(s))])
    graph = builder.compile(checkpointer=InMemorySaver())
    return with_visibility(graph, VisibilityPolicy(internal=["planner"]))


def test_a_sent_pair_a_visible_node_passes_on_stays_internal() -> None:
    graph = _sender_graph(
        lambda s: {"messages": [("ai", "SECRET sent")]},
        lambda s: {"messages": [*s["messages"], AIMessage("VISIBLE answer")]},
    )
    stream, state = _exits(graph, sync=True)
    assert "SECRET" not in stream and "SECRET" not in state
    assert "VISIBLE answer" in stream and "VISIBLE answer" in state


SENT_TO_A_SUBGRAPH: dict[str, Any] = {
    "a dict": [{"role": "ai", "content": "SECRET dict"}],
    "a pair": [("ai", "SECRET pair")],
    "a string": ["SECRET string"],
    "a dict alone": {"role": "ai", "content": "SECRET alone"},
    "a string alone": "SECRET string alone",
    "a pair alone": ("ai", "SECRET pair alone"),
    "after the state it received": "state",
}


@pytest.mark.parametrize("how", ["edge", "command", "to the parent"])
@pytest.mark.parametrize("form", list(SENT_TO_A_SUBGRAPH))
def test_what_an_internal_node_sends_a_compiled_subgraph_stays_internal(
    form: str, how: str
) -> None:
    """A visible compiled subgraph's `add_messages` makes new objects of the dicts, pairs
    and strings an internal node sends it, which its answer hands back to the parent: they
    stay internal (made dicts carrying the tag before they are sent). Sent by the node's
    conditional edge, by its `Command(goto=Send(...))`, or by a node of an internal subgraph
    to its parent's subgraph node (`Command.PARENT`)."""

    def sent(state: State) -> dict[str, Any]:
        value = SENT_TO_A_SUBGRAPH[form]
        if value == "state":
            value = [
                *state["messages"],
                ("ai", "SECRET after"),
                {"role": "ai", "content": "SECRET d"},
            ]
        return {"messages": value}

    def build(enforced: bool) -> Any:
        inner = _answering(State)
        builder = StateGraph(State)
        builder.add_node("reader", inner.compile())
        if how == "edge":
            builder.add_node("planner", lambda s: {})
            builder.add_conditional_edges("planner", lambda s: [Send("reader", sent(s))])
        elif how == "command":
            builder.add_node(
                "planner", lambda s: Command(goto=Send("reader", sent(s))), destinations=("reader",)
            )
        else:
            go = StateGraph(State)
            go.add_node("go", lambda s: Command(graph=Command.PARENT, goto=Send("reader", sent(s))))
            go.add_edge(START, "go")
            builder.add_node("planner", go.compile(), destinations=("reader",))
        builder.add_edge(START, "planner")
        return _finished(builder, enforced)

    _assert_kept_internal(build(False), build(True), True)


class ModelState(BaseModel):
    messages: Annotated[list[Any], add_messages] = []


@dataclasses.dataclass
class DataState:
    messages: Annotated[list[Any], add_messages] = dataclasses.field(default_factory=list)


@pytest.mark.parametrize("schema", [ModelState, DataState], ids=["pydantic", "dataclass"])
def test_what_an_internal_node_sends_a_subgraph_in_a_model_input_stays_internal(
    schema: Any,
) -> None:
    """The same when the Send's input is the subgraph's Pydantic or dataclass state: it is
    given a copy whose lists carry the tagged dicts."""
    sent = [("ai", "SECRET pair"), {"role": "ai", "content": "SECRET dict"}, "SECRET str"]

    def build(enforced: bool) -> Any:
        inner = _answering(schema)
        builder = StateGraph(State)
        builder.add_node("planner", lambda s: {})
        builder.add_node("reader", inner.compile())
        builder.add_edge(START, "planner")
        route = lambda s: [Send("reader", schema(messages=list(sent)))]  # noqa: E731
        builder.add_conditional_edges("planner", route, ["reader"])
        return _finished(builder, enforced)

    _assert_kept_internal(build(False), build(True), True)


def test_a_pair_an_internal_node_sends_as_a_key_s_whole_value_is_dropped_from_the_task_start() -> (
    None
):
    """`Send("worker", {"messages": ("ai", ...)})`: the pair shows in the receiving task's
    start, as it does in a list."""

    def build(enforced: bool) -> Any:
        return _finished(_sends_a_pair("planner"), enforced)

    _assert_kept_internal(build(False), build(True), True, where="stream")


class _Frozen(dict):  # type: ignore[type-arg]
    """A read-only dict that needs an argument to be made: `copy.copy` cannot copy it."""

    def __new__(cls, items: Any) -> _Frozen:
        return super().__new__(cls)

    def __init__(self, items: Any) -> None:
        super().__init__(items)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError("frozen")


def test_a_dict_that_refuses_writes_sent_to_a_function_node_runs_as_raw() -> None:
    """A Send's input is not copied for a function node: where its type refuses the equal
    copies put in its place, its own dict messages are known instead, and the run goes on.
    (Its own pairs are not: an equal constant tuple elsewhere in the module is the same
    object, which would be dropped too.)"""
    seen: list[Any] = []

    def worker(state: Any) -> dict[str, Any]:
        seen.append((type(state).__name__, state["messages"]))
        return {"messages": [AIMessage("VISIBLE answer")]}

    def build(enforced: bool) -> Any:
        builder = StateGraph(State)
        builder.add_node("planner", lambda s: {})
        builder.add_node("worker", worker)
        builder.add_edge(START, "planner")
        message = {"role": "ai", "content": "SECRET dict"}
        sent = lambda s: [Send("worker", _Frozen({"messages": message}))]  # noqa: E731
        builder.add_conditional_edges("planner", sent, ["worker"])
        return _finished(builder, enforced)

    _assert_kept_internal(build(False), build(True), True, where="stream")
    assert seen == [("_Frozen", {"role": "ai", "content": "SECRET dict"})] * 2


@pytest.mark.parametrize("kind", ["defaultdict", "frozen"])
def test_a_dict_subclass_sent_to_a_subgraph_stays_internal_without_an_error(kind: str) -> None:
    """Any dict LangGraph takes as a Send's input: a `defaultdict` is copied as one, a
    dict `copy.copy` cannot copy or write to as a plain dict (a subgraph reads a mapping)."""

    def build(enforced: bool) -> Any:
        inner = _answering(State)

        def route(state: State) -> list[Send]:
            messages = [("ai", "SECRET pair"), "SECRET string"]
            sent: Any = collections.defaultdict(list)
            sent["messages"] = messages
            return [Send("reader", sent if kind == "defaultdict" else _Frozen(sent))]

        builder = StateGraph(State)
        builder.add_node("planner", lambda s: {})
        builder.add_node("reader", inner.compile())
        builder.add_edge(START, "planner")
        builder.add_conditional_edges("planner", route, ["reader"])
        return _finished(builder, enforced)

    _assert_kept_internal(build(False), build(True), True)


@pytest.mark.parametrize("receiver", ["subgraph", "function"])
def test_a_role_pair_under_a_key_that_holds_no_messages_is_left_alone(receiver: str) -> None:
    """Only under a key that holds messages in the receiving graph is a pair that is the
    key's whole value a message: elsewhere (`coords`) it is any pair of strings, delivered
    as the raw graph delivers it, in the receiver's task start and wherever it is written
    (a subgraph's state, the function node's update of the root's)."""

    class Located(TypedDict, total=False):
        messages: Annotated[list[AnyMessage], add_messages]
        coords: Any

    def build(enforced: bool) -> Any:
        inner = _answering(Located)
        builder = StateGraph(Located)
        builder.add_node("planner", lambda s: {})
        if receiver == "subgraph":
            builder.add_node("reader", inner.compile())
        else:
            builder.add_node(
                "reader",
                lambda s: {"coords": s["coords"], "messages": [AIMessage("VISIBLE answer")]},
            )
        builder.add_edge(START, "planner")
        sent = {"coords": ("human", "VISIBLE coords"), "messages": [("ai", "SECRET pair")]}
        builder.add_conditional_edges("planner", lambda s: [Send("reader", sent)], ["reader"])
        return _finished(builder, enforced)

    _assert_kept_internal(build(False), build(True), True, where="stream")
    raw_stream, raw_state = _exits(build(False), sync=True)
    stream, state = _exits(build(True), sync=True)
    assert raw_stream.count("VISIBLE coords") > 0
    assert (stream.count("VISIBLE coords"), state.count("VISIBLE coords")) == (
        raw_stream.count("VISIBLE coords"),
        raw_state.count("VISIBLE coords"),
    )


@pytest.mark.parametrize("handed", ["the messages", "nothing"])
def test_a_pair_sent_inside_a_graph_a_node_invokes_is_dropped_from_the_task_start(
    handed: str,
) -> None:
    """In a graph a node's function invokes (its keys are not known before the run), a pair
    that is a key's whole value counts as a message under any key but those in
    `user_visible_keys` (fail closed), whatever the graph was handed."""

    def build(enforced: bool) -> Any:
        graph_inside = _sends_a_pair("router").compile()
        builder = StateGraph(State)
        builder.add_node(
            "runner",
            lambda s: graph_inside.invoke(s if handed == "the messages" else {"messages": []}),
        )
        builder.add_edge(START, "runner")
        return _finished(builder, enforced, internal=["runner/router"])

    _assert_kept_internal(build(False), build(True), True, where="stream")


def test_a_list_sent_to_a_subgraph_and_to_a_function_node_reaches_the_function_as_written() -> None:
    """One list (or one input) sent to a compiled subgraph and to a function node: what the
    subgraph is sent is changed in copies, so the function still gets the pair."""
    seen: list[Any] = []

    def reader(state: State) -> dict[str, Any]:
        role, text = state["messages"][0]
        seen.append((role, text))
        return {"messages": [AIMessage("VISIBLE answer")]}

    def build(enforced: bool, *, share: str) -> Any:
        inner = StateGraph(State)
        inner.add_node("noop", lambda s: {})
        inner.add_edge(START, "noop")

        def route(state: State) -> list[Send]:
            shared = [("ai", "SECRET plan")]
            one, two = {"messages": shared}, {"messages": shared}
            return [Send("sub", one), Send("reader", one if share == "input" else two)]

        builder = StateGraph(State)
        builder.add_node("planner", lambda s: {})
        builder.add_node("sub", inner.compile())
        builder.add_node("reader", reader)
        builder.add_edge(START, "planner")
        builder.add_conditional_edges("planner", route, ["sub", "reader"])
        return _finished(builder, enforced)

    for share in ("list", "input"):
        seen.clear()
        _assert_kept_internal(build(False, share=share), build(True, share=share), True)
        assert seen == [("ai", "SECRET plan")] * 2, share  # raw, then enforced


def test_what_an_internal_node_sends_from_its_input_stays_as_it_is_elsewhere() -> None:
    """The internal sender passes on a visible state key it received: that key's dicts and
    pairs are not its product, and stay in every snapshot."""

    class Hist(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]
        history: list[Any]

    graph = _sender_graph(
        lambda s: {"history": s["history"]},
        lambda s: {"messages": [AIMessage("VISIBLE answer")]},
        schema=Hist,
    )
    written = [{"role": "user", "content": "VISIBLE dict"}, ("human", "VISIBLE pair")]
    parts = list(
        graph.stream(
            {"messages": [HumanMessage("hi")], "history": written},
            CONFIG,
            stream_mode="values",
        )
    )
    assert all(p["history"] == written for p in parts)


def test_a_visible_node_s_constant_pair_equal_to_a_sent_one_is_kept() -> None:
    """CPython shares equal constant tuples between a module's functions: the one an
    internal node sends is copied before it is recorded, so the visible node's stays (made
    the equal dict, tagged visible)."""
    graph = _sender_graph(
        lambda s: {"messages": [("ai", "VISIBLE ack")]},
        lambda s: {},
        ack=lambda s: {"messages": [("ai", "VISIBLE ack")]},
    )
    updates = list(graph.stream({"messages": [HumanMessage("hi")]}, CONFIG))
    (acked,) = [u["ack"]["messages"] for u in updates if "ack" in u]
    assert [(m["role"], m["content"]) for m in acked] == [("ai", "VISIBLE ack")]
    assert acked[0]["response_metadata"]["visibility"] == "user_visible"
    kept = graph.get_state(CONFIG).values["messages"]
    assert [m.content for m in kept if m.type == "ai"] == ["VISIBLE ack"]


def test_a_send_of_pairs_that_are_not_messages_runs_as_raw() -> None:
    """A 2-tuple whose first item is not a role (here a dict) is not a message pair."""
    pairs = [({"doc": 1}, "query")]
    seen: list[Any] = []
    graph = _sender_graph(
        lambda s: {"pairs": pairs},
        lambda s: seen.append(s["pairs"]) or {},
    )
    list(graph.stream({"messages": [HumanMessage("hi")]}, CONFIG))
    assert seen == [pairs]


def test_a_list_an_internal_node_received_is_never_changed() -> None:
    """An internal node writes another key's list (few-shot pairs) into `messages`: that
    key's state is not rewritten (its pairs stay untagged: README, known gaps)."""

    class Shots(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]
        examples: list[Any]

    builder = StateGraph(Shots)
    builder.add_node("planner", lambda s: {"messages": s["examples"]})
    builder.add_edge(START, "planner")
    graph = with_visibility(
        builder.compile(checkpointer=InMemorySaver()),
        VisibilityPolicy(internal=["planner"], user_visible_keys=["examples"]),
    )
    examples = [("human", "VISIBLE q"), ("ai", "VISIBLE a")]
    out = graph.invoke({"messages": [HumanMessage("hi")], "examples": examples}, CONFIG)
    assert out["examples"] == [("human", "VISIBLE q"), ("ai", "VISIBLE a")]


@pytest.mark.parametrize("shape", ["pair", "string"])
def test_an_internal_node_appending_to_its_input_list_stays_internal(shape: str) -> None:
    """The node appends to its input's list in place and returns that list: the items after
    those it received are its own."""

    def planner(state: State) -> dict[str, Any]:
        state["messages"].append(("ai", "SECRET appended") if shape == "pair" else "SECRET s")
        return {"messages": state["messages"]}

    build = _then_answer(State, "planner", planner, internal=["planner"])
    _assert_kept_internal(build(False), build(True), True)


def test_a_visible_receiver_returning_the_list_it_was_sent_keeps_the_pair_internal() -> None:
    graph = _sender_graph(
        lambda s: {"messages": [("ai", "SECRET sent")]},
        lambda s: {"messages": s["messages"]},
    )
    stream, state = _exits(graph, sync=True)
    assert "SECRET" not in stream and "SECRET" not in state


def test_an_internal_sender_s_envelope_message_is_dropped_from_the_task_start() -> None:
    envelope = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", "AIMessage"],
        "kwargs": {"content": "SECRET envelope"},
    }
    graph = _sender_graph(lambda s: {"messages": [dict(envelope)]}, lambda s: {})
    stream, _ = _exits(graph, sync=True)
    assert "SECRET" not in stream


def test_what_an_internal_sender_appended_to_its_input_list_and_sent_is_dropped() -> None:
    """The sender appends its plan to its input's list in place and sends that list: the
    plan is its own (beyond what it received), so the receiving task's start drops it.
    (The state keeps it: the channel's own list was changed in place, as in raw LangGraph.)"""

    def send(state: dict[str, Any]) -> dict[str, Any]:
        state["messages"].append(("ai", "SECRET plan"))
        return {"messages": state["messages"]}

    graph = _sender_graph(send, lambda s: {})
    starts = [
        p["data"]
        for p in graph.stream(
            {"messages": [HumanMessage("hi")]}, CONFIG, stream_mode="tasks", version="v2"
        )
        if p["data"].get("name") == "worker" and "input" in p["data"]
    ]
    assert starts and "SECRET" not in repr(starts)
