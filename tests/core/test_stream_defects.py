"""Stream correctness: one small test per way the enforced stream once leaked or dropped.

Internal content carries SECRET_<defect><n> markers, visible content VISIBLE_<defect><n>;
a leak is a SECRET marker in repr() of any output event, a false drop a missing VISIBLE one.
Only lg_visibility's public API is used.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
)
from langchain_core.runnables import RunnableConfig, RunnableLambda, RunnableParallel
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from lg_visibility import (
    VisibilityPolicy,
    compile_with_visibility,
    visibility_of,
    with_visibility,
)
from lg_visibility.testing import FakeChatModel
from tests._support.stream_parts import leaks, missing, run_parts

WAYS = [
    pytest.param(True, "v1", id="sync-v1"),
    pytest.param(True, "v2", id="sync-v2"),
    pytest.param(False, "v1", id="async-v1"),
    pytest.param(False, "v2", id="async-v2"),
]
USER = {"messages": [HumanMessage("hello", id="u1")]}


def _wrap(builder: StateGraph, policy: VisibilityPolicy) -> Any:
    return with_visibility(builder.compile(checkpointer=InMemorySaver()), policy)


class SlowStart(BaseCallbackHandler):
    """A harmless tracer whose on_chain_start takes 50 ms (defect B's certain trigger)."""

    run_inline = True

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        if (kwargs.get("metadata") or {}).get("langgraph_node") == kwargs.get("name"):
            time.sleep(0.05)


# -- A: a message a node passes into a subgraph it invokes --------------------------------


def _prompt_into_subgraph() -> StateGraph:
    """Internal `route` builds a prompt and invokes `inner`, whose `deep/answer` is visible."""
    model = FakeChatModel(responses=["VISIBLE_A1 answer"])

    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    deep = StateGraph(MessagesState)
    deep.add_node("answer", answer)
    deep.add_edge(START, "answer")
    inner = StateGraph(MessagesState)
    inner.add_node("deep", deep.compile())
    inner.add_edge(START, "deep")
    inner_graph = inner.compile()

    def route(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        prompt = HumanMessage("SECRET_A1 rewrite the question")
        out = inner_graph.invoke({"messages": [prompt]}, config)
        return {"messages": [out["messages"][-1]]}

    root = StateGraph(MessagesState)
    root.add_node("route", route)
    root.add_edge(START, "route")
    return root


@pytest.mark.parametrize("mode", ["tasks", "debug", "values", "checkpoints"])
@pytest.mark.parametrize("sync,version", WAYS)
def test_invoked_subgraph_input_message_is_internal_like_its_builder(
    sync: bool, version: str, mode: str
) -> None:
    """A prompt an internal node builds and passes into a subgraph never leaves the graph."""
    policy = VisibilityPolicy(internal=["route"], user_visible=["route/deep"])
    graph = _wrap(_prompt_into_subgraph(), policy)
    parts = run_parts(graph, [USER], sync=sync, version=version, stream_mode=[mode, "messages"])
    assert leaks(parts, ["SECRET_A1"]) == []
    assert missing(parts, ["VISIBLE_A1"]) == []
    # the visible node inside the subgraph still shows its events in that mode
    assert any(m == mode and len(ns) == 2 for ns, m, _ in parts)


# -- B: events of a node that has not started in this run ----------------------------------


def _task_starts(parts: list, mode: str) -> list[str]:
    """Names of the task-start events (not task results) among `parts`."""
    found = []
    for _, m, p in parts:
        task = p.get("payload") if m == "debug" else p
        if m == mode and isinstance(task, dict) and "name" in task and "result" not in task:
            if m == "tasks" or p.get("type") == "task":
                found.append(task["name"])
    return found


def _notes_graph() -> StateGraph:
    """`prep` writes an internal message, `work` then starts with it in its input."""
    root = StateGraph(MessagesState)
    root.add_node("prep", lambda s: {"messages": [AIMessage("SECRET_B1 plan", id="p1")]})
    root.add_node("work", lambda s: {"messages": [AIMessage("SECRET_B2 worked", id="w1")]})
    root.add_edge(START, "prep")
    root.add_edge("prep", "work")
    return root


@pytest.mark.parametrize("mode", ["tasks", "debug"])
@pytest.mark.parametrize("sync,version", WAYS)
def test_task_start_of_tag_rule_internal_node_is_dropped(
    sync: bool, version: str, mode: str
) -> None:
    """A task-start of a node internal by a tag rule (a run tag on the call) is dropped."""
    policy = VisibilityPolicy(tags={"kn_internal": "internal"})
    graph = _wrap(_notes_graph(), policy)
    parts = run_parts(
        graph,
        [USER],
        sync=sync,
        version=version,
        stream_mode=mode,
        callbacks=[SlowStart()],
        tags=["kn_internal"],
    )
    raw = run_parts(
        _notes_graph().compile(checkpointer=InMemorySaver()),
        [USER],
        sync=sync,
        version=version,
        stream_mode=mode,
    )
    assert _task_starts(raw, mode) == ["prep", "work"]
    assert _task_starts(parts, mode) == []
    assert leaks(parts, ["SECRET_B1", "SECRET_B2"]) == []


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"result for {query}"


def _agent(name: str, call_args: str, answer: str) -> Any:
    """`create_agent(name=...)` as the root graph: a tool call, then an answer."""
    call = {"name": "lookup", "args": {"query": call_args}, "id": f"call_{name}"}
    model = FakeChatModel(
        responses=[AIMessage("", tool_calls=[call]), answer], tool_args_chunk_size=1000
    )
    return create_agent(model, [lookup], name=name, checkpointer=InMemorySaver())


@pytest.mark.parametrize("mode", ["tasks", "debug"])
@pytest.mark.parametrize("sync,version", WAYS)
def test_task_start_of_agent_rule_internal_tools_is_dropped(
    sync: bool, version: str, mode: str
) -> None:
    """An internal agent's task-starts (its `tools` one carries the tool-call args) are dropped."""
    policy = VisibilityPolicy(agents={"researcher": "internal"})
    graph = with_visibility(_agent("researcher", "SECRET_B3 query", "SECRET_B4 found"), policy)
    parts = run_parts(
        graph, [USER], sync=sync, version=version, stream_mode=mode, callbacks=[SlowStart()]
    )
    assert leaks(parts, ["SECRET_B3", "SECRET_B4"]) == []
    assert _task_starts(parts, mode) == []


@pytest.mark.parametrize("mode", ["tasks", "debug"])
@pytest.mark.parametrize("sync,version", WAYS)
def test_task_start_of_agent_rule_visible_node_is_kept(sync: bool, version: str, mode: str) -> None:
    """A visible agent's task-starts are delivered under a fail-closed default."""
    policy = VisibilityPolicy(default="internal", agents={"helper": "user_visible"})
    graph = with_visibility(_agent("helper", "VISIBLE_B5 query", "VISIBLE_B6 found"), policy)
    parts = run_parts(
        graph, [USER], sync=sync, version=version, stream_mode=mode, callbacks=[SlowStart()]
    )
    assert _task_starts(parts, mode) == ["model", "tools", "model"]
    assert missing(parts, ["VISIBLE_B5", "VISIBLE_B6"]) == []


class _Fan(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    note: str
    answer: str


def _replay_graph(declared: str) -> StateGraph:
    """`outer` invokes `inner` with a call-config declaration; inner runs `a` and `ask` in
    one step, `ask` interrupts, so on resume LangGraph replays `a`'s update."""
    inner = StateGraph(_Fan)
    inner.add_node(
        "a", lambda s: {"note": f"{'SECRET' if declared == 'internal' else 'VISIBLE'}_B7"}
    )
    inner.add_node("ask", lambda s: {"answer": str(interrupt("approve?"))})
    inner.add_edge(START, "a")
    inner.add_edge(START, "ask")
    inner_graph = inner.compile()

    def outer(state: _Fan, config: RunnableConfig) -> dict[str, Any]:
        out = inner_graph.invoke({"messages": []}, {**config, "metadata": {"visibility": declared}})
        return {"answer": out["answer"]}

    root = StateGraph(_Fan)
    root.add_node("outer", outer)
    root.add_edge(START, "outer")
    return root


@pytest.mark.parametrize("declared", ["internal", "user_visible"])
@pytest.mark.parametrize("sync,version", WAYS)
def test_replayed_update_follows_call_config_declaration(
    sync: bool, version: str, declared: str
) -> None:
    """An update LangGraph replays on resume is judged as the node's own run was."""
    # the pattern says the opposite of the declaration, so the fallback is always wrong
    other = "outer/a"
    policy = (
        VisibilityPolicy(user_visible=[other])
        if declared == "internal"
        else VisibilityPolicy(internal=[other])
    )
    graph = _wrap(_replay_graph(declared), policy)
    first = run_parts(graph, [USER], sync=sync, version=version, stream_mode="updates")
    assert any("__interrupt__" in repr(p) for _, _, p in first)
    resumed = run_parts(
        graph, [Command(resume="yes")], sync=sync, version=version, stream_mode="updates"
    )
    replayed = [p for ns, _, p in resumed if ns and "a" in p]
    if declared == "internal":
        assert leaks(first + resumed, ["SECRET_B7"]) == []
        assert replayed == []
    else:
        assert [p["a"] for p in replayed] == [{"note": "VISIBLE_B7"}]


# -- C: an internal model's tool call in a visible `tools` node's task input --------------


@pytest.mark.parametrize("mode", ["tasks", "debug"])
@pytest.mark.parametrize("sync,version", WAYS)
def test_tools_task_input_drops_internal_model_tool_call(
    sync: bool, version: str, mode: str
) -> None:
    """The raw tool call of an internal model is redacted from a visible `tools` task's input."""
    call = {"name": "lookup", "args": {"query": "SECRET_C1 args"}, "id": "call_c1"}
    model = FakeChatModel(
        responses=[AIMessage("", tool_calls=[call]), "SECRET_C2 done"],
        metadata={"visibility": "internal"},
        tool_args_chunk_size=1000,
    )
    root = StateGraph(MessagesState)
    root.add_node("agent", create_agent(model, [lookup], name="agent"))
    root.add_edge(START, "agent")
    graph = _wrap(root, VisibilityPolicy())
    parts = run_parts(graph, [USER], sync=sync, version=version, stream_mode=mode)
    assert leaks(parts, ["SECRET_C1", "SECRET_C2", "call_c1"]) == []
    tasks = [p.get("payload", p) if mode == "debug" else p for ns, _, p in parts if ns]
    tools_events = [t for t in tasks if isinstance(t, dict) and t.get("name") == "tools"]
    assert len(tools_events) == 2  # the visible tools node: its start and its result


# -- D: a visible LLM run whose chunks an internal node sums itself -----------------------


def _summing_graph(nostream: bool) -> StateGraph:
    """`inner/draft` is declared internal; its model call is declared user_visible on the
    call; the node streams the model and returns the sum of the chunks."""
    model = FakeChatModel(responses=["VISIBLE_D1 the answer"])

    def draft(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        call: dict[str, Any] = {"metadata": {"visibility": "user_visible"}}
        if nostream:
            call["tags"] = ["nostream"]
        total = None
        for chunk in model.stream(state["messages"], call):
            total = chunk if total is None else total + chunk
        return {"messages": [total]}

    inner = StateGraph(MessagesState)
    inner.add_node("draft", draft, metadata={"visibility": "internal"})
    inner.add_node("note", lambda s: {"messages": [AIMessage("SECRET_D2 note", id="n1")]})
    inner.add_edge(START, "draft")
    inner.add_edge("draft", "note")
    root = StateGraph(MessagesState)
    root.add_node("inner", inner.compile())
    root.add_edge(START, "inner")
    return root


@pytest.mark.parametrize(
    "nostream,subgraphs",
    [(False, False), (True, True), (True, False)],
    ids=["root-only", "nostream", "nostream-root-only"],
)
@pytest.mark.parametrize("sync,version", WAYS)
def test_summed_visible_llm_message_keeps_its_run_visibility(
    sync: bool, version: str, nostream: bool, subgraphs: bool
) -> None:
    """An unregistered visible LLM run's message, summed by an internal node, stays visible."""
    graph = _wrap(_summing_graph(nostream), VisibilityPolicy(internal=["inner/note"]))
    parts = run_parts(
        graph,
        [USER],
        sync=sync,
        version=version,
        stream_mode=["messages", "values"],
        subgraphs=subgraphs,
    )
    assert leaks(parts, ["SECRET_D2"]) == []
    assert missing(parts, ["VISIBLE_D1"], mode="messages") == []
    assert missing([p for p in parts if not p[0]], ["VISIBLE_D1"], mode="values") == []
    state = graph.raw_state.get_state({"configurable": {"thread_id": "t1"}}).values
    answer = next(m for m in state["messages"] if "VISIBLE_D1" in m.text)
    assert visibility_of(answer) == "user_visible"


# -- E: a hand-built message that reuses an id already in the node's input ----------------


def _rewriting_graph() -> StateGraph:
    """Internal `rewrite` replaces the user's message (same id, new object): add_messages
    update-by-id; visible `answer` then answers."""
    root = StateGraph(MessagesState)
    root.add_node("rewrite", lambda s: {"messages": [HumanMessage("SECRET_E1 rewritten", id="u1")]})
    root.add_node("answer", lambda s: {"messages": [AIMessage("VISIBLE_E1 answer", id="a1")]})
    root.add_edge(START, "rewrite")
    root.add_edge("rewrite", "answer")
    return root


def _fixed_id_graph() -> StateGraph:
    """Internal `note` writes a message with a fixed id on every turn (new content each turn)."""
    turns = iter(range(1, 100))

    def note(state: MessagesState) -> dict[str, Any]:
        n = next(turns)
        return {"messages": [AIMessage(f"SECRET_E{n + 1} note", id="fixed-note")]}

    root = StateGraph(MessagesState)
    root.add_node("note", note)
    root.add_node("answer", lambda s: {"messages": [AIMessage("VISIBLE_E2 answer")]})
    root.add_edge(START, "note")
    root.add_edge("note", "answer")
    return root


@pytest.mark.parametrize("mode", ["values", "checkpoints", "debug"])
@pytest.mark.parametrize("sync,version", WAYS)
def test_new_message_reusing_an_input_id_is_tagged_by_its_node(
    sync: bool, version: str, mode: str
) -> None:
    """A new object reusing an input message's id is the node's own message, not a pass-through."""
    graph = _wrap(_rewriting_graph(), VisibilityPolicy(internal=["rewrite"]))
    parts = run_parts(graph, [USER], sync=sync, version=version, stream_mode=mode)
    assert leaks(parts, ["SECRET_E1"]) == []
    assert missing(parts, ["VISIBLE_E1"]) == []
    state = graph.raw_state.get_state({"configurable": {"thread_id": "t1"}}).values
    assert [visibility_of(m) for m in state["messages"]] == ["internal", "user_visible"]


@pytest.mark.parametrize("mode", ["values", "checkpoints", "debug"])
@pytest.mark.parametrize("sync,version", WAYS)
def test_fixed_id_message_of_next_turn_is_tagged_by_its_node(
    sync: bool, version: str, mode: str
) -> None:
    """An internal node's fixed-id message of a later turn is tagged and never leaks."""
    graph = _wrap(_fixed_id_graph(), VisibilityPolicy(internal=["note"]))
    turns = [{"messages": [HumanMessage(f"turn {i}", id=f"u{i}")]} for i in range(3)]
    parts = run_parts(graph, turns, sync=sync, version=version, stream_mode=mode)
    assert leaks(parts, ["SECRET_E2", "SECRET_E3", "SECRET_E4"]) == []
    assert missing(parts, ["VISIBLE_E2"]) == []


# -- F: a declaration bound with with_config inside an LCEL composition -------------------


def _lcel_graph(shape: str, bound: str) -> StateGraph:
    """Node `answer`, declared the opposite of `bound` with add_node, calls a composition
    holding `model.with_config(metadata={"visibility": bound})`."""
    text = "VISIBLE_F1 answer" if bound == "user_visible" else "SECRET_F2 answer"
    model = FakeChatModel(responses=[text]).with_config(metadata={"visibility": bound})
    prompt = RunnableLambda(lambda s: s["messages"])
    if shape == "sequence":
        chain: Any = prompt | model
    else:
        chain = prompt | RunnableParallel(reply=model) | (lambda d: d["reply"])

    def answer(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [chain.invoke(state, config)]}

    node_decl = "internal" if bound == "user_visible" else "user_visible"
    root = StateGraph(MessagesState)
    root.add_node("answer", answer, metadata={"visibility": node_decl})
    root.add_edge(START, "answer")
    return root


@pytest.mark.parametrize("bound", ["user_visible", "internal"])
@pytest.mark.parametrize("shape", ["sequence", "parallel"])
@pytest.mark.parametrize("sync,version", WAYS)
def test_with_config_declaration_holds_inside_lcel(
    sync: bool, version: str, shape: str, bound: str
) -> None:
    """A model's with_config declaration beats its node's add_node one inside `a | model`."""
    graph = _wrap(_lcel_graph(shape, bound), VisibilityPolicy())
    parts = run_parts(graph, [USER], sync=sync, version=version, stream_mode=["messages", "values"])
    if bound == "user_visible":
        assert missing(parts, ["VISIBLE_F1"], mode="messages") == []
        assert missing(parts, ["VISIBLE_F1"], mode="values") == []
    else:
        assert leaks(parts, ["SECRET_F2"]) == []
    state = graph.raw_state.get_state({"configurable": {"thread_id": "t1"}}).values
    assert visibility_of(state["messages"][-1]) == bound


def _invoking_graph(bound: str, *, wrap_inner: bool) -> StateGraph:
    """Node `route` invokes a graph (compiled with `compile_with_visibility`, or plainly)
    whose node `answer`, declared the opposite of `bound`, runs `prompt | model` with
    `model.with_config(metadata={"visibility": bound})`."""
    inner = _lcel_graph("sequence", bound)
    graph = compile_with_visibility(inner, VisibilityPolicy()) if wrap_inner else inner.compile()

    def route(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        out = graph.invoke({"messages": state["messages"]}, config)
        return {"messages": out["messages"][len(state["messages"]) :]}

    root = StateGraph(MessagesState)
    root.add_node("route", route)
    root.add_edge(START, "route")
    return root


@pytest.mark.parametrize("bound", ["user_visible", "internal"])
@pytest.mark.parametrize("sync,version", WAYS)
def test_with_config_declaration_holds_inside_lcel_of_wrapped_invoked_graph(
    sync: bool, version: str, bound: str
) -> None:
    """Inside a graph a node invokes, `prompt | model.with_config(...)` holds once that graph
    is compiled with compile_with_visibility."""
    graph = _wrap(_invoking_graph(bound, wrap_inner=True), VisibilityPolicy())
    parts = run_parts(graph, [USER], sync=sync, version=version, stream_mode=["messages", "values"])
    if bound == "user_visible":
        assert missing(parts, ["VISIBLE_F1"], mode="messages") == []
        assert missing(parts, ["VISIBLE_F1"], mode="values") == []
    else:
        assert leaks(parts, ["SECRET_F2"]) == []
    state = graph.raw_state.get_state({"configurable": {"thread_id": "t1"}}).values
    assert visibility_of(state["messages"][-1]) == bound


@pytest.mark.parametrize("sync,version", WAYS)
def test_with_config_declaration_inside_lcel_of_unwrapped_invoked_graph_loses(
    sync: bool, version: str
) -> None:
    """The README's limit: in a plainly compiled graph a node invokes, the node's add_node
    declaration (internal) beats `prompt | model.with_config(...)` (user_visible)."""
    graph = _wrap(_invoking_graph("user_visible", wrap_inner=False), VisibilityPolicy())
    parts = run_parts(graph, [USER], sync=sync, version=version, stream_mode=["messages", "values"])
    assert missing(parts, ["VISIBLE_F1"], mode="messages") == ["VISIBLE_F1"]
    state = graph.raw_state.get_state({"configurable": {"thread_id": "t1"}}).values
    assert visibility_of(state["messages"][-1]) == "internal"


@pytest.mark.parametrize("call", ["user_visible", "internal"])
@pytest.mark.parametrize("sync,version", WAYS)
def test_add_node_declaration_beats_the_wrapped_graph_call_declaration(
    sync: bool, version: str, call: str
) -> None:
    """Innermost wins: a node's add_node declaration beats one on the wrapped graph's call."""
    node_decl = "internal" if call == "user_visible" else "user_visible"
    text = "SECRET_F3 answer" if node_decl == "internal" else "VISIBLE_F3 answer"
    model = FakeChatModel(responses=[text])
    root = StateGraph(MessagesState)
    root.add_node(
        "answer",
        lambda s: {"messages": [model.invoke(s["messages"])]},
        metadata={"visibility": node_decl},
    )
    root.add_node("after", lambda s: {"messages": [AIMessage(f"{call} after")]})
    root.add_edge(START, "answer")
    root.add_edge("answer", "after")
    graph = _wrap(root, VisibilityPolicy())
    parts = run_parts(
        graph,
        [USER],
        sync=sync,
        version=version,
        stream_mode=["messages", "values"],
        metadata={"visibility": call},
    )
    if node_decl == "internal":
        assert leaks(parts, ["SECRET_F3"]) == []
    else:
        assert missing(parts, ["VISIBLE_F3"], mode="messages") == []
    state = graph.raw_state.get_state({"configurable": {"thread_id": "t1"}}).values
    assert [visibility_of(m) for m in state["messages"][1:]] == [node_decl, call]
