"""A create_agent whose model is internal, resumed at its tools step.

`create_agent` sends its tools node the bare tool calls (`Send("tools", [call])`, langchain
1.5). A run resumed at that task (`interrupt_before=["tools"]`, or `interrupt()` inside the
tool) holds no message saying who made the call: the model's message is only in the saved
state. The tool's result and its `tools` events must stay internal on every way out, and a
visible model's tool result must still reach the user. Without an interrupt, the same
holds for the events the tool's run makes (`astream_events`), which carry its result before
the tools node ends.

Ground truth is the secret the tool writes into its result, never our tags. The control
shows the check fails when the decider cannot read the tools node's state.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from typing import Annotated, Any, TypedDict, cast

import pytest
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.callbacks import dispatch_custom_event
from langchain_core.documents import Document
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_stream_writer
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, Send, interrupt

from lg_visibility import VisibilityHandler, VisibilityPolicy, visibility_of, with_visibility
from lg_visibility.testing import FakeChatModel
from tests._support.core import TIMEOUT, State, pytestmark, run, thread

__all__ = ["pytestmark"]

MODES = ["values", "tools", "updates", "messages"]
HOWS = ["interrupt in tool", "interrupt_before tools"]
WAYS = ["stream", "astream", "astream_events", "astream_events v1"]


@tool
def asking(q: str) -> str:
    """Search, once approved."""
    interrupt("run the search?")
    return f"TOOLSECRET result for {q}"


@tool
def plain(q: str) -> str:
    """Search."""
    return f"TOOLSECRET result for {q}"


def _agent(how: str, *, internal: bool = True, name: str | None = None, q: str = "x") -> Any:
    chosen = asking if how == "interrupt in tool" else plain
    model = FakeChatModel(
        responses=[
            AIMessage("", tool_calls=[{"name": chosen.name, "args": {"q": q}, "id": "c1"}]),
            "done",
        ],
        metadata={"visibility": "internal"} if internal else None,
    )
    kw: dict[str, Any] = {"interrupt_before": ["tools"]} if how == "interrupt_before tools" else {}
    return create_agent(model, [chosen], checkpointer=InMemorySaver(), name=name, **kw)


def _nested(how: str, *, internal: bool = True, q: str = "x") -> Any:
    """The agent as a subgraph node of a root graph (resumed inside the subgraph)."""
    builder: StateGraph[Any] = StateGraph(State)
    agent = _agent(how, internal=internal, q=q)
    agent.checkpointer = None  # the root's saver keeps its state
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    return builder.compile(checkpointer=InMemorySaver())


def _calling(*tools: Any, nested: bool = False) -> Any:
    """A visible node that calls every tool in one message (call ids c1, c2, ...), then a
    visible tools node that runs them side by side (threads in `stream`, tasks in
    `astream`), compiled with a saver; `nested`: the two as a subgraph of a root graph."""
    calls = [
        {"name": t.name, "args": {"q": "x"}, "id": f"c{i}", "type": "tool_call"}
        for i, t in enumerate(tools, 1)
    ]
    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node(
        "agent", lambda s: {"messages": [AIMessage("CALLS", id="a1", tool_calls=calls)]}
    )
    builder.add_node("tools", ToolNode(list(tools)))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    if not nested:
        return builder.compile(checkpointer=InMemorySaver())
    root: StateGraph[Any] = StateGraph(State)
    root.add_node("inner", builder.compile())
    root.add_edge(START, "inner")
    return root.compile(checkpointer=InMemorySaver())


def _turns(how: str) -> list[Any]:
    first = {"messages": [HumanMessage("hi", id="h1")]}
    if how == "no interrupt":
        return [first]
    return [first, Command(resume=True) if how == "interrupt in tool" else None]


def _ways_out(graph: Any, how: str, way: str, modes: list[str] = MODES) -> str:
    """Everything the turns (start, then resume) send out one way, written out as it
    comes, then the state read after them."""
    inputs = _turns(how)
    config = thread(f"{how}-{way}")
    if way == "stream":
        sent = [repr(x) for i in inputs for x in graph.stream(i, config, stream_mode=modes)]
        return "".join(sent) + repr(graph.get_state(config).values)

    async def collect() -> str:
        sent = []
        for i in inputs:
            if way == "astream":
                async for x in graph.astream(i, config, stream_mode=modes, subgraphs=True):
                    sent.append(repr(x))
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # v1 is deprecated in langchain-core
                    version = "v1" if way == "astream_events v1" else "v2"
                    async for x in graph.astream_events(i, config, version=version):
                        sent.append(repr(x))
        state = await graph.aget_state(config, subgraphs=True)
        return "".join(sent) + repr(state)

    return asyncio.run(asyncio.wait_for(collect(), TIMEOUT))


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("shape", ["agent", "nested agent"])
@pytest.mark.parametrize("how", [*HOWS, "no interrupt"])
def test_an_internal_models_tool_result_stays_internal_after_a_resume(
    how: str, shape: str, way: str
) -> None:
    raw = _agent(how) if shape == "agent" else _nested(how)
    assert "TOOLSECRET" in _ways_out(raw, how, way)  # the secret is there to be found
    graph = with_visibility(_agent(how) if shape == "agent" else _nested(how), VisibilityPolicy())
    assert "TOOLSECRET" not in _ways_out(graph, how, way)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("shape", ["agent", "nested agent"])
@pytest.mark.parametrize("how", HOWS)
def test_an_internal_models_tool_call_arguments_stay_internal_after_a_resume(
    how: str, shape: str, way: str
) -> None:
    """The resumed tools task starts before its tool does (task-start events, the tools
    node's chain start): the call's arguments in its input are internal from the start,
    read from the saved state before the resumed run begins; a visible model's stay."""
    modes = [*MODES, "tasks", "debug"]

    def build(internal: bool) -> Any:
        made = _agent if shape == "agent" else _nested
        return made(how, internal=internal, q="ARGSECRET")

    assert "ARGSECRET" in _ways_out(build(True), how, way, modes)  # there to be found
    sent = _ways_out(with_visibility(build(True), VisibilityPolicy()), how, way, modes)
    assert "ARGSECRET" not in sent
    sent = _ways_out(with_visibility(build(False), VisibilityPolicy()), how, way, modes)
    assert "ARGSECRET" in sent and "TOOLSECRET" in sent


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("how", [*HOWS, "no interrupt"])
def test_a_visible_models_tool_result_still_reaches_the_user(how: str, way: str) -> None:
    graph = with_visibility(_agent(how, internal=False), VisibilityPolicy())
    sent = _ways_out(graph, how, way)
    assert "TOOLSECRET" in sent
    if not way.startswith("astream_events"):
        assert "'tool-started'" in sent or "tool-started" in sent  # its `tools` events too


@pytest.mark.parametrize("how", [*HOWS, "no interrupt"])
def test_the_handler_on_a_plain_graph_tags_the_result_internal(how: str) -> None:
    """`VisibilityHandler` on a plain graph tags, drops nothing: the result is tagged."""
    agent = _agent(how)
    config = {**thread(how), "callbacks": [VisibilityHandler(VisibilityPolicy())]}
    for turn in _turns(how):
        agent.invoke(turn, config)
    results = [m for m in agent.get_state(thread(how)).values["messages"] if m.type == "tool"]
    assert [visibility_of(m) for m in results] == ["internal"]


@pytest.mark.parametrize("how", HOWS)
def test_the_check_fails_when_the_state_is_not_read(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: with the tools node's state unread (and the saved state not read before
    the resumed run), the result and the call's arguments leak, so the checks above can
    fail."""
    import lg_visibility._run as run_module

    monkeypatch.setattr(run_module, "task_state", lambda: None)
    monkeypatch.setattr(run_module.RunState, "note_pending", lambda self, saved: None)
    graph = with_visibility(_agent(how, q="ARGSECRET"), VisibilityPolicy())
    assert "TOOLSECRET" in _ways_out(graph, how, "stream")
    graph = with_visibility(_agent(how, q="ARGSECRET"), VisibilityPolicy())
    monkeypatch.undo()
    monkeypatch.setattr(run_module.RunState, "note_pending", lambda self, saved: None)
    assert "ARGSECRET" in _ways_out(graph, how, "astream", [*MODES, "tasks"])


# -- found in review of the tool-run decisions -------------------------------------------


def test_a_tool_returning_the_history_in_a_command_tags_only_its_result() -> None:
    """A tool answering an internal call returns `Command(update={"messages": [*history,
    result]})` (a handoff): only its result is its own; the user's message stays visible in
    state, snapshots and checkpoints."""

    @tool
    def handoff(q: str, runtime: ToolRuntime) -> Command[Any]:
        """Hand off."""
        result = ToolMessage("TOOLSECRET", tool_call_id=runtime.tool_call_id)
        return Command(update={"messages": [*runtime.state["messages"], result]})

    model = FakeChatModel(
        responses=[
            AIMessage("", tool_calls=[{"name": "handoff", "args": {"q": "x"}, "id": "c1"}]),
            "ok",
        ],
        metadata={"visibility": "internal"},
    )
    graph = with_visibility(
        create_agent(model, [handoff], checkpointer=InMemorySaver()), VisibilityPolicy()
    )
    first = {"messages": [HumanMessage("USERSAYS hi", id="h1")]}
    snapshots = list(graph.stream(first, thread(), stream_mode="values"))
    raw = graph.raw_state.get_state(thread()).values["messages"]
    assert [m.content for m in raw if m.type == "tool"] == ["TOOLSECRET"]  # the handoff ran
    kept = [m.content for m in graph.get_state(thread()).values["messages"]]
    assert kept == ["USERSAYS hi"]
    assert "USERSAYS hi" in repr(snapshots[-1]) and "TOOLSECRET" not in repr(snapshots)


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("fails", [False, True], ids=["returns", "raises"])
def test_an_internal_calls_tool_run_leaves_no_event(version: str, fails: bool) -> None:
    """`astream_events`: the run of a tool that answers an internal call is dropped whole,
    its input (the call's arguments) and its error with it, not only its result."""

    @tool
    def lookup(q: str) -> str:
        """Look up."""
        if fails:
            raise ValueError("ERRSECRET: the backend said no")
        return "TOOLSECRET"

    def agent() -> Any:
        model = FakeChatModel(
            responses=[
                AIMessage(
                    "", tool_calls=[{"name": "lookup", "args": {"q": "ARGSECRET"}, "id": "c1"}]
                ),
                "ok",
            ],
            metadata={"visibility": "internal"},
        )
        return create_agent(model, [lookup], checkpointer=InMemorySaver())

    async def events(graph: Any) -> str:
        sent: list[str] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # v1 is deprecated in langchain-core
            first = {"messages": [HumanMessage("hi", id="h1")]}
            try:
                async for event in graph.astream_events(first, thread(), version=version):
                    sent.append(repr(event))
            except ValueError:
                assert fails  # the tool's error ends the run, after its events
        return "".join(sent)

    raw = asyncio.run(asyncio.wait_for(events(agent()), TIMEOUT))
    assert "ARGSECRET" in raw  # each secret is there to be found (v1 has no error event)
    assert ("ERRSECRET" in raw) == (fails and version == "v2")
    assert ("TOOLSECRET" in raw) == (not fails)
    sent = asyncio.run(
        asyncio.wait_for(events(with_visibility(agent(), VisibilityPolicy())), TIMEOUT)
    )
    assert not {"ARGSECRET", "ERRSECRET", "TOOLSECRET"} & set(_secrets(sent))


def _secrets(text: str) -> list[str]:
    return [s for s in ("ARGSECRET", "ERRSECRET", "TOOLSECRET") if s in text]


def test_the_tagger_tags_before_astream_events_v1_is_handed_the_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """astream_events v1 builds its events in LangChain's log handler, from the objects
    handed to it; the tagging callback runs first, so a slow tagging still precedes it."""
    import time

    import lg_visibility._run as run_module

    tag_result = run_module.Decider.end_tool

    def slowly(self: Any, run_id: Any, output: Any) -> None:
        time.sleep(0.02)  # gives the log handler's consumer a turn, were it ahead of us
        tag_result(self, run_id, output)

    monkeypatch.setattr(run_module.Decider, "end_tool", slowly)
    graph = with_visibility(_agent("no interrupt"), VisibilityPolicy())
    assert "TOOLSECRET" not in _ways_out(graph, "no interrupt", "astream_events v1")


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_what_an_internal_tool_adds_beside_its_result_is_internal(sync: bool) -> None:
    """A tool declared internal, in a visible tools node, returns a `Command` whose update
    adds its result and a message it built: both are its own, so both are internal; the
    visible node's call stays visible."""

    @tool
    def lookup(q: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Look it up."""
        result = ToolMessage("TOOLSECRET", tool_call_id=tool_call_id)
        return Command(update={"messages": [result, AIMessage("EXTRASECRET", id="extra")]})

    lookup.metadata = {"visibility": "internal"}
    graph = with_visibility(_calling(lookup), VisibilityPolicy())
    modes = ["values", "updates", "messages"]
    sent = repr(
        run(
            graph,
            {"messages": [HumanMessage("hi", id="h1")]},
            thread(),
            sync=sync,
            stream_mode=modes,
        )
    )
    state = repr(graph.get_state(thread()).values)
    assert "EXTRASECRET" not in sent + state and "TOOLSECRET" not in sent + state
    assert "CALLS" in state
    assert "EXTRASECRET" in repr(graph.raw_state.get_state(thread()).values)  # it was there


@pytest.mark.parametrize("way", ["stream", "astream", "astream_events", "astream_events v1"])
def test_a_model_an_internal_tool_calls_is_internal(way: str) -> None:
    """A tool declared internal calls a chat model in its body: a tool's metadata is its
    own, not inherited, so the model run is internal by the tool's decision, its tokens
    and events with it; the visible call stays visible."""
    child = FakeChatModel(responses=["CHILDSECRET words"])

    @tool
    def lookup(q: str) -> str:
        """Look it up."""
        return "TOOLSECRET " + str(child.invoke(q).content)

    lookup.metadata = {"visibility": "internal"}
    child.responses = ["CHILDSECRET words"]
    assert "CHILDSECRET" in _ways_out(_calling(lookup), "no interrupt", way)  # there to be found
    child.responses = ["CHILDSECRET words"]
    sent = _ways_out(with_visibility(_calling(lookup), VisibilityPolicy()), "no interrupt", way)
    assert "CHILDSECRET" not in sent and "TOOLSECRET" not in sent
    assert "CALLS" in sent


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_an_agent_an_internal_tool_runs_stays_internal(sync: bool) -> None:
    """A tool declared internal runs a sub-agent on a message it builds and passes the
    sub-agent's messages on: what it handed the agent is its own (internal), the agent's
    snapshots and task starts under the tools task are internal, on every stream mode."""
    sub = create_agent(FakeChatModel(responses=["SUBANSWER words"]), tools=[])

    @tool
    def lookup(q: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Look it up."""
        out = sub.invoke({"messages": [HumanMessage("SUBQUERY " + q, id="subq")]})
        result = ToolMessage("TOOLSECRET", tool_call_id=tool_call_id)
        return Command(update={"messages": [*out["messages"], result]})

    lookup.metadata = {"visibility": "internal"}
    graph = with_visibility(_calling(lookup), VisibilityPolicy())
    modes = ["values", "updates", "messages", "tasks", "checkpoints", "debug", "custom"]
    first = {"messages": [HumanMessage("hi", id="h1")]}
    items = run(graph, first, thread(), sync=sync, stream_mode=modes, subgraphs=True)
    sent = repr(items) + repr(graph.get_state(thread()).values)
    assert not [s for s in ("SUBQUERY", "SUBANSWER", "TOOLSECRET") if s in sent]
    assert "CALLS" in sent


class _Docs(BaseRetriever):
    """A retriever whose one document holds RETRSECRET."""

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        return [Document(page_content=f"RETRSECRET about {query}")]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("declared", ["internal", "visible"])
def test_what_else_an_internal_tool_runs_is_internal(way: str, declared: str) -> None:
    """A tool declared internal runs a retriever and a plain (non-chat) LLM and dispatches
    a custom event in its body: their events (the documents, the completion, the event's
    data under `filter_custom`) are internal by the tool's decision. The same tool left
    visible keeps all of them: nothing visible is lost."""
    llm = FakeListLLM(responses=["LLMSECRET words"])

    @tool
    def lookup(q: str) -> str:
        """Look it up."""
        docs = _Docs().invoke(q)
        dispatch_custom_event("card", {"text": "CUSTOMSECRET"})
        return f"TOOLSECRET {len(docs)} {len(llm.invoke(q))}"

    if declared == "internal":
        lookup.metadata = {"visibility": "internal"}
    graph = with_visibility(_calling(lookup), VisibilityPolicy(filter_custom=True))
    sent = _ways_out(graph, "no interrupt", way)
    found = {s for s in ("RETRSECRET", "LLMSECRET", "CUSTOMSECRET", "TOOLSECRET") if s in sent}
    assert "CALLS" in sent
    if declared == "visible":
        # What each way shows of a visible tool's runs: the events carry all of it (v1 has
        # no custom events); the streams carry the tool's result only.
        expected = {
            "astream_events": {"RETRSECRET", "LLMSECRET", "CUSTOMSECRET", "TOOLSECRET"},
            "astream_events v1": {"RETRSECRET", "LLMSECRET", "TOOLSECRET"},
        }.get(way, {"TOOLSECRET"})
        assert found == expected
    else:
        assert found == set()


# -- what an internal tool runs with the config injected into it --------------------------


class _Echo(BaseRetriever):
    """A retriever whose one document is the query."""

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        return [Document(page_content=query)]


_INJECTED = ("CHATSECRET", "RETRSECRET", "LLMSECRET", "CUSTOMSECRET", "WRITERSECRET")


def _injected(how: str, secret: str = "SECRET", *, internal: bool = True) -> Any:
    """A tool that passes the config LangChain injected into it (the tools node's) to a
    chat model, a retriever, a plain LLM and a custom event, and writes to the `custom`
    stream: each carries its own marker (`CHAT` + `secret`, ...)."""
    chat = FakeChatModel(responses=[f"CHAT{secret} words"] * 9)
    llm = FakeListLLM(responses=[f"LLM{secret} words"] * 9)

    def body(q: str, config: RunnableConfig, writer: Any) -> str:
        time.sleep(0.01)  # a tool beside it runs meanwhile
        docs = _Echo().invoke(f"RETR{secret}", config)
        dispatch_custom_event("card", {"text": f"CUSTOM{secret}"}, config=config)
        writer({"text": f"WRITER{secret}"})
        said = chat.invoke(q, config).content
        return f"TOOL{secret} {len(docs)} {llm.invoke(q, config)} {said}"

    name = f"look_{secret.lower()}"
    if how == "config parameter":

        def with_config(q: str, config: RunnableConfig) -> str:
            return body(q, config, get_stream_writer())

        chosen = tool(name, description="Look it up.")(with_config)
    else:

        def with_runtime(q: str, runtime: ToolRuntime) -> str:
            return body(q, runtime.config, runtime.stream_writer)

        chosen = tool(name, description="Look it up.")(with_runtime)
    if internal:
        chosen.metadata = {"visibility": "internal"}
    return chosen


_CUSTOM_MODES = [*MODES, "custom"]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("how", ["config parameter", "runtime.config"])
def test_what_an_internal_tool_runs_with_its_injected_config_is_internal(
    how: str, way: str
) -> None:
    """LangChain hands a tool its tools node's config: a run the tool starts with it has the
    node's run for its parent, not the tool's. It still runs in the tool's body, so it is
    internal by the tool's decision: the model's tokens, the documents, the completion,
    the custom event and (under `filter_custom`) the `custom` write."""
    raw = _ways_out(_calling(_injected(how)), "no interrupt", way, _CUSTOM_MODES)
    shows = {s for s in _INJECTED if s in raw}
    assert "CHATSECRET" in shows and ("WRITERSECRET" in shows) == (way in ("stream", "astream"))
    policy = VisibilityPolicy(filter_custom=True)
    graph = with_visibility(_calling(_injected(how)), policy)
    sent = _ways_out(graph, "no interrupt", way, _CUSTOM_MODES)
    assert "CALLS" in sent
    assert {s for s in (*_INJECTED, "TOOLSECRET") if s in sent} == set()


@pytest.mark.parametrize("nested", [False, True], ids=["root", "subgraph"])
@pytest.mark.parametrize("way", WAYS)
def test_tools_side_by_side_keep_their_own_decisions(way: str, nested: bool) -> None:
    """An internal and a visible tool run side by side in one tools node, both passing on
    their injected config: what the internal one runs is dropped, and every way out shows
    exactly what the raw graph shows of the visible one."""

    def build() -> Any:
        return _calling(
            _injected("runtime.config"),
            _injected("config parameter", "SHOWN", internal=False),
            nested=nested,
        )

    def found(sent: str, secret: str) -> set[str]:
        marks = (*_INJECTED, "TOOLSECRET")
        return {m for m in marks if m.replace("SECRET", secret) in sent}

    raw = _ways_out(build(), "no interrupt", way, _CUSTOM_MODES)
    shown = found(raw, "SHOWN")
    assert "CHATSECRET" in found(raw, "SECRET") and "CHATSECRET" in shown
    graph = with_visibility(build(), VisibilityPolicy(filter_custom=True))
    sent = _ways_out(graph, "no interrupt", way, _CUSTOM_MODES)
    assert found(sent, "SECRET") == set()
    assert found(sent, "SHOWN") == shown


def _force_log_first(monkeypatch: pytest.MonkeyPatch, *, bare_only: bool = False) -> None:
    """Every merge of callback managers puts the v1 log handlers first (with `bare_only`,
    only those the tagger does not decide in), and the tagger's starts are slow: what a
    set merge may do, and the consumer's chance to read a start before its decision."""
    from langchain_core.callbacks.base import BaseCallbackManager
    from langchain_core.tracers.log_stream import LogStreamCallbackHandler

    from lg_visibility._handlers import _RunTagger

    merge = BaseCallbackManager.merge

    def first(handler: Any) -> bool:
        is_log = isinstance(handler, LogStreamCallbackHandler)
        return is_log and not (bare_only and vars(handler).get("_lgv_tagger"))

    def log_first(self: Any, other: Any) -> Any:
        merged = merge(self, other)
        for key in ("handlers", "inheritable_handlers"):
            getattr(merged, key).sort(key=lambda h: not first(h))
        return merged

    for name in ("on_retriever_start", "on_llm_start", "on_chat_model_start", "on_chain_start"):
        decide = getattr(_RunTagger, name)

        def slowly(self: Any, *args: Any, _decide: Any = decide, **kwargs: Any) -> Any:
            time.sleep(0.02)  # gives the log's consumer a turn, were the log handler ahead
            return _decide(self, *args, **kwargs)

        monkeypatch.setattr(_RunTagger, name, slowly)
    monkeypatch.setattr(BaseCallbackManager, "merge", log_first)


def _graph_tool(secret: str, *, internal: bool) -> Any:
    """A tool whose sync body runs a one-node graph with the config LangChain injected
    into it (the tools node's); the graph's model says GRAPH + `secret`."""
    model = FakeChatModel(responses=[f"GRAPH{secret} words"] * 9)
    builder = StateGraph(MessagesState)
    builder.add_node("think", lambda s, config: {"messages": [model.invoke(s["messages"], config)]})
    builder.add_edge(START, "think")
    sub = builder.compile()

    def run_graph(q: str, config: RunnableConfig) -> str:
        time.sleep(0.01)  # a tool beside it runs meanwhile
        return f"TOOL{secret} {len(sub.invoke({'messages': [('user', q)]}, config)['messages'])}"

    chosen = tool(f"graph_{secret.lower()}", description="Look it up.")(run_graph)
    if internal:
        chosen.metadata = {"visibility": "internal"}
    return chosen


@pytest.mark.parametrize("runs", ["a retriever and an LLM", "a graph"])
@pytest.mark.parametrize("beside", [False, True], ids=["decided in the log handler", "control"])
def test_astream_events_v1_decides_a_run_before_logging_it_whatever_the_handler_order(
    monkeypatch: pytest.MonkeyPatch, beside: bool, runs: str
) -> None:
    """LangChain's `BaseCallbackManager.merge` combines handlers as a set (LangGraph merges
    two managers for a subgraph's run), so the v1 log handler may come before the tagger;
    a tool's sync body then hands it a retriever's or an LLM's start on a worker thread
    while the consumer reads the log on the loop's thread. Forced here: every merge puts the
    log handler first, and the tagger is slow. The tagger decides inside the log handler, so
    nothing of the internal tool's leaves; the control keeps the tagger beside it (as where
    the log handler's shape is not the one checked), and leaks: which of the raced runs
    leak depends on the threads' timing (CI once saw the chat model's and not the LLM's),
    so the control asks for one of them."""
    import lg_visibility._compat as compat

    _force_log_first(monkeypatch)
    if beside:
        monkeypatch.setattr(compat, "LOG_HANDLER_SHAPE_PROBLEMS", ["forced by the test"])

    if runs == "a graph":
        tools = (_graph_tool("SECRET", internal=True), _graph_tool("SHOWN", internal=False))
        raced, shown = {"GRAPHSECRET"}, ("GRAPHSHOWN", "TOOLSHOWN")
    else:
        tools = (
            _injected("runtime.config"),
            _injected("config parameter", "SHOWN", internal=False),
        )
        raced = {"RETRSECRET", "LLMSECRET", "CHATSECRET"}
        shown = ("RETRSHOWN", "LLMSHOWN")
    graph = with_visibility(_calling(*tools, nested=True), VisibilityPolicy(filter_custom=True))
    sent = _ways_out(graph, "no interrupt", "astream_events v1", _CUSTOM_MODES)
    leaked = {m for m in (*_INJECTED, "GRAPHSECRET", "TOOLSECRET") if m in sent}
    if beside:
        assert raced & leaked  # the oracle sees the race
    else:
        assert leaked == set()
        assert all(m in sent for m in shown)


def test_astream_events_v1_inside_another_v1_call_decides_in_its_own_log_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wrapped graph's v1 call made inside another v1 call's run (a chain passing its
    config on) holds both calls' log handlers: the tagger decides in this call's (the
    last one, which has seen no run), never in the outer call's, which keeps LangChain's
    methods. Forced as above: every merge puts a log handler the tagger is not in first,
    and the tagger is slow. Ground truth: the markers; the control: the inner stream
    does carry the visible tool's output."""
    from langchain_core.tracers.log_stream import LogStreamCallbackHandler

    _force_log_first(monkeypatch, bare_only=True)
    tools = (_injected("runtime.config"), _injected("config parameter", "SHOWN", internal=False))
    graph = with_visibility(_calling(*tools, nested=True), VisibilityPolicy(filter_custom=True))
    inner: list[str] = []
    outer_logs: list[Any] = []

    async def call_inner(x: Any, config: RunnableConfig) -> str:
        outer_logs.extend(
            h for h in config["callbacks"].handlers if isinstance(h, LogStreamCallbackHandler)
        )
        config = {**config, "configurable": {"thread_id": "nested-v1"}}
        async for event in graph.astream_events(x, config, version="v1"):
            inner.append(repr(event))
        return "done"

    async def outer() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            chain = RunnableLambda(call_inner)
            async for _ in chain.astream_events(_turns("no interrupt")[0], version="v1"):
                pass

    asyncio.run(asyncio.wait_for(outer(), TIMEOUT))
    sent = "".join(inner)
    assert {m for m in (*_INJECTED, "TOOLSECRET") if m in sent} == set()
    assert "RETRSHOWN" in sent and "LLMSHOWN" in sent
    assert len(outer_logs) == 1 and "_lgv_tagger" not in vars(outer_logs[0])
    assert not outer_logs[0].raise_error


class _DumpedDocs(BaseRetriever):
    """A retriever (a cache, say) returning a dumped `Document`, which LangChain's loader
    refuses."""

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        return [cast(Any, Document(page_content=query).to_json())]


@pytest.mark.parametrize("where", ["a node's output", "a retriever's output"])
def test_astream_events_v1_keeps_going_where_langchains_log_handler_fails(where: str) -> None:
    """LangChain's log handler logs its own errors and the stream goes on (here: a value its
    loader refuses, a dumped `Document`, at a node's end, a callback the tagger decides in,
    or at a retriever's end, one it does not); the tagger inside it changes nothing of
    that: the wrapped graph's v1 call yields what the raw graph's yields."""

    class Doc(TypedDict):
        doc: Any
        answer: str

    def answer(state: Doc) -> dict[str, Any]:
        if where == "a node's output":
            return {"answer": "ok", "doc": Document("x").to_json()}
        return {"answer": str(len(_DumpedDocs().invoke("q")))}

    builder = StateGraph(Doc)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    raw = builder.compile()

    async def events(graph: Any) -> list[str]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = graph.astream_events({"doc": None, "answer": ""}, version="v1")
            return [f"{e['event']} {e['name']}" async for e in got]

    expected = asyncio.run(events(raw))
    assert expected  # the control: raw goes on past the failed log
    assert asyncio.run(events(with_visibility(raw, VisibilityPolicy()))) == expected


@pytest.mark.parametrize("passes", ["its config", "no config"])
@pytest.mark.parametrize("way", ["astream", "astream_events"])
def test_what_an_internal_tool_leaves_running_stays_internal(way: str, passes: str) -> None:
    """An internal tool starts a task and returns; the task calls a model and writes to
    the `custom` stream after the tool's run has ended, and a later visible node awaits
    it. The task runs in the tool's context, so what it does is the tool's: internal."""
    chat = FakeChatModel(responses=["LATERSECRET words"] * 4)
    pending: list[Any] = []

    async def look(q: str, config: RunnableConfig) -> str:
        writer = get_stream_writer()

        async def later() -> None:
            await asyncio.sleep(0.02)
            await (chat.ainvoke(q, config) if passes == "its config" else chat.ainvoke(q))
            writer({"text": "WRITELATERSECRET"})

        pending.append(asyncio.create_task(later()))
        return "started"

    async def wait(state: Any) -> Any:
        while pending:
            await pending.pop()
        return {}

    def build() -> Any:
        chosen = tool("look", description="Look it up.")(look)
        chosen.metadata = {"visibility": "internal"}
        graph = _calling(chosen)
        builder = graph.builder
        builder.add_node("wait", wait)
        builder.add_edge("tools", "wait")
        return builder.compile(checkpointer=InMemorySaver())

    secrets = ("LATERSECRET", "WRITELATERSECRET")
    raw = _ways_out(build(), "no interrupt", way, _CUSTOM_MODES)
    assert "LATERSECRET" in raw
    graph = with_visibility(build(), VisibilityPolicy(filter_custom=True))
    sent = _ways_out(graph, "no interrupt", way, _CUSTOM_MODES)
    assert "CALLS" in sent and [s for s in secrets if s in sent] == []


def _worker_graph() -> Any:
    """An internal tool is the first user of a shared background worker (a batching
    client, a session's reader task): the worker's task copies the tool's context. The tool
    hands it a job with its injected config, then a visible node hands it one with its
    own."""
    chat = FakeChatModel(respond=lambda messages: f"{messages[-1].content} words")
    box: dict[str, Any] = {}

    async def ask(text: str, config: RunnableConfig) -> str:
        if "queue" not in box:
            queue: asyncio.Queue[Any] = asyncio.Queue()

            async def serve() -> None:
                while True:
                    job, job_config, done = await queue.get()
                    done.set_result(str((await chat.ainvoke(job, job_config)).content))

            box["queue"], box["task"] = queue, asyncio.create_task(serve())
        done = asyncio.get_running_loop().create_future()
        await box["queue"].put((text, config, done))
        return str(await done)

    async def look(q: str, config: RunnableConfig) -> str:
        return "TOOL" + await ask("VIASECRET", config)

    async def after(state: Any, config: RunnableConfig) -> Any:
        said = await ask("LATERSHOWN", config)
        box["task"].cancel()
        return {"messages": [AIMessage(f"got {len(said)}", id="a2")]}

    chosen = tool("look", description="Look it up.")(look)
    chosen.metadata = {"visibility": "internal"}
    builder = _calling(chosen).builder
    builder.add_node("after", after)
    builder.add_edge("tools", "after")
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("way", ["astream", "astream_events", "astream_events v1"])
def test_work_another_run_hands_a_worker_an_internal_tool_started_is_that_runs(way: str) -> None:
    """The context decides only for a run given the config the tool was handed (or none):
    the visible node's job, given its own config, is the node's, in a task that copied the
    internal tool's context; the tool's job stays internal."""
    raw = _ways_out(_worker_graph(), "no interrupt", way)
    assert "LATERSHOWN" in raw and "VIASECRET" in raw
    sent = _ways_out(with_visibility(_worker_graph(), VisibilityPolicy()), "no interrupt", way)
    assert "LATERSHOWN" in sent and "VIASECRET" not in sent


def test_the_handler_on_a_plain_graph_tags_what_an_internal_tool_leaves_running() -> None:
    """`VisibilityHandler` on a plain graph keeps ended internal tool runs too: a model a
    task the tool left running calls after the tool returned is tagged internal."""
    chat = FakeChatModel(responses=["LATERSECRET words"])
    pending: list[Any] = []

    async def look(q: str) -> str:
        async def later() -> Any:
            await asyncio.sleep(0.02)  # after the tool's run has ended
            return await chat.ainvoke(q)

        pending.append(asyncio.create_task(later()))
        return "started"

    async def wait(state: Any) -> Any:
        return {"messages": [await pending.pop()]}

    chosen = tool("look", description="Look it up.")(look)
    chosen.metadata = {"visibility": "internal"}
    builder = _calling(chosen).builder
    builder.add_node("wait", wait)
    builder.add_edge("tools", "wait")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {**thread("plain"), "callbacks": [VisibilityHandler(VisibilityPolicy())]}
    asyncio.run(graph.ainvoke({"messages": [HumanMessage("hi", id="h1")]}, config))
    messages = graph.get_state(thread("plain")).values["messages"]
    later = [m for m in messages if "LATER" in str(m.content)]
    assert [visibility_of(m) for m in later] == ["internal"]


@pytest.mark.parametrize("way", ["stream", "astream", "astream_events"])
def test_the_check_fails_when_the_context_is_not_read(
    way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: judged by their parent run only (the context's run unread), the runs an
    internal tool starts with its injected config leak, so the checks above can fail."""
    import lg_visibility._run as run_module

    monkeypatch.setattr(run_module, "context_run_id", lambda: None)
    policy = VisibilityPolicy(filter_custom=True)
    graph = with_visibility(_calling(_injected("runtime.config")), policy)
    sent = _ways_out(graph, "no interrupt", way, _CUSTOM_MODES)
    assert "CHATSECRET" in sent
    assert ("WRITERSECRET" in sent) == (way != "astream_events")


# -- found in review of the resumed run's read of its saved state ------------------------


def _asks() -> Any:
    builder: StateGraph[Any] = StateGraph(State)

    def ask(state: Any) -> Any:
        return {"messages": [AIMessage(f"answer {interrupt('ok?')}", id="a1")]}

    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("where", ["bound", "context"])
def test_a_resume_reads_its_saved_state_with_the_config_the_run_uses(where: str) -> None:
    """The thread may come from the graph's bound config or LangChain's config context,
    not the call's config: the read before the resumed run finds it as the run does (it
    raised on a config without `configurable`)."""
    modes = ["updates", "tasks"]
    first = {"messages": [HumanMessage("hi", id="h1")]}

    def turns(graph: Any) -> list[Any]:
        if where == "bound":
            bound = graph.with_config(configurable={"thread_id": "t-bound"})
            bound.invoke(first)
            sent = list(bound.stream(Command(resume="yes"), None, stream_mode=modes))
            sent += list(bound.stream(None, {"recursion_limit": 9}, stream_mode=modes))
            return sent

        def step(x: Any) -> Any:
            return list(graph.stream(x, stream_mode=modes))  # the config comes from the context

        chain = RunnableLambda(step)
        chain.invoke(first, thread("t-context"))
        return list(chain.invoke(Command(resume="yes"), thread("t-context")))

    def shape(items: list[Any]) -> list[Any]:  # task ids differ from run to run
        return [(mode, sorted(part)) for mode, part in items]

    expected = turns(_asks())
    assert "answer yes" in repr(expected)
    sent = turns(with_visibility(_asks(), VisibilityPolicy()))
    assert "answer yes" in repr(sent) and shape(sent) == shape(expected)


@pytest.mark.parametrize("way", WAYS)
def test_a_pending_internal_call_is_found_behind_a_later_visible_message(way: str) -> None:
    """A visible node adds a message in the step where an internal model's bare calls are
    sent to a tools node that interrupts: the internal message is not the saved state's
    last AI message, and its calls are still internal when the run resumes."""

    def build(internal: bool) -> Any:
        model = FakeChatModel(
            responses=[
                AIMessage(
                    "", tool_calls=[{"name": "asking", "args": {"q": "ARGSECRET"}, "id": "c1"}]
                ),
                "done",
            ],
            metadata={"visibility": "internal"} if internal else None,
        )
        builder: StateGraph[Any] = StateGraph(State)
        builder.add_node("think", lambda s: {"messages": [model.invoke(s["messages"])]})
        builder.add_node("notify", lambda s: {"messages": [AIMessage("WORKING", id="n1")]})
        builder.add_node("tools", ToolNode([asking]))
        builder.add_edge(START, "think")

        def route(s: Any) -> list[Any]:
            return [Send("tools", [c]) for c in s["messages"][-1].tool_calls] + ["notify"]

        builder.add_conditional_edges("think", route, ["tools", "notify"])
        return builder.compile(checkpointer=InMemorySaver())

    modes = [*MODES, "tasks", "debug"]
    assert "ARGSECRET" in _ways_out(build(True), "interrupt in tool", way, modes)
    sent = _ways_out(
        with_visibility(build(True), VisibilityPolicy()), "interrupt in tool", way, modes
    )
    assert "ARGSECRET" not in sent and "WORKING" in sent
    sent = _ways_out(
        with_visibility(build(False), VisibilityPolicy()), "interrupt in tool", way, modes
    )
    assert "ARGSECRET" in sent
