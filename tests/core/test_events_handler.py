"""astream_events(version="v2") of an enforced graph runs langchain-core's implementation
with our `EventsHandler` in place of LangChain's events handler: it decides and tags for the
run (no tagging callback beside it), never builds an event for an internal model's token
(counted at the handler, with a visible control), decides a nested model (inside a tool,
inside an LCEL chain) before its first event is built, and delivers exactly the events the
fallback path (LangChain's handler, a tagging callback, the event filter) delivers."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph

from lg_visibility import VisibilityPolicy, _wrap, with_visibility
from lg_visibility._handlers import EventsHandler, VisibilityHandler
from lg_visibility.errors import VisibilityConfigError
from lg_visibility.testing import FakeChatModel
from tests._support.core import TIMEOUT, State, pytestmark, tagged
from tests._support.oracle import canon_events

__all__ = ["pytestmark"]

INTERNAL_MODELS = ("planner", "chain_secret", "tool_secret")
VISIBLE_MODELS = ("tool_visible", "answer")
MARKERS = ("PLANSECRET", "CHAINSECRET", "TOOLSECRET")


def _graph(*, sync: bool = False) -> Any:
    """`plan` (internal by policy: a model), `work` (visible: an LCEL chain ending in a model
    declared internal, and a tool that runs a model declared internal and a visible one),
    `answer` (visible: a model); with `sync`, every node, tool and model call is sync (run
    in LangGraph's executor, its callbacks through a sync callback manager)."""
    planner = FakeChatModel(responses=["PLANSECRET step one"]).with_config(run_name="planner")
    chain_model = FakeChatModel(responses=["CHAINSECRET aside"]).with_config(
        run_name="chain_secret", metadata={"visibility": "internal"}
    )
    chain = RunnableLambda(lambda messages: messages) | chain_model
    tool_secret = FakeChatModel(responses=["TOOLSECRET lookup"]).with_config(
        run_name="tool_secret", metadata={"visibility": "internal"}
    )
    tool_visible = FakeChatModel(responses=["TOOLVISIBLE found it"]).with_config(
        run_name="tool_visible"
    )
    answer = FakeChatModel(responses=["ANSWERVISIBLE all done"]).with_config(run_name="answer")

    @tool
    async def look(query: str) -> str:
        """Look something up with two models."""
        await tool_secret.ainvoke([HumanMessage(query)])
        found = await tool_visible.ainvoke([HumanMessage(query)])
        return str(found.content)

    @tool
    def look_sync(query: str) -> str:
        """Look something up with two models."""
        tool_secret.invoke([HumanMessage(query)])
        return str(tool_visible.invoke([HumanMessage(query)]).content)

    async def plan(state: State) -> dict[str, Any]:
        return {"messages": [await planner.ainvoke(state["messages"])]}

    async def work(state: State) -> dict[str, Any]:
        await chain.ainvoke(state["messages"])
        text = await look.ainvoke({"query": "order 7"})
        return {"messages": [AIMessage(text, id="work-1")]}

    async def reply(state: State) -> dict[str, Any]:
        return {"messages": [await answer.ainvoke(state["messages"])]}

    def plan_sync(state: State) -> dict[str, Any]:
        return {"messages": [planner.invoke(state["messages"])]}

    def work_sync(state: State) -> dict[str, Any]:
        chain.invoke(state["messages"])
        text = look_sync.invoke({"query": "order 7"})
        return {"messages": [AIMessage(text, id="work-1")]}

    def reply_sync(state: State) -> dict[str, Any]:
        return {"messages": [answer.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("plan", plan_sync if sync else plan)
    builder.add_node("work", work_sync if sync else work)
    builder.add_node("reply", reply_sync if sync else reply)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "work")
    builder.add_edge("work", "reply")
    graph = builder.compile(checkpointer=InMemorySaver())
    return with_visibility(graph, VisibilityPolicy(internal=["plan"]))


class _Counts:
    """What the handlers built during a call: events per (kind, run name), taggers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.built: Counter[tuple[str, str]] = Counter()
        self.handlers = 0
        self.taggers = 0
        send, init = EventsHandler._send, EventsHandler.__init__
        for_run = VisibilityHandler._for_run.__func__  # type: ignore[attr-defined]

        def counting_send(handler: Any, event: Any, event_type: str) -> None:
            self.built[(event["event"], event["name"])] += 1
            send(handler, event, event_type)

        def counting_init(handler: Any, *args: Any, **kwargs: Any) -> None:
            self.handlers += 1
            init(handler, *args, **kwargs)

        def counting_for_run(cls: Any, run: Any) -> Any:
            self.taggers += 1
            return for_run(cls, run)

        monkeypatch.setattr(EventsHandler, "_send", counting_send)
        monkeypatch.setattr(EventsHandler, "__init__", counting_init)
        monkeypatch.setattr(VisibilityHandler, "_for_run", classmethod(counting_for_run))

    def tokens(self, name: str) -> int:
        return self.built[("on_chat_model_stream", name)]


def _events(graph: Any, config: RunnableConfig, *, version: str = "v2", **kw: Any) -> list[dict]:
    async def collect() -> list[dict]:
        stream = graph.astream_events(
            {"messages": [HumanMessage("hi", id="h1")]}, config, version=version, **kw
        )
        return [e async for e in stream]

    return asyncio.run(asyncio.wait_for(collect(), TIMEOUT))


def _delivered_tokens(events: list[dict]) -> Counter[str]:
    return Counter(e["name"] for e in events if e["event"] == "on_chat_model_stream")


def _state_tags(graph: Any, config: RunnableConfig) -> list[tuple[str, Any, str | None]]:
    messages: list[BaseMessage] = graph.raw_state.get_state(config).values["messages"]
    return tagged(messages)


STATE_TAGS = [
    ("HumanMessage", "hi", None),
    ("AIMessage", "PLANSECRET step one", "internal"),
    ("AIMessage", "TOOLVISIBLE found it", "user_visible"),
    ("AIMessage", "ANSWERVISIBLE all done", "user_visible"),
]


@pytest.mark.parametrize("sync", [False, True], ids=["async-nodes", "sync-nodes"])
@pytest.mark.parametrize(
    "stream_mode", [None, ["messages", "values"]], ids=["default", "messages+values"]
)
def test_events_handler_builds_no_event_for_internal_tokens(
    monkeypatch: pytest.MonkeyPatch, stream_mode: Any, sync: bool
) -> None:
    """Internal models' tokens (by policy, in an LCEL chain, in a tool) are never built as
    events; the visible models' are (the control), each delivered."""
    counts = _Counts(monkeypatch)
    graph = _graph(sync=sync)
    kw = {} if stream_mode is None else {"stream_mode": stream_mode}
    events = _events(graph, {"configurable": {"thread_id": "a"}}, **kw)
    assert counts.handlers == 1
    assert [counts.tokens(name) for name in INTERNAL_MODELS] == [0, 0, 0]
    # FakeChatModel streams one chunk per word (three each here), then an empty last one.
    assert [counts.tokens(name) for name in VISIBLE_MODELS] == [4, 4]
    assert _delivered_tokens(events) == Counter({"tool_visible": 4, "answer": 4})
    assert [m for m in MARKERS if m in repr(events)] == []


@pytest.mark.parametrize("sync", [False, True], ids=["async-nodes", "sync-nodes"])
def test_events_handler_tags_in_place_of_the_tagging_callback(
    monkeypatch: pytest.MonkeyPatch, sync: bool
) -> None:
    """v2 attaches no tagging callback, yet state carries the same tags as on the v1 path,
    which still attaches one (the control)."""
    counts = _Counts(monkeypatch)
    graph = _graph(sync=sync)
    _events(graph, {"configurable": {"thread_id": "v2"}})
    assert (counts.handlers, counts.taggers) == (1, 0)
    assert _state_tags(graph, {"configurable": {"thread_id": "v2"}}) == STATE_TAGS
    with pytest.warns(DeprecationWarning):
        _events(graph, {"configurable": {"thread_id": "v1"}}, version="v1")
    assert (counts.handlers, counts.taggers) == (1, 1)
    assert _state_tags(graph, {"configurable": {"thread_id": "v1"}}) == STATE_TAGS


def test_events_handler_decides_before_the_first_event_is_built() -> None:
    """The first delivered chunk of each visible model, and its end event's message, carry
    the tag: the run was decided before LangChain built those events."""
    events = _events(_graph(), {"configurable": {"thread_id": "a"}})
    for name in VISIBLE_MODELS:
        chunks = [
            e["data"]["chunk"]
            for e in events
            if e["event"] == "on_chat_model_stream" and e["name"] == name
        ]
        tags = [c.response_metadata.get("visibility") for c in chunks]
        assert tags == ["user_visible", None, None, None]
        (end,) = [e for e in events if e["event"] == "on_chat_model_end" and e["name"] == name]
        assert end["data"]["output"].response_metadata["visibility"] == "user_visible"


@pytest.mark.parametrize(
    "stream_mode", [None, ["messages", "values"]], ids=["default", "messages+values"]
)
def test_events_handler_delivers_what_the_fallback_path_delivers(
    monkeypatch: pytest.MonkeyPatch, stream_mode: Any
) -> None:
    """The same events and the same state tags with our handler as with LangChain's own
    handler plus the tagging callback (the path taken when langchain-core's shape is not
    the one checked)."""
    kw = {} if stream_mode is None else {"stream_mode": stream_mode}
    config: RunnableConfig = {"configurable": {"thread_id": "a"}}
    fast_graph, slow_graph = _graph(), _graph()
    fast = _events(fast_graph, config, **kw)
    counts = _Counts(monkeypatch)
    monkeypatch.setattr(_wrap, "astream_events_v2_with", lambda build: None)
    slow = _events(slow_graph, config, **kw)
    assert counts.handlers == 0
    assert counts.taggers == (1 if stream_mode is None else 0)
    assert canon_events(fast) == canon_events(slow)
    assert [(e["event"], e["name"]) for e in fast] == [(e["event"], e["name"]) for e in slow]
    assert _state_tags(fast_graph, config) == _state_tags(slow_graph, config) == STATE_TAGS
    assert [m for m in MARKERS if m in repr(slow)] == []


def test_events_handler_fails_closed_on_a_decision_error() -> None:
    """A model whose declaration cannot be decided stops the run with the error, as the
    tagging callback did: the handler raises its own errors."""
    model = FakeChatModel(responses=["BADDECL x"]).with_config(metadata={"visibility": "bogus"})

    async def call(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("talk", call)
    builder.add_edge(START, "talk")
    graph = with_visibility(builder.compile(), VisibilityPolicy())
    with pytest.raises(VisibilityConfigError, match="bogus"):
        _events(graph, {})


def test_events_handler_decides_with_the_calls_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A `VisibilityHandler` in the call's callbacks replaces the policy for the call, and
    the handler decides with it: the internal-by-policy planner's tokens are built and
    delivered (a staff view), the models declared internal themselves still are not."""
    counts = _Counts(monkeypatch)
    config: RunnableConfig = {
        "configurable": {"thread_id": "staff"},
        "callbacks": [VisibilityHandler(VisibilityPolicy())],
    }
    events = _events(_graph(), config)
    assert [counts.tokens(name) for name in INTERNAL_MODELS] == [4, 0, 0]
    assert _delivered_tokens(events) == Counter({"planner": 4, "tool_visible": 4, "answer": 4})
    assert counts.taggers == 0


def test_events_handler_is_found_in_a_callback_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Callbacks given as a callback manager: langchain-core adds our handler to a copy of
    it, and the plan finds it there, so no tagging callback is added either."""
    from langchain_core.callbacks import AsyncCallbackManager

    counts = _Counts(monkeypatch)
    graph = _graph()
    config: RunnableConfig = {
        "configurable": {"thread_id": "m"},
        "callbacks": AsyncCallbackManager([]),
    }
    events = _events(graph, config)
    assert (counts.handlers, counts.taggers) == (1, 0)
    assert [counts.tokens(name) for name in INTERNAL_MODELS] == [0, 0, 0]
    assert _delivered_tokens(events) == Counter({"tool_visible": 4, "answer": 4})
    assert _state_tags(graph, {"configurable": {"thread_id": "m"}}) == STATE_TAGS
