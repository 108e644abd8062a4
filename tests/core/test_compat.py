"""_compat: the langgraph version guard, the import-time shape checks, and the per-run
handler swap that patches nothing. CI runs this on the lowest and the highest supported
langgraph."""

from __future__ import annotations

import asyncio
import builtins
import dis
import functools
import inspect
import operator
import sys
import textwrap
import threading
import tomllib
import types
import warnings
import weakref
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any, TypedDict
from uuid import uuid4

import langgraph.pregel._messages
import langgraph.pregel.main
import langgraph.pregel.protocol
import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_stream_writer
from langgraph.constants import TAG_HIDDEN
from langgraph.errors import ParentCommand
from langgraph.graph import START, MessagesState, StateGraph, add_messages
from langgraph.pregel import Pregel
from langgraph.types import Command

from lg_visibility import VisibilityPolicy, _compat, with_visibility
from lg_visibility._compat import check_version, is_task_config, pregel_stream_with
from lg_visibility.testing import FakeChatModel
from tests._support.core import (
    SYNC_ASYNC,
    TIMEOUT,
    State,
    llm_node,
    pytestmark,
    run,
    thread,
    tokens,
    user_input,
)
from tests._support.wrong_puts import batch_by_task, batch_while_as_long

__all__ = ["pytestmark"]

RANGE = "lg_visibility supports langgraph >=1.2.19,<1.3 but langgraph {} is installed."
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@pytest.mark.parametrize("found", ["1.3.0", "1.2.0", "1.2.18", "2.0.0", "0.6.11", "1.2"])
def test_check_version_rejects_an_unsupported_langgraph(found: str) -> None:
    """A langgraph outside >=1.2.19,<1.3 raises ImportError naming the range and the fix."""
    with pytest.raises(ImportError) as info:
        check_version(found)
    message = str(info.value)
    assert message.startswith(RANGE.format(found))
    assert "pip install 'langgraph>=1.2.19,<1.3'" in message


@pytest.mark.parametrize("found", ["1.2.1rc9", "1.2.1a9", "1.2.18.post1"])
def test_check_version_rejects_a_pre_or_post_release_of_an_unsupported_version(found: str) -> None:
    """A suffix does not lift an old patch release into the range ("1rc9" is 1, not 19)."""
    with pytest.raises(ImportError, match=r">=1\.2\.19,<1\.3"):
        check_version(found)


@pytest.mark.parametrize("found", ["1.2.19", "1.2.21", "1.2.24", "1.2.99", "1.2.30.post1"])
def test_check_version_accepts_a_supported_langgraph(found: str) -> None:
    """Versions in the range pass silently."""
    assert check_version(found) is None


def test_check_version_defaults_to_the_installed_langgraph() -> None:
    """Without an argument the installed langgraph is checked, and it is supported here."""
    assert version("langgraph") == _compat.LANGGRAPH_VERSION
    low, high = _compat.SUPPORTED
    assert low <= _compat._parse(_compat.LANGGRAPH_VERSION) < high
    assert check_version() is None


def test_supported_range_is_the_one_pyproject_pins() -> None:
    """pyproject.toml requires exactly the langgraph range the import-time guard accepts."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    pins = [dep for dep in project["dependencies"] if dep.startswith("langgraph")]
    assert pins == ["langgraph" + _compat.SUPPORTED_SPEC]
    assert _compat.SUPPORTED == ((1, 2, 19), (1, 3, 0))
    assert _compat.SUPPORTED_SPEC == ">=1.2.19,<1.3"


def _shape_problems() -> str:
    """What `check_shapes` raises, between its fixed opening and closing."""
    with pytest.raises(ImportError) as info:
        _compat.check_shapes()
    head = f"lg_visibility cannot run on langgraph {_compat.LANGGRAPH_VERSION}: "
    tail = (
        ". Install a supported langgraph (see pyproject.toml) or an lg-visibility release "
        "that supports yours."
    )
    text = str(info.value)
    assert text.startswith(head) and text.endswith(tail)
    return text[len(head) : -len(tail)]


def test_compat_shape_check_fails_on_a_stream_that_keeps_a_callers_handlers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A `Pregel.astream` that does not drop a caller's messages handlers from a graph not run
    as a task (langgraph <=1.2.18) fails the import-time check, naming what is missing."""
    own = _compat._PREGEL_ASTREAM
    older = types.FunctionType((lambda self: None).__code__, own.__globals__, own.__name__)
    monkeypatch.setattr(_compat, "_PREGEL_ASTREAM", older)
    assert _shape_problems() == (
        "Pregel.astream does not drop a caller's messages handlers from a graph not run as a "
        "task (langgraph 1.2.19 added this); Pregel.astream no longer streams through the "
        "global _output; Pregel.astream no longer builds Runtime(stream_writer=...); "
        "Pregel.astream no longer builds its subgraphs' sink as "
        "StreamProtocol(stream_put, stream_modes) with call_soon_threadsafe; "
        "Pregel.astream no longer defines its custom writer; "
        "Pregel.astream no longer builds its loop's stream as "
        "StreamProtocol(stream.put_nowait, stream_modes) on an AsyncQueue; "
        "Pregel.stream/astream no longer build their loop by its global name"
    )


def test_compat_shape_check_fails_where_a_called_task_is_no_longer_placed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A loop whose `accept_push` no longer emits the pushed task's start, and a functional
    task whose run no longer marks its path in progress, fail the import-time check (a
    `@task`'s events would be judged by the wrong path)."""

    class Loop:
        def accept_push(self, task: Any, write_idx: int, call: Any = None) -> None:
            return None

    def prepare(task_path: Any) -> dict[str, Any]:
        return {"langgraph_path": task_path, "langgraph_checkpoint_ns": ""}

    monkeypatch.setattr(_compat, "_PregelLoop", Loop)
    monkeypatch.setattr(_compat, "_prepare_call", prepare)
    assert _shape_problems() == (
        "PregelLoop.accept_push no longer emits the pushed task's start; "
        "prepare_push_task_functional no longer marks a call's task path in progress in "
        "its run's metadata; PregelLoop._put_checkpoint no longer saves a copy_checkpoint(...)"
    )


def test_compat_shape_check_fails_on_a_stream_that_reads_output_as_an_attribute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A `Pregel.stream` that names `_output` other than as a module global (which a run's
    copy could not replace) fails the import-time check."""
    own = _compat._PREGEL_STREAM
    other = types.FunctionType(
        (lambda self: self._is_stream_mode_handler and self._output).__code__,
        own.__globals__,
        own.__name__,
    )
    monkeypatch.setattr(_compat, "_PREGEL_STREAM", other)
    assert _shape_problems() == (
        "Pregel.stream no longer streams through the global _output; Pregel.stream no longer "
        "builds Runtime(stream_writer=...); Pregel.stream no longer builds its loop's stream "
        "as StreamProtocol(stream.put, stream_modes) on a SyncQueue; "
        "Pregel.stream/astream no longer build their loop by its global name"
    )


def test_compat_shape_check_fails_on_a_stream_whose_writer_is_not_handed_to_runtime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A `Pregel.stream` that builds its run's `Runtime` otherwise than from the global
    `Runtime` with `stream_writer=` (which a run's copy could not judge) fails the check."""
    own = _compat._PREGEL_STREAM
    code = own.__code__
    consts = tuple(
        tuple("writer" if n == "stream_writer" else n for n in c) if isinstance(c, tuple) else c
        for c in code.co_consts
    )
    other = types.FunctionType(code.replace(co_consts=consts), own.__globals__, own.__name__)
    monkeypatch.setattr(_compat, "_PREGEL_STREAM", other)
    assert _shape_problems() == "Pregel.stream no longer builds Runtime(stream_writer=...)"


def _rewritten(fn: Any, line: str, *lines: str) -> Any:
    """`fn` compiled again from its own source with its one line `line` replaced by
    `lines` (at its indentation), with its module's globals: a plausible refactor of
    LangGraph's or LangChain's code."""
    source = textwrap.dedent(inspect.getsource(fn)).splitlines()
    found = [i for i, text in enumerate(source) if text.strip() == line]
    assert len(found) == 1
    at = found[0]
    indent = source[at][: len(source[at]) - len(source[at].lstrip())]
    source[at : at + 1] = [indent + text for text in lines]
    scope = dict(vars(sys.modules[fn.__module__]))
    text = "from __future__ import annotations\n" + "\n".join(source)
    exec(compile(text, "<rewritten>", "exec"), scope)
    return scope[fn.__name__]


def test_compat_shape_check_fails_on_a_stream_that_hands_its_writer_on_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A `Pregel.stream` that sets its writer again after building `Runtime` (the slot's
    judging writer would be replaced unjudged) fails the check."""
    merge = "runtime = parent_runtime.merge(runtime)"
    again = "runtime = runtime.override(stream_writer=stream_writer)"
    other = _rewritten(langgraph.pregel.main.Pregel.stream, merge, merge, again)
    monkeypatch.setattr(_compat, "_PREGEL_STREAM", other)
    assert _shape_problems() == "Pregel.stream no longer builds Runtime(stream_writer=...)"


@pytest.mark.parametrize(
    "refactored",
    [
        ")[:-2]",  # the namespace cut one segment shorter
        ")[1:-1]",  # and its root segment left out: -1 is still one of its constants
    ],
)
def test_compat_shape_check_fails_on_a_custom_writer_that_namespaces_otherwise(
    refactored: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `Pregel.astream` whose custom writer builds its event another way fails the check:
    the run's copy rebuilds that writer (`_loop_thread_writer`) and would otherwise stream
    what LangGraph no longer does."""
    other = _rewritten(langgraph.pregel.main.Pregel.astream, ")[:-1]", refactored)
    monkeypatch.setattr(_compat, "_PREGEL_ASTREAM", other)
    assert _shape_problems() == "Pregel.astream's custom writer changed"


def test_compat_shape_check_fails_on_a_writer_reading_another_get_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LangGraph's module naming another `get_config` than `_compat`'s at import fails the
    check: the rebuilt writer reads `_compat`'s."""
    monkeypatch.setattr(langgraph.pregel.main, "get_config", dict)
    assert _shape_problems() == (
        "Pregel.astream's writer reads another get_config, CONF, CONFIG_KEY_CHECKPOINT_NS or NS_SEP"
    )


@pytest.mark.parametrize(
    ("line", "refactored"),
    [
        # the body run outside the tool's context
        (
            "response = context.run(self._run, *tool_args, **tool_kwargs)",
            "response = self._run(*tool_args, **tool_kwargs)",
        ),
        # the context built from the config the tool was given (the tools node's callbacks)
        (
            "with set_config_context(child_config) as context:",
            "with set_config_context(config) as context:",
        ),
    ],
    ids=["body outside the context", "context of the given config"],
)
def test_compat_shape_check_fails_on_a_tool_whose_body_would_not_name_its_run(
    monkeypatch: pytest.MonkeyPatch, line: str, refactored: str
) -> None:
    """A `BaseTool.run` whose body would not run in a context naming the tool's run (what
    `context_run_id` reads would name the tools node) fails the check."""
    monkeypatch.setattr(_compat._BaseTool, "run", _rewritten(BaseTool.run, line, refactored))
    assert _shape_problems() == (
        "langchain-core's BaseTool.run no longer runs the tool's body in a context "
        "holding its run's child callbacks (context_run_id)"
    )


@pytest.mark.parametrize("method", ["run", "arun"])
def test_compat_shape_check_fails_on_a_tool_whose_body_names_no_run(
    monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """A langchain-core `BaseTool.run`/`arun` that no longer runs the tool's body in a
    context holding its run's child callbacks (what `context_run_id` reads) fails the
    import-time check."""

    class Tool(BaseTool):
        def run(self, *args: Any, **kwargs: Any) -> Any:
            return None

        async def arun(self, *args: Any, **kwargs: Any) -> Any:
            return None

    monkeypatch.setattr(_compat._BaseTool, method, getattr(Tool, method))
    assert _shape_problems() == (
        f"langchain-core's BaseTool.{method} no longer runs the tool's body in a context "
        "holding its run's child callbacks (context_run_id)"
    )


def test_compat_shape_check_fails_on_an_output_with_another_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An `_output` whose parameters differ from langgraph 1.2.19-1.2.24's fails the
    import-time check, naming the signature found."""
    monkeypatch.setattr(_compat, "_PREGEL_OUTPUT", lambda stream_mode, getter: None)
    with pytest.raises(ImportError) as info:
        _compat.check_shapes()
    assert str(info.value) == (
        f"lg_visibility cannot run on langgraph {_compat.LANGGRAPH_VERSION}: "
        "langgraph.pregel.main._output(stream_mode, getter) changed. "
        "Install a supported langgraph (see pyproject.toml) or an lg-visibility release that "
        "supports yours."
    )


def test_compat_shape_check_fails_on_a_local_read_with_another_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A task reader whose parameters differ from langgraph 1.2.19-1.2.24's fails the
    import-time check: `task_state` reads a task's channels through its bound arguments."""
    monkeypatch.setattr(_compat, "_local_read", lambda channels, select: None)
    with pytest.raises(ImportError, match=r"local_read\(channels, select\) changed"):
        _compat.check_shapes()


def test_compat_shape_check_fails_on_a_send_task_that_binds_no_local_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`task_state` reads a Send task's state through the reader its config binds: a
    langgraph whose `prepare_push_task_send` binds no `partial(local_read, ...)` fails the
    import-time check."""

    def prepare_push_task_send() -> None:
        return None

    monkeypatch.setattr(_compat, "_prepare_send", prepare_push_task_send)
    with pytest.raises(ImportError, match="no longer binds partial"):
        _compat.check_shapes()


def test_task_state_fails_closed_on_another_reader() -> None:
    """A task whose config holds another reader under CONFIG_KEY_READ: raised, not read as
    no state (which would let an internal call's tool result through)."""
    from langchain_core.runnables.config import var_child_runnable_config

    token = var_child_runnable_config.set({"configurable": {_compat.CONFIG_KEY_READ: print}})
    try:
        with pytest.raises(RuntimeError, match="cannot read a task's state"):
            _compat.task_state()
    finally:
        var_child_runnable_config.reset(token)


def test_task_state_reads_the_running_tasks_channels_and_nothing_outside_a_task() -> None:
    """Inside a node, `task_state` is the channels' values as the task reads them (by
    pointer); outside a graph's task it is None."""
    assert _compat.task_state() is None
    seen: list[Any] = []

    def node(state: dict[str, Any]) -> dict[str, Any]:
        seen.append(_compat.task_state())
        return {}

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("talk", node)
    builder.add_edge(START, "talk")
    message = HumanMessage("hi", id="h1")
    builder.compile().invoke({"messages": [message]})
    assert len(seen) == 1 and seen[0] is not None
    assert seen[0]["messages"] == [message] and seen[0]["messages"][0] is message


def test_compat_output_contact_holds_on_the_installed_langgraph() -> None:
    """Both `Pregel.stream` and `Pregel.astream` name `_output`, and its parameters are the
    eight the per-run `_output` passes on."""
    for fn in (_compat._PREGEL_STREAM, _compat._PREGEL_ASTREAM):
        assert "_output" in _compat._names(fn.__code__)
    assert _compat._PREGEL_OUTPUT is langgraph.pregel.main._output
    assert list(inspect.signature(_compat._PREGEL_OUTPUT).parameters) == [
        "stream_mode",
        "print_mode",
        "stream_subgraphs",
        "getter",
        "empty_exc",
        "version",
        "output_mapper",
        "state_mapper",
    ]


def test_pregel_stream_with_judges_raw_items_and_formats_for_the_callers_mode() -> None:
    """The per-run `_output` pulls through the judged getter (a dropped item is skipped, a
    redacted one replaced) and formats for the caller's mode, not the run's."""
    queue = [((), "tasks", {"id": "t"}), ((), "updates", {"a": 1}), ((), "updates", {"b": 2})]

    def getter() -> Any:
        if not queue:
            raise LookupError
        return queue.pop(0)

    def judged(get: Any) -> Any:
        def judge() -> Any:
            while True:
                ns, mode, payload = get()
                if "b" not in payload:
                    return ns, mode, {**payload, "judged": True}

        return judge

    fn = pregel_stream_with(lambda *a, **k: None, lambda *a, **k: None, judged, "updates")
    output = fn.__globals__["_output"]
    assert langgraph.pregel.main._output is not output
    items = list(output(["updates", "tasks"], [], False, getter, LookupError))
    assert items == [{"a": 1, "judged": True}]
    assert queue == []
    plain = pregel_stream_with(lambda *a, **k: None, lambda *a, **k: None)
    assert loaded(plain, "_output") is langgraph.pregel.main._output


def own_thread_child() -> Any:
    """A graph with its own checkpointer: invoked in a node, it runs as a root, not a task."""
    builder = StateGraph(State)
    builder.add_node("answer", llm_node(FakeChatModel(responses=["CHILD_SECRET"])))
    builder.add_edge(START, "answer")
    return builder.compile(checkpointer=InMemorySaver())


def planner_calling(child: Any) -> RunnableLambda:
    """An internal node that runs `child` on a thread of its own, sync or async."""

    def call(state: State) -> dict[str, Any]:
        child.invoke({"messages": state["messages"]}, thread("child"))
        return {}

    async def acall(state: State) -> dict[str, Any]:
        await child.ainvoke({"messages": state["messages"]}, thread("child"))
        return {}

    return RunnableLambda(call, acall)


@SYNC_ASYNC
def test_child_on_its_own_thread_in_an_internal_node_does_not_stream_as_root(sync: bool) -> None:
    """A graph invoked on its own thread inside an internal node, whose node shares a name
    with a visible root node, streams nothing: on langgraph 1.2.18 its tokens leaked."""
    child = own_thread_child()
    builder = StateGraph(State)
    builder.add_node("planner", planner_calling(child))
    builder.add_node("answer", llm_node(FakeChatModel(responses=["VISIBLE_ANSWER"])))
    builder.add_edge(START, "planner")
    builder.add_edge("planner", "answer")
    graph = with_visibility(builder.compile(), VisibilityPolicy(internal=["planner"]))
    items = run(graph, user_input(), sync=sync, stream_mode="messages")
    assert "".join(tokens(items)) == "VISIBLE_ANSWER"
    assert "CHILD_SECRET" not in repr(items)
    # Control: the child did run in this run, so the marker was there to leak.
    state = (
        child.get_state(thread("child"))
        if sync
        else asyncio.run(asyncio.wait_for(child.aget_state(thread("child")), TIMEOUT))
    )
    assert [m.content for m in state.values["messages"]] == ["hi", "CHILD_SECRET"]


@SYNC_ASYNC
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_child_on_its_own_thread_in_an_internal_node_is_placed_under_it(
    sync: bool, version: str
) -> None:
    """With subgraphs=True LangGraph (>= 1.2.22) keeps our handler on a child graph run on a
    thread of its own, whose namespaces start again at the root: its runs are judged under
    the internal node that invoked it, not as the visible root node of the same name."""
    child = own_thread_child()
    builder = StateGraph(State)
    builder.add_node("planner", planner_calling(child))
    builder.add_node("answer", llm_node(FakeChatModel(responses=["VISIBLE_ANSWER"])))
    builder.add_edge(START, "planner")
    builder.add_edge("planner", "answer")
    raw = run(builder.compile(), user_input(), sync=sync, stream_mode="messages", subgraphs=True)
    graph = with_visibility(builder.compile(), VisibilityPolicy(internal=["planner"]))
    items = run(
        graph, user_input(), sync=sync, stream_mode="messages", subgraphs=True, version=version
    )
    # Control: from langgraph 1.2.22 the raw graph streams the child's tokens (before, LangGraph
    # dropped the caller's handler from such a child itself).
    keeps_handler = _compat._parse(_compat.LANGGRAPH_VERSION) >= (1, 2, 22)
    assert ("CHILD_SECRET" in repr(raw)) is keeps_handler
    assert "CHILD_SECRET" not in repr(items)
    assert "VISIBLE_ANSWER" in repr(items)


def without_run_of(events: list[dict[str, Any]], name: str) -> list[tuple[str, str]]:
    """(event, name) of `events` without the run of node `name` and everything between its
    start and its end (the graph is sequential, so that is its whole run tree) and without
    the root's on_chain_stream items: the raw events minus the internal node's."""
    root = events[0]["run_id"]
    out, inside = [], None
    for event in events:
        if inside is None and event["event"] == "on_chain_start" and event["name"] == name:
            inside = event["run_id"]
        if inside is None and not (event["run_id"] == root and event["event"] == "on_chain_stream"):
            out.append((event["event"], event["name"]))
        if inside is not None and event["event"] == "on_chain_end" and event["run_id"] == inside:
            inside = None
    return out


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_child_on_its_own_thread_in_an_internal_node_has_no_events(version: str) -> None:
    """astream_events: the events of a graph invoked on its own thread inside an internal
    node (its namespaces start again at the root, where a visible node has the same name)
    are dropped with the node's; the enforced events are the raw ones minus that node's run,
    in the same order, and the visible answer streams."""
    child = own_thread_child()
    builder = StateGraph(State)
    builder.add_node("planner", planner_calling(child))
    builder.add_node("answer", llm_node(FakeChatModel(responses=["VISIBLE_ANSWER"])))
    builder.add_edge(START, "planner")
    builder.add_edge("planner", "answer")
    graph = with_visibility(builder.compile(), VisibilityPolicy(internal=["planner"]))

    async def collect(target: Any) -> list[dict[str, Any]]:
        return [e async for e in target.astream_events(user_input(), version=version)]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # v1 is deprecated
        raw = asyncio.run(asyncio.wait_for(collect(builder.compile()), TIMEOUT))
        out = asyncio.run(asyncio.wait_for(collect(graph), TIMEOUT))
    # Control: the raw events carry the child's answer, so the oracle can fail.
    assert "CHILD_SECRET" in repr(raw)
    expected = without_run_of(raw, "planner")
    assert len(expected) < len(without_run_of(raw, "no such node")) - 4
    assert without_run_of(out, "no such node") == expected
    assert "CHILD_SECRET" not in repr(out)
    streamed = [e["data"]["chunk"].content for e in out if e["event"] == "on_chat_model_stream"]
    assert "".join(streamed) == "VISIBLE_ANSWER"


def test_compat_leaves_langgraph_module_globals_alone() -> None:
    """LangGraph's `StreamMessagesHandler` and `_output` globals are still its own after
    import and after a per-run copy."""
    pregel_stream_with(lambda *a, **k: None, lambda *a, **k: None, lambda get: get, "values")
    assert langgraph.pregel.main._output is _compat._PREGEL_OUTPUT
    assert langgraph.pregel.main.StreamMessagesHandler is (
        langgraph.pregel._messages.StreamMessagesHandler
    )
    assert langgraph.pregel.main.StreamMessagesHandlerV2 is (
        langgraph.pregel._messages.StreamMessagesHandlerV2
    )


def test_pregel_stream_with_returns_a_copy_and_leaves_pregel_stream_as_is() -> None:
    """The per-run stream function is a copy with its own globals; `Pregel.stream` is untouched."""
    original = Pregel.stream
    fn = pregel_stream_with(lambda *a, **k: None, lambda *a, **k: None)
    assert fn is not original
    assert fn.__code__ is original.__code__
    assert Pregel.stream is original
    assert original.__globals__ is vars(langgraph.pregel.main)
    assert fn.__globals__ is not original.__globals__
    assert original.__globals__["StreamMessagesHandler"] is (
        langgraph.pregel._messages.StreamMessagesHandler
    )


def loaded(fn: Any, name: str) -> Any:
    """What `fn`'s code finds when it loads the global `name` (globals, then builtins)."""
    return fn.__globals__[name] if name in fn.__globals__ else fn.__builtins__[name]


def global_loads(code: types.CodeType) -> set[str]:
    found = {i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= global_loads(const)
    return found


@pytest.mark.parametrize("name", ["stream", "astream"])
def test_pregel_stream_copy_finds_every_global_as_langgraph_does(name: str) -> None:
    """The per-run copy's code finds each global it loads (nested code included) bound as
    in LangGraph's module, but for the names it rebinds; its own globals hold only those,
    and the rest, shared by every copy, is rebuilt once a name is rebound in the module."""
    copy_with = pregel_stream_with if name == "stream" else _compat.pregel_astream_with
    own = getattr(_compat, "_PREGEL_STREAM" if name == "stream" else "_PREGEL_ASTREAM")
    module = vars(langgraph.pregel.main)
    rebinds = {"StreamMessagesHandler", "StreamMessagesHandlerV2", "_output", "StreamProtocol"}
    rebinds |= {"SyncPregelLoop", "AsyncPregelLoop"}  # every copy's: checkpoints held
    if name == "astream":
        rebinds.add("Runtime")  # every astream copy's writer puts on the loop's thread
    first, second = (copy_with(lambda *a, **k: None, lambda *a, **k: None) for _ in range(2))
    names = global_loads(own.__code__)
    assert {"StreamMessagesHandler", "RuntimeError", "ensure_config"} <= names
    for n in names - rebinds:
        assert loaded(first, n) is (module[n] if n in module else getattr(builtins, n)), n
    assert set(first.__globals__) - {"__builtins__", "__name__"} <= rebinds
    assert first.__globals__["__name__"] == "langgraph.pregel.main"
    assert first.__builtins__ is second.__builtins__  # made once, not per run

    class Rebound(Exception):
        pass

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(langgraph.pregel.main, "ensure_config", lambda *a: "rebound")
        mp.setattr(builtins, "RuntimeError", Rebound)
        third = copy_with(lambda *a, **k: None, lambda *a, **k: None)
        assert loaded(third, "ensure_config")() == "rebound"
        assert loaded(third, "RuntimeError") is Rebound
    fourth = copy_with(lambda *a, **k: None, lambda *a, **k: None)
    assert loaded(fourth, "ensure_config") is module["ensure_config"]
    assert loaded(fourth, "RuntimeError") is builtins.RuntimeError


def test_handler_slot_builds_ours_and_answers_isinstance_as_the_original() -> None:
    """In the copy, the handler name builds our handler but `isinstance` checks still see
    LangGraph's class, so inherited handlers are recognised as before."""
    built: list[tuple] = []
    fn = pregel_stream_with(lambda *a, **k: built.append((a, k)) or "ours", lambda *a, **k: None)
    slot = fn.__globals__["StreamMessagesHandler"]
    original = langgraph.pregel._messages.StreamMessagesHandler
    assert slot("stream", True, parent_ns=("a",)) == "ours"
    assert built == [(("stream", True), {"parent_ns": ("a",)})]
    handler = original(lambda _: None, True)
    assert isinstance(handler, slot)
    assert not isinstance(object(), slot)
    assert issubclass(original, slot)
    assert not issubclass(int, slot)


def test_is_task_config_tells_a_node_run_from_a_top_level_run() -> None:
    """A config carrying a task id is that of a graph running as a node of another graph."""
    assert is_task_config({"configurable": {_compat.CONFIG_KEY_TASK_ID: "t"}}) is True
    assert is_task_config({"configurable": {"thread_id": "1"}}) is False
    assert is_task_config({}) is False


def test_compat_get_subgraphs_finds_a_graph_a_runnable_lambda_lists_in_deps() -> None:
    """LangGraph finds a node's subgraph through `RunnableLambda.deps` (what SubagentNode
    relies on); `static_subgraphs` reports it under the node's path."""
    from langchain_core.runnables import RunnableLambda
    from langgraph.graph import START, StateGraph

    from lg_visibility._compat import static_subgraphs
    from tests._support.core import State, hand_node

    inner_builder = StateGraph(State)
    inner_builder.add_node("say", hand_node())
    inner_builder.add_edge(START, "say")
    inner = inner_builder.compile()

    class Wrapping(RunnableLambda):  # type: ignore[type-arg]
        @property
        def deps(self) -> list[object]:
            return [inner]

    outer = StateGraph(State)
    outer.add_node("wrapped", Wrapping(lambda state: {}))
    outer.add_edge(START, "wrapped")
    assert [(path, graph is inner) for path, graph in static_subgraphs(outer.compile())] == [
        (("wrapped",), True)
    ]


# -- langchain-core's astream_events v2 (checked against langchain-core 1.8.3) -------------


def test_events_contact_accepts_the_installed_langchain_core() -> None:
    """The installed langchain-core has the shape checked: our handler subclasses its own,
    and the per-call copy leaves langchain-core's module globals alone."""
    import langchain_core.tracers.event_stream as event_stream

    assert _compat.EVENTS_SHAPE_PROBLEMS == []
    assert _compat.EventStreamHandler is event_stream._AstreamEventsCallbackHandler
    original = event_stream._astream_events_implementation_v2
    fn = _compat.astream_events_v2_with(lambda **kwargs: None)
    assert fn is not original
    assert fn.__code__ is original.__code__
    assert fn.__globals__ is not original.__globals__
    assert original.__globals__ is vars(event_stream)
    assert event_stream._AstreamEventsCallbackHandler is _compat.EventStreamHandler


def test_a_runs_loop_saves_checkpoints_with_their_lists_copied(monkeypatch: Any) -> None:
    """`_held_checkpoint(copy)` is LangGraph's `copy` (the one its loop saves with) with the
    channel values' lists copied too, nothing else; a run's loop uses the `copy_checkpoint`
    LangGraph's module binds when the run saves (a later monkeypatch is seen); the shape
    check names a loop class that saves its own way."""
    import langgraph.pregel._loop as loop_module
    from langchain_core.messages import AIMessage
    from langgraph.pregel._checkpoint import copy_checkpoint, empty_checkpoint

    checkpoint = empty_checkpoint()
    history: list[int] = [1, 2]
    other = {"k": [3]}
    checkpoint["channel_values"] = {"messages": history, "other": other, "n": 1}
    held = _compat._held_checkpoint(copy_checkpoint)(checkpoint)
    assert held == copy_checkpoint(checkpoint)
    assert held["channel_values"]["messages"] is not history
    assert held["channel_values"]["other"] is other
    assert held["channel_values"] is not checkpoint["channel_values"]

    copies: list[Any] = []

    def counting(checkpoint: Any) -> Any:
        copies.append(checkpoint)
        return copy_checkpoint(checkpoint)

    monkeypatch.setattr(loop_module, "copy_checkpoint", counting)
    builder: StateGraph[Any] = StateGraph(MessagesState)
    builder.add_node("a", lambda s: {"messages": [AIMessage("x", id="x")]})
    builder.add_edge(START, "a")
    graph = with_visibility(builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy())
    graph.invoke({"messages": []}, {"configurable": {"thread_id": "t"}})
    assert copies
    assert _compat._checkpoint_copy_shape_problems() == []
    monkeypatch.setattr(
        _compat._SyncPregelLoop, "_put_checkpoint", lambda self, m: None, raising=False
    )
    assert _compat._checkpoint_copy_shape_problems() == [
        "SyncPregelLoop has a _put_checkpoint of its own"
    ]


@pytest.mark.parametrize("sync", [True, False])
def test_a_runs_loop_is_freed_as_its_run_ends_as_raw_langgraphs_is(sync: bool) -> None:
    """A run's loop holds its checkpoint saver (`_held_put`), and its loop-thread put its
    batch: neither may hold the loop back. With the collector off, the enforced run's loops
    are freed as it ends, as the raw graph's (the control) are, and an async run (tokens and
    a custom write put on the loop's thread) leaves nothing in cycles, as the raw one does.
    (A cycle would keep each run's state until the collector found it.)"""
    import gc
    import weakref

    import langgraph.pregel._loop as loop_module
    from langchain_core.messages import AIMessage

    loops: list[Any] = []
    cls = loop_module.SyncPregelLoop if sync else loop_module.AsyncPregelLoop
    enter = "__enter__" if sync else "__aenter__"
    original = getattr(cls, enter)

    def noting(self: Any) -> Any:
        loops.append(weakref.ref(self))
        return original(self)

    # tokens and a custom write: an async node's puts go through the loop-thread put
    model = FakeChatModel(responses=["a few tokens"])

    def answer(state: Any) -> dict[str, Any]:
        get_stream_writer()({"writing": True})
        return {"messages": [model.invoke(state["messages"]), AIMessage("x", id="x")]}

    async def aanswer(state: Any) -> dict[str, Any]:
        get_stream_writer()({"writing": True})
        return {"messages": [await model.ainvoke(state["messages"]), AIMessage("x", id="x")]}

    builder: StateGraph[Any] = StateGraph(MessagesState)
    builder.add_node("a", RunnableLambda(answer, afunc=aanswer))
    builder.add_edge(START, "a")
    raw = builder.compile(checkpointer=InMemorySaver())
    enforced = with_visibility(raw, VisibilityPolicy())
    modes = ["values", "messages", "custom"]

    def alive_after_a_run(graph: Any) -> tuple[int, int]:
        loops.clear()
        config = {"configurable": {"thread_id": str(uuid4())}}
        gc.collect()
        gc.disable()
        try:
            if sync:
                list(graph.stream({"messages": []}, config, stream_mode=modes))
            else:

                async def main() -> None:
                    async for _ in graph.astream({"messages": []}, config, stream_mode=modes):
                        pass

                asyncio.run(main())
            assert loops
            return sum(ref() is not None for ref in loops), gc.collect()
        finally:
            gc.enable()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cls, enter, noting)
        raw_loops, raw_garbage = alive_after_a_run(raw)
        loops_left, garbage = alive_after_a_run(enforced)
    assert raw_loops == loops_left == 0
    if not sync:  # (a sync raw run leaves cycles of its own, which hold the run's objects)
        assert raw_garbage == garbage == 0


def test_events_shape_check_names_each_change() -> None:
    """An implementation that no longer builds the handler by name, a handler method whose
    signature changed, and a `Runnable` that no longer calls the implementation are each
    reported, by name."""
    import langchain_core.tracers.event_stream as event_stream

    async def impl(runnable: Any, value: Any, config: Any = None) -> Any:
        yield None

    class Changed(event_stream._AstreamEventsCallbackHandler):
        async def on_llm_new_token(self, token: Any, *, run_id: Any, **kwargs: Any) -> None:
            return None

        def _send(self, event: Any) -> None:  # type: ignore[override]
            return None

    send_changed = "_AstreamEventsCallbackHandler._send(self, event: 'Any') -> 'None' changed"
    assert _compat.events_shape_problems(impl, Changed, lambda self: None) == [
        "_astream_events_implementation_v2 no longer names _AstreamEventsCallbackHandler",
        "Runnable._astream_events_v1_v2 no longer calls the v2 implementation",
        send_changed,
        "_AstreamEventsCallbackHandler.on_llm_new_token(self, token: 'Any', *, "
        "run_id: 'Any', **kwargs: 'Any') -> 'None' changed",
    ]
    assert _compat.events_shape_problems(lambda: None, Changed) == [
        "_astream_events_implementation_v2 is no longer an async generator",
        "_astream_events_implementation_v2 no longer names _AstreamEventsCallbackHandler",
        "_astream_events_implementation_v2() changed",
        send_changed,
        "_AstreamEventsCallbackHandler.on_llm_new_token(self, token: 'Any', *, "
        "run_id: 'Any', **kwargs: 'Any') -> 'None' changed",
    ]


# -- langchain-core's astream_events v1 log handler (checked against langchain-core 1.8.3) --


def test_log_handler_contact_accepts_the_installed_langchain_core() -> None:
    """The installed log handler has the shape checked, and its callbacks are exactly the
    ones the tagger has: a callback the tagger gains must decide inside the log handler."""
    from langchain_core.callbacks import BaseCallbackHandler

    from lg_visibility._handlers import _RunTagger

    assert _compat.LOG_HANDLER_SHAPE_PROBLEMS == []
    tagger_has = {
        name
        for name in dir(_RunTagger)
        if name.startswith("on_")
        and getattr(_RunTagger, name) is not getattr(BaseCallbackHandler, name)
    }
    assert tagger_has == set(_compat.LOG_HANDLER_METHODS)


def test_log_handler_shape_check_names_each_change() -> None:
    """A handler that takes no schema format, has an async callback or none at all, or
    whose instances take no attributes, is reported by name; nothing is changed then."""
    from langchain_core.tracers.log_stream import LogStreamCallbackHandler

    class Changed(LogStreamCallbackHandler):
        def __init__(self) -> None:
            pass

        async def on_llm_end(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
            return None

    assert _compat.log_handler_shape_problems(Changed) == [
        "LogStreamCallbackHandler takes no _schema_format",
        "LogStreamCallbackHandler sets no root_id",
        "LogStreamCallbackHandler.on_llm_end is not a plain method",
    ]

    class Slotted:
        __slots__ = ()

    assert _compat.log_handler_shape_problems(Slotted) == [
        "LogStreamCallbackHandler takes no _schema_format",
        "LogStreamCallbackHandler sets no root_id",
        "LogStreamCallbackHandler instances take no attributes",
        *(
            f"LogStreamCallbackHandler.{n} is not a plain method"
            for n in _compat.LOG_HANDLER_METHODS
        ),
    ]


def test_the_tagger_decides_inside_this_calls_log_handler_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each callback of the call's log handler calls the tagger's first, inline, raising
    the tagger's errors; the class and any other instance keep LangChain's methods; a
    second call on the same handler, or a shape that failed, changes nothing."""
    from langchain_core.tracers.log_stream import LogStreamCallbackHandler

    calls: list[str] = []

    class Tagger:
        def __getattr__(self, name: str) -> Any:
            return lambda *a, **k: calls.append(name)

    class Recording(LogStreamCallbackHandler):
        def on_llm_error(self, *args: Any, **kwargs: Any) -> Any:
            calls.append("logged")

    log = Recording(auto_close=False, _schema_format="streaming_events")
    other = LogStreamCallbackHandler(auto_close=False, _schema_format="streaming_events")
    assert _compat.events_v1_log_handler([object(), other]) is other
    astream_log = LogStreamCallbackHandler(auto_close=False, _schema_format="original")
    assert _compat.events_v1_log_handler([astream_log]) is None
    # A v1 call inside another one's run: the outer call's handler (it has seen runs) is
    # further up; this call's is the last, and one that has seen a run is nobody's to patch.
    outer = LogStreamCallbackHandler(auto_close=False, _schema_format="streaming_events")
    outer.root_id = uuid4()
    assert _compat.events_v1_log_handler([outer, object(), other]) is other
    assert _compat.events_v1_log_handler([other, outer]) is None
    assert _compat.decide_before_logging(log, Tagger())
    assert (log.run_inline, log.raise_error) == (True, True)
    log.on_llm_error(ValueError("x"), run_id=uuid4())
    assert calls == ["on_llm_error", "logged"]  # the tagger's first
    for name in (*_compat.LOG_HANDLER_METHODS, "on_retriever_end", "on_retry"):
        assert name in vars(log) and name not in vars(other)  # LangChain's errors: logged
    assert not _compat.decide_before_logging(log, Tagger())  # once per handler

    def fails(*args: Any, **kwargs: Any) -> None:
        raise ValueError("LangChain's own")

    def refuses(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("undecided")

    assert _compat._decided_first(lambda *a, **k: None, fails, "on_chain_end")() is None
    with pytest.raises(RuntimeError, match="undecided"):  # the tagger's: the run stops
        _compat._decided_first(refuses, lambda *a, **k: None, "on_chain_end")()
    monkeypatch.setattr(_compat, "LOG_HANDLER_SHAPE_PROBLEMS", ["changed"])
    assert not _compat.decide_before_logging(other, Tagger())
    assert "on_llm_end" not in vars(other) and not other.run_inline


def test_events_shape_failure_falls_back_to_the_tagging_callback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A langchain-core whose events handler changed shape does not refuse the import: the
    contact reports the change and answers None, and astream_events v2 is still enforced,
    through LangChain's own handler, a tagging callback and the event filter."""
    import langchain_core.tracers.event_stream as event_stream

    from lg_visibility._handlers import EventsHandler, VisibilityHandler

    class Changed(event_stream._AstreamEventsCallbackHandler):
        async def on_llm_end(self, response: Any, **kwargs: Any) -> None:
            return None

    monkeypatch.setattr(event_stream, "_AstreamEventsCallbackHandler", Changed)
    impl, handler, problems = _compat._events_contact()  # what import runs: no ImportError
    assert (impl is event_stream._astream_events_implementation_v2, handler) == (True, None)
    assert problems == [
        "_AstreamEventsCallbackHandler.on_llm_end(self, response: 'Any', **kwargs: 'Any') "
        "-> 'None' changed"
    ]
    monkeypatch.setattr(_compat, "_EVENTS_HANDLER", handler)
    assert _compat.astream_events_v2_with(lambda **kwargs: None) is None

    built: list[str] = []
    init, for_run = EventsHandler.__init__, VisibilityHandler._for_run.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(
        EventsHandler, "__init__", lambda h, *a, **k: (built.append("ours"), init(h, *a, **k))[1]
    )
    monkeypatch.setattr(
        VisibilityHandler,
        "_for_run",
        classmethod(lambda cls, r: (built.append("tagger"), for_run(cls, r))[1]),
    )
    builder = StateGraph(State)
    builder.add_node("plan", llm_node(FakeChatModel(responses=["FALLBACKSECRET plan"])))
    builder.add_node("answer", llm_node(FakeChatModel(responses=["VISIBLE answer"])))
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "answer")
    graph = with_visibility(builder.compile(), VisibilityPolicy(internal=["plan"]))

    async def collect() -> list[dict]:
        return [e async for e in graph.astream_events(user_input(), version="v2")]

    events = asyncio.run(asyncio.wait_for(collect(), TIMEOUT))
    assert built == ["tagger"]
    assert "FALLBACKSECRET" not in repr(events)
    assert [e["data"]["chunk"].content for e in events if e["event"] == "on_chat_model_stream"] == [
        "VISIBLE ",
        "answer",
        "",
    ]


def test_compat_sink_contact_holds_on_the_installed_langgraph() -> None:
    """`Pregel.astream` builds its subgraphs' sink as `StreamProtocol(stream_put,
    stream_modes)`, and `StreamProtocol` takes `(__call__, modes)` in its two slots."""
    assert _compat._sink_shape_problems(_compat._PREGEL_ASTREAM) == []
    assert _compat._PREGEL_ASTREAM.__globals__["StreamProtocol"] is _compat.StreamProtocol
    params = list(inspect.signature(_compat.StreamProtocol.__init__).parameters)
    assert params == ["self", "__call__", "modes"]
    assert set(_compat.StreamProtocol.__slots__) == {"modes", "__call__"}


def test_compat_sink_shape_check_names_each_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """An astream that does not build the sink from `stream_put`, and a `StreamProtocol`
    with another constructor, are each named by the check."""
    own = _compat._PREGEL_ASTREAM
    other = types.FunctionType(
        # StreamProtocol: the module global of own.__globals__, the code's globals
        (lambda self, s, m: StreamProtocol(s.put, m)).__code__,  # noqa: F821
        own.__globals__,
        own.__name__,
    )

    class Other:
        __slots__ = ("__call__", "modes")

        def __init__(self, put: Any, modes: Any, extra: Any = None) -> None:
            pass

    assert _compat._sink_shape_problems(other) == [
        "Pregel.astream no longer builds its subgraphs' sink as "
        "StreamProtocol(stream_put, stream_modes) with call_soon_threadsafe"
    ]
    monkeypatch.setattr(_compat, "StreamProtocol", Other)
    assert _compat._sink_shape_problems(own) == [
        "StreamProtocol(self, put: 'Any', modes: 'Any', extra: 'Any' = None) -> 'None' changed",
        "langgraph.pregel.main.StreamProtocol is not langgraph's StreamProtocol",
    ]


def test_sink_slot_wraps_only_the_parent_side_sink() -> None:
    """In an astream copy given a sink, `StreamProtocol(stream_put, modes)` (the put that
    subgraphs push into) is built with the sink's put; the loop's own stream is built as is;
    without a sink, the name is LangGraph's class."""
    wrapped: list[Any] = []

    def sink(put: Any) -> Any:
        wrapped.append(put)
        return lambda chunk: put(("dropped",) if chunk[1] == "values" else chunk)

    fn = _compat.pregel_astream_with(lambda *a, **k: None, lambda *a, **k: None, sink=sink)
    slot = fn.__globals__["StreamProtocol"]
    original = langgraph.pregel.protocol.StreamProtocol

    async def build() -> tuple[Any, Any, list[Any]]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        stream_put = functools.partial(loop.call_soon_threadsafe, queue.put_nowait)
        own = slot(queue.put_nowait, {"values"})
        parent = slot(stream_put, {"values", "updates"})
        parent(((), "values", 1))
        parent(((), "updates", 2))
        own(((), "values", 3))
        await asyncio.sleep(0)
        return own, parent, [queue.get_nowait() for _ in range(queue.qsize())]

    own, parent, queued = asyncio.run(build())
    assert type(own) is original and type(parent) is original
    assert isinstance(parent, slot)
    assert parent.modes == {"values", "updates"}
    # The sink gets stream_put without its wake-up write on the loop's thread.
    assert len(wrapped) == 1 and wrapped[0].__name__ == "put_on_loop"
    assert sorted(map(repr, queued)) == sorted(
        map(repr, [("dropped",), ((), "updates", 2), ((), "values", 3)])
    )
    plain = _compat.pregel_astream_with(lambda *a, **k: None, lambda *a, **k: None)
    assert loaded(plain, "StreamProtocol") is original
    assert langgraph.pregel.main.StreamProtocol is original


def test_sync_sink_contact_holds_and_the_slot_wraps_the_loops_stream() -> None:
    """`Pregel.stream` builds its loop's stream as `StreamProtocol(stream.put, modes)` on a
    `SyncQueue` (its subgraphs push into that same stream): in a stream copy given a sink,
    it is built with the sink's put; any other put is built as is."""
    from langgraph._internal._queue import SyncQueue

    assert _compat._sync_sink_shape_problems(_compat._PREGEL_STREAM) == []
    wrapped: list[Any] = []

    def sink(put: Any) -> Any:
        wrapped.append(put)
        return lambda chunk: None if chunk[1] == "values" else put(chunk)

    fn = _compat.pregel_stream_with(lambda *a, **k: None, lambda *a, **k: None, sink=sink)
    slot = fn.__globals__["StreamProtocol"]
    queue = SyncQueue()
    loop_stream = slot(queue.put, {"values", "updates"})
    other = slot(print, {"values"})
    loop_stream((("sub:1",), "values", 1))
    loop_stream((("sub:1",), "updates", 2))
    assert wrapped == [queue.put] and other.__call__ is print
    assert list(queue._queue) == [(("sub:1",), "updates", 2)]


def test_sync_sink_shape_check_names_the_change(monkeypatch: pytest.MonkeyPatch) -> None:
    own = _compat._PREGEL_STREAM

    def stream(self: Any) -> Any:
        return self.StreamProtocol(self.put)

    other = types.FunctionType(stream.__code__, own.__globals__, own.__name__)
    assert _compat._sync_sink_shape_problems(other) == [
        "Pregel.stream no longer builds its loop's stream as "
        "StreamProtocol(stream.put, stream_modes) on a SyncQueue"
    ]


def test_writer_shape_check_names_a_queue_set_twice() -> None:
    """The rebuilt custom writer reads `astream`'s loop and queue once, when the run's
    `Runtime` is built: an `astream` that sets either again is named; LangGraph's sets each
    once."""
    own = _compat._PREGEL_ASTREAM
    assert "Pregel.astream no longer sets its loop and queue once" not in (
        _compat._writer_shape_problems(own)
    )

    source = textwrap.dedent(
        """
        def astream(self):
            stream, aioloop = self.queue(), self.loop
            def stream_writer(c):
                aioloop.call_soon_threadsafe(
                    stream.put_nowait,
                    (tuple(get_config()[CONF][CONFIG_KEY_CHECKPOINT_NS].split(NS_SEP)[:-1]),
                     "custom", c),
                )
            stream = self.queue()  # a second queue, after the writer was made
            return stream_writer
        """
    )
    found: dict[str, Any] = {}
    exec(compile(source, "<astream>", "exec"), found)
    other = types.FunctionType(found["astream"].__code__, own.__globals__, own.__name__)
    writers, problems = _compat._astream_writers(other)
    assert len(writers) == 1 and not problems  # the writer itself is LangGraph's
    assert "Pregel.astream no longer sets its loop and queue once" in (
        _compat._writer_shape_problems(other)
    )


class _CountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts its self-pipe wake-up writes, and the callbacks queued
    that put into a queue (`put_nowait`, or the loop-thread put's batch)."""

    writes = 0
    put_callbacks = 0

    def _write_to_self(self) -> None:
        type(self).writes += 1
        super()._write_to_self()  # type: ignore[misc]

    def _call_soon(self, callback: Any, args: Any, context: Any) -> Any:
        if getattr(callback, "__name__", None) in ("put_nowait", "put_batch"):
            type(self).put_callbacks += 1
        return super()._call_soon(callback, args, context)  # type: ignore[misc]


def _run_counting(main: Any) -> tuple[Any, int]:
    loop = _CountingLoop()
    _CountingLoop.writes = 0
    _CountingLoop.put_callbacks = 0
    try:
        result = loop.run_until_complete(main())
    finally:
        loop.close()
    return result, _CountingLoop.writes


def test_loop_thread_put_skips_the_wakeup_only_on_the_loop_thread() -> None:
    """`loop_thread_put(stream_put)` queues in exactly the order `stream_put` does, and
    writes the loop's wake-up byte only for a put from another thread; the raw
    `stream_put` (the control) writes it for every put. Any other put is returned as is."""

    def scenario(wrap: Callable[[Any], Any]) -> Callable[[], Any]:
        async def main() -> list[Any]:
            loop = asyncio.get_running_loop()
            queue: asyncio.Queue[Any] = asyncio.Queue()
            put = wrap(functools.partial(loop.call_soon_threadsafe, queue.put_nowait))
            put(((), "messages", 1))
            put(((), "messages", 2))
            worker = threading.Thread(target=put, args=(((), "custom", 3),))
            worker.start()
            worker.join()
            put(((), "messages", 4))
            for _ in range(3):
                await asyncio.sleep(0)
            return [queue.get_nowait()[2] for _ in range(queue.qsize())]

        return main

    base_writes = _run_counting(scenario(lambda put: lambda item: None))[1]  # the loop alone
    raw, raw_writes = _run_counting(scenario(lambda put: put))
    ours, our_writes = _run_counting(scenario(_compat.loop_thread_put))
    assert raw == ours == [1, 2, 3, 4]
    assert raw_writes - base_writes == 4
    assert our_writes - base_writes == 1
    other = functools.partial(print, "x")
    assert _compat.loop_thread_put(other) is other


def _tasks_putting(wrap: Callable[[Any], Any]) -> Callable[[], Any]:
    """Puts made around what else may be queued: a task its puts start (as a `@task` call
    does, whose first step puts into the queue directly), a second task, a done callback
    putting directly (as LangGraph commits a finished task's writes), a plain callback.
    The queue's order, as `wrap`'s put leaves it."""

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        put = wrap(functools.partial(loop.call_soon_threadsafe, queue.put_nowait))

        async def started() -> None:
            queue.put_nowait("started")

        spawned = []

        def relay() -> None:  # run after its queue's first callbacks were taken
            loop.call_soon(queue.put_nowait, "relayed")
            put("from the relay")

        async def first() -> None:
            loop.call_soon(relay)
            put("a1")
            put("a2")
            spawned.append(loop.create_task(started()))
            put("a3")

        async def second() -> None:
            put("b1")
            await asyncio.sleep(0)
            put("b2")

        one = loop.create_task(first())
        one.add_done_callback(lambda _: queue.put_nowait("a committed"))
        two = loop.create_task(second())
        loop.call_soon(put, "from a callback")
        await asyncio.gather(one, two, *spawned)
        for _ in range(3):
            await asyncio.sleep(0)
        return [queue.get_nowait() for _ in range(queue.qsize())]

    return main


_RAW_ORDER = [
    "a1",
    "a2",
    "started",
    "a3",
    "a committed",
    "b1",
    "from a callback",
    "relayed",
    "from the relay",
    "b2",
]


def test_loop_thread_put_batches_only_puts_nothing_was_queued_between() -> None:
    """A run of puts with nothing queued between them is one callback, in the place of the
    first: every item lands where `stream_put`'s own callbacks put it, around a task the
    puts start, a done callback, the next task and a plain callback."""
    raw, _ = _run_counting(_tasks_putting(lambda put: put))
    raw_callbacks = _CountingLoop.put_callbacks
    ours, _ = _run_counting(_tasks_putting(_compat.loop_thread_put))
    assert raw == ours == _RAW_ORDER
    # raw: the 7 puts and the relay's own `put_nowait`; ours: that, and 5 batches:
    # (a put joins a batch still waiting last, even one queued in an earlier iteration)
    assert (raw_callbacks, _CountingLoop.put_callbacks) == (8, 6)


class _Big:
    """An item a test can see freed (a large snapshot, say)."""


def test_loop_thread_put_keeps_no_item_once_its_batch_is_put() -> None:
    """Once its callback has put them, the put (which lives as long as the run) holds no
    reference to a batch's items: a large snapshot is freed when the consumer drops it, as
    raw's is, not when the next batch is queued. It fails on a put that keeps the last
    batch's handle (whose arguments are the items)."""

    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        put = _compat.loop_thread_put(
            functools.partial(loop.call_soon_threadsafe, queue.put_nowait)
        )
        item = _Big()
        ref = weakref.ref(item)
        put(((), "values", item))
        del item
        await asyncio.sleep(0)  # the batch's callback runs
        queue.get_nowait()
        alive_with_put = ref() is not None
        return alive_with_put, callable(put)

    alive, put_still_there = asyncio.run(main())
    assert put_still_there
    assert not alive


def test_loop_thread_put_without_a_ready_deque_queues_a_callback_a_put(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the loop's ready queue cannot be read (uvloop; an asyncio that no longer keeps
    the deque `_ready`), each put has its own callback, as `stream_put`'s: the same order,
    the same number of callbacks, still no wake-up write."""
    monkeypatch.setattr(_compat, "_READY_APPENDED", False)
    raw, raw_writes = _run_counting(_tasks_putting(lambda put: put))
    raw_callbacks = _CountingLoop.put_callbacks
    ours, our_writes = _run_counting(_tasks_putting(_compat.loop_thread_put))
    assert raw == ours == _RAW_ORDER
    assert _CountingLoop.put_callbacks == raw_callbacks
    assert our_writes < raw_writes


@pytest.mark.parametrize("wrong", [batch_by_task, batch_while_as_long])
def test_the_batch_order_check_fails_on_a_batch_blind_to_the_ready_queue(wrong: Any) -> None:
    """Controls: a batch of a task's puts, blind to what was queued between them, puts a3
    before the task a2 started; one that only compares the ready queue's length puts the
    relay's item before what the relay queued first."""
    ours, _ = _run_counting(_tasks_putting(wrong))
    assert ours != _RAW_ORDER
    assert sorted(ours) == sorted(_RAW_ORDER)


def test_enforced_astream_puts_tokens_without_wakeup_writes() -> None:
    """On the installed langgraph the contact is live: the messages handler of an enforced
    `astream` gets the loop-thread put, so 40 tokens of an async model cost no wake-up
    writes, where the raw graph (the control) writes one per token."""
    model = FakeChatModel(responses=["t " * 40])

    async def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    raw = builder.compile()
    enforced = with_visibility(raw, VisibilityPolicy())

    def consume(graph: Any) -> Callable[[], Any]:
        async def main() -> int:
            n = 0
            async for _ in graph.astream({"messages": [("user", "hi")]}, stream_mode="messages"):
                n += 1
            return n

        return main

    raw_parts, raw_writes = _run_counting(consume(raw))
    raw_callbacks = _CountingLoop.put_callbacks
    our_parts, our_writes = _run_counting(consume(enforced))
    assert raw_parts == our_parts >= 40
    assert raw_writes >= 40
    assert our_writes < 10
    # and one callback queues the tokens the model yields without awaiting
    assert raw_callbacks >= 40
    assert _CountingLoop.put_callbacks < 10


def test_one_runs_handler_and_parent_side_sink_share_one_loop_thread_put(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The messages handler and the sink its subgraphs push through put into one queue:
    an enforced `astream(subgraphs=True)` makes its loop-thread put once a run, not once
    for each (a function and five cells of every run's peak memory). Two runs make two."""
    made: list[Any] = []
    real = _compat.loop_thread_put

    def counting(put: Any) -> Any:
        wrapped = real(put)
        if wrapped is not put:
            made.append(put)
        return wrapped

    monkeypatch.setattr(_compat, "loop_thread_put", counting)
    model = FakeChatModel(responses=["a b c"])

    async def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    inner = StateGraph(MessagesState)
    inner.add_node("answer", answer)
    inner.add_edge(START, "answer")
    outer = StateGraph(MessagesState)
    outer.add_node("sub", inner.compile())
    outer.add_edge(START, "sub")
    enforced = with_visibility(outer.compile(), VisibilityPolicy())

    async def main() -> list[Any]:
        return [
            part
            async for part in enforced.astream(
                {"messages": [("user", "hi")]}, stream_mode=["messages", "values"], subgraphs=True
            )
        ]

    parts = asyncio.run(main())
    assert [p for p in parts if p[1] == "messages"]  # the handler put through it
    assert len(made) == 1
    asyncio.run(main())
    assert len(made) == 2 and made[0] is not made[1]


def _reference_iter_messages(value: Any) -> list[Any]:
    """What iter_messages yields, written with isinstance checks as LangGraph's handler is."""
    from collections.abc import Sequence
    from dataclasses import fields, is_dataclass

    from langchain_core.messages import BaseMessage
    from langgraph.types import Command
    from pydantic import BaseModel

    if isinstance(value, BaseMessage):
        return [value]
    if isinstance(value, Command):
        return [] if value.update is None else _reference_iter_messages(value.update)
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        out: list[Any] = []
        for item in value:
            if isinstance(item, BaseMessage):
                out.append(item)
            elif isinstance(item, (Command, dict)):
                out += _reference_iter_messages(item)
        return out
    if isinstance(value, dict):
        values = list(value.values())
    elif isinstance(value, BaseModel):
        values = [getattr(value, k) for k in type(value).model_fields]
    elif is_dataclass(value) and not isinstance(value, type):
        values = [getattr(value, f.name) for f in fields(value)]
    else:
        values = []
    out = []
    for item in values:
        if isinstance(item, BaseMessage):
            out.append(item)
        elif isinstance(item, Sequence) and not isinstance(item, (str, bytes)):
            out += [inner for inner in item if isinstance(inner, BaseMessage)]
    return out


def test_iter_messages_finds_what_isinstance_checks_find() -> None:
    """The per-class lookups of `iter_messages` find, for every shape a node's input or
    output takes, exactly the messages that isinstance checks find, in the same order."""
    import collections
    import collections.abc
    import dataclasses

    import pydantic
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.types import Command

    a, h, t = AIMessage("a", id="a"), HumanMessage("h", id="h"), ToolMessage("t", tool_call_id="c")

    class Model(pydantic.BaseModel):
        messages: list[Any] = []
        last: Any = None
        note: str = ""

    @dataclasses.dataclass
    class Data:
        messages: list[Any]
        last: Any = None

    class MyDict(dict):  # type: ignore[type-arg]
        pass

    class MySeq(collections.UserList):  # type: ignore[type-arg]
        pass

    class DictSeq(dict):  # type: ignore[type-arg]
        """Both a dict and a Sequence: isinstance checks take it as a sequence first."""

        def __getitem__(self, i: Any) -> Any:
            return list(self.values())[i] if isinstance(i, int) else dict.__getitem__(self, i)

        def __iter__(self) -> Any:
            return iter(list(self.values()))

    collections.abc.Sequence.register(DictSeq)
    from unittest.mock import Mock

    proxy = Mock(spec=AIMessage)  # its __class__ is AIMessage, as isinstance sees it

    values: list[Any] = [
        a,
        [a, h],
        (h, t),
        [a, [h], "x", {"messages": [t]}, Command(update={"messages": [h]})],
        Command(update={"messages": [a, t]}),
        Command(goto="x"),
        [Command(update={"m": a}), Command(update=[h])],
        {"messages": [a, h, "s"], "last": t, "n": 1, "nested": {"messages": [a]}},
        MyDict(messages=[a]),
        MySeq([a, h]),
        Model(messages=[a, h], last=t),
        Data(messages=[h], last=a),
        Data,
        "text",
        b"bytes",
        42,
        None,
        {"messages": (a, h)},
        proxy,
        [proxy, a],
        DictSeq(x=a, y=h),
        [DictSeq(x=t)],
        {"messages": DictSeq(x=a)},
    ]
    for value in values:
        assert list(_compat.iter_messages(value)) == _reference_iter_messages(value), value
        backwards = list(_compat.iter_messages(value, reverse=True))
        assert backwards == _reference_iter_messages(value)[::-1], value
    assert list(_compat.iter_messages(values[3])) == [a, t, h]  # the reference finds something


def test_loaded_names_are_read_whole_by_a_run_starting_meanwhile() -> None:
    """Two runs starting at once on two threads: one that reads the shared names while the
    other is rebuilding them gets a complete dict, never a half-published one. (The switch
    is forced: the first rebuild starts the second while it reads builtins.)"""

    got: list[dict[str, Any]] = []

    class Reentrant(dict):  # type: ignore[type-arg]
        inside: Any = None

        def get(self, key: Any, default: Any = None) -> Any:
            if self.inside is not None:
                inside, self.inside = self.inside, None
                got.append(inside())  # the other thread, mid-rebuild
            return dict.get(self, key, default)

    loaded = _compat._LoadedNames(_compat._PREGEL_STREAM)
    builtins_dict = Reentrant(loaded._builtins)
    loaded._builtins = builtins_dict
    builtins_dict.inside = loaded.current
    full = loaded.current()
    assert got and all(len(names) == len(full) for names in got)
    assert {"isinstance", "StreamMessagesHandler"} <= set(full)


def test_message_keys_are_the_keys_add_messages_reduces() -> None:
    """`message_keys` finds add_messages however the state names it (MessagesState, an
    annotation, a partial with options) and nothing else; and ParentCommand still carries
    its command first, as `parent_command` reads it."""

    class State(MessagesState):
        more: Annotated[list[Any], functools.partial(add_messages, format="langchain-openai")]
        plain: Annotated[list[Any], operator.add]
        value: str

    class Other(TypedDict):
        chat: Annotated[list[Any], add_messages]

    for schema, expected in ((State, {"messages", "more"}), (Other, {"chat"})):
        builder = StateGraph(schema)
        builder.add_node("n", lambda s: {})
        builder.add_edge(START, "n")
        assert _compat.message_keys(builder.compile()) == expected
    command: Any = Command(graph=Command.PARENT, update={"messages": []})
    assert _compat.parent_command(ParentCommand(command)) is command
    assert _compat.parent_command(ValueError(command)) is None


def test_compat_shape_check_fails_where_a_run_finds_its_cache_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`with_run_cache` scopes the cache `Pregel._defaults` resolves (the config's
    CONFIG_KEY_CACHE, else the graph's): a langgraph that finds it otherwise fails the
    import-time check, not with an unscoped cache answering a client's run."""

    def _defaults(self: Any, config: Any) -> None:
        return None

    monkeypatch.setattr(_compat._pregel_main.Pregel, "_defaults", _defaults)
    with pytest.raises(ImportError, match="no longer resolves a run's cache"):
        _compat.check_shapes()


def test_compat_shape_check_fails_where_the_handler_no_longer_names_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`name_unsent_messages` walks an internal node's output as LangGraph's handler does
    and names what its `_emit` would: a handler that no longer names an id-less message
    fails the import-time check."""

    def _emit(self: Any, meta: Any, message: Any, *, dedupe: bool = False) -> None:
        return None

    monkeypatch.setattr(_compat.StreamMessagesHandler, "_emit", _emit)
    with pytest.raises(ImportError, match="no longer names an id-less message"):
        _compat.check_shapes()


@pytest.mark.parametrize("subgraphs", [False, True])
@pytest.mark.parametrize(
    ("name", "tags", "checkpoint_ns"),
    [
        ("node", None, "node:1"),
        ("node", ["x", TAG_HIDDEN], "node:1"),
        ("other", None, "node:1"),
        ("node", None, "sub:1|node:2"),
        ("node", [], "parent:0|node:2"),
    ],
)
def test_registers_node_run_answers_as_langgraphs_handler(
    subgraphs: bool, name: str, tags: Any, checkpoint_ns: str
) -> None:
    """`registers_node_run` is LangGraph's own test of which chain runs its messages handler
    takes as node runs: compared with the handler itself on the same callbacks."""
    metadata = {"langgraph_node": "node", "langgraph_checkpoint_ns": checkpoint_ns}
    handler = _compat.StreamMessagesHandler(lambda item: None, subgraphs, parent_ns=("parent:0",))
    run_id = uuid4()
    handler.on_chain_start({}, {}, run_id=run_id, tags=tags, metadata=metadata, name=name)
    expected = run_id in handler.metadata
    assert _compat.registers_node_run(handler, metadata, tags, name) is expected
    assert _compat.registers_node_run(handler, None, tags, name) is False


def test_name_unsent_messages_names_what_langgraphs_handler_sends() -> None:
    """The walk is LangGraph's: a node's output as a dict, a Command's update, a list of
    Commands; each id-less message there gets an id, one with an id keeps it."""
    from langchain_core.messages import AIMessage

    ours = [AIMessage("a"), AIMessage("b", id="keep"), AIMessage("c"), AIMessage("d")]
    outputs = [
        {"messages": [ours[0], ours[1]]},
        Command(update={"messages": [ours[2]]}),
        [Command(update={"messages": ours[3]}), {"x": 1}],
    ]
    for output in outputs:
        _compat.name_unsent_messages(output, uuid4())
    assert ours[1].id == "keep"
    assert all(isinstance(m.id, str) and m.id for m in ours)
