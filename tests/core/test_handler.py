"""Deciding at the source: producer declarations, tags on every produced message, and the
public `VisibilityHandler` (policy override on a wrapped graph, tagging on a plain one)."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from typing import Annotated, Any, TypedDict
from uuid import uuid4

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManager
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig, RunnableLambda, RunnableParallel
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from lg_visibility import (
    VisibilityConfigError,
    VisibilityHandler,
    VisibilityPolicy,
    visibility_of,
    with_visibility,
)
from lg_visibility._provenance import path_of_checkpoint_ns
from lg_visibility._run import NONE_YET, RunState, record_of
from lg_visibility.testing import FakeChatModel
from tests._support.core import (
    AGENT_UPDATES_REDACTED,
    EVERYTHING_VISIBLE,
    SYNC_ASYNC,
    State,
    hand_node,
    llm_node,
    lookup,
    one_node_graph,
    run,
    tagged,
    thread,
    tokens,
    tool_script,
    user_input,
)


@SYNC_ASYNC
def test_declaration_on_node_beats_an_internal_pattern(sync: bool) -> None:
    """`add_node(..., metadata={"visibility": "user_visible"})` overrides `internal=[node]`."""
    graph = one_node_graph(
        llm_node(FakeChatModel(responses=["hello there"])),
        metadata={"visibility": "user_visible"},
    )
    enforced = with_visibility(graph, VisibilityPolicy(internal=["talk"]))
    items = run(enforced, user_input(), sync=sync, stream_mode="messages")
    assert tokens(items) == ["hello ", "there", ""]


@SYNC_ASYNC
def test_declaration_on_node_makes_its_llm_output_internal(sync: bool) -> None:
    """A node declared internal keeps its LLM tokens out, though no pattern names it."""
    graph = one_node_graph(
        llm_node(FakeChatModel(responses=["hello there"])), metadata={"visibility": "internal"}
    )
    items = run(
        with_visibility(graph, EVERYTHING_VISIBLE),
        user_input(),
        sync=sync,
        stream_mode=["messages", "values"],
    )
    assert [mode for mode, _ in items] == ["values", "values"]
    assert [tagged(v["messages"]) for _, v in items] == [[("HumanMessage", "hi", None)]] * 2


class NotedState(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    note: str


def noted_builder() -> StateGraph:
    """Root: `scratch` (declared internal), `work` (a subgraph declared internal, running
    `jot`), then `reply`; the first two write a non-message `note`."""
    inner = StateGraph(NotedState)
    inner.add_node("jot", lambda state: {"note": "inner scratch"})
    inner.add_edge(START, "jot")
    builder = StateGraph(NotedState)
    builder.add_node(
        "scratch", lambda state: {"note": "root scratch"}, metadata={"visibility": "internal"}
    )
    builder.add_node("work", inner.compile(), metadata={"visibility": "internal"})
    builder.add_node("reply", hand_node(AIMessage("your answer", id="reply-1")))
    builder.add_edge(START, "scratch")
    builder.add_edge("scratch", "work")
    builder.add_edge("work", "reply")
    return builder


@SYNC_ASYNC
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_declaration_on_node_drops_its_updates(sync: bool, version: str) -> None:
    """The updates of nodes declared internal (a root node, a subgraph node and the nodes
    inside it) are dropped, non-message fields included, as if a pattern named them."""
    enforced = with_visibility(
        noted_builder().compile(), VisibilityPolicy(user_visible_keys=["note"])
    )
    items = run(
        enforced, user_input(), sync=sync, stream_mode="updates", subgraphs=True, version=version
    )
    if version == "v2":
        items = [(i["ns"], i["data"]) for i in items]
    assert [(ns, list(update)) for ns, update in items] == [((), ["reply"])]


@SYNC_ASYNC
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_declaration_on_node_drops_its_task_events(sync: bool, version: str) -> None:
    """Task events of nodes declared internal are dropped, also those emitted before the
    node starts (its decision is then read from the graph's declarations)."""
    enforced = with_visibility(
        noted_builder().compile(), VisibilityPolicy(user_visible_keys=["note"])
    )
    items = run(
        enforced, user_input(), sync=sync, stream_mode="tasks", subgraphs=True, version=version
    )
    if version == "v2":
        items = [(i["ns"], i["data"]) for i in items]
    assert [(ns, task["name"], "result" in task) for ns, task in items] == [
        ((), "reply", False),
        ((), "reply", True),
    ]


@SYNC_ASYNC
def test_declaration_on_a_subgraphs_config_drops_its_nodes_updates(sync: bool) -> None:
    """A subgraph declared with `.with_config(metadata=...)`: its nodes (which inherit the
    declaration at run time) send no update, and neither does the `work` node that runs it
    (its runnable's own config decides it too)."""
    inner = StateGraph(State)
    inner.add_node("jot", hand_node(AIMessage("scratch note", id="note-1")))
    inner.add_edge(START, "jot")
    builder = StateGraph(State)
    builder.add_node("work", inner.compile().with_config(metadata={"visibility": "internal"}))
    builder.add_node("reply", hand_node(AIMessage("your answer", id="reply-1")))
    builder.add_edge(START, "work")
    builder.add_edge("work", "reply")
    enforced = with_visibility(builder.compile(), EVERYTHING_VISIBLE)
    items = run(enforced, user_input(), sync=sync, stream_mode="updates", subgraphs=True)
    assert [(ns, {k: tagged(v["messages"]) for k, v in u.items()}) for ns, u in items] == [
        ((), {"reply": [("AIMessage", "your answer", "user_visible")]}),
    ]


def test_run_state_declared_for_reads_the_nearest_declaration() -> None:
    """A path gets its own node's declaration, else the nearest enclosing one, else None."""
    state = RunState(EVERYTHING_VISIBLE, {"work": "internal", "work/answer": "user_visible"})
    paths = ["work", "work/jot", "work/jot/model", "work/answer", "work/answer/model", "reply"]
    assert [state.declared_for(p) for p in paths] == [
        "internal",
        "internal",
        "internal",
        "user_visible",
        "user_visible",
        None,
    ]


def test_record_of_keeps_both_first_entries_made_on_two_threads() -> None:
    """The callbacks of parallel tasks run on threads of their own. A record of rare runs
    is an empty frozenset until its first entry (`record_of` makes the set): two first
    entries land in one set even when both threads read the empty record before either
    makes it (forced by a barrier on each thread's first read). A lost entry is a leak."""
    barrier = threading.Barrier(2, timeout=5)

    class Owner:
        def __init__(self) -> None:
            self._calls: Any = NONE_YET
            self.readers: set[int] = set()

        @property
        def calls(self) -> Any:
            value = self._calls
            if threading.get_ident() not in self.readers:
                self.readers.add(threading.get_ident())
                barrier.wait()
            return value

        @calls.setter
        def calls(self, value: Any) -> None:
            self._calls = value

    owner = Owner()
    workers = [
        threading.Thread(target=lambda i=i: record_of(owner, "calls").add(f"call-{i}"))
        for i in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert owner._calls == {"call-0", "call-1"}
    assert RunState(EVERYTHING_VISIBLE).internal_tool_calls is NONE_YET  # made on first use


@pytest.mark.parametrize(
    ("model_says", "node_says", "expected"),
    [("user_visible", "internal", ["hi ", "you", ""]), ("internal", "user_visible", [])],
)
def test_declaration_on_model_beats_declaration_on_node(
    model_says: str, node_says: str, expected: list[str]
) -> None:
    """The model's constructor metadata decides over its node's metadata, either way round."""
    model = FakeChatModel(responses=["hi you"], metadata={"visibility": model_says})
    graph = one_node_graph(llm_node(model), metadata={"visibility": node_says})
    items = run(
        with_visibility(graph, EVERYTHING_VISIBLE), user_input(), sync=True, stream_mode="messages"
    )
    assert tokens(items) == expected


@pytest.mark.parametrize("how", ["with_config", "invoke_config"])
@pytest.mark.parametrize(
    ("call_says", "node_says", "expected"),
    [("user_visible", "internal", ["hi ", "you", ""]), ("internal", "user_visible", [])],
)
def test_declaration_on_call_beats_declaration_on_node(
    how: str, call_says: str, node_says: str, expected: list[str]
) -> None:
    """Call metadata (`model.with_config` or the invoke config) decides over node metadata."""
    model: Any = FakeChatModel(responses=["hi you"])
    metadata = {"visibility": call_says}
    if how == "with_config":
        node = llm_node(model.with_config(metadata=metadata))
    else:
        node = llm_node(model, {"metadata": metadata})
    graph = one_node_graph(node, metadata={"visibility": node_says})
    items = run(
        with_visibility(graph, EVERYTHING_VISIBLE), user_input(), sync=True, stream_mode="messages"
    )
    assert tokens(items) == expected


def test_declaration_on_call_beats_patterns() -> None:
    """A call declared user_visible streams inside a node the policy makes internal."""
    node = llm_node(
        FakeChatModel(responses=["hi you"]), {"metadata": {"visibility": "user_visible"}}
    )
    enforced = with_visibility(one_node_graph(node), VisibilityPolicy(internal=["talk"]))
    assert tokens(run(enforced, user_input(), sync=True, stream_mode="messages")) == [
        "hi ",
        "you",
        "",
    ]


@pytest.mark.parametrize(
    ("model_says", "call_says", "expected"),
    [("internal", "user_visible", []), ("user_visible", "internal", ["hi ", "you", ""])],
)
def test_declaration_on_model_beats_declaration_on_call(
    model_says: str, call_says: str, expected: list[str]
) -> None:
    """The model's own metadata is the innermost: LangChain merges it over the call's."""
    model = FakeChatModel(responses=["hi you"], metadata={"visibility": model_says})
    node = llm_node(model, {"metadata": {"visibility": call_says}})
    items = run(
        with_visibility(one_node_graph(node), EVERYTHING_VISIBLE),
        user_input(),
        sync=True,
        stream_mode="messages",
    )
    assert tokens(items) == expected


def test_declaration_in_invoke_config_beats_with_config() -> None:
    """Of two call declarations, the invoke config (applied last) decides."""
    model = FakeChatModel(responses=["hi you"]).with_config(metadata={"visibility": "internal"})
    node = llm_node(model, {"metadata": {"visibility": "user_visible"}})
    items = run(
        with_visibility(one_node_graph(node), EVERYTHING_VISIBLE),
        user_input(),
        sync=True,
        stream_mode="messages",
    )
    assert tokens(items) == ["hi ", "you", ""]


@SYNC_ASYNC
def test_agent_rule_applies_to_a_named_create_agent(sync: bool) -> None:
    """`agents={"researcher": "internal"}` silences the agent named so, wherever it runs."""
    researcher = create_agent(FakeChatModel(responses=["digging"]), name="researcher")
    writer = create_agent(FakeChatModel(responses=["the report"]), name="writer")
    builder = StateGraph(State)
    builder.add_node("research", researcher)
    builder.add_node("write", writer)
    builder.add_edge(START, "research")
    builder.add_edge("research", "write")
    policy = VisibilityPolicy(agents={"researcher": "internal"})
    items = run(
        with_visibility(builder.compile(), policy),
        user_input(),
        sync=sync,
        stream_mode="messages",
        subgraphs=True,
    )
    assert [m.content for _, (m, _) in items] == ["the ", "report", ""]


@SYNC_ASYNC
def test_tag_rule_applies_to_a_call_with_that_tag(sync: bool) -> None:
    """`tags={"scratch": "internal"}` silences a call tagged so, beside an untagged one."""
    model = FakeChatModel(responses=["draft words", "final words"])

    def call(state: State) -> dict[str, Any]:
        draft = model.invoke(state["messages"], {"tags": ["scratch"]})
        return {"messages": [draft, model.invoke(state["messages"])]}

    async def acall(state: State) -> dict[str, Any]:
        draft = await model.ainvoke(state["messages"], {"tags": ["scratch"]})
        return {"messages": [draft, await model.ainvoke(state["messages"])]}

    graph = one_node_graph(RunnableLambda(call, acall))
    policy = VisibilityPolicy(tags={"scratch": "internal"})
    items = run(with_visibility(graph, policy), user_input(), sync=sync, stream_mode="messages")
    assert tokens(items) == ["final ", "words", ""]


def _tools_node_tagged_visible() -> Any:
    """`agent` calls `lookup` and `vault` at once; `tools` is a ToolNode tagged `shown`, and
    `vault` is tagged `scratch`."""

    @tool
    def vault(q: str) -> str:
        """Open the vault."""
        return "SECRET-VAULT"

    vault.tags = ["scratch"]
    model = FakeChatModel(
        responses=[
            AIMessage(
                "",
                tool_calls=[
                    {"name": "lookup", "args": {"order": "A1"}, "id": "c1"},
                    {"name": "vault", "args": {"q": "x"}, "id": "c2"},
                ],
            )
        ]
    )
    builder = StateGraph(State)
    builder.add_node("agent", llm_node(model))
    builder.add_node("tools", ToolNode([lookup, vault]).with_config(tags=["shown"]))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    return builder.compile()


def test_tag_rules_that_disagree_on_one_run_make_it_internal() -> None:
    """A tool tagged internal inside a tools node tagged visible carries both tags, the
    node's first: its answer stays in, and its neighbour's is delivered."""
    policy = VisibilityPolicy(tags={"scratch": "internal", "shown": "user_visible"})
    modes = ["updates", "tasks", "debug", "values", "messages"]

    def texts(graph: Any) -> tuple[str, str]:
        items = list(graph.stream(user_input(), stream_mode=modes, subgraphs=True))
        events = asyncio.run(_events(graph))
        return repr(items), repr(events)

    async def _events(graph: Any) -> list[Any]:
        return [e async for e in graph.astream_events(user_input(), version="v2")]

    raw = texts(_tools_node_tagged_visible())
    assert all("SECRET-VAULT" in text and "order A1 shipped" in text for text in raw)
    enforced = texts(with_visibility(_tools_node_tagged_visible(), policy))
    assert all("SECRET-VAULT" not in text for text in enforced)
    assert all("order A1 shipped" in text for text in enforced)


@SYNC_ASYNC
def test_declaration_unknown_on_model_raises_when_the_run_happens(sync: bool) -> None:
    """An unknown value declared on a model raises VisibilityConfigError naming it and its path."""
    model = FakeChatModel(responses=["hi"], metadata={"visibility": "secret"})
    enforced = with_visibility(one_node_graph(llm_node(model)), EVERYTHING_VISIBLE)
    with pytest.raises(VisibilityConfigError) as info:
        run(enforced, user_input(), sync=sync, stream_mode="messages")
    assert str(info.value) == (
        "metadata {'visibility': ...} of a run at 'talk': unknown visibility 'secret'; "
        "use one of 'user_visible', 'internal'."
    )


# -- messages built by nodes ------------------------------------------------------------------


@SYNC_ASYNC
def test_handler_tags_a_hand_built_message_with_its_nodes_decision(sync: bool) -> None:
    """A node's own AIMessage (no LLM run) belongs to the node: internal, so never streamed."""
    builder = StateGraph(State)
    builder.add_node("note", hand_node(AIMessage("scratch note", id="note-1")))
    builder.add_node("reply", hand_node(AIMessage("your answer", id="reply-1")))
    builder.add_edge(START, "note")
    builder.add_edge("note", "reply")
    saver = InMemorySaver()
    enforced = with_visibility(
        builder.compile(checkpointer=saver), VisibilityPolicy(internal=["note"])
    )
    items = run(enforced, user_input(), thread(), sync=sync, stream_mode=["messages", "updates"])
    assert [
        (mode, tagged([p[0]] if mode == "messages" else p["reply"]["messages"]))
        for mode, p in items
    ] == [
        ("messages", [("AIMessage", "your answer", "user_visible")]),
        ("updates", [("AIMessage", "your answer", "user_visible")]),
    ]
    assert tagged(enforced.raw_state.get_state(thread()).values["messages"]) == [
        ("HumanMessage", "hi", None),
        ("AIMessage", "scratch note", "internal"),
        ("AIMessage", "your answer", "user_visible"),
    ]


def test_handler_leaves_a_passed_through_message_untagged() -> None:
    """A node returning a message it received did not produce it: the message keeps no tag."""
    builder = StateGraph(State)
    builder.add_node("echo", lambda state: {"messages": [state["messages"][-1]]})
    builder.add_edge(START, "echo")
    enforced = with_visibility(builder.compile(), VisibilityPolicy(internal=["echo"]))
    out = enforced.invoke(user_input())
    assert tagged(out["messages"]) == [("HumanMessage", "hi", None)]


@SYNC_ASYNC
def test_handler_tool_message_answering_an_internal_tool_call_is_internal(sync: bool) -> None:
    """The agent's tools node is visible by path but answers a call of an internal model."""
    agent = create_agent(tool_script(metadata={"visibility": "internal"}), tools=[lookup])
    enforced = with_visibility(agent, EVERYTHING_VISIBLE)
    items = run(enforced, user_input(), sync=sync, stream_mode=["messages", "updates"])
    assert items == AGENT_UPDATES_REDACTED
    assert tagged(enforced.invoke(user_input())["messages"]) == [
        ("HumanMessage", "hi", None),
        ("AIMessage", "", "internal"),
        ("ToolMessage", "order A1 shipped", "internal"),
        ("AIMessage", "it shipped", "internal"),
    ]


# -- tags everywhere ------------------------------------------------------------------------


def agent_in_subgraph(*, checkpointer: Any = None, ask: bool = False) -> Any:
    """Root: `work` (a subgraph: `agent`, a tool-calling create_agent; optionally `ask`, an
    interrupt) then `respond`, a visible LLM answer."""
    inner = StateGraph(State)
    inner.add_node("agent", create_agent(tool_script(), tools=[lookup]))
    inner.add_edge(START, "agent")
    if ask:

        def ask_node(state: State) -> dict[str, Any]:
            return {"messages": [AIMessage(f"approved: {interrupt('approve?')}", id="ack-1")]}

        inner.add_node("ask", ask_node)
        inner.add_edge("agent", "ask")
    outer = StateGraph(State)
    outer.add_node("work", inner.compile())
    outer.add_node("respond", llm_node(FakeChatModel(responses=["all good"])))
    outer.add_edge(START, "work")
    outer.add_edge("work", "respond")
    return outer.compile(checkpointer=checkpointer)


WORK_MESSAGES = [
    ("AIMessage", "", "internal"),
    ("ToolMessage", "order A1 shipped", "internal"),
    ("AIMessage", "it shipped", "internal"),
]


@SYNC_ASYNC
def test_handler_tags_every_streamed_chunk_and_message(sync: bool) -> None:
    """With nothing internal, the first chunk of every streamed message and every whole
    message (the ToolMessage), at any depth, carries the tag; later chunks do not."""
    enforced = with_visibility(agent_in_subgraph(), EVERYTHING_VISIBLE)
    items = run(enforced, user_input(), sync=sync, stream_mode="messages", subgraphs=True)
    streamed = [message for _, (message, _) in items]
    assert [type(m).__name__ for m in streamed] == [
        *["AIMessageChunk"] * 3,  # the tool call: name with args, rest of args, last chunk
        "ToolMessage",
        *["AIMessageChunk"] * 3,  # "it shipped"
        *["AIMessageChunk"] * 3,  # "all good"
    ]
    first = ["user_visible", None, None]
    assert [visibility_of(m) for m in streamed] == [*first, "user_visible", *first, *first]
    assert len({m.id for m in streamed}) == 4


def test_handler_tags_state_and_checkpoints_of_every_namespace() -> None:
    """Every AIMessage and ToolMessage in every checkpoint, root and subgraphs, carries its tag
    as a plain str after the InMemorySaver round trip."""
    saver = InMemorySaver()
    enforced = with_visibility(
        agent_in_subgraph(checkpointer=saver), VisibilityPolicy(internal=["work"])
    )
    enforced.invoke(user_input(), thread())
    found: dict[str, set[tuple[str, Any, Any, type]]] = {}
    for checkpoint in saver.list(None):
        ns = checkpoint.config["configurable"]["checkpoint_ns"]
        for m in checkpoint.checkpoint["channel_values"].get("messages", []):
            if isinstance(m, (AIMessage, ToolMessage)):
                tag = m.response_metadata.get("visibility")
                found.setdefault(path_of_checkpoint_ns(ns), set()).add(
                    (type(m).__name__, m.content, tag, type(tag))
                )
    internal = {(kind, content, tag, str) for kind, content, tag in WORK_MESSAGES}
    assert found == {
        "": internal | {("AIMessage", "all good", "user_visible", str)},
        "work": internal,
        "work/agent": internal,
    }


def test_handler_tags_subgraph_state_and_history() -> None:
    """`get_state(subgraphs=True)` and `get_state_history` of a waiting subgraph show the tags."""
    enforced = with_visibility(
        agent_in_subgraph(checkpointer=InMemorySaver(), ask=True),
        VisibilityPolicy(internal=["work"]),
    )
    enforced.invoke(user_input(), thread())
    sub = enforced.raw_state.get_state(thread(), subgraphs=True).tasks[0].state
    assert tagged(sub.values["messages"]) == [("HumanMessage", "hi", None), *WORK_MESSAGES]
    sub_thread = {
        "configurable": {
            **thread()["configurable"],
            "checkpoint_ns": sub.config["configurable"]["checkpoint_ns"],
        }
    }
    history = [
        tagged(s.values.get("messages", []))
        for s in enforced.raw_state.get_state_history(sub_thread)
    ]
    assert history == [
        [("HumanMessage", "hi", None), *WORK_MESSAGES],
        [("HumanMessage", "hi", None)],
        [],
    ]
    root_history = [
        tagged(s.values.get("messages", [])) for s in enforced.raw_state.get_state_history(thread())
    ]
    assert root_history == [[("HumanMessage", "hi", None)], []]


def test_handler_tags_survive_resume_after_an_interrupt() -> None:
    """After resuming, the final root state holds the subgraph's and root's messages, tagged."""
    enforced = with_visibility(
        agent_in_subgraph(checkpointer=InMemorySaver(), ask=True),
        VisibilityPolicy(internal=["work"]),
    )
    enforced.invoke(user_input(), thread())
    enforced.invoke(Command(resume="yes"), thread())
    assert tagged(enforced.raw_state.get_state(thread()).values["messages"]) == [
        ("HumanMessage", "hi", None),
        *WORK_MESSAGES,
        ("AIMessage", "approved: yes", "internal"),
        ("AIMessage", "all good", "user_visible"),
    ]


@SYNC_ASYNC
def test_handler_merged_message_has_exactly_the_tag(sync: bool) -> None:
    """Chunks merged (by LangChain and by a client) carry "user_visible" once, as a plain str."""
    saver = InMemorySaver()
    words = "one two three four five six"
    graph = one_node_graph(llm_node(FakeChatModel(responses=[words])), checkpointer=saver)
    enforced = with_visibility(graph, EVERYTHING_VISIBLE)
    items = run(enforced, user_input(), thread(), sync=sync, stream_mode="messages")
    chunks = [m for m, _ in items]
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged = merged + chunk
    final = enforced.get_state(thread()).values["messages"][-1]
    for tag in (merged.response_metadata["visibility"], final.response_metadata["visibility"]):
        assert tag == "user_visible"
        assert json.dumps(tag) == '"user_visible"'
    assert type(final.response_metadata["visibility"]) is str
    assert final.content == words


# -- VisibilityHandler -------------------------------------------------------------------------


def spied_graph(policy: VisibilityPolicy) -> tuple[Any, list[list[Any]]]:
    """Root `think` (an LLM, internal under `policy`) then `answer`; `think` records the
    callback handlers its run was given."""
    seen: list[list[Any]] = []
    model = FakeChatModel(responses=["secret words"])

    def think(state: State, config: RunnableConfig) -> dict[str, Any]:
        seen.append(list(config["callbacks"].handlers))
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("think", think)
    builder.add_node("answer", llm_node(FakeChatModel(responses=["shown words"])))
    builder.add_edge(START, "think")
    builder.add_edge("think", "answer")
    return with_visibility(builder.compile(), policy), seen


def manager_of(handler: Any) -> CallbackManager:
    """A callback manager that hands `handler` down to child runs, as a parent run's does."""
    return CallbackManager(handlers=[handler], inheritable_handlers=[handler])


STAFF_VIEW = ["secret ", "words", "", "shown ", "words", ""]
USER_VIEW = ["shown ", "words", ""]
INTERNAL_THINK = VisibilityPolicy(internal=["think"])


@SYNC_ASYNC
@pytest.mark.parametrize("container", ["list", "manager"])
def test_visibility_handler_replaces_the_policy_for_that_run(sync: bool, container: str) -> None:
    """A staff view (`VisibilityPolicy()`) in the call's callbacks shows the internal tokens."""
    graph, _ = spied_graph(INTERNAL_THINK)
    handler = VisibilityHandler(EVERYTHING_VISIBLE)
    callbacks: Any = [handler] if container == "list" else manager_of(handler)
    staff = run(graph, user_input(), {"callbacks": callbacks}, sync=sync, stream_mode="messages")
    assert tokens(staff) == STAFF_VIEW


def test_visibility_handler_applies_to_that_run_only() -> None:
    """The next run without the handler enforces the graph's own policy again."""
    graph, _ = spied_graph(INTERNAL_THINK)
    handler = VisibilityHandler(EVERYTHING_VISIBLE)
    run(graph, user_input(), {"callbacks": [handler]}, sync=True, stream_mode="messages")
    assert tokens(run(graph, user_input(), sync=True, stream_mode="messages")) == USER_VIEW


@pytest.mark.parametrize("container", ["list", "manager"])
@pytest.mark.parametrize("stream_mode", ["messages", "values"])
def test_visibility_handler_is_not_left_attached(container: str, stream_mode: str) -> None:
    """The handler passed in the call's callbacks is not among the callbacks the nodes get."""
    graph, seen = spied_graph(INTERNAL_THINK)
    handler = VisibilityHandler(EVERYTHING_VISIBLE)
    callbacks: Any = [handler] if container == "list" else manager_of(handler)
    run(graph, user_input(), {"callbacks": callbacks}, sync=True, stream_mode=stream_mode)
    assert len(seen) == 1
    assert [h for h in seen[0] if h is handler] == []
    assert [h.policy for h in seen[0] if isinstance(h, VisibilityHandler)] == (
        [] if stream_mode == "messages" else [EVERYTHING_VISIBLE]
    )


def test_visibility_handler_in_graph_config_replaces_the_policy() -> None:
    """A handler bound with `graph.with_config(callbacks=[...])` applies to every run."""
    graph, _ = spied_graph(INTERNAL_THINK)
    staff = graph.with_config(callbacks=[VisibilityHandler(EVERYTHING_VISIBLE)])
    assert tokens(run(staff, user_input(), sync=True, stream_mode="messages")) == STAFF_VIEW


def test_visibility_handler_in_graph_config_stays_bound_across_runs() -> None:
    """Running does not unbind the handler: the graph's config keeps it and the next run
    applies it again."""
    graph, _ = spied_graph(INTERNAL_THINK)
    handler = VisibilityHandler(EVERYTHING_VISIBLE)
    staff = graph.with_config(callbacks=[handler])
    first = tokens(run(staff, user_input(), sync=True, stream_mode="messages"))
    second = tokens(run(staff, user_input(), sync=True, stream_mode="messages"))
    assert [first, second] == [STAFF_VIEW, STAFF_VIEW]
    assert staff.config["callbacks"] == [handler]


def test_visibility_handler_in_graph_config_is_not_attached_to_the_run() -> None:
    """A handler bound with `with_config` decides the policy but is not a callback of the run."""
    graph, seen = spied_graph(INTERNAL_THINK)
    handler = VisibilityHandler(EVERYTHING_VISIBLE)
    run(graph.with_config(callbacks=[handler]), user_input(), sync=True, stream_mode="messages")
    assert len(seen) == 1
    assert [h for h in seen[0] if isinstance(h, VisibilityHandler)] == []


def test_visibility_handler_in_the_call_beats_one_in_graph_config() -> None:
    """A user view passed in the call overrides a staff view bound to the graph, and the staff
    handler does not tag this run: a message an internal node builds stays out."""
    builder = StateGraph(State)
    builder.add_node("think", hand_node(AIMessage("scratch note", id="note-1")))
    builder.add_edge(START, "think")
    staff = with_visibility(builder.compile(), INTERNAL_THINK).with_config(
        callbacks=[VisibilityHandler(EVERYTHING_VISIBLE)]
    )
    user = {"callbacks": [VisibilityHandler(INTERNAL_THINK)]}
    items = run(staff, user_input(), user, sync=True, stream_mode=["messages", "updates"])
    assert items == []
    assert tagged(staff.invoke(user_input(), user)["messages"]) == [
        ("HumanMessage", "hi", None),
        ("AIMessage", "scratch note", "internal"),
    ]


def test_visibility_handler_in_graph_config_tags_tool_answers_of_internal_calls() -> None:
    """With the handler bound to a wrapped graph, a ToolMessage answering an internal call
    still stays out of the stream."""
    agent = create_agent(tool_script(metadata={"visibility": "internal"}), tools=[lookup])
    graph = with_visibility(agent, VisibilityPolicy(default="internal")).with_config(
        callbacks=[VisibilityHandler(EVERYTHING_VISIBLE)]
    )
    items = run(graph, user_input(), sync=True, stream_mode=["messages", "updates"])
    assert items == AGENT_UPDATES_REDACTED


@SYNC_ASYNC
def test_visibility_handler_on_a_plain_graph_tags_without_dropping(sync: bool) -> None:
    """On a plain compiled graph the stream is LangGraph's (internal tokens too), now tagged."""
    builder = StateGraph(State)
    builder.add_node("think", llm_node(FakeChatModel(responses=["secret words"])))
    builder.add_node("note", hand_node(AIMessage("scratch note", id="note-1")))
    builder.add_edge(START, "think")
    builder.add_edge("think", "note")
    plain = builder.compile()
    config = {"callbacks": [VisibilityHandler(VisibilityPolicy(internal=["think", "note"]))]}
    items = run(plain, user_input(), config, sync=sync, stream_mode=["messages", "values"])
    assert [(m, tagged([p[0]])[0]) for m, p in items if m == "messages"] == [
        ("messages", ("AIMessageChunk", "secret ", "internal")),
        ("messages", ("AIMessageChunk", "words", "internal")),
        ("messages", ("AIMessageChunk", "", "internal")),
        ("messages", ("AIMessage", "scratch note", "internal")),
    ]
    assert tagged([p for m, p in items if m == "values"][-1]["messages"]) == [
        ("HumanMessage", "hi", None),
        ("AIMessage", "secret words", "internal"),
        ("AIMessage", "scratch note", "internal"),
    ]


def test_visibility_handler_on_a_plain_graph_tags_tool_answers_of_internal_calls() -> None:
    """On a plain graph, a ToolMessage answering a call of an internal model is tagged internal."""
    agent = create_agent(tool_script(), tools=[lookup])
    handler = VisibilityHandler(VisibilityPolicy(internal=["model"]))
    out = agent.invoke(user_input(), {"callbacks": [handler]})
    assert tagged(out["messages"]) == [
        ("HumanMessage", "hi", None),
        ("AIMessage", "", "internal"),
        ("ToolMessage", "order A1 shipped", "internal"),
        ("AIMessage", "it shipped", "internal"),
    ]


def test_visibility_handler_rejects_a_non_policy() -> None:
    """`VisibilityHandler` takes a VisibilityPolicy; anything else raises, showing the fix."""
    with pytest.raises(VisibilityConfigError) as info:
        VisibilityHandler({"internal": ["x"]})  # type: ignore[arg-type]
    assert str(info.value) == (
        "VisibilityHandler takes a VisibilityPolicy, got dict {'internal': ['x']}; write "
        "VisibilityHandler(VisibilityPolicy(internal=[...]))."
    )


def test_visibility_of_reads_only_known_tags() -> None:
    """`visibility_of` returns the tag, or None for an untagged or unknown value."""
    messages = [
        AIMessage("a", response_metadata={"visibility": "internal"}),
        AIMessage("b", response_metadata={"visibility": "user_visible"}),
        AIMessage("c"),
        AIMessage("d", response_metadata={"visibility": "secret"}),
    ]
    assert [visibility_of(m) for m in messages] == ["internal", "user_visible", None, None]


def _calls_node(calls: list[tuple[str, str]], run_id: Any, *, gather: bool = False) -> Any:
    """A node making one model call per (marker, visibility), each with `run_id` (one UUID
    object for all, or none), streamed token by token, every token holding its call's
    marker; with `gather`, concurrently (on threads when run sync)."""

    def config(vis: str) -> RunnableConfig:
        metadata = {"visibility": vis}
        return {"run_id": run_id, "metadata": metadata} if run_id else {"metadata": metadata}

    def model(marker: str) -> FakeChatModel:
        text = " ".join(f"{marker}{i}" for i in range(4))
        return FakeChatModel(responses=[text], token_delay=0.001)

    def call(state: State) -> dict[str, Any]:
        if gather:  # LangChain's executor threads, each call's context copied
            parallel = RunnableParallel({m: model(m).with_config(config(v)) for m, v in calls})
            out = parallel.invoke(state["messages"])
            return {"messages": [out[m] for m, _ in calls]}
        return {"messages": [model(m).invoke(state["messages"], config(v)) for m, v in calls]}

    async def acall(state: State) -> dict[str, Any]:
        coros = [model(m).ainvoke(state["messages"], config(v)) for m, v in calls]
        if gather:
            return {"messages": list(await asyncio.gather(*coros))}
        return {"messages": [await c for c in coros]}

    return RunnableLambda(call, afunc=acall)


def _visible_part(raw: list[Any], calls: list[tuple[str, str]]) -> list[str]:
    """The oracle: raw's tokens of the calls whose marker is visible, in raw's order. A
    token belongs to the call whose marker it holds; the last chunk of a call has no text
    and belongs to the call of its message id, or (calls sharing a run id share the message
    id too, and run one after the other) of the token before it."""
    shown = {m for m, v in calls if v == "user_visible"}
    by_id: dict[str, set[str]] = {}
    for c, _ in raw:
        by_id.setdefault(c.id, set()).update(m for m, _ in calls if m in str(c.content))
    out, owner = [], None
    for c, _ in raw:
        marked = [m for m, _ in calls if m in str(c.content)]
        ids_owner = by_id[c.id]
        owner = marked[0] if marked else next(iter(ids_owner)) if len(ids_owner) == 1 else owner
        if owner in shown:
            out.append(c.content)
    assert out and len(out) < len(raw)  # control: raw has internal tokens to drop
    return out


@SYNC_ASYNC
@pytest.mark.parametrize("first", ["internal", "user_visible"])
def test_one_run_id_object_for_several_model_calls_judges_each_call(sync: bool, first: str) -> None:
    """A caller may pass the same UUID object as `run_id` to several model calls. The
    handler's shortcut for a token of the run it saw last is reset as a call starts and
    ends: each call's tokens are judged by that call alone. Ground truth: the markers."""
    second = "user_visible" if first == "internal" else "internal"
    calls = [("SECRETA", "internal"), ("SHOWNA", "user_visible")]
    if first == "user_visible":
        calls.reverse()
    calls.append(("SECRETB" if second == "internal" else "SHOWNB", second))
    graph = one_node_graph(_calls_node(calls, uuid4()))
    raw = run(graph, user_input(), sync=sync, stream_mode="messages")
    items = run(
        with_visibility(graph, EVERYTHING_VISIBLE), user_input(), sync=sync, stream_mode="messages"
    )
    assert tokens(items) == _visible_part(raw, calls)


@SYNC_ASYNC
def test_interleaved_model_calls_have_their_tokens_judged_each_by_its_own_run(sync: bool) -> None:
    """Concurrent calls, one visible between two internal ones, stream interleaved tokens:
    each token is judged by its own run, whichever run the previous token came from. The
    control: raw LangGraph does interleave them (else this would test nothing)."""
    calls = [("SECRET", "internal"), ("SHOWN", "user_visible"), ("HIDDEN", "internal")]
    graph = one_node_graph(_calls_node(calls, None, gather=True))
    raw = run(graph, user_input(), sync=sync, stream_mode="messages")
    owners = [m for t in tokens(raw) for m in ("SECRET", "SHOWN", "HIDDEN") if m in t]
    assert sum(a != b for a, b in itertools.pairwise(owners)) >= 3, owners  # interleaved
    items = run(
        with_visibility(graph, EVERYTHING_VISIBLE), user_input(), sync=sync, stream_mode="messages"
    )
    assert tokens(items) == _visible_part(raw, calls)


@SYNC_ASYNC
def test_an_internal_call_reusing_the_run_id_of_an_unfinished_visible_stream_stays_internal(
    sync: bool,
) -> None:
    """A visible model stream left open (never closed, so never ended) keeps LangGraph's
    registration of its run id; an internal call given the same `run_id` afterwards must not
    stream through it. Ground truth: the markers; the control: raw streams both."""
    run_id = uuid4()
    held: list[Any] = []
    calls = [("SHOWN", "user_visible"), ("SECRET", "internal")]

    def config(vis: str) -> RunnableConfig:
        return {"run_id": run_id, "metadata": {"visibility": vis}}

    def shown() -> FakeChatModel:
        return FakeChatModel(responses=["SHOWN0 SHOWN1 SHOWN2"])

    def secret() -> FakeChatModel:
        return FakeChatModel(responses=["SECRET0 SECRET1"])

    def call(state: State) -> dict[str, Any]:
        stream = shown().stream(state["messages"], config("user_visible"))
        next(stream)
        held.append(stream)  # left open
        return {"messages": [secret().invoke(state["messages"], config("internal"))]}

    async def acall(state: State) -> dict[str, Any]:
        stream = shown().astream(state["messages"], config("user_visible"))
        await anext(stream)
        held.append(stream)  # left open
        return {"messages": [await secret().ainvoke(state["messages"], config("internal"))]}

    graph = one_node_graph(RunnableLambda(call, afunc=acall))
    raw = run(graph, user_input(), sync=sync, stream_mode="messages")
    items = run(
        with_visibility(graph, EVERYTHING_VISIBLE), user_input(), sync=sync, stream_mode="messages"
    )
    assert tokens(items) == _visible_part(raw, calls) == ["SHOWN0 "]


def test_an_internal_node_handed_an_answered_visible_call_does_not_make_it_internal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An internal node handed the history after a visible model's tool round (the
    model's own declaration makes its call visible inside an internal node) did not make
    that call: it stays visible, so its task and tool events are kept whenever the consumer
    reads them. A call the node is handed unanswered (a tools node's) is internal at once,
    as before. (The getter judges a part when the consumer reads it: with a slow consumer
    the call's events were judged after the node's second start, and dropped.)"""
    from langgraph.prebuilt import ToolNode

    import lg_visibility._wrap as wrap_module

    runs: list[RunState] = []

    def recording(*args: Any, **kwargs: Any) -> RunState:
        run = RunState(*args, **kwargs)
        runs.append(run)
        return run

    monkeypatch.setattr(wrap_module, "RunState", recording)
    model = tool_script(metadata={"visibility": "user_visible"})

    async def agent(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    def route(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if getattr(last, "tool_calls", None) else END

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    graph = with_visibility(builder.compile(), VisibilityPolicy(internal=["agent"]))
    run(graph, user_input(), sync=False, stream_mode=["messages", "tools"])
    assert runs and "call-1" not in runs[-1].internal_tool_calls

    runs.clear()
    hidden = with_visibility(builder.compile(), VisibilityPolicy(internal=["agent", "tools"]))
    run(hidden, user_input(), sync=False, stream_mode=["messages", "tools"])
    assert runs and "call-1" in runs[-1].internal_tool_calls
