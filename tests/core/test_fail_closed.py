"""Fail closed: enforcement never switches itself off silently.

Each case ends with no leak or with a clear error: a wrapper around `Pregel.stream`
installed before or after import, a node that pushes `messages` parts into the stream
itself (as `RemoteGraph` does), a run whose handler swap did not take, and LangGraph code
whose shape no longer matches what `_compat` extends.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk
from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONF, CONFIG_KEY_CHECKPOINT_NS, CONFIG_KEY_STREAM
from langgraph.graph import START, StateGraph
from langgraph.pregel import Pregel
from langgraph.pregel._messages import StreamMessagesHandler, StreamMessagesHandlerV2

from lg_visibility import VisibilityPolicy, _compat, with_visibility
from lg_visibility.errors import VisibilityError
from tests._support.core import SYNC_ASYNC, State, pytestmark, run, user_input

__all__ = ["pytestmark"]

SUBPROCESS_TIMEOUT = 60


def remote_like(text: str, msg_id: str) -> Any:
    """A node that pushes one `messages` part into its parent's stream, as RemoteGraph does:
    the namespace is the caller's task plus the remote's own, the metadata the remote's."""

    def node(state: State, config: RunnableConfig) -> dict[str, Any]:
        stream = config[CONF].get(CONFIG_KEY_STREAM)
        if stream is not None:
            caller = tuple(config[CONF][CONFIG_KEY_CHECKPOINT_NS].split("|"))
            part = [
                {"type": "AIMessageChunk", "content": text, "id": msg_id},
                {"langgraph_node": "answer", "langgraph_checkpoint_ns": "answer:remote"},
            ]
            stream(((*caller, "answer:remote"), "messages", part))
        return {}

    return node


def remote_graph() -> Any:
    builder = StateGraph(State)
    builder.add_node("remote_research", remote_like("REMOTE_SECRET", "r-secret"))
    builder.add_node("remote_answer", remote_like("REMOTE_ANSWER", "r-answer"))
    builder.add_edge(START, "remote_research")
    builder.add_edge("remote_research", "remote_answer")
    return builder.compile()


REMOTE_POLICY = VisibilityPolicy(internal=["remote_research"])


@SYNC_ASYNC
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_foreign_messages_part_is_judged_by_the_task_it_entered_through(
    sync: bool, version: str
) -> None:
    """A part pushed by a node of an internal path is dropped, one of a visible path kept,
    whatever namespace and metadata the pusher claims."""
    graph = with_visibility(remote_graph(), REMOTE_POLICY)
    items = run(
        graph, user_input(), sync=sync, stream_mode="messages", subgraphs=True, version=version
    )
    assert "REMOTE_SECRET" not in repr(items)
    assert repr(items).count("REMOTE_ANSWER") == 1


@SYNC_ASYNC
def test_foreign_messages_part_control_leaks_on_the_raw_graph(sync: bool) -> None:
    """Control: without enforcement the pushed internal part reaches the consumer."""
    items = run(remote_graph(), user_input(), sync=sync, stream_mode="messages", subgraphs=True)
    assert repr(items).count("REMOTE_SECRET") == 1


@SYNC_ASYNC
def test_run_whose_handler_swap_did_not_take_raises(
    sync: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If LangGraph streamed through its own messages handler, the run stops with
    VisibilityError instead of letting its tokens through."""
    from lg_visibility import _wrap
    from lg_visibility.testing import FakeChatModel
    from tests._support.core import llm_node, one_node_graph

    # The copy builds LangGraph's own handler classes; the output is judged as usual.
    own = (StreamMessagesHandler, StreamMessagesHandlerV2)
    sync_with, async_with = _wrap.pregel_stream_with, _wrap.pregel_astream_with
    monkeypatch.setattr(_wrap, "pregel_stream_with", lambda _1, _2, *a: sync_with(*own, *a))
    monkeypatch.setattr(_wrap, "pregel_astream_with", lambda _1, _2, *a: async_with(*own, *a))
    graph = with_visibility(
        one_node_graph(llm_node(FakeChatModel(responses=["SWAP_SECRET"]))),
        VisibilityPolicy(default="internal"),
    )
    with pytest.raises(VisibilityError, match="messages handler was not installed"):
        run(graph, user_input(), sync=sync, stream_mode="messages")


def _run_script(*parts: str) -> subprocess.CompletedProcess[str]:
    script = "\n".join(textwrap.dedent(part) for part in parts)
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        check=False,
    )


_INCIDENT_RUN = """
    from langchain_core.messages import HumanMessage
    from lg_visibility import with_visibility
    from lg_visibility.demo.graphs import (
        INCIDENT_INTERNAL_MARKERS, INCIDENT_POLICY, INCIDENT_VISIBLE_MARKERS, incident_builder,
    )
    graph = with_visibility(incident_builder().compile(), INCIDENT_POLICY)
    out = repr(list(graph.stream(
        {"messages": [HumanMessage("What is the Pura X price?")]},
        stream_mode=["messages", "values", "updates"], subgraphs=True,
    )))
    print("LEAKED", sorted(m for m in INCIDENT_INTERNAL_MARKERS if m in out))
    print("SHOWN", sorted(m for m in INCIDENT_VISIBLE_MARKERS if m in out))
"""

_TRACING_WRAPPER = """
    import functools
    import langgraph.pregel.main as pregel_main
    original, aoriginal = pregel_main.Pregel.stream, pregel_main.Pregel.astream
    CALLS = []
    @functools.wraps(original)
    def stream(self, *args, **kwargs):
        CALLS.append("stream")
        yield from original(self, *args, **kwargs)
    @functools.wraps(aoriginal)
    async def astream(self, *args, **kwargs):
        async for item in aoriginal(self, *args, **kwargs):
            yield item
    pregel_main.Pregel.stream, pregel_main.Pregel.astream = stream, astream
"""


def _markers(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The script's two result lines (leaked and shown markers); its stderr if it failed."""
    return proc.stdout.splitlines()[:2] if proc.returncode == 0 else [proc.stderr]


def _no_leak() -> list[str]:
    from lg_visibility.demo.graphs import INCIDENT_VISIBLE_MARKERS

    return ["LEAKED []", f"SHOWN {sorted(INCIDENT_VISIBLE_MARKERS)}"]


def test_tracing_wrapper_installed_before_import_does_not_open_the_stream() -> None:
    """A functools.wraps wrapper of Pregel.stream/astream installed before lg_visibility is
    imported is unwrapped: the enforced run leaks nothing and shows every visible marker."""
    assert _markers(_run_script(_TRACING_WRAPPER, _INCIDENT_RUN)) == _no_leak()


def test_tracing_wrapper_installed_after_import_does_not_open_the_stream() -> None:
    """The same wrapper installed after import is not on the enforced path either."""
    assert _markers(_run_script("import lg_visibility", _TRACING_WRAPPER, _INCIDENT_RUN)) == (
        _no_leak()
    )


def test_tracing_wrapper_control_leaks_without_enforcement() -> None:
    """Control: the same script on the raw graph shows the internal markers."""
    raw_run = _INCIDENT_RUN.replace(
        "with_visibility(incident_builder().compile(), INCIDENT_POLICY)",
        "incident_builder().compile()",
    )
    assert raw_run != _INCIDENT_RUN
    proc = _run_script(_TRACING_WRAPPER, raw_run)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] != "LEAKED []"


def test_opaque_wrapper_installed_before_import_fails_the_import_with_the_fix() -> None:
    """A wrapper that hides LangGraph's function (no __wrapped__) makes the import fail,
    naming the wrapper and the fix, rather than enforcing through unknown code."""
    proc = _run_script(
        """
        import langgraph.pregel.main as pregel_main
        original = pregel_main.Pregel.stream
        def opaque(self, *args, **kwargs):
            yield from original(self, *args, **kwargs)
        pregel_main.Pregel.stream = opaque
        import lg_visibility
        """
    )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: lg_visibility cannot find LangGraph's own Pregel.stream")
    assert "Import lg_visibility before the tool that wraps Pregel.stream" in last


def test_compat_refuses_a_stream_function_that_is_not_langgraphs() -> None:
    """A copy of Pregel.stream with other globals (as a changed LangGraph would present)
    fails the structural check."""
    original = _compat._PREGEL_STREAM
    moved = types.FunctionType(original.__code__, {}, original.__name__)
    with pytest.raises(ImportError, match=r"cannot find LangGraph's own Pregel\.stream"):
        _compat._langgraph_own(moved, "stream")


def test_compat_finds_langgraphs_stream_under_a_wraps_wrapper() -> None:
    """Unwrapping follows __wrapped__ to LangGraph's own function."""
    import functools

    @functools.wraps(Pregel.stream)
    def traced(*args: Any, **kwargs: Any) -> Any:
        return Pregel.stream(*args, **kwargs)

    assert _compat._langgraph_own(traced, "stream") is _compat._PREGEL_STREAM


def test_compat_shape_check_fails_when_the_handler_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A messages handler whose `_emit` changed signature fails the import-time check,
    naming what changed."""

    class Changed(_compat.StreamMessagesHandler):
        def _emit(self, meta: Any, message: Any, *, dedupe: bool = False, ns: Any = None) -> None:
            return None

    monkeypatch.setattr(_compat, "StreamMessagesHandler", Changed)
    with pytest.raises(ImportError, match=r"StreamMessagesHandler\._emit.* changed"):
        _compat.check_shapes()


def test_compat_shape_check_passes_on_the_installed_langgraph() -> None:
    """The installed langgraph has the shape lg_visibility extends."""
    assert _compat.check_shapes() is None


def test_remote_part_in_an_internal_path_is_dropped_as_a_plain_message_too() -> None:
    """A pushed part holding a message object (not a dict) is judged the same way."""

    def node(state: State, config: RunnableConfig) -> dict[str, Any]:
        caller = tuple(config[CONF][CONFIG_KEY_CHECKPOINT_NS].split("|"))
        chunk = AIMessageChunk("OBJ_SECRET", id="o1")
        config[CONF][CONFIG_KEY_STREAM](((*caller, "x:1"), "messages", (chunk, {})))
        return {}

    builder = StateGraph(State)
    builder.add_node("remote_research", node)
    builder.add_edge(START, "remote_research")
    graph = with_visibility(builder.compile(), REMOTE_POLICY)
    items = run(graph, user_input(), sync=True, stream_mode=["messages"], subgraphs=True)
    assert items == []
