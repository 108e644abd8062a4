"""astream_events v1/v2 of a wrapped graph: the oracle (raw events minus those of internal
runs, data redacted, same order, nothing visible lost, every interrupt kept), the root's
stream events equal to the enforced astream, the chat model's prompt removed, custom events
under the custom-mode rules, astream_log refused, and a control that fails on a leaky
wrapper."""

from __future__ import annotations

import asyncio
import json
import uuid
import warnings
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain.agents.structured_output import ProviderStrategy
from langchain_core.callbacks import adispatch_custom_event
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnableConfig, RunnableLambda, RunnableParallel
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import Command
from pydantic import BaseModel

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility._compat import pregel_base
from lg_visibility._output_filter import OutputFilter
from lg_visibility.demo.graphs import (
    INCIDENT_POLICY,
    ORDER_POLICY,
    incident_builder,
    order_builder,
)
from lg_visibility.testing import FakeChatModel
from tests._support.cases import INCIDENT, ORDER, ORDER_CLOSED, ORDER_CLOSED_POLICY
from tests._support.oracle import (
    _NO_OUTPUT,
    Case,
    all_text,
    canon,
    canon_events,
    chunk_of,
    event_parts,
    event_parts_of,
    expected_events,
    expected_stream,
    interrupt_values,
    without_root_stream,
)

TIMEOUT = 60.0
pytestmark = pytest.mark.timeout(TIMEOUT)


class Triage(BaseModel):
    """The root-level internal agent's structured output."""

    label: str
    note: str


class RootAgentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    structured_response: Triage


def root_agent_builder() -> StateGraph[Any]:
    """`triage` (an internal create_agent with response_format, added as a root node: its
    JSON answer lands in `messages`, its parsed `structured_response` in root state), then
    `answer` (a visible LLM at the root)."""
    triage_json = json.dumps({"label": "refund", "note": "TRIAGEJSON priority customer"})
    triage = create_agent(
        FakeChatModel(responses=[triage_json], profile={"structured_output": True}),
        tools=[],
        response_format=ProviderStrategy(Triage),
        name="triage_agent",
    )
    answer_model = FakeChatModel(responses=["ROOTVISIBLE We will refund you."])

    async def answer(state: RootAgentState) -> dict[str, Any]:
        return {"messages": [await answer_model.ainvoke(state["messages"])]}

    def answer_sync(state: RootAgentState) -> dict[str, Any]:
        return {"messages": [answer_model.invoke(state["messages"])]}

    builder: StateGraph[Any] = StateGraph(RootAgentState)
    builder.add_node("triage", triage)
    builder.add_node("answer", RunnableLambda(answer_sync, answer))
    builder.add_edge(START, "triage")
    builder.add_edge("triage", "answer")
    return builder


ROOT_AGENT = Case(
    internal_markers=("TRIAGEJSON",),
    visible_markers=("ROOTVISIBLE",),
    internal_prefixes=("triage",),
    internal_keys=("structured_response",),
)
ROOT_AGENT_POLICY = VisibilityPolicy(internal=["triage"], internal_keys=["structured_response"])

INCIDENT_INPUTS = [{"messages": [HumanMessage("I want a refund for my order", id="u1")]}]
ORDER_INPUTS = [
    {"messages": [HumanMessage("Please order 2 widgets for ACME", id="u1")]},
    Command(resume={"phone": "555-0100"}),
    Command(resume="approve"),
]
GRAPHS = {
    "incident": (incident_builder, INCIDENT, INCIDENT_POLICY, INCIDENT_INPUTS),
    "order": (order_builder, ORDER, ORDER_POLICY, ORDER_INPUTS),
    "order_closed": (order_builder, ORDER_CLOSED, ORDER_CLOSED_POLICY, ORDER_INPUTS),
    "root_agent": (root_agent_builder, ROOT_AGENT, ROOT_AGENT_POLICY, INCIDENT_INPUTS),
}
MODES: list[Any] = [None, ["messages", "values", "updates", "debug"], ["values", "custom"]]


def _events(graph: Any, inputs: list[Any], *, version: str, **kw: Any) -> list[list[dict]]:
    """The events of each input's `astream_events` call, one thread, bounded."""

    async def collect() -> list[list[dict]]:
        out = []
        for value in inputs:
            config: RunnableConfig = {"configurable": {"thread_id": "thread-1"}}
            out.append(
                [e async for e in graph.astream_events(value, config, version=version, **kw)]
            )
        return out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # v1 is deprecated in langchain-core
        return asyncio.run(asyncio.wait_for(collect(), TIMEOUT))


def _recording(graph: Any) -> tuple[Any, list[list[Any]]]:
    """`graph` under a subclass that records the items each top-level `astream` call yields
    (the enforced stream astream_events runs underneath), one list per call."""
    calls: list[list[Any]] = []

    class Recording(type(graph)):  # type: ignore[misc]
        async def astream(self, *args: Any, **kwargs: Any) -> Any:
            items: list[Any] = []
            calls.append(items)
            async for item in super().astream(*args, **kwargs):
                items.append(item)
                yield item

    return Recording(**graph.__dict__), calls


def _aggregate(chunks: list[Any]) -> Any:
    """What langchain-core's v1 log makes of a run's streamed chunks (log_stream.py)."""
    final = None
    for chunk in chunks:
        try:
            final = chunk if final is None else final + chunk
        except TypeError:
            final = chunk
    return final


def _root_chunks(events: list[dict]) -> list[Any]:
    root = events[0]["run_id"]
    return [
        e["data"]["chunk"]
        for e in events
        if e["run_id"] == root and e["event"] == "on_chain_stream"
    ]


def _build(name: str, *, enforced: bool) -> Any:
    build, _, policy, _ = GRAPHS[name]
    graph = build().compile(checkpointer=InMemorySaver())
    return with_visibility(graph, policy) if enforced else graph


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("subgraphs", [False, True], ids=["root-only", "subgraphs"])
@pytest.mark.parametrize(
    "stream_mode", MODES, ids=lambda m: "+".join(m) if isinstance(m, list) else str(m)
)
@pytest.mark.parametrize("name", list(GRAPHS))
def test_events_equal_raw_minus_internal(
    name: str, stream_mode: Any, subgraphs: bool, version: str
) -> None:
    """astream_events of the wrapped graph is the raw events minus internal runs, redacted,
    with the root's stream events exactly the enforced astream's items."""
    _, case, _, inputs = GRAPHS[name]
    kw: dict[str, Any] = {"subgraphs": subgraphs}
    if stream_mode is not None:
        kw["stream_mode"] = stream_mode
    raw_calls = _events(_build(name, enforced=False), inputs, version=version, **kw)
    recording, streams = _recording(_build(name, enforced=True))
    enforced_calls = _events(recording, inputs, version=version, **kw)
    mode = stream_mode if stream_mode is not None else recording.stream_mode

    all_enforced: list[dict] = []
    all_expected: list[dict] = []
    expected_root: list[tuple] = []
    assert len(streams) == len(inputs)
    for raw, enforced, stream in zip(raw_calls, enforced_calls, streams, strict=True):
        # the root's stream events are the very items the enforced astream yielded...
        chunks = _root_chunks(enforced)
        assert len(chunks) == len(stream)
        if version == "v2":
            assert all(c is s for c, s in zip(chunks, stream, strict=True))
        else:  # v1 patches carry copies
            assert canon([((), "c", c) for c in chunks]) == canon([((), "c", c) for c in stream])
        # ...which are the raw root stream minus internal events (the stream oracle)
        parts = lambda cs: [event_parts(c, mode, subgraphs, "v1") for c in cs]  # noqa: E731
        assert canon(parts(chunks)) == canon(expected_stream(case, parts(_root_chunks(raw))))
        kept = expected_stream(case, parts(_root_chunks(raw)))
        output = (
            _aggregate([chunk_of(p, mode, subgraphs) for p in kept])
            if version == "v1"
            else _NO_OUTPUT
        )
        expected = expected_events(case, raw, output)
        assert canon_events(without_root_stream(enforced)) == canon_events(expected)
        all_enforced += enforced
        all_expected += expected
        expected_root += kept

    text = all_text(event_parts_of(all_enforced))
    assert [m for m in case.internal_markers if m in text] == []
    expected_text = all_text(event_parts_of(all_expected)) + all_text(expected_root)
    assert [m for m in case.visible_markers if m in expected_text] == [
        m for m in case.visible_markers if m in text
    ]
    answers = [m for m in case.visible_markers if m.endswith("VISIBLE")]
    assert [m for m in answers if m not in text] == []

    # every interrupt the raw root stream surfaced is surfaced in the enforced one
    def interrupts(calls: list[list[dict]]) -> list[Any]:
        chunks = [c for events in calls for c in _root_chunks(events)]
        return interrupt_values([event_parts(c, mode, subgraphs, "v1") for c in chunks])

    assert set(map(repr, interrupts(enforced_calls))) == set(map(repr, interrupts(raw_calls)))
    if name.startswith("order") and {"values", "updates"} & set(
        [mode] if isinstance(mode, str) else mode
    ):
        assert len(set(map(repr, interrupts(raw_calls)))) == 2


class _LeakyEvents:
    """A wrapped graph whose astream_events is LangGraph's own (the enforced astream still
    runs underneath): what lg_visibility did before it filtered events."""

    def astream_events(self, *args: Any, **kwargs: Any) -> Any:
        return pregel_base().astream_events(self, *args, **kwargs)  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_events_oracle_detects_a_leaky_wrapper(version: str) -> None:
    """Against a wrapper that does not filter events, the event oracle fails: it can fail."""
    _, case, _, inputs = GRAPHS["incident"]
    wrapped = _build("incident", enforced=True)
    leaky = type("Leaky", (_LeakyEvents, type(wrapped)), {})(**wrapped.__dict__)
    (raw,) = _events(_build("incident", enforced=False), inputs, version=version)
    (leaked,) = _events(leaky, inputs, version=version)
    expected = expected_events(case, raw, _NO_OUTPUT)
    assert canon_events(without_root_stream(leaked)) != canon_events(expected)
    text = all_text(event_parts_of(leaked))
    assert [m for m in case.internal_markers if m in text] == list(case.internal_markers)


def _one_node(model: Any, *, policy: VisibilityPolicy) -> Any:
    class S(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]

    async def call(state: S) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder: StateGraph[Any] = StateGraph(S)
    builder.add_node("reply", call)
    builder.add_edge(START, "reply")
    return with_visibility(builder.compile(), policy)


def test_events_chat_model_prompt_does_not_leave() -> None:
    """A visible chat model's start and end events carry no `input` (its prompt)."""
    graph = _one_node(FakeChatModel(responses=["hello there"]), policy=VisibilityPolicy())
    (events,) = _events(graph, [{"messages": [HumanMessage("SYSPROMPT hi")]}], version="v2")
    model = [(e["event"], sorted(e["data"])) for e in events if e["name"] == "FakeChatModel"]
    assert model == [
        ("on_chat_model_start", []),
        ("on_chat_model_stream", ["chunk"]),
        ("on_chat_model_stream", ["chunk"]),
        ("on_chat_model_stream", ["chunk"]),
        ("on_chat_model_end", ["output"]),
    ]


def _custom_graph(policy: VisibilityPolicy) -> Any:
    class S(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]

    async def push(state: S) -> dict[str, Any]:
        await adispatch_custom_event("card", {"text": "CUSTOMCARD"})
        return {}

    inner: StateGraph[Any] = StateGraph(S)
    inner.add_node("push", push)
    inner.add_edge(START, "push")
    outer: StateGraph[Any] = StateGraph(S)
    outer.add_node("work", inner.compile())
    outer.add_edge(START, "work")
    return with_visibility(outer.compile(), policy)


@pytest.mark.parametrize(
    ("filter_custom", "expected"), [(False, [("card", {"text": "CUSTOMCARD"})]), (True, [])]
)
def test_events_custom_event_follows_the_custom_mode(filter_custom: bool, expected: list) -> None:
    """`on_custom_event` from an internal subgraph passes, unless `filter_custom` is set."""
    policy = VisibilityPolicy(internal=["work"], filter_custom=filter_custom)
    (events,) = _events(_custom_graph(policy), [{"messages": []}], version="v2")
    custom = [(e["name"], e["data"]) for e in events if e["event"] == "on_custom_event"]
    assert custom == expected
    assert [e["name"] for e in events if e["event"] == "on_chain_start"] == ["LangGraph"]


@pytest.mark.parametrize("internal", ["work", "work/push"], ids=["graph", "node"])
def test_events_custom_event_of_an_internal_node_is_dropped(internal: str) -> None:
    """With `filter_custom`, `on_custom_event` (v2 only, in langchain-core) of an internal
    node inside a visible graph is dropped, as the `custom` mode drops its writes (its
    graph's namespace is visible); the control without a rule delivers it."""
    (events,) = _events(
        _custom_graph(VisibilityPolicy(internal=[internal], filter_custom=True)),
        [{"messages": []}],
        version="v2",
    )
    assert [e for e in events if e["event"] == "on_custom_event"] == []
    (raw,) = _events(_custom_graph(VisibilityPolicy()), [{"messages": []}], version="v2")
    assert [e["name"] for e in raw if e["event"] == "on_custom_event"] == ["card"]


def _tagged_chain_graph(policy: VisibilityPolicy) -> Any:
    """A visible node dispatches a card, runs a chain with a run-time tag whose body (and a
    chain inside it) dispatches one each, then dispatches another."""

    class S(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]

    async def leaf(x: Any) -> Any:
        await adispatch_custom_event("card", {"text": "CUSTOMSECRET-inner"})
        return x

    async def body(x: Any) -> Any:
        await adispatch_custom_event("card", {"text": "CUSTOMSECRET-body"})
        return await RunnableLambda(leaf).ainvoke(x)

    async def node(state: S) -> dict[str, Any]:
        await adispatch_custom_event("card", {"text": "before"})
        await RunnableLambda(body).ainvoke(1, {"tags": ["kn_internal"]})
        await adispatch_custom_event("card", {"text": "after"})
        return {}

    builder: StateGraph[Any] = StateGraph(S)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    return with_visibility(builder.compile(), policy)


@pytest.mark.parametrize("filter_custom", [True, False], ids=["filtered", "default"])
def test_events_custom_event_of_a_chain_tagged_internal_is_dropped(filter_custom: bool) -> None:
    """With `filter_custom`, `on_custom_event` that a chain run with an internal run-time
    tag dispatches inside a visible node (or a run inside it) is dropped, the node's own
    kept; by default every one passes."""
    policy = VisibilityPolicy(tags={"kn_internal": "internal"}, filter_custom=filter_custom)
    (events,) = _events(_tagged_chain_graph(policy), [{"messages": []}], version="v2")
    texts = [e["data"]["text"] for e in events if e["event"] == "on_custom_event"]
    everything = ["before", "CUSTOMSECRET-body", "CUSTOMSECRET-inner", "after"]
    assert texts == (["before", "after"] if filter_custom else everything)


def test_events_astream_log_is_refused() -> None:
    """`astream_log` on a wrapped graph raises an error that points to astream_events."""
    graph = _one_node(FakeChatModel(responses=["hi"]), policy=VisibilityPolicy())
    with pytest.raises(NotImplementedError, match=r"astream_events\(version='v2'\)"):
        graph.astream_log({"messages": []})


def test_events_sync_stream_events_v1_v2_still_raise_like_langgraph() -> None:
    """Sync `stream_events` v1/v2 are not implemented by langchain-core, wrapped or not."""
    graph = _one_node(FakeChatModel(responses=["hi"]), policy=VisibilityPolicy())
    with pytest.raises(NotImplementedError):
        list(graph.stream_events({"messages": []}, version="v2"))


def test_events_internal_model_tokens_never_leave() -> None:
    """A model declared internal in its metadata streams no event at all, tokens included."""
    model = FakeChatModel(responses=["SECRETTOKENS a b c"], metadata={"visibility": "internal"})
    graph = _one_node(model, policy=VisibilityPolicy())
    (events,) = _events(graph, [{"messages": [HumanMessage("hi")]}], version="v2")
    assert [e["event"] for e in events if e["name"] == "FakeChatModel"] == []
    assert "SECRETTOKENS" not in repr(events)
    assert [(e["event"], e["name"]) for e in events if e["name"] != "FakeChatModel"] == [
        ("on_chain_start", "LangGraph"),
        ("on_chain_start", "reply"),
        ("on_chain_stream", "reply"),
        ("on_chain_end", "reply"),
        ("on_chain_stream", "LangGraph"),
        ("on_chain_end", "LangGraph"),
    ]


class _LoopState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _tool_loop(*, error: bool, is_async: bool) -> Any:
    """An internal researcher (declared on its constructor) calls `search`; the tools node
    answers it (a hand-built `ToolMessage`, or `ToolNode`'s error message when the tool
    raises); then a visible model answers."""
    call = {"name": "search", "args": {"query": "ARGSECRET"}, "id": "call-1"}
    researcher = FakeChatModel(
        responses=[AIMessage("", tool_calls=[call]), "NOTESSECRET"],
        metadata={"visibility": "internal"},
    )
    answerer = FakeChatModel(responses=["ANSWERVISIBLE here you are"])

    @tool
    def search(query: str) -> str:
        """Search."""
        raise ValueError("TOOLSECRET lookup failed")

    def answer_calls(state: _LoopState) -> dict[str, Any]:
        calls = state["messages"][-1].tool_calls  # type: ignore[union-attr]
        return {"messages": [ToolMessage("TOOLSECRET result", tool_call_id=c["id"]) for c in calls]}

    async def answer_calls_async(state: _LoopState) -> dict[str, Any]:
        return answer_calls(state)

    tools: Any = answer_calls_async if is_async else answer_calls
    if error:
        tools = ToolNode([search], handle_tool_errors=True)

    def research(state: _LoopState) -> dict[str, Any]:
        return {"messages": [researcher.invoke(state["messages"])]}

    def reply(state: _LoopState) -> dict[str, Any]:
        return {"messages": [answerer.invoke(state["messages"])]}

    def route(state: _LoopState) -> str:
        return "tools" if state["messages"][-1].tool_calls else "reply"  # type: ignore[union-attr]

    builder: StateGraph[Any] = StateGraph(_LoopState)
    builder.add_node("research", research)
    builder.add_node("tools", tools)
    builder.add_node("reply", reply)
    builder.add_edge(START, "research")
    builder.add_conditional_edges("research", route, ["tools", "reply"])
    builder.add_edge("tools", "research")
    return builder.compile(checkpointer=InMemorySaver())


_TOOL_LOOP_INTERNAL = ("ARGSECRET", "NOTESSECRET", "TOOLSECRET")


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize(
    ("error", "is_async"),
    [(False, False), (False, True), (True, False)],
    ids=["sync", "async", "error"],
)
def test_events_tool_answer_to_an_internal_call_never_leaves(
    version: str, error: bool, is_async: bool
) -> None:
    """A tools node's `on_chain_stream` event, which LangChain sends before the node ends
    (and before its end tags what it made), loses the `ToolMessage` answering an internal
    model's call; the event itself, and everything visible, is delivered as raw has it."""
    inputs = [{"messages": [HumanMessage("hi VISIBLEQUESTION", id="u1")]}]
    (raw,) = _events(_tool_loop(error=error, is_async=is_async), inputs, version=version)
    enforced_graph = with_visibility(_tool_loop(error=error, is_async=is_async), VisibilityPolicy())
    (enforced,) = _events(enforced_graph, inputs, version=version)
    raw_text, text = repr(raw), repr(enforced)
    assert [m for m in _TOOL_LOOP_INTERNAL if m in raw_text] == list(_TOOL_LOOP_INTERNAL)
    assert [m for m in _TOOL_LOOP_INTERNAL if m in text] == []
    assert "ANSWERVISIBLE" in text
    assert "VISIBLEQUESTION" in text

    def tools_events(events: list[dict]) -> list[tuple[str, str]]:
        return [(e["event"], e["name"]) for e in events if e["name"] == "tools"]

    assert tools_events(enforced) == tools_events(raw)
    assert ("on_chain_stream", "tools") in tools_events(enforced)


def test_events_tool_answer_check_fails_on_a_wrapper_judging_by_tag_and_id_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Control: judged by tag and message id alone, as before, the tools node's stream
    event leaks the answer (so the test above can fail)."""
    import lg_visibility._events as events_module

    monkeypatch.setattr(events_module, "_EventRedaction", OutputFilter)
    graph = with_visibility(_tool_loop(error=False, is_async=False), VisibilityPolicy())
    (events,) = _events(graph, [{"messages": [HumanMessage("hi", id="u1")]}], version="v2")
    leaked = [(e["event"], e["name"]) for e in events if "TOOLSECRET" in repr(e.get("data"))]
    assert leaked == [("on_chain_stream", "tools")]


class Route(BaseModel):
    """A router's structured decision."""

    dest: str


class _RouteState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    route: str


def _router_graph(chain: Any = None) -> Any:
    """`router` (undeclared) runs `chain`, by default `with_structured_output` of a model
    declared internal on its constructor, and writes the decision to the internal key
    `route`; `answer` (a visible model) replies."""
    call = {"name": "Route", "args": {"dest": "ROUTESECRET billing"}, "id": "route-1"}
    if chain is None:
        router_model = FakeChatModel(
            responses=[AIMessage("", tool_calls=[call])], metadata={"visibility": "internal"}
        )
        chain = router_model.with_structured_output(Route)
    answerer = FakeChatModel(responses=["ANSWERVISIBLE on its way"])

    async def router(state: _RouteState) -> dict[str, Any]:
        decision = await chain.ainvoke(state["messages"])
        return {"route": getattr(decision, "dest", str(decision))}

    async def answer(state: _RouteState) -> dict[str, Any]:
        return {"messages": [await answerer.ainvoke(state["messages"])]}

    builder: StateGraph[Any] = StateGraph(_RouteState)
    builder.add_node("router", router)
    builder.add_node("answer", answer)
    builder.add_edge(START, "router")
    builder.add_edge("router", "answer")
    return builder.compile(checkpointer=InMemorySaver())


_ROUTE_POLICY = VisibilityPolicy(internal_keys=["route"])


def _shape(events: list[dict]) -> list[tuple[str, str, list[str]]]:
    return [(e["event"], e["name"], sorted(e.get("data") or {})) for e in events]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_events_structured_output_of_an_internal_model_never_leaves(version: str) -> None:
    """The parser of `with_structured_output` is handed the internal model's message: its
    events, and the sequence's output (the parser's), are internal with it. Everything
    else is raw's, and the sequence's start and end still frame the call."""
    inputs = [{"messages": [HumanMessage("hi VISIBLEQUESTION", id="u1")]}]
    (raw,) = _events(_router_graph(), inputs, version=version)
    (enforced,) = _events(with_visibility(_router_graph(), _ROUTE_POLICY), inputs, version=version)
    leaks = [(e["event"], e["name"]) for e in raw if "ROUTESECRET" in repr(e.get("data"))]
    assert ("on_parser_end", "PydanticToolsParser") in leaks  # control: raw carries it
    assert "ROUTESECRET" not in repr(enforced)
    assert "ANSWERVISIBLE" in repr(enforced)
    expected = [
        (kind, name, [k for k in keys if not (name == "RunnableSequence" and k == "output")])
        for kind, name, keys in _shape(raw)
        if name not in ("FakeChatModel", "PydanticToolsParser") or "ANSWERVISIBLE" in str(keys)
    ]
    answer_model = [s for s in _shape(enforced) if s[1] == "FakeChatModel"]
    assert [s for s in _shape(enforced) if s[1] != "FakeChatModel"] == expected
    assert answer_model  # the visible answer's model events, prompts removed
    assert all(s[0] != "on_chat_model_end" or s[2] == ["output"] for s in answer_model)


def _rewrite_then_ask() -> Any:
    """`internal rewriter | parser | ask | parser` in a node: `ask` (a lambda) hands the
    rewritten query to a visible model and returns its answer, which the last parser reads."""
    rewriter = FakeChatModel(responses=["NOTESSECRET query"], metadata={"visibility": "internal"})
    writer = FakeChatModel(responses=["ANSWERVISIBLE written"])

    async def ask(query: str) -> Any:
        return await writer.ainvoke([HumanMessage(query)])

    chain = rewriter | StrOutputParser() | RunnableLambda(ask, name="ask") | StrOutputParser()
    return _router_graph(chain)


def test_events_steps_after_an_internal_model_are_internal_but_a_model_inside_them() -> None:
    """Every step after the internal model is made of its output: the parser, `ask` (whose
    input is the rewritten query) and the parser after it are dropped, and the sequence's
    end keeps no `output`. The visible model `ask` runs decides for itself: its events,
    tokens and answer are delivered (its prompt removed, as any model's)."""
    inputs = [{"messages": [HumanMessage("hi", id="u1")]}]
    (raw,) = _events(_rewrite_then_ask(), inputs, version="v2")
    (enforced,) = _events(with_visibility(_rewrite_then_ask(), _ROUTE_POLICY), inputs, version="v2")
    assert "NOTESSECRET" in repr(raw)
    assert "NOTESSECRET" not in repr(enforced)
    names = [e["name"] for e in enforced]
    assert "StrOutputParser" not in names
    assert "ask" not in names
    (end,) = [
        e for e in enforced if (e["event"], e["name"]) == ("on_chain_end", "RunnableSequence")
    ]
    assert "output" not in end["data"]
    writer = [e for e in enforced if e["name"] == "FakeChatModel"]
    tokens = "".join(str(e["data"]["chunk"].content) for e in writer if "chunk" in e["data"])
    assert tokens.startswith("ANSWERVISIBLE written")
    assert any(e["event"] == "on_chat_model_end" for e in writer)


def _streamed_text(graph: Any) -> str:
    """The text of every message `graph.astream(..., stream_mode="messages")` yields."""

    async def run() -> list[Any]:
        config: RunnableConfig = {"configurable": {"thread_id": "t"}}
        stream = graph.astream(
            {"messages": [HumanMessage("hi", id="u1")]}, config, stream_mode="messages"
        )
        return [part async for part in stream]

    parts = asyncio.run(asyncio.wait_for(run(), TIMEOUT))
    return "".join(str(message.content) for message, _ in parts)


def test_a_model_inside_a_step_after_an_internal_parser_stays_visible_in_the_stream() -> None:
    """The same chain through `astream`: the visible model that `ask` runs streams its
    tokens (a step's own runs are never taken for internal)."""
    graph = with_visibility(_rewrite_then_ask(), _ROUTE_POLICY)
    text = _streamed_text(graph)
    assert text == "ANSWERVISIBLE writtenANSWERVISIBLE on its way"  # `ask`'s, then `answer`'s


def test_events_of_a_node_with_an_internal_model_and_a_conditional_edge_are_raws() -> None:
    """A node that calls an internal model and has a conditional edge (its path function runs
    as the node's second step): the node's and the path's events are raw's."""

    def build() -> Any:
        notes = FakeChatModel(responses=["NOTESSECRET"], metadata={"visibility": "internal"})
        writer = FakeChatModel(responses=["ANSWERVISIBLE here"])

        async def answer(state: _LoopState) -> dict[str, Any]:
            await notes.ainvoke(state["messages"])
            return {"messages": [await writer.ainvoke(state["messages"])]}

        builder: StateGraph[Any] = StateGraph(_LoopState)
        builder.add_node("answer", answer)
        builder.add_edge(START, "answer")

        def route(state: _LoopState) -> str:
            return END

        builder.add_conditional_edges("answer", route, [END])
        return builder.compile()

    inputs = [{"messages": [HumanMessage("hi", id="u1")]}]
    (raw,) = _events(build(), inputs, version="v2")
    (enforced,) = _events(with_visibility(build(), VisibilityPolicy()), inputs, version="v2")

    def node_events(events: list[dict]) -> list[Any]:
        return [
            (e["event"], e["name"], canon([((), "d", e["data"])]))
            for e in events
            if e["name"] in ("answer", "route")
        ]

    assert len(node_events(raw)) == 5
    assert node_events(enforced) == node_events(raw)


def test_events_runs_a_node_starts_after_an_internal_model_stay_its_own() -> None:
    """A node's function calls an internal model, then a chain of its own: both are the
    node's step 1, so the chain follows nothing and its events are delivered as raw's."""
    notes = FakeChatModel(responses=["NOTESSECRET facts"], metadata={"visibility": "internal"})

    def build() -> Any:
        graph_chain = RunnableLambda(lambda messages: "VISIBLECHAIN ok", name="shape")

        class Both:
            async def ainvoke(self, messages: Any) -> Any:
                await notes.ainvoke(messages)
                return await graph_chain.ainvoke(messages)

        return _router_graph(Both())

    inputs = [{"messages": [HumanMessage("hi", id="u1")]}]
    (raw,) = _events(build(), inputs, version="v2")
    (enforced,) = _events(with_visibility(build(), _ROUTE_POLICY), inputs, version="v2")
    shape = [s for s in _shape(raw) if s[1] == "shape"]
    assert shape
    assert [s for s in _shape(enforced) if s[1] == "shape"] == shape
    assert "NOTESSECRET" not in repr(enforced)


def test_events_structured_output_check_fails_without_following_sequence_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Control: with no sequence step followed, the parser's decision leaves (so the tests
    above can fail)."""
    import lg_visibility._run as run_module

    monkeypatch.setattr(run_module, "_sequence_step", lambda tags: None)
    inputs = [{"messages": [HumanMessage("hi", id="u1")]}]
    (events,) = _events(with_visibility(_router_graph(), _ROUTE_POLICY), inputs, version="v2")
    leaks = [(e["event"], e["name"]) for e in events if "ROUTESECRET" in repr(e.get("data"))]
    assert leaks == [("on_parser_end", "PydanticToolsParser"), ("on_chain_end", "RunnableSequence")]


def _structured_variants() -> dict[str, Any]:
    """Ways a router's structured output is made of an internal model's message."""
    call = {"name": "Route", "args": {"dest": "ROUTESECRET billing"}, "id": "route-1"}

    def model() -> Any:
        return FakeChatModel(
            responses=[AIMessage("", tool_calls=[call])], metadata={"visibility": "internal"}
        )

    def check(message: Any) -> Any:  # a provider's step between model and parser
        return message

    parser = model().with_structured_output(Route).steps[-1]  # type: ignore[attr-defined]
    notes = FakeChatModel(responses=["ROUTESECRET notes"], metadata={"visibility": "internal"})
    return {
        # langchain-openai's shape: `llm | RunnableGenerator(_check_refusal) | parser`
        "step_between": model() | RunnableLambda(check, name="check") | parser,
        # the structured chain as the last step of an outer sequence
        "nested": RunnableLambda(lambda x: x, name="prep")
        | model().with_structured_output(Route).with_config(run_name="structured"),
        # the parser's output handed to a RunnableParallel's branches
        "parallel": notes
        | StrOutputParser()
        | RunnableParallel(
            n=RunnableLambda(lambda text: len(text), name="count"),
            k=RunnableLambda(lambda text: "k", name="const"),
        ),
    }


@pytest.mark.parametrize("variant", ["step_between", "nested", "parallel"])
def test_events_what_is_made_of_an_internal_models_output_never_leaves(variant: str) -> None:
    """Every step after the internal model (a provider's check, the parser, a sequence
    around the structured chain, a `RunnableParallel`'s branches) is made of its output:
    none of it reaches the events; the rest is raw's."""
    inputs = [{"messages": [HumanMessage("hi", id="u1")]}]
    (raw,) = _events(_router_graph(_structured_variants()[variant]), inputs, version="v2")
    enforced_graph = with_visibility(_router_graph(_structured_variants()[variant]), _ROUTE_POLICY)
    (enforced,) = _events(enforced_graph, inputs, version="v2")
    assert "ROUTESECRET" in repr(raw)
    assert "ROUTESECRET" not in repr(enforced)
    assert "ANSWERVISIBLE" in repr(enforced)
    kept = {"LangGraph", "router", "answer"}
    assert [s for s in _shape(enforced) if s[1] in kept] == [s for s in _shape(raw) if s[1] in kept]


def test_events_custom_events_of_a_step_after_an_internal_model_follow_the_custom_mode() -> None:
    """With `filter_custom`, a step after an internal model (its own events dropped) is
    judged as any run for what it dispatches or writes: both pass, as in `custom` mode."""

    async def after(text: str, config: RunnableConfig) -> int:
        await adispatch_custom_event("progress", {"stage": "PROGRESSVISIBLE"}, config=config)
        return len(text)

    notes = FakeChatModel(responses=["NOTESSECRET facts"], metadata={"visibility": "internal"})
    chain = notes | StrOutputParser() | RunnableLambda(after, name="after")
    policy = VisibilityPolicy(internal_keys=["route"], filter_custom=True)
    inputs = [{"messages": [HumanMessage("hi", id="u1")]}]
    (events,) = _events(with_visibility(_router_graph(chain), policy), inputs, version="v2")
    assert "NOTESSECRET" not in repr(events)
    assert "after" not in [e["name"] for e in events]
    customs = [e["data"] for e in events if e["event"] == "on_custom_event"]
    assert customs == [{"stage": "PROGRESSVISIBLE"}]


def test_a_run_id_reused_inside_its_own_run_does_not_stop_the_stream() -> None:
    """A caller that gives a step the run id of the sequence around it (its own run's):
    following the steps outwards stops where an id repeats, and the run streams."""
    reused = uuid.uuid4()
    notes = FakeChatModel(responses=["NOTESSECRET facts"], metadata={"visibility": "internal"})
    inner = (notes | StrOutputParser()).with_config(run_id=reused)
    outer = RunnableLambda(lambda x: x, name="prep") | inner

    class Reusing:
        async def ainvoke(self, messages: Any) -> Any:
            return await outer.ainvoke(messages, {"run_id": reused})

    graph = with_visibility(_router_graph(Reusing()), _ROUTE_POLICY)
    text = _streamed_text(graph)
    assert text == "ANSWERVISIBLE on its way"
