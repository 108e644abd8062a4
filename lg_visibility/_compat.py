"""The only module that touches langgraph internals.

Everything here was checked against langgraph 1.2.24, and CI runs the core suite on the
lowest supported release too (see `.ci/run`). The supported range is pinned in
pyproject.toml; importing lg_visibility with a langgraph outside it, or one whose private
code lacks the shape checked below, fails here, at import, rather than leaking or crashing
on the first streamed event.
"""

from __future__ import annotations

import builtins as _builtins
import copy
import dis
import inspect
import itertools
import logging
import operator
import types
import weakref
from asyncio import base_events as _asyncio_base_events
from asyncio import events as _asyncio_events
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import fields, is_dataclass
from functools import partial
from importlib.metadata import version as _dist_version
from typing import Any, TypeVar, cast
from uuid import UUID, uuid4

from langchain_core.callbacks.base import BaseCallbackManager as _BaseCallbackManager
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tools import BaseTool as _BaseTool
from pydantic import BaseModel

__all__ = [
    "CONF",
    "CONFIG_KEY_TASK_ID",
    "EVENTS_SHAPE_PROBLEMS",
    "INTERRUPT",
    "KINDS",
    "LANGGRAPH_VERSION",
    "LOG_HANDLER_SHAPE_PROBLEMS",
    "MESSAGE",
    "NS_END",
    "NS_SEP",
    "PUSH",
    "SUPPORTED",
    "SUPPORTED_SPEC",
    "TAG_HIDDEN",
    "UPDATE_METADATA_KEY",
    "EventStreamHandler",
    "Getter",
    "Put",
    "Sink",
    "StreamMessagesHandler",
    "StreamMessagesHandlerV2",
    "added_as_graph",
    "added_in_place",
    "astream_events_v2_with",
    "called_task_graph_ns",
    "caller_context",
    "check_shapes",
    "check_version",
    "context_run_id",
    "decide_before_logging",
    "ensure_config",
    "events_v1_log_handler",
    "fields_with_values",
    "graph_namespace",
    "has_saved_state",
    "has_subgraph_cache",
    "is_pull_task",
    "is_task_config",
    "iter_messages",
    "kind_of",
    "message_fields",
    "message_keys",
    "name_unsent_messages",
    "new_messages",
    "node_copies",
    "output_keys",
    "parent_command",
    "pregel_astream_with",
    "pregel_base",
    "pregel_stream_with",
    "rebuild_as",
    "received_state",
    "registers_node_run",
    "sent_inputs",
    "sent_message_likes",
    "state_keys",
    "static_subgraphs",
    "task_has_channel",
    "task_state",
    "with_run_cache",
    "written_message_dicts",
]

SUPPORTED = ((1, 2, 19), (1, 3, 0))
"""Inclusive lower bound, exclusive upper bound of the langgraph versions we support.

1.2.19 is the first whose `Pregel.stream` keeps a caller's messages handlers out of a graph
not run as a task (checked in `check_shapes`); on 1.2.18 such a graph's tokens leak.
"""

SUPPORTED_SPEC = ">=1.2.19,<1.3"
"""`SUPPORTED` as a requirement specifier; pyproject.toml pins langgraph to exactly this."""

LANGGRAPH_VERSION = _dist_version("langgraph")


def _parse(v: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in v.split(".")[:3]:
        # Leading digits only: "3rc1" is 3, not 31 (which would pass the range check).
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def check_version(found: str = LANGGRAPH_VERSION) -> None:
    """Raise ImportError unless `found` is a langgraph version this release supports."""
    low, high = SUPPORTED
    if not (low <= _parse(found) < high):
        raise ImportError(
            f"lg_visibility supports langgraph {SUPPORTED_SPEC} but langgraph {found} is "
            "installed. lg_visibility replaces LangGraph's internal messages handler, so it "
            "cannot run safely on an unchecked version: install a supported langgraph "
            f"(pip install 'langgraph{SUPPORTED_SPEC}') or an lg-visibility release that "
            "supports yours."
        )


check_version()

# Private imports, all here. (checked against langgraph 1.2.24)
import langgraph.pregel.main as _pregel_main  # noqa: E402
from langgraph._internal._config import ensure_config  # noqa: E402
from langgraph._internal._constants import (  # noqa: E402
    CONF,
    CONFIG_KEY_CACHE,
    CONFIG_KEY_CHECKPOINT_NS,
    CONFIG_KEY_READ,
    CONFIG_KEY_TASK_ID,
    INTERRUPT,
    NS_END,
    NS_SEP,
    PUSH,
)
from langgraph._internal._queue import (  # type: ignore[attr-defined]  # noqa: E402  (mypy misses it)
    AsyncQueue as _AsyncQueue,
)
from langgraph._internal._queue import (  # type: ignore[attr-defined]  # noqa: E402
    SyncQueue as _SyncQueue,
)
from langgraph.channels.binop import BinaryOperatorAggregate  # noqa: E402
from langgraph.checkpoint.base import BaseCheckpointSaver  # noqa: E402
from langgraph.config import get_config  # noqa: E402
from langgraph.constants import TAG_HIDDEN  # noqa: E402
from langgraph.errors import EmptyChannelError, ParentCommand  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.pregel._algo import local_read as _local_read  # noqa: E402
from langgraph.pregel._algo import prepare_push_task_functional as _prepare_call  # noqa: E402
from langgraph.pregel._algo import prepare_push_task_send as _prepare_send  # noqa: E402
from langgraph.pregel._loop import AsyncPregelLoop as _AsyncPregelLoop  # noqa: E402
from langgraph.pregel._loop import PregelLoop as _PregelLoop  # noqa: E402
from langgraph.pregel._loop import SyncPregelLoop as _SyncPregelLoop  # noqa: E402
from langgraph.pregel._messages import (  # noqa: E402
    StreamMessagesHandler,
    StreamMessagesHandlerV2,
    graph_namespace,
)
from langgraph.pregel._read import PregelNode as _PregelNode  # noqa: E402
from langgraph.pregel.protocol import PregelProtocol, StreamProtocol  # noqa: E402
from langgraph.runtime import Runtime  # noqa: E402
from langgraph.types import Command, Send  # noqa: E402

HandlerFactory = Callable[..., Any]
M = TypeVar("M", bound=BaseMessage)

_get_running_loop = _asyncio_events._get_running_loop
"""asyncio's own running-loop test, which the loop-thread puts ask on every put."""

_READY_APPENDED = {"_ready", "append"} <= set(
    getattr(_asyncio_base_events.BaseEventLoop, "_call_soon").__code__.co_names  # noqa: B009
)
"""Whether asyncio's loop queues a callback by appending its handle to the deque `_ready`
(CPython's asyncio; checked on 3.11), which the loop-thread puts read to batch; if not,
each put keeps a callback of its own."""

_SYNC_QUEUE_PUT = _SyncQueue.put
"""`SyncQueue.put`, the put of `Pregel.stream`'s queue."""

_ASYNC_QUEUE_PUT = _AsyncQueue.put_nowait
"""`AsyncQueue.put_nowait` (asyncio.Queue's), the put of `Pregel.astream`'s loop stream."""

UPDATE_METADATA_KEY = "__metadata__"
"""The key LangGraph adds beside the nodes of a cached update. (langgraph 1.2.24)"""

_HANDLER_NAMES = ("StreamMessagesHandler", "StreamMessagesHandlerV2")
"""The globals of `Pregel.stream`/`astream` that name the messages handlers. (1.2.24)"""

_OUTPUT_PARAMS = [
    "stream_mode",
    "print_mode",
    "stream_subgraphs",
    "getter",
    "empty_exc",
    "version",
    "output_mapper",
    "state_mapper",
]
"""The parameters of the module function `_output` through which `Pregel.stream`/`astream`
pull every queued `(ns, mode, payload)` and format it for the caller. (1.2.19-1.2.24)"""

_LOCAL_READ_PARAMS = ["scratchpad", "channels", "managed", "task", "select", "fresh"]
"""`local_read`'s parameters: langgraph binds the first four per task. (1.2.19-1.2.24)"""


Getter = Callable[[], tuple[tuple[str, ...], str, Any]]

Put = Callable[[tuple[tuple[str, ...], str, Any]], None]
Sink = Callable[[Put], Put]
"""Given the put of the parent-side sink of a run's subgraphs, the put to use instead."""


def _langgraph_own(fn: Any, name: str) -> types.FunctionType:
    """LangGraph's own `Pregel.<name>`, under any `functools.wraps` wrappers around it.

    A tracing or APM tool may have wrapped `Pregel.stream` before lg_visibility was
    imported. Copying the wrapper would copy nothing of LangGraph's (its globals are the
    wrapper's), and the run would stream through LangGraph's own handler: a leak. So the
    wrappers are unwrapped (an enforced run does not go through them), and where they
    cannot be, import fails with the reason. (checked against langgraph 1.2.24)
    """
    found = fn
    while True:
        code = getattr(found, "__code__", None)
        if (
            isinstance(found, types.FunctionType)
            and found.__globals__ is vars(_pregel_main)
            and code is not None
            and all(handler in code.co_names for handler in _HANDLER_NAMES)
        ):
            return found
        inner = getattr(found, "__wrapped__", None)
        if inner is None:
            raise ImportError(
                f"lg_visibility cannot find LangGraph's own Pregel.{name}: it is "
                f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)!r}, "
                "which neither is LangGraph's function (langgraph 1.2.24 names "
                f"{' and '.join(_HANDLER_NAMES)} in it) nor wraps it with functools.wraps. "
                f"Import lg_visibility before the tool that wraps Pregel.{name}, or make that "
                "wrapper set __wrapped__; enforcing through an unknown function could leak."
            )
        found = inner


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """`code` and the code nested in it (functions, comprehensions), recursively."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _names(code: types.CodeType) -> set[str]:
    """The global and attribute names `code` uses, its nested comprehensions' included."""
    return {name for c in _codes(code) for name in c.co_names}


def check_shapes() -> None:
    """Raise ImportError unless LangGraph's private code has the shape lg_visibility extends.

    Each check is one contact with langgraph internals (checked against 1.2.24); a newer
    langgraph that moved one fails here, at import, not with a leak in production.
    """
    problems: list[str] = []
    for name, fn in (("stream", _PREGEL_STREAM), ("astream", _PREGEL_ASTREAM)):
        # A graph not run as a task (a child with its own checkpointer invoked in a node)
        # namespaces its events from the root; from 1.2.19 on, Pregel.stream drops its
        # caller's messages handlers, ours included, which would take them for their own.
        # (1.2.19-1.2.21 name the test _is_stream_mode_handler; 1.2.22 renamed it.)
        if not _names(fn.__code__) & {"_is_stream_mode_handler", "_streams_only_its_graph"}:
            problems.append(
                f"Pregel.{name} does not drop a caller's messages handlers from a graph not "
                "run as a task (langgraph 1.2.19 added this)"
            )
        # Every item it yields comes out of the module global `_output`, which a run's copy
        # replaces (so a global, not an attribute: `_output` loaded with LOAD_GLOBAL).
        if not any(
            i.opname == "LOAD_GLOBAL" and i.argval == "_output" for i in dis.get_instructions(fn)
        ):
            problems.append(f"Pregel.{name} no longer streams through the global _output")
        if not _hands_writer_to_runtime(fn):
            problems.append(f"Pregel.{name} no longer builds Runtime(stream_writer=...)")
    problems += _sink_shape_problems(_PREGEL_ASTREAM)
    problems += _writer_shape_problems(_PREGEL_ASTREAM)
    problems += _sync_sink_shape_problems(_PREGEL_STREAM)
    problems += _loop_stream_shape_problems(_PREGEL_ASTREAM)
    problems += _called_task_shape_problems()
    problems += _checkpoint_copy_shape_problems()
    if "operator" not in getattr(BinaryOperatorAggregate, "__slots__", ()):
        problems.append("BinaryOperatorAggregate no longer keeps its reducer as `operator`")
    handoff: Command[Any] = Command(graph=Command.PARENT)
    if ParentCommand(handoff).args[:1] != (handoff,):  # read by parent_command
        problems.append("langgraph.errors.ParentCommand no longer carries its Command first")
    if "bound" not in inspect.signature(_PregelNode.__init__).parameters:
        problems.append("PregelNode no longer takes the runnable it runs as `bound`")
    resolve = getattr(_pregel_main.Pregel, "_resolve_checkpointer", None)
    if resolve is None or list(inspect.signature(resolve).parameters) != ["self", "config"]:
        problems.append("Pregel._resolve_checkpointer(self, config) is gone or changed")
    defaults = getattr(_pregel_main.Pregel, "_defaults", None)
    if defaults is None or not {"CONFIG_KEY_CACHE", "cache"} <= _names(defaults.__code__):
        problems.append(
            "Pregel._defaults no longer resolves a run's cache as the config's "
            "CONFIG_KEY_CACHE, else the graph's cache"
        )
    read = inspect.signature(_local_read)
    if list(read.parameters) != _LOCAL_READ_PARAMS:
        problems.append(f"langgraph.pregel._algo.local_read{read} changed")
    if not {"local_read", "partial", "CONFIG_KEY_READ"} <= _names(_prepare_send.__code__):
        problems.append(
            "prepare_push_task_send no longer binds partial(local_read, ...) under "
            "CONFIG_KEY_READ in a Send task's config"
        )
    # child_config = patch_config(config, callbacks=run_manager.get_child()), then
    # with set_config_context(child_config) as context: the body runs in that context.
    child = ["patch_config", "config", "run_manager", "get_child"]
    for tool_run, body in (
        (_BaseTool.run, ["context", "run", "self", "_run"]),  # context.run(self._run, ...)
        (_BaseTool.arun, ["coro_with_context", "coro", "context"]),
    ):
        if not (
            _loads_in_order(tool_run, child)
            and _loads_in_order(tool_run, ["set_config_context", "child_config"])
            and _loads_in_order(tool_run, body)
        ):
            problems.append(
                f"langchain-core's BaseTool.{tool_run.__name__} no longer runs the tool's body "
                "in a context holding its run's child callbacks (context_run_id)"
            )
    if "parent_run_id" not in inspect.signature(_BaseCallbackManager.__init__).parameters:
        problems.append("langchain-core's BaseCallbackManager has no parent_run_id")
    output = inspect.signature(_PREGEL_OUTPUT)
    if list(output.parameters) != _OUTPUT_PARAMS:
        problems.append(f"langgraph.pregel.main._output{output} changed")
    handler = StreamMessagesHandler
    if not issubclass(StreamMessagesHandlerV2, handler):
        problems.append("StreamMessagesHandlerV2 no longer subclasses StreamMessagesHandler")
    init = inspect.signature(handler.__init__)
    if list(init.parameters) != ["self", "stream", "subgraphs", "parent_ns"]:
        problems.append(f"StreamMessagesHandler.__init__{init} changed")
    emit = inspect.signature(handler._emit)
    if list(emit.parameters) != ["self", "meta", "message", "dedupe"]:
        problems.append(f"StreamMessagesHandler._emit{emit} changed")
    for method in ("on_chat_model_start", "on_llm_end", "on_chain_start", "on_chain_end"):
        if method not in vars(handler):
            problems.append(f"StreamMessagesHandler.{method} is gone")
    if not {"metadata", "_find_and_emit_messages"} <= _names(handler.on_chain_end.__code__):
        problems.append(
            "StreamMessagesHandler.on_chain_end no longer sends a node's output through "
            "self._find_and_emit_messages(meta, ...) for the run's self.metadata entry"
        )
    if "_emit" not in _names(handler._find_and_emit_messages.__code__) or "uuid4" not in (
        handler._emit.__code__.co_names
    ):
        problems.append(
            "StreamMessagesHandler no longer names an id-less message (uuid4 in _emit, "
            "reached from _find_and_emit_messages)"
        )
    start = _names(handler.on_chain_start.__code__)
    if not {"langgraph_node", "TAG_HIDDEN", "subgraphs", "parent_ns", "graph_namespace"} <= (
        start | set(handler.on_chain_start.__code__.co_consts)
    ):
        problems.append(
            "StreamMessagesHandler.on_chain_start no longer takes a node run by its "
            "langgraph_node name, TAG_HIDDEN, subgraphs and parent_ns"
        )
    emits = handler.on_llm_new_token.__code__.co_names
    if "_emit" not in emits or "metadata" not in emits:
        problems.append("StreamMessagesHandler.on_llm_new_token no longer emits via _emit")
    init_names = handler.__init__.__code__.co_names
    for attr in ("stream", "metadata", "seen", "parent_ns"):
        if attr not in init_names:
            problems.append(f"StreamMessagesHandler no longer sets .{attr}")
    if problems:
        raise ImportError(
            f"lg_visibility cannot run on langgraph {LANGGRAPH_VERSION}: "
            + "; ".join(problems)
            + ". Install a supported langgraph (see pyproject.toml) or an lg-visibility "
            "release that supports yours."
        )


def _loaded(fn: Any, *, local_only: bool = False) -> list[Any]:
    """The names `fn`'s own code loads (locals, globals, attributes; with `local_only`, its
    locals and cells), in order. (A local load is LOAD_FAST on 3.11, also LOAD_FAST_CHECK
    and LOAD_FAST_LOAD_FAST, a pair, later.)"""
    others = (
        ("LOAD_DEREF",) if local_only else ("LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD", "LOAD_DEREF")
    )
    names: list[Any] = []
    for i in dis.get_instructions(fn):
        if i.opname.startswith("LOAD_FAST") and isinstance(i.argval, tuple):
            names.extend(i.argval)
        elif i.opname.startswith("LOAD_FAST") or i.opname in others:
            names.append(i.argval)
    return names


def _loads_in_order(fn: Any, names: list[str]) -> bool:
    """Whether `fn` loads `names` one right after the other (e.g. `context.run(self._run`)."""
    loaded, n = _loaded(fn), len(names)
    return any(loaded[i : i + n] == names for i in range(len(loaded) - n + 1))


def _hands_writer_to_runtime(fn: types.FunctionType) -> bool:
    """Whether `Pregel.stream`/`astream` hand the run's custom writer on exactly once, as
    `Runtime(..., stream_writer=stream_writer, ...)` with the global `Runtime`: the one
    call the run's copy judges (`_RuntimeSlot`). A second hand-over (an `override` after
    the merge, say) or another builder would pass the writer on unjudged."""
    code = fn.__code__
    handed = [k for k in code.co_consts if isinstance(k, tuple) and "stream_writer" in k]
    return (
        _loaded(fn).count("Runtime") == 1
        and "Runtime" in _global_loads(code)
        # the local writer read once (`.stream_writer` of a parent's runtime is an attribute)
        and _loaded(fn, local_only=True).count("stream_writer") == 1
        and len(handed) == 1
    )


def _sink_shape_problems(astream: types.FunctionType) -> list[str]:
    """What keeps the parent-side sink of `Pregel.astream` from being recognised, [] when
    nothing. (langgraph 1.2.19-1.2.24)

    With `subgraphs=True`, `Pregel.astream` puts `StreamProtocol(stream_put, stream_modes)`
    in the loop's config under `CONFIG_KEY_STREAM`: every subgraph's loop pushes its events
    into it (beside its own stream, which feeds its return value and is never touched).
    `stream_put` is `partial(aioloop.call_soon_threadsafe, stream.put_nowait)`.
    """
    problems: list[str] = []
    init = inspect.signature(StreamProtocol.__init__)
    if list(init.parameters) != ["self", "__call__", "modes"] or set(
        getattr(StreamProtocol, "__slots__", ())
    ) != {"modes", "__call__"}:
        problems.append(f"StreamProtocol{init} changed")
    if astream.__globals__.get("StreamProtocol") is not StreamProtocol:
        problems.append("langgraph.pregel.main.StreamProtocol is not langgraph's StreamProtocol")
    builds_sink = _builds_stream_protocol(astream, ("stream_put", None), ("stream_modes", None))
    names = _names(astream.__code__)
    if not builds_sink or not {"CONFIG_KEY_STREAM", "call_soon_threadsafe"} <= names:
        problems.append(
            "Pregel.astream no longer builds its subgraphs' sink as "
            "StreamProtocol(stream_put, stream_modes) with call_soon_threadsafe"
        )
    return problems


def _builds_stream_protocol(
    fn: types.FunctionType, *args: tuple[str, tuple[str, ...] | None]
) -> bool:
    """Whether `fn` loads the global `StreamProtocol` followed at once by `args`, each the
    name the next instruction loads and, if given, the opnames it may load it with: how
    `StreamProtocol(<args>)` is called."""
    ins = list(dis.get_instructions(fn))
    return any(
        ins[i].opname == "LOAD_GLOBAL"
        and ins[i].argval == "StreamProtocol"
        and all(
            load.argval == name and (opnames is None or load.opname in opnames)
            for load, (name, opnames) in zip(ins[i + 1 : i + 1 + len(args)], args, strict=True)
        )
        for i in range(len(ins) - len(args))
    )


def _loop_stream_shape_problems(astream: types.FunctionType) -> list[str]:
    """What keeps `Pregel.astream`'s loop stream from being recognised, [] when nothing:
    `StreamProtocol(stream.put_nowait, stream_modes)` on an `AsyncQueue` (see
    `_is_async_queue_put`). (langgraph 1.2.19-1.2.24)"""
    builds = _builds_stream_protocol(
        astream,
        ("stream", None),
        ("put_nowait", ("LOAD_ATTR", "LOAD_METHOD")),
        ("stream_modes", None),
    )
    if not builds or "AsyncQueue" not in _names(astream.__code__):
        return [
            "Pregel.astream no longer builds its loop's stream as "
            "StreamProtocol(stream.put_nowait, stream_modes) on an AsyncQueue"
        ]
    return []


def _called_task_shape_problems() -> list[str]:
    """What keeps a `@task`'s run and start event from being placed, [] when nothing
    (`called_task_graph_ns`, `OutputFilter.noting_called_tasks`): the loop's `accept_push`
    emits the task's start (`_emit("tasks", ...)`) where its caller calls it, and
    `prepare_push_task_functional` gives the task's run the path it marks as in progress
    and a namespace under its caller's. (langgraph 1.2.19-1.2.24)"""
    problems = []
    if not {"_emit", "map_debug_tasks", "prepare_single_task"} <= _names(
        _PregelLoop.accept_push.__code__
    ):
        problems.append("PregelLoop.accept_push no longer emits the pushed task's start")
    code = _prepare_call.__code__
    consts = {k for c in code.co_consts for k in (c if isinstance(c, tuple) else (c,))}
    marks = {"langgraph_path", "langgraph_checkpoint_ns"}
    if "in_progress_task_path" not in code.co_varnames or not marks <= consts:
        problems.append(
            "prepare_push_task_functional no longer marks a call's task path in progress "
            "in its run's metadata"
        )
    return problems


def _sync_sink_shape_problems(stream: types.FunctionType) -> list[str]:
    """What keeps the sink of `Pregel.stream`'s subgraphs from being recognised, [] when
    nothing. (langgraph 1.2.19-1.2.24)

    `Pregel.stream` builds its loop's stream as `StreamProtocol(stream.put, stream_modes)`,
    `stream` a `SyncQueue`, and with `subgraphs=True` puts that same stream in the loop's
    config under `CONFIG_KEY_STREAM`, so its subgraphs push into it.
    """
    builds = _builds_stream_protocol(
        stream, ("stream", None), ("put", ("LOAD_ATTR", "LOAD_METHOD")), ("stream_modes", None)
    )
    names = _names(stream.__code__)
    if not builds or not {"SyncQueue", "CONFIG_KEY_STREAM"} <= names:
        return [
            "Pregel.stream no longer builds its loop's stream as "
            "StreamProtocol(stream.put, stream_modes) on a SyncQueue"
        ]
    return []


def _is_stream_put(put: Any) -> bool:
    """Whether `put` is `Pregel.astream`'s `stream_put`:
    `partial(aioloop.call_soon_threadsafe, stream.put_nowait)`. (langgraph 1.2.19-1.2.24)"""
    return (
        type(put) is partial
        and getattr(put.func, "__name__", None) == "call_soon_threadsafe"
        and len(put.args) == 1
        and getattr(put.args[0], "__name__", None) == "put_nowait"
        and not put.keywords
    )


def _is_sync_queue_put(put: Any) -> bool:
    """Whether `put` is `Pregel.stream`'s `stream.put` (a `SyncQueue`'s): the put of the
    run loop's stream, which its subgraphs push into too (`CONFIG_KEY_STREAM` is the
    loop's own stream). (langgraph 1.2.19-1.2.24)"""
    return getattr(put, "__func__", None) is _SYNC_QUEUE_PUT


def _is_async_queue_put(put: Any) -> bool:
    """Whether `put` is `Pregel.astream`'s loop stream put: `stream.put_nowait` of its
    `AsyncQueue`. (langgraph 1.2.19-1.2.24)"""
    return getattr(put, "__func__", None) is _ASYNC_QUEUE_PUT and isinstance(
        getattr(put, "__self__", None), _AsyncQueue
    )


def loop_thread_put(put: Put) -> Put:
    """`put`, where it is `Pregel.astream`'s `stream_put`, without the wake-up write when
    called on the event loop's own thread, and with one ready-queue callback for a run of
    puts nothing else is queued between; any other put as is.

    `stream_put` is `partial(aioloop.call_soon_threadsafe, stream.put_nowait)` (see
    `_is_stream_put`): each put writes a byte to the loop's self-pipe (a `send`, and a
    `recv` when the loop drains it), so that a loop blocked in `select` wakes up, and
    appends one callback to the loop's ready queue that puts the item when the loop runs
    it. A put made on the loop's own thread (an async model: the common case) finds the
    loop running, not blocked: no wake-up is needed. And where the callback of the batch
    the last put joined is still the last one in the ready queue, the callback of this put
    would run right after it: that callback, a batch, puts this item too, after the others,
    in the same order. So a burst of tokens (and the writes among them) is one callback,
    and anything queued between two puts (another task's step, a `@task` call's task,
    which puts into the queue directly; a done callback; a put of LangGraph's tools
    handler, or from another thread) starts a new batch after it: the queue's order is the
    order `stream_put` gives.

    asyncio's loop keeps its ready queue as the deque `_ready` (`_READY_APPENDED`); on a
    loop without it (uvloop) each put has its callback, as `stream_put`'s. A put from
    another thread (a sync node LangGraph runs in an executor) stays
    `call_soon_threadsafe`. (langgraph 1.2.19-1.2.24; asyncio's `BaseEventLoop` and uvloop
    both set the running loop per thread)
    """
    if not _is_stream_put(put):
        return put
    threadsafe = cast(partial[Any], put)
    loop: Any = getattr(threadsafe.func, "__self__")  # noqa: B009 (a bound method's loop)
    soon = loop.call_soon
    put_nowait = threadsafe.args[0]
    running_loop = _get_running_loop
    ready = getattr(loop, "_ready", None) if _READY_APPENDED else None
    if type(ready) is not deque:
        ready = None
    batch: list[tuple[tuple[str, ...], str, Any]] | None = None  # waiting for its callback
    queued: Any = None  # that callback's handle

    def put_batch(items: list[tuple[tuple[str, ...], str, Any]]) -> None:
        nonlocal batch, queued
        if items is batch:
            batch = queued = None  # (the handle holds the items: a snapshot may be large)
        for item in items:
            put_nowait(item)

    def put_on_loop(item: tuple[tuple[str, ...], str, Any]) -> None:
        nonlocal batch, queued
        if running_loop() is not loop:
            threadsafe(item)
        elif ready is None:
            soon(put_nowait, item)
        elif batch is not None and ready and ready[-1] is queued:
            batch.append(item)
        else:
            batch = [item]
            queued = soon(put_batch, batch)

    return put_on_loop


class _OnLoopThread:
    """`loop_thread_put` for one run's slots, made once for its queue: the messages handler,
    the `custom` writer and the parent-side sink put into the same queue through one put, so
    their puts share batches (see `loop_thread_put`), and a run makes one put (two
    functions), not three. Any put other than `Pregel.astream`'s `stream_put`, as is."""

    __slots__ = ("_made", "_queue")

    def __init__(self) -> None:
        self._queue: Any = None
        self._made: Put | None = None

    def __call__(self, put: Put) -> Put:
        if not _is_stream_put(put):
            return put
        queue = cast(partial[Any], put).args[0].__self__  # stream.put_nowait's queue
        if queue is not self._queue or self._made is None:
            self._made, self._queue = loop_thread_put(put), queue
        return self._made


class _SinkSlot:
    """Stands where `Pregel.stream`/`astream` name `StreamProtocol`, for one run.

    It builds LangGraph's own `StreamProtocol` every time; given `sink`, for the stream a
    run's subgraphs push into it builds it with a put through `sink`, which can drop an
    event before it is queued: in `astream` the parent-side sink, `sink(loop_thread_put(
    stream_put))` (see `_sink_shape_problems`); in `stream` the loop's own stream,
    `sink(stream.put)` on its `SyncQueue` (see `_sync_sink_shape_problems`). Given `note`,
    those puts and `astream`'s loop stream (`stream.put_nowait` on its `AsyncQueue`, see
    `_loop_stream_shape_problems`) go through `note(put)` first; no other put does (the
    messages handler's and the `custom` writer's are not built here). Given `hold`, the
    same puts go through `hold(put)` last, after `sink`, just before the queue.
    """

    __slots__ = ("_hold", "_note", "_on_loop", "_sink")

    def __init__(
        self,
        sink: Sink | None,
        note: Sink | None = None,
        hold: Sink | None = None,
        on_loop: Callable[[Put], Put] = loop_thread_put,
    ):
        self._sink = sink
        self._note = note
        self._hold = hold
        self._on_loop = on_loop

    def __call__(self, put: Put, modes: Any) -> StreamProtocol:
        sink, note, hold = self._sink, self._note, self._hold
        if _is_stream_put(put) or _is_sync_queue_put(put):
            if sink is not None or hold is not None:
                put = self._on_loop(put)
            if hold is not None:
                put = hold(put)
            if sink is not None:
                put = sink(put)
            if note is not None:
                put = note(put)
        elif _is_async_queue_put(put):
            if hold is not None:
                put = hold(put)
            if note is not None:
                put = note(put)
        return StreamProtocol(put, modes)

    def __instancecheck__(self, obj: object) -> bool:
        return isinstance(obj, StreamProtocol)


class _HandlerSlot:
    """Stands where `Pregel.stream` names a messages handler class, for one run.

    `Pregel.stream`/`astream` (langgraph 1.2.24) use the module globals
    `StreamMessagesHandler` and `StreamMessagesHandlerV2` twice: to build the handler for
    stream_mode="messages", and in `isinstance` checks on inherited handlers. A slot builds
    our handler, with the run's loop-thread put, when called and answers
    `isinstance`/`issubclass` exactly as the original class would, so only construction
    changes.
    """

    __slots__ = ("_build", "_on_loop", "_original")

    def __init__(
        self,
        original: type,
        build: HandlerFactory,
        on_loop: Callable[[Put], Put] = loop_thread_put,
    ) -> None:
        self._original = original
        self._build = build
        self._on_loop = on_loop

    def __call__(self, stream: Any, subgraphs: bool, *, parent_ns: Any = None) -> Any:
        # The handler puts every event through the run's loop-thread put: on the loop's
        # thread, without a wake-up write, batched with the puts queued just before it.
        return self._build(self._on_loop(stream), subgraphs, parent_ns=parent_ns)

    def __instancecheck__(self, obj: object) -> bool:
        return isinstance(obj, self._original)

    def __subclasscheck__(self, cls: type) -> bool:
        return issubclass(cls, self._original)


_REFERENCE_WRITER = """
def _astream(aioloop, stream):
    def stream_writer(c):
        aioloop.call_soon_threadsafe(
            stream.put_nowait,
            (tuple(get_config()[CONF][CONFIG_KEY_CHECKPOINT_NS].split(NS_SEP)[:-1]), "custom", c),
        )
"""
"""`Pregel.astream`'s custom writer, as `_loop_thread_writer` rebuilds it. (langgraph
1.2.19-1.2.24)"""


def _code_shape(code: types.CodeType) -> tuple[Any, ...]:
    """What `code` does, line numbers aside: its instructions, constants and variables."""
    ops = [(i.opname, i.argval) for i in dis.get_instructions(code)]
    return ops, code.co_consts, code.co_freevars, code.co_argcount, code.co_names


_WRITER_SHAPE = _code_shape(
    next(
        c
        for c in _codes(compile(_REFERENCE_WRITER, "<writer>", "exec"))
        if c.co_name == "stream_writer"
    )
)
_WRITER_GLOBALS = {
    "get_config": get_config,
    "CONF": CONF,
    "CONFIG_KEY_CHECKPOINT_NS": CONFIG_KEY_CHECKPOINT_NS,
    "NS_SEP": NS_SEP,
}
"""The globals the writer reads, as the rebuilt writer reads them."""


def _astream_writers(astream: types.FunctionType) -> tuple[list[types.CodeType], list[str]]:
    """The code of `Pregel.astream`'s custom writers (`stream_writer` closures that compile
    to exactly `_REFERENCE_WRITER`'s), and what is wrong with any other `stream_writer` it
    defines (only the one that writes nothing may differ)."""
    writers, problems = [], []
    for code in _codes(astream.__code__):
        if code.co_name != "stream_writer":
            continue
        if _loaded(code) == [] and not code.co_freevars:
            continue  # `def stream_writer(c): pass`: nothing is written
        if _code_shape(code) == _WRITER_SHAPE:
            writers.append(code)
        else:
            problems.append("Pregel.astream's custom writer changed")
    return writers, problems


def _writer_shape_problems(astream: types.FunctionType) -> list[str]:
    """What keeps `_loop_thread_writer` from rebuilding `Pregel.astream`'s custom writer
    exactly, [] when nothing: the writer's code, the globals it reads are the ones the
    rebuilt writer reads, and `astream` sets the loop and queue it closes over once (the
    rebuilt writer reads them when the run's `Runtime` is built)."""
    writers, problems = _astream_writers(astream)
    if not writers:
        problems.append("Pregel.astream no longer defines its custom writer")
    stores = [
        i.argval
        for i in dis.get_instructions(astream)
        if i.opname in ("STORE_DEREF", "STORE_FAST") and i.argval in ("aioloop", "stream")
    ]
    if writers and sorted(stores) != ["aioloop", "stream"]:
        problems.append("Pregel.astream no longer sets its loop and queue once")
    mod = astream.__globals__
    if any(mod.get(name) is not value for name, value in _WRITER_GLOBALS.items()):
        problems.append(
            "Pregel.astream's writer reads another get_config, CONF, "
            "CONFIG_KEY_CHECKPOINT_NS or NS_SEP"
        )
    return problems


def caller_context() -> tuple[str, Mapping[str, Any], list[str]] | None:
    """(checkpoint namespace, metadata, tags) of the config of the code running now (a
    task's body, or a runnable it runs), None outside a task's context: where a `@task`
    called now gets its namespace (under the caller task's), and the tags and metadata its
    run inherits. (langgraph 1.2.19-1.2.24: `call` hands the context's config on)"""
    found = _task_config()
    if found is None:
        return None
    task, config = found
    return task, config.get("metadata") or {}, list(config.get("tags") or ())


def writer_task_ns() -> str | None:
    """The checkpoint namespace of the task a `custom` write is made in now, whose parent
    part is the namespace LangGraph's custom writer gives the write (`_REFERENCE_WRITER`);
    None outside a task's context (a thread started without it), where LangGraph's writer
    raises, or writes nothing when the stream has no `custom` mode."""
    found = _task_config()
    return None if found is None else found[0]


def _task_config() -> tuple[str, RunnableConfig] | None:
    """(checkpoint namespace, config) of the task context the code running now is in."""
    try:
        config = get_config()
    except RuntimeError:
        return None
    task = config.get(CONF, {}).get(CONFIG_KEY_CHECKPOINT_NS)
    return (task, config) if isinstance(task, str) else None


def _loop_writer_template() -> Callable[[Any], None]:
    put: Put = cast(Any, None)

    def stream_writer(c: Any) -> None:
        put((tuple(get_config()[CONF][CONFIG_KEY_CHECKPOINT_NS].split(NS_SEP)[:-1]), "custom", c))

    return stream_writer


_LOOP_WRITER = _loop_writer_template().__code__
"""The code of `Pregel.astream`'s custom writer, putting its item as LangGraph's does, but
through the run's loop-thread put (its one free variable, `put`)."""
_LOOP_WRITER_GLOBALS: dict[str, Any] = {**_WRITER_GLOBALS, "__builtins__": vars(_builtins)}
"""The rebuilt writer's own globals: what LangGraph's writer reads (checked at import),
not `_compat`'s module namespace."""


def _loop_thread_writer(
    writer: Callable[[Any], None], on_loop: Callable[[Put], Put] = loop_thread_put
) -> Callable[[Any], None]:
    """`writer`, where it is `Pregel.astream`'s custom writer (`_REFERENCE_WRITER`) and
    reads the globals `_compat` does, rebuilt to put its item through
    `on_loop(stream_put)` for the loop and queue it closes over: the run's one loop-thread
    put (`loop_thread_put`), so a write made on the event loop's own thread (an async node:
    the common case) makes no wake-up write and shares a batch with the tokens around it,
    in order; one from any other thread (a sync node's executor thread, another loop) is
    queued with `call_soon_threadsafe`, as before. Any other writer, or one whose globals a
    test or tool rebound, as is."""
    code = getattr(writer, "__code__", None)
    if code not in _ASTREAM_WRITERS:
        return writer
    fn = cast(types.FunctionType, writer)
    found, builtins = fn.__globals__, getattr(fn, "__builtins__")  # noqa: B009 (not in typeshed)
    for name, value in _WRITER_GLOBALS.items():
        if (found[name] if name in found else builtins.get(name)) is not value:
            return writer
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
    loop, stream = cells["aioloop"].cell_contents, cells["stream"].cell_contents
    put = on_loop(partial(loop.call_soon_threadsafe, stream.put_nowait))
    return types.FunctionType(
        _LOOP_WRITER, _LOOP_WRITER_GLOBALS, "stream_writer", None, (types.CellType(put),)
    )


class _RuntimeSlot:
    """Stands where `Pregel.stream`/`astream` name `Runtime`, for one run: it builds
    LangGraph's own `Runtime` around the run's `stream_writer`, the one every graph run as
    its task writes through with `subgraphs=True` (a subgraph whose own modes lack `custom`
    takes its parent runtime's writer when the parent streams subgraphs, else LangGraph's
    writer that writes nothing; a graph a node streams itself with `custom` has a writer of
    its own).
    In `astream` that writer puts through the run's loop-thread put (`_loop_thread_writer`,
    `on_loop`); given `held`, it writes `held(chunk)`; given `drops`, it drops a write when
    `drops()` says so, called on the writer's own thread and context. (langgraph 1.2.19-1.2.24;
    `check_shapes` checks that the writer is handed on once, to the global `Runtime`, by
    keyword.)
    """

    __slots__ = ("_drops", "_held", "_on_loop")

    def __init__(
        self,
        drops: Callable[[], bool] | None,
        held: Callable[[Any], Any] | None = None,
        on_loop: Callable[[Put], Put] = loop_thread_put,
    ) -> None:
        self._drops = drops
        self._held = held
        self._on_loop = on_loop

    def __call__(self, *args: Any, **kwargs: Any) -> Runtime[Any]:
        writer = kwargs.get("stream_writer")
        if writer is not None:
            writer = _loop_thread_writer(writer, self._on_loop)
            if self._held is not None:
                writer = _HeldWriter(writer, self._held)
            drops = self._drops
            if drops is not None:
                inner = writer

                def writer(chunk: Any) -> None:
                    if not drops():
                        inner(chunk)

            kwargs["stream_writer"] = writer
        return Runtime(*args, **kwargs)


class _HeldWriter:
    """A `custom` writer that writes `held(chunk)` (slotted: no closure and cells a run)."""

    __slots__ = ("_held", "_write")

    def __init__(self, write: Callable[[Any], None], held: Callable[[Any], Any]) -> None:
        self._write = write
        self._held = held

    def __call__(self, chunk: Any) -> None:
        self._write(self._held(chunk))


def _judged_output(judged: Callable[[Getter], Getter], stream_mode: Any) -> Callable[..., Any]:
    """LangGraph's `_output` for one run: it pulls through `judged(getter)`, so each raw
    `(ns, mode, payload)` is judged before LangGraph formats it, and formats for the
    caller's `stream_mode` (modes the run added, such as `tasks`, are judged, not yielded).

    LangGraph prints `print_mode` items inside `_output`, after the getter: debug printing
    sees only what may leave the graph. (langgraph 1.2.19-1.2.24)
    """

    def _output(
        _run_mode: Any,
        print_mode: Any,
        stream_subgraphs: bool,
        getter: Getter,
        empty_exc: type[Exception],
        version: Any = "v1",
        output_mapper: Any = None,
        state_mapper: Any = None,
    ) -> Any:
        return _PREGEL_OUTPUT(
            stream_mode,
            print_mode,
            stream_subgraphs,
            judged(getter),
            empty_exc,
            version,
            output_mapper,
            state_mapper,
        )

    return _output


def _checkpoint_copy_shape_problems() -> list[str]:
    """What keeps a run's loop from handing its saver checkpoints with their lists copied
    (`_held_loop`), [] when nothing. (langgraph 1.2.19-1.2.24)"""
    problems = []
    put = _PregelLoop.__dict__.get("_put_checkpoint")
    if not isinstance(put, types.FunctionType) or "copy_checkpoint" not in _names(put.__code__):
        problems.append("PregelLoop._put_checkpoint no longer saves a copy_checkpoint(...)")
    for cls in (_SyncPregelLoop, _AsyncPregelLoop):
        if "_put_checkpoint" in cls.__dict__:
            problems.append(f"{cls.__name__} has a _put_checkpoint of its own")
        if not cls.__dictoffset__:
            problems.append(f"{cls.__name__} keeps no attributes of its own (__slots__)")
    for name in ("SyncPregelLoop", "AsyncPregelLoop"):
        if getattr(_pregel_main, name, None) not in (_SyncPregelLoop, _AsyncPregelLoop):
            problems.append(f"langgraph.pregel.main.{name} is not the loop class")
    names = _names(_PREGEL_STREAM.__code__) | _names(_PREGEL_ASTREAM.__code__)
    if not {"SyncPregelLoop", "AsyncPregelLoop"} <= names:
        problems.append("Pregel.stream/astream no longer build their loop by its global name")
    return problems


def _held_checkpoint(copy_checkpoint: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """LangGraph's `copy_checkpoint`, and each list among the channel values copied too.

    A saver (durability "async", the default) serializes a step's checkpoint in the
    background, while the next step's nodes run. Its channel values are the channels' own
    lists, and a node may append to its input's list in place, with no write: its message,
    tagged only when the node ends, would be saved untagged, and since nothing was written
    the channel's version stays and no later checkpoint saves it again (every state read,
    and the next turn, would show it). Copied here, on the loop's thread before the next
    step starts, a checkpoint saves the state as of its step, as with durability "sync"."""

    def held(checkpoint: Any) -> Any:
        copied = copy_checkpoint(checkpoint)
        values = copied["channel_values"]
        for key, value in list(values.items()):
            if isinstance(value, list):
                values[key] = value[:] if type(value) is list else copy.copy(value)
        return copied

    return held


def _with_handlers(
    fn: types.FunctionType,
    build_v1: HandlerFactory,
    build_v2: HandlerFactory,
    judged: Callable[[Getter], Getter] | None,
    stream_mode: Any,
    sink: Sink | None = None,
    drops_write: Callable[[], bool] | None = None,
    note: Sink | None = None,
    hold: Sink | None = None,
    held_write: Callable[[Any], Any] | None = None,
) -> types.FunctionType:
    # A copy of the function whose globals name our handlers (and our `_output`): nothing
    # process-wide changes, so other graphs in the process stream exactly as before.
    on_loop = _OnLoopThread()
    slots: dict[str, Any] = {
        "StreamMessagesHandler": _HandlerSlot(StreamMessagesHandler, build_v1, on_loop),
        "StreamMessagesHandlerV2": _HandlerSlot(StreamMessagesHandlerV2, build_v2, on_loop),
    }
    # The run's loop, whose checkpoints hold the state as of their step.
    slots["SyncPregelLoop"] = _HELD_SYNC_LOOP
    slots["AsyncPregelLoop"] = _HELD_ASYNC_LOOP
    if judged is not None:
        slots["_output"] = _judged_output(judged, stream_mode)
    if sink is not None or note is not None or hold is not None:
        slots["StreamProtocol"] = _SinkSlot(sink, note, hold, on_loop)
    if drops_write is not None or held_write is not None or fn is _PREGEL_ASTREAM:
        slots["Runtime"] = _RuntimeSlot(drops_write, held_write, on_loop)
    return _with_globals(fn, slots)


class _LoadedNames:
    """The global names a function's code loads (nested code included), as its module (else
    builtins) binds them now: the `__builtins__` of its copies.

    LOAD_GLOBAL looks in a function's globals, then in its builtins dict. A copy per run
    gets globals of only the names it rebinds and this dict as its builtins, made once and
    shared by every copy while each name stays bound to the same object (checked per copy:
    an identity test a name), so a run allocates a dict of a few names, not of the 50-odd
    LangGraph's stream loads, and a name rebound later (a test's monkeypatch) is seen by
    the next run, as the original function sees it. What it found is published as one
    tuple, so a run starting on another thread meanwhile reads all of it or none."""

    __slots__ = ("_builtins", "_found", "_module", "_names")

    def __init__(self, fn: types.FunctionType) -> None:
        self._module = fn.__globals__
        self._builtins: dict[str, Any] = getattr(fn, "__builtins__")  # noqa: B009 (not in typeshed)
        self._names = tuple(sorted(_global_loads(fn.__code__)))
        # (the names' values in the module, the names found in builtins, their values
        # there, the dict): empty until the first copy
        self._found: tuple[tuple[Any, ...], tuple[str, ...], tuple[Any, ...], dict[str, Any]] = (
            (),
            (),
            (),
            {},
        )

    def current(self) -> dict[str, Any]:
        """The dict, rebuilt first if the module or builtins rebound one of its names."""
        names, module, builtins = self._names, self._module, self._builtins
        was_module, builtin_names, was_builtins, found = self._found
        in_module = tuple(map(module.get, names, _UNBOUND_EACH))
        if (
            len(in_module) == len(was_module)
            and all(map(operator.is_, in_module, was_module))
            and all(
                map(operator.is_, map(builtins.get, builtin_names, _UNBOUND_EACH), was_builtins)
            )
        ):
            return found
        found = {n: v for n, v in zip(names, in_module, strict=True) if v is not _UNBOUND}
        builtin_names = tuple(n for n in names if n not in found)
        in_builtins = tuple(map(builtins.get, builtin_names, _UNBOUND_EACH))
        for name, value in zip(builtin_names, in_builtins, strict=True):
            if value is not _UNBOUND:
                found[name] = value
        self._found = (in_module, builtin_names, in_builtins, found)
        return found


def _global_loads(code: types.CodeType) -> set[str]:
    """The names `code` (nested code included) loads as globals."""
    return {
        i.argval
        for c in _codes(code)
        for i in dis.get_instructions(c)
        if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")
    }


_UNBOUND = object()
_UNBOUND_EACH = itertools.repeat(_UNBOUND)
_LOADED: dict[types.FunctionType, _LoadedNames] = {}


def _with_globals(fn: types.FunctionType, slots: dict[str, Any]) -> types.FunctionType:
    """A copy of `fn` (code, defaults, closure) whose code finds `slots` where it loads
    those global names, and every other name as `fn` finds it (see `_LoadedNames`)."""
    loaded = _LOADED.get(fn)
    if loaded is None:
        loaded = _LOADED[fn] = _LoadedNames(fn)
    run_globals = {
        **slots,
        "__builtins__": loaded.current(),
        "__name__": fn.__globals__.get("__name__"),
    }
    clone = types.FunctionType(
        fn.__code__, run_globals, fn.__name__, fn.__defaults__, fn.__closure__
    )
    clone.__kwdefaults__ = fn.__kwdefaults__
    return clone


_PREGEL_STREAM = _langgraph_own(_pregel_main.Pregel.stream, "stream")
_PREGEL_ASTREAM = _langgraph_own(_pregel_main.Pregel.astream, "astream")
_PREGEL_OUTPUT = _pregel_main._output
check_shapes()
_ASTREAM_WRITERS = frozenset(_astream_writers(_PREGEL_ASTREAM)[0])
if _global_loads(_LOOP_WRITER) - set(_LOOP_WRITER_GLOBALS) - set(vars(_builtins)):
    raise ImportError("lg_visibility's custom writer reads a global it is not given")


def _held_put(loop: Any) -> Callable[[Any], None]:
    """LangGraph's `_put_checkpoint`, as its module binds it now, bound to `loop` (weakly,
    `_LoopMethod`), run with the `copy_checkpoint` it names, held (`_held_checkpoint`). The
    copy is made again only when one of those, or a global it reads, was rebound since the
    last run."""
    put = _PregelLoop.__dict__["_put_checkpoint"]
    if isinstance(put, types.FunctionType) and "copy_checkpoint" in put.__globals__:
        copy_checkpoint = put.__globals__["copy_checkpoint"]
        made = _HELD_PUT[0]
        if (
            made is None
            or made[0] is not put
            or made[1] is not copy_checkpoint
            or getattr(made[2], "__builtins__") is not _LOADED[put].current()  # noqa: B009
        ):
            held = _with_globals(put, {"copy_checkpoint": _held_checkpoint(copy_checkpoint)})
            made = _HELD_PUT[0] = (put, copy_checkpoint, held)
        put = made[2]
    return _LoopMethod(put, loop)


class _LoopMethod:
    """`fn` bound to a loop as its method, holding the loop weakly. The loop holds it (an
    attribute of its own), and a bound method would make a cycle: each run's loop, and the
    state its channels hold, would wait for the collector, where LangGraph's own loop is
    freed as its run ends. (The loop calls it, so the loop is alive whenever it runs.)"""

    __slots__ = ("_fn", "_loop")

    def __init__(self, fn: Callable[..., Any], loop: Any) -> None:
        self._fn = fn
        self._loop = weakref.ref(loop)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(self._loop(), *args, **kwargs)


_HELD_PUT: list[tuple[Any, Any, types.FunctionType] | None] = [None]
"""The last `_held_put` copy made: (LangGraph's function, its `copy_checkpoint`, ours)."""


def _held_loop(cls: type) -> Callable[..., Any]:
    """Stands where `Pregel.stream`/`astream` name their loop class, for every run: builds
    LangGraph's own loop, whose `_put_checkpoint` saves each checkpoint with its lists
    copied (`_held_put`, looked up once a run: a later monkeypatch is seen by the next run). An
    attribute of the loop, not a subclass: LangGraph's loop code, run for the raw graphs
    and the subgraphs too, keeps seeing one class (a second one costs its specialized
    attribute reads, about 1.5% of a W5 run's instructions)."""

    def build(*args: Any, **kwargs: Any) -> Any:
        loop = cls(*args, **kwargs)
        loop._put_checkpoint = _held_put(loop)
        return loop

    return build


_HELD_SYNC_LOOP = _held_loop(_SyncPregelLoop)
_HELD_ASYNC_LOOP = _held_loop(_AsyncPregelLoop)


def pregel_stream_with(
    build_v1: HandlerFactory,
    build_v2: HandlerFactory,
    judged: Callable[[Getter], Getter] | None = None,
    stream_mode: Any = None,
    sink: Sink | None = None,
    drops_write: Callable[[], bool] | None = None,
    note: Sink | None = None,
    hold: Sink | None = None,
    held_write: Callable[[Any], Any] | None = None,
) -> Any:
    """`Pregel.stream` for one run, building its messages handler with our factories and,
    given `judged`, pulling its output through `judged(getter)`, formatted for
    `stream_mode`; given `sink`, its loop's stream (which its subgraphs push into, with
    `subgraphs=True`) puts through `sink(stream.put)`, where the subgraph's node runs;
    given `drops_write`, a `custom` write is dropped where it is made when it says so;
    given `note`, every event its loops put goes through `note(put)` (outermost); given
    `hold`, through `hold(put)` (innermost); given `held_write`, a `custom` write is
    written as `held_write(chunk)`."""
    return _with_handlers(
        _PREGEL_STREAM,
        build_v1,
        build_v2,
        judged,
        stream_mode,
        sink,
        drops_write,
        note,
        hold,
        held_write,
    )


def pregel_astream_with(
    build_v1: HandlerFactory,
    build_v2: HandlerFactory,
    judged: Callable[[Getter], Getter] | None = None,
    stream_mode: Any = None,
    sink: Sink | None = None,
    drops_write: Callable[[], bool] | None = None,
    note: Sink | None = None,
    hold: Sink | None = None,
    held_write: Callable[[Any], Any] | None = None,
) -> Any:
    """`Pregel.astream` for one run, as `pregel_stream_with`; given `sink`, the parent-side
    sink its subgraphs push into (with `subgraphs=True`) puts through `sink(stream_put)`;
    given `note`, so do its loop's own stream and that sink, through `note(put)`, and
    given `hold`, through `hold(put)`, innermost."""
    return _with_handlers(
        _PREGEL_ASTREAM,
        build_v1,
        build_v2,
        judged,
        stream_mode,
        sink,
        drops_write,
        note,
        hold,
        held_write,
    )


def is_task_config(config: Mapping[str, Any]) -> bool:
    """True when a config is that of a task: the graph runs as a node of another graph."""
    return CONFIG_KEY_TASK_ID in config.get(CONF, {})


def pregel_base() -> type:
    """The Pregel class whose stream methods we copy."""
    return _pregel_main.Pregel


def rebuild_as(graph: Any, cls: type, nodes: Mapping[str, Any] | None = None) -> Any:
    """A copy of compiled `graph` whose class is `cls` (a subclass of the graph's class),
    with `nodes` (from `node_copies`) in place of its own where given.

    `Pregel.__init__` takes every attribute of a compiled graph as an argument but drops what
    it does not know, among them the v2 output and state mappers `StateGraph.compile` sets
    afterwards; they are copied over, or v2 values of a Pydantic or dataclass state would
    come out as dicts. (langgraph 1.2.24)
    """
    attrs = {k: v for k, v in graph.__dict__.items() if k != "__orig_class__"}
    if nodes is not None:
        attrs["nodes"] = dict(nodes)
    rebuilt = cls(**attrs)
    rebuilt.__dict__.update(attrs)
    return rebuilt


def node_copies(
    graph: Any,
    old: str,
    new: str,
    cache: Callable[[Any], Any] | None = None,
    *,
    rename: bool = True,
) -> dict[str, Any] | None:
    """`graph.nodes` with each node's metadata key `old` moved to `new`, and the own cache of
    each compiled subgraph added as a node replaced by `cache(its cache)`, or None if no
    node (nor any subgraph added as a node, recursively) has `old` or a cache of its own.

    Nothing is mutated: a node is copied with `PregelNode.copy`, and a compiled subgraph
    added as a node (the node's runnable is the graph) is rebuilt with its own copied nodes
    and cache and put in the node copy's `bound` (and `subgraphs`, where LangGraph lists
    it: not a `checkpointer=False` graph, whose declarations the static tree does not see
    and which are left as they are). A subgraph a node's function calls, or one inside a
    composition (`sub | step`: found by langgraph 1.2.24's `find_subgraph_pregel`), cannot
    be swapped: it keeps its metadata and cache. (langgraph 1.2.24 `PregelNode`)
    """
    nodes: dict[str, Any] = dict(graph.nodes)
    changed = False
    for name, node in graph.nodes.items():
        update: dict[str, Any] = {}
        metadata = node.metadata or {}
        if rename and old in metadata:
            update["metadata"] = {
                **{k: v for k, v in metadata.items() if k != old},
                new: metadata[old],
            }
        sub = added_subgraph(node)
        if sub is not None:
            listed = bool(node.subgraphs)
            sub_nodes = node_copies(sub, old, new, cache, rename=rename and listed)
            sub_cache = sub.cache if cache is None or sub.cache is None else cache(sub.cache)
            if sub_nodes is not None or sub_cache is not sub.cache:
                sub_copy = rebuild_as(sub, type(sub), sub_nodes)
                sub_copy.cache = sub_cache
                update["bound"] = sub_copy
                update["subgraphs"] = [sub_copy] if listed else []
        if update:
            nodes[name] = node.copy(update)
            changed = True
    return nodes if changed else None


def added_subgraph(node: Any) -> Any:
    """The compiled graph a node (a `PregelNode`) runs as itself (`add_node(name, compiled)`),
    whether or not LangGraph lists it in the node's `subgraphs` (it leaves out a
    `checkpointer=False` graph); None for any other node. (langgraph 1.2.24)"""
    bound = getattr(node, "bound", None)
    return bound if isinstance(bound, _pregel_main.Pregel) else None


def added_as_graph(node: Any) -> bool:
    """Whether a compiled graph's node (a `PregelNode`) runs a graph added as the node
    itself (`add_node(name, compiled)`), not a function that may invoke graphs, of which
    `get_subgraphs` lists the first it finds. (langgraph 1.2.19-1.2.24 `PregelNode.bound`;
    `check_shapes` checks that `PregelNode` takes it)"""
    return isinstance(getattr(node, "bound", None), PregelProtocol)


def static_subgraphs(graph: Any) -> list[tuple[tuple[str, ...], Any]]:
    """(path segments, subgraph) of every subgraph `get_subgraphs` finds, recursively.

    It finds a compiled graph added as a node, or one a node's runnable lists in its
    `deps` (langgraph 1.2.24 `find_subgraph_pregel`); not one a node's function invokes.
    A `RemoteGraph` is found too (any `PregelProtocol`), but not looked into: see
    `opaque_graph`.
    """
    return [(tuple(ns.split(NS_SEP)), g) for ns, g in graph.get_subgraphs(recurse=True)]


def opaque_graph(graph: Any) -> bool:
    """Whether a subgraph's inside is not known before a run: a `PregelProtocol` that is no
    local compiled graph (`RemoteGraph`, which runs on a LangGraph server), with no channels
    or nodes to read."""
    return isinstance(graph, PregelProtocol) and not isinstance(graph, _pregel_main.Pregel)


def task_has_channel(config: Mapping[str, Any], key: str) -> bool | None:
    """Whether the graph running this task has channel `key`; None outside a graph.

    Asks `local_read`, the reader langgraph puts in every task's config under
    `CONFIG_KEY_READ` (what conditional edges read state with): it raises KeyError for an
    unknown channel and EmptyChannelError for a known one with no value. (langgraph 1.2.24;
    tests/core/test_subagent_instructions.py checks both answers.)
    """
    read = (config.get(CONF) or {}).get(CONFIG_KEY_READ)
    if not callable(read):
        return None
    try:
        read(key)
    except KeyError:
        return False
    except EmptyChannelError:
        return True
    return True


def task_state() -> dict[str, Any] | None:
    """The channel values the task running now reads, None outside a graph's task.

    What a tools node given a `Send` of bare tool calls reads its graph's state with: the
    `partial(local_read, scratchpad, channels, managed, task)` under `CONFIG_KEY_READ`,
    asked for every channel it binds. Pointers only, nothing copied. (langgraph
    1.2.19-1.2.24; `check_shapes` checks `local_read`'s parameters and that a Send task's
    config binds it.)

    Raises:
        RuntimeError: if the task's config holds another reader (fails closed).
    """
    config = var_child_runnable_config.get()
    read = (config.get(CONF) or {}).get(CONFIG_KEY_READ) if config else None
    if read is None:
        return None
    if not (isinstance(read, partial) and read.func is _local_read and len(read.args) == 4):
        # Fail closed: without the state, who made a tool call cannot be known.
        raise RuntimeError(
            f"lg_visibility cannot read a task's state on langgraph {LANGGRAPH_VERSION}: "
            f"its config holds {read!r} under CONFIG_KEY_READ, not partial(local_read, "
            "scratchpad, channels, managed, task). Install a supported langgraph (see "
            "pyproject.toml) or an lg-visibility release that supports yours."
        )
    return cast("dict[str, Any]", read(list(read.args[1]), False))


def context_run_id() -> UUID | None:
    """The run whose body is running in this context, None outside one.

    langchain-core runs a runnable's body (a tool's too) in a context whose child config
    holds that run's child callback manager (`set_config_context(patch_config(config,
    callbacks=run_manager.get_child()))`), whose `parent_run_id` is the run. A run the body
    starts with a config of its own, such as the one LangChain injects into a tool
    (`config: RunnableConfig`, `runtime.config`: the tools node's), names another parent;
    the context still names the tool. (langchain-core 1.8.3; `check_shapes` checks that
    `BaseTool.run` and `arun` set it.)
    """
    config = var_child_runnable_config.get()
    if not config:
        return None
    return getattr(config.get("callbacks"), "parent_run_id", None)


def has_saved_state(graph: Any, merged: RunnableConfig) -> bool:
    """Whether `graph.get_state(merged)` has a saver and a thread to read, `merged` the
    config a run of `graph` runs with (`ensure_config(graph.config, config)`): the saver
    that run uses (`Pregel._resolve_checkpointer`: none for `checkpointer=False`, a
    parent's lent through the config, else the graph's own), and a thread id. (langgraph
    1.2.19-1.2.24; `check_shapes` checks the method.)"""
    if merged.get(CONF, {}).get("thread_id") is None:
        return False
    try:
        saver = graph._resolve_checkpointer(merged)
    except RuntimeError:
        return False  # `checkpointer=True` on a root graph: the run itself refuses
    return isinstance(saver, BaseCheckpointSaver)


def with_run_cache(
    graph: Any, config: Any, merged: Any, scoped: Callable[[Any], Any], subgraphs: bool
) -> tuple[Any, Any]:
    """(graph, config) of a run whose node caches are `scoped(cache)`: the one the run would
    use (`Pregel._defaults`: CONFIG_KEY_CACHE in the config it runs with, which `merged`
    is, `ensure_config(graph.config, config)` and so any a parent runnable lends; else the
    graph's own), and with `subgraphs`, the own cache of each compiled subgraph added as a
    node (`_subgraph_caches`). Unchanged where there is none. A graph's cache is replaced in
    a copy, a lent one in the call's `configurable`, which the merge lets win (and which
    LangGraph hands every subgraph's task, as it would the lent cache).
    (langgraph 1.2.19-1.2.24; `check_shapes` checks `_defaults`.)"""
    if subgraphs:
        graph = _subgraph_caches(graph, scoped)
    lent = merged.get(CONF) or {}
    if CONFIG_KEY_CACHE in lent:
        cache = lent[CONFIG_KEY_CACHE]
        if cache is None:
            return graph, config
        conf = {**((config or {}).get(CONF) or {}), CONFIG_KEY_CACHE: scoped(cache)}
        return graph, {**(config or {}), CONF: conf}
    if graph.cache is None:
        return graph, config
    graph = copy.copy(graph)
    graph.cache = scoped(graph.cache)
    return graph, config


def has_subgraph_cache(graph: Any) -> bool:
    """Whether a compiled subgraph added as a node of `graph` (recursively) has a cache of
    its own (which `with_run_cache` then scopes for each run)."""
    for node in graph.nodes.values():
        sub = added_subgraph(node)
        if sub is not None and (sub.cache is not None or has_subgraph_cache(sub)):
            return True
    return False


def _subgraph_caches(graph: Any, scoped: Callable[[Any], Any]) -> Any:
    """`graph`, or a copy whose compiled subgraphs added as nodes (recursively) are copies
    whose own cache is `scoped(cache)`, in node copies (`PregelNode.copy`), as
    `node_copies` makes them. (langgraph 1.2.24 `PregelNode`)"""
    changed: dict[str, Any] = {}
    for name, node in graph.nodes.items():
        sub = added_subgraph(node)
        if sub is None:
            continue
        run_sub = _subgraph_caches(sub, scoped)
        if sub.cache is not None:
            if run_sub is sub:
                run_sub = copy.copy(sub)
            run_sub.cache = scoped(sub.cache)
        if run_sub is not sub:
            listed = [run_sub] if node.subgraphs else []
            changed[name] = node.copy({"bound": run_sub, "subgraphs": listed})
    if not changed:
        return graph
    graph = copy.copy(graph)
    graph.nodes = {**graph.nodes, **changed}
    return graph


def registers_node_run(
    handler: Any, metadata: Mapping[str, Any] | None, tags: Any, name: str | None
) -> bool:
    """Whether LangGraph's messages handler `handler` (a StreamMessagesHandler) takes a
    chain run as a node run whose output it sends at its end: its `on_chain_start` test.
    (langgraph 1.2.24; `check_shapes` checks the names it reads.)"""
    if not metadata or name != metadata.get("langgraph_node"):
        return False
    if tags and TAG_HIDDEN in tags:
        return False
    ns = graph_namespace(metadata)
    return bool(handler.subgraphs or not ns or ns == handler.parent_ns)


class _IdNamer:
    """LangGraph's walk of a node run's output at its end (`on_chain_end`, through
    `_find_and_emit_messages`), with an `_emit` that only gives an id-less message the id
    LangGraph's `_emit` gives it before sending it. Nothing is sent."""

    __slots__ = ("metadata",)

    _find_and_emit_messages = StreamMessagesHandler._find_and_emit_messages

    def __init__(self, run_id: Any) -> None:
        self.metadata: dict[Any, Any] = {run_id: ((), {})}

    def _emit(self, meta: Any, message: BaseMessage, *, dedupe: bool = False) -> None:
        if message.id is None:
            message.id = str(uuid4())


def name_unsent_messages(output: Any, run_id: Any) -> None:
    """Give each id-less message of a node run's `output` the id LangGraph's messages handler
    would give it as it sent it (`registers_node_run`), without sending anything: an
    internal node's messages then carry an id from its end on, as the raw graph's do, in
    its write, the node cache's entry (stored before `add_messages` names them) and state.
    (langgraph 1.2.24; `check_shapes` checks the walk.)"""
    StreamMessagesHandler.on_chain_end(cast(Any, _IdNamer(run_id)), output, run_id=run_id)


def state_keys(graph: Any) -> frozenset[str]:
    """The state keys of a compiled graph: its channels without LangGraph's own
    (`__start__`, `branch:to:...`). (langgraph 1.2.24)"""
    return frozenset(k for k in graph.channels if not k.startswith("__") and ":" not in k)


def message_keys(graph: Any) -> frozenset[str]:
    """The state keys of a compiled graph that `add_messages` reduces (a `MessagesState`'s
    `messages`, any `Annotated[list, add_messages]`), where it makes message objects of
    dicts, pairs and strings. (langgraph 1.2.24: a reducer key is a `BinaryOperatorAggregate`
    channel whose `operator` is the reducer; `check_shapes` checks the attribute.)"""
    found = []
    for key, channel in graph.channels.items():
        if isinstance(channel, BinaryOperatorAggregate):
            operator_ = getattr(channel, "operator", None)
            if isinstance(operator_, partial):
                operator_ = operator_.func
            if operator_ is add_messages:
                found.append(key)
    return frozenset(found)


def output_keys(graph: Any) -> frozenset[str]:
    """The keys a compiled graph returns to the graph that runs it. (langgraph 1.2.24)"""
    out = graph.output_channels
    return frozenset([out] if isinstance(out, str) else out)


KINDS: dict[type, int] = {}
"""Class -> what `iter_messages` makes of its instances (`MESSAGE`, `_COMMAND`, ...), and
the output filter's test of an item in a state list (`MESSAGE` or not): one dict lookup per
value, where `isinstance` against `BaseMessage`, `BaseModel` or `Sequence` (ABC checks) would
cost most of the loop. Read as `KINDS.get(cls) or kind_of(cls)`. `iter_messages` keys it by
`__class__`, as `isinstance` is; it starts over past 4096 classes (classes made per call).
A class registered as a `Sequence` after its first instance was seen keeps its first answer."""
_OTHER, MESSAGE, _COMMAND, _SEQUENCE, _DICT, _DICT_SEQUENCE, _MODEL, _DATACLASS = range(1, 9)
_SEQUENCES = (_SEQUENCE, _DICT_SEQUENCE)


def kind_of(cls: type) -> int:
    """What `iter_messages` makes of `cls`, found once per class and kept in `KINDS`."""
    if issubclass(cls, BaseMessage):
        kind = MESSAGE
    elif issubclass(cls, Command):
        kind = _COMMAND
    elif issubclass(cls, (str, bytes)):
        kind = _OTHER
    elif issubclass(cls, Sequence):
        kind = _DICT_SEQUENCE if issubclass(cls, dict) else _SEQUENCE
    elif issubclass(cls, dict):
        kind = _DICT
    elif issubclass(cls, BaseModel):
        kind = _MODEL
    elif is_dataclass(cls):
        kind = _DATACLASS
    else:
        kind = _OTHER
    if len(KINDS) >= 4096:
        KINDS.clear()
    KINDS[cls] = kind
    return kind


def _state_items(obj: Any, kind: int) -> Sequence[tuple[str, Any]]:
    """(key, value) of a state's top-level fields: a dict's, a Pydantic model's, a
    dataclass's; none for anything else."""
    if kind == _DICT:
        return list(obj.items())
    if kind == _MODEL:
        return fields_with_values(obj, type(obj).model_fields)
    if kind == _DATACLASS:
        return fields_with_values(obj, [f.name for f in fields(obj)])
    return ()


_UNSET: Any = object()


def fields_with_values(obj: Any, names: Iterable[str]) -> list[tuple[str, Any]]:
    """(name, value) of the fields of `obj` named `names` that hold a value: a dataclass's
    `field(init=False)` that nothing set has none (nor has a field `model_construct` left
    out), and holds no message."""
    return [(name, v) for name in names if (v := getattr(obj, name, _UNSET)) is not _UNSET]


def _state_fields(state: Any) -> dict[str, Any]:
    """A state's top-level fields as they are now: a dict itself, a Pydantic model's or a
    dataclass's as a dict (empty for anything else)."""
    if type(state) is dict:
        return state
    return dict(_state_items(state, KINDS.get(state.__class__) or kind_of(state.__class__)))


def _state_values(obj: Any, kind: int) -> Sequence[Any]:
    if kind == _DICT:
        return list(obj.values())  # the common case, without the pairs
    return [value for _, value in _state_items(obj, kind)]


def _backwards(items: Any) -> Iterator[Any]:
    # What iterating `items` gives, last first (a dict that is also a Sequence iterates its
    # own way, which `reversed` would not follow).
    return reversed(items) if type(items) is list or type(items) is tuple else reversed([*items])


def _is_key_value(item: Any) -> bool:
    """A `(key, value)` pair of an update given as pairs (`Command(update=[...])`)."""
    return type(item) is tuple and len(item) == 2 and isinstance(item[0], str)


def iter_messages(value: Any, *, reverse: bool = False) -> Iterator[BaseMessage]:
    """Messages in a node's input or output, where LangGraph's handler looks for them.

    A message, a sequence of messages, a state (dict, Pydantic model, dataclass) whose
    top-level values are messages or sequences of them, a `Command`'s update, or a list of
    any of these. (Mirrors `StreamMessagesHandler._find_and_emit_messages` and
    `on_chain_end`, langgraph 1.2.24.) With `reverse`, the same messages last first: the
    last of a kind is found without walking a long history.
    """
    kinds = KINDS
    order: Callable[[Any], Any] = _backwards if reverse else iter
    cls = value.__class__
    kind = kinds.get(cls) or kind_of(cls)
    if kind == MESSAGE:
        yield value
        return
    if kind == _COMMAND:
        update = value.update
        if isinstance(update, (list, tuple)) and all(map(_is_key_value, update)):
            # an update given as (key, value) pairs: each value, as a state's
            update = {str(i): item for i, (_, item) in enumerate(update)}
        if update is not None:
            yield from iter_messages(update, reverse=reverse)
        return
    if kind == _SEQUENCE or kind == _DICT_SEQUENCE:
        for item in order(value):
            cls = item.__class__
            item_kind = kinds.get(cls) or kind_of(cls)
            if item_kind == MESSAGE:
                yield item
            elif item_kind == _COMMAND or item_kind == _DICT or item_kind == _DICT_SEQUENCE:
                yield from iter_messages(item, reverse=reverse)
        return
    for item in order(_state_values(value, kind)):
        cls = item.__class__
        item_kind = kinds.get(cls) or kind_of(cls)
        if item_kind == MESSAGE:
            yield item
        elif item_kind == _SEQUENCE or item_kind == _DICT_SEQUENCE:
            for inner in order(item):
                cls = inner.__class__
                if (kinds.get(cls) or kind_of(cls)) == MESSAGE:
                    yield inner


def last_message(value: Any, cls: type[M]) -> M | None:
    """The last `cls` message in a node's input, found from the end: what
    `next(m for m in iter_messages(value, reverse=True) if isinstance(m, cls))` finds, read
    in place for a plain dict state (every node start reads it). `cls` is a message class,
    so an instance of it is what `iter_messages` takes for a message."""
    if type(value) is not dict:
        return next((m for m in iter_messages(value, reverse=True) if isinstance(m, cls)), None)
    kinds = KINDS
    for item in reversed(value.values()):
        # (an instance of `cls` is a MESSAGE: the ABC check only where it can answer yes)
        kind = kinds.get(item.__class__) or kind_of(item.__class__)
        if kind == MESSAGE:
            if isinstance(item, cls):
                return item
        elif kind == _SEQUENCE or kind == _DICT_SEQUENCE:
            for inner in _backwards(item):
                if isinstance(inner, cls):
                    return inner
    return None


def called_task_graph_ns(metadata: Mapping[str, Any], task_ns: str) -> str | None:
    """For the run of a functional-API task (a `@task` called from a node, an entrypoint
    or another task), the checkpoint namespace of the graph whose stream carries its task
    events; None for any other run.

    LangGraph nests such a task's namespace under its caller's (`app:<id>|research:<id>`)
    and marks its path `(PUSH, <the caller's path>, <index>, True)`, but its graph's loop
    streams its `tasks`, `updates` and debug events at the graph's own namespace, named by
    the task. (langgraph 1.2.19-1.2.24 `prepare_push_task_functional`)"""
    path = metadata.get("langgraph_path")
    depth = 0
    while type(path) is tuple and len(path) == 4 and path[0] == PUSH and path[3] is True:
        depth += 1
        path = path[1]
    if not depth:
        return None
    segments = task_ns.split(NS_SEP)
    return NS_SEP.join(segments[: -(depth + 1)]) if len(segments) > depth else None


def is_pull_task(metadata: Mapping[str, Any]) -> bool:
    """Whether a node run's task reads its input from the graph's channels (a node run on
    an edge), not from a `Send` (a push task, whose input its sender built). (langgraph
    1.2.24 puts the task's triggers in `langgraph_triggers`; a push task's is `PUSH`.)"""
    triggers = metadata.get("langgraph_triggers")
    return isinstance(triggers, (list, tuple)) and bool(triggers) and PUSH not in triggers


def received_state(inputs: Any) -> dict[str, Any] | None:
    """What `new_messages` compares a node's output with: for a state (a node's input
    read from the channels: a dict, a Pydantic model, a dataclass), each key's value, any
    sequence as a tuple of its items (the node may change it in place); None for any other
    input. It holds pointers only, and never reads a message."""
    kinds = KINDS
    if type(inputs) is dict:  # the common case, without the pairs
        return {
            key: tuple(v) if (kinds.get(v.__class__) or kind_of(v.__class__)) in _SEQUENCES else v
            for key, v in inputs.items()
        }
    kind = kinds.get(inputs.__class__) or kind_of(inputs.__class__)
    if kind != _MODEL and kind != _DATACLASS:
        return None  # (a dict subclass is read whole, as any other input)
    received: dict[str, Any] = {}
    for key, v in _state_items(inputs, kind):
        v_kind = kinds.get(v.__class__) or kind_of(v.__class__)
        received[key] = tuple(v) if v_kind == _SEQUENCE or v_kind == _DICT_SEQUENCE else v
    return received


def added_in_place(state: Any, arrived: dict[str, Any]) -> list[BaseMessage]:
    """The messages a node's input `state` holds now in a sequence that it did not hold
    anywhere as it arrived (`arrived`, from `received_state`): what the node put there in
    place. By pointer: a sequence with the same items as it arrived is passed over in one
    pass; in one that changed, only objects that are none of the received ones count, so a
    node that trims, reorders or rebinds what it received adds nothing."""
    now = _state_fields(state)
    kinds = KINDS
    held: set[int] | None = None
    found: list[BaseMessage] = []
    for key, before in arrived.items():
        if type(before) is not tuple:
            continue
        item = now.get(key, before)
        if item is before:
            continue
        if (kinds.get(item.__class__) or kind_of(item.__class__)) not in _SEQUENCES:
            continue  # rebound to something else: the node's own dict, not the state
        if len(item) == len(before) and all(map(operator.is_, item, before)):
            continue
        if held is None:  # everything it received, under any key
            held = set()
            for value in arrived.values():
                if type(value) is tuple:
                    held.update(map(id, value))
                else:
                    held.add(id(value))
        for inner in item:
            if id(inner) not in held and (
                (kinds.get(inner.__class__) or kind_of(inner.__class__)) == MESSAGE
            ):
                found.append(inner)
    return found


def top_lists(state: Any) -> list[Any]:
    """The mutable sequences at the top level of node input `state` (a dict, a Pydantic
    model, a dataclass): a channel's own list among them, which LangGraph hands every node
    that reads it in a step (and a subgraph whose channel keeps what it is given)."""
    kinds = KINDS
    return [
        v
        # (a copy first: another thread's node may add keys to its own input meanwhile)
        for v in list(_state_fields(state).values())
        if type(v) is not tuple and (kinds.get(v.__class__) or kind_of(v.__class__)) in _SEQUENCES
    ]


def received_prefix(items: Sequence[Any], before: tuple[Any, ...]) -> int:
    """How many leading items of `items` are the very objects `before` starts with (the
    first pair that differs ends it), found by pointer. Mostly all of `before` is there
    (the node kept what it received), which one pass that stops at a difference finds."""
    n = len(before)
    if len(items) >= n and all(map(operator.is_, items, before)):
        return n
    same = list(map(operator.is_, items, before))
    return same.index(False) if False in same else len(same)


def new_messages(value: Any, received: dict[str, Any] | None) -> list[BaseMessage]:
    """`iter_messages(value)` less, for a dict state `value`, the messages that are the very
    objects the node received at the same place (`received`, from `received_state`): a
    key's message or tuple that is the input's own, and the leading items of a list that
    start as the input's sequence under that key did (`add_messages` returns the old
    objects, then the new ones). Any other container is read whole.

    A node's output, and the input of a chain it runs, are mostly what the node received: a
    long history is skipped by comparing pointers, without reading a message (the objects
    of a freshly read history are out of the CPU cache). A list, not a generator: at most
    node ends it is empty."""
    if received is None or type(value) is not dict:
        return list(iter_messages(value))
    kinds = KINDS
    found: list[BaseMessage] = []
    for key, item in value.items():
        # What `iter_messages` finds at one key of a state: the message, or a sequence's.
        kind = kinds.get(item.__class__) or kind_of(item.__class__)
        if kind == MESSAGE:
            if item is not received.get(key, _UNBOUND):
                found.append(item)
            continue
        if kind != _SEQUENCE and kind != _DICT_SEQUENCE:
            continue
        before = received.get(key, _UNBOUND)
        if type(before) is tuple and kind == _SEQUENCE and type(item) is not tuple:
            items = item if type(item) is list else list(item)  # a list subclass, a deque
            skip = received_prefix(items, before)
            if skip == len(items):
                continue  # nothing past what it received (the common case)
            item = items[skip:] if skip else items
        elif item is before and type(item) is tuple:
            continue
        for inner in item:
            if (kinds.get(inner.__class__) or kind_of(inner.__class__)) == MESSAGE:
                found.append(inner)
    return found


def parent_command(error: BaseException) -> Command[Any] | None:
    """The `Command` a node sends to its parent graph (`Command(graph=Command.PARENT)`),
    if `error` carries one: LangGraph raises it out of the node's run as `ParentCommand`,
    and the parent's task applies its update. (langgraph 1.2.19-1.2.24 `errors.py`)"""
    if isinstance(error, ParentCommand) and error.args and isinstance(error.args[0], Command):
        return error.args[0]
    return None


# The roles (or `type`s) langchain-core's `convert_to_messages` makes a message of, as
# `add_messages` calls it on a node's update (langchain-core 1.8 `_convert_to_message`).
_MESSAGE_ROLES = frozenset(
    {"human", "user", "ai", "assistant", "system", "developer", "function", "tool"}
)


def message_fields(item: Any) -> dict[str, Any] | None:
    """For a message written as a dict, which `add_messages` turns into a message object
    (`{"role": "user", "content": ...}`, `{"type": "ai", ...}`, or LangChain's
    `{"lc": 1, "type": "constructor", "kwargs": {...}}` envelope), the dict of its fields,
    whose `response_metadata` the object will carry; None for anything else."""
    if type(item) is not dict or ("content" not in item and "kwargs" not in item):
        return None
    if item.get("lc") == 1 and item.get("type") == "constructor":
        fields = item.get("kwargs")
        return fields if type(fields) is dict and "content" in fields else None
    role = item.get("role", item.get("type"))
    return item if "content" in item and role in _MESSAGE_ROLES else None


def _is_pair(item: Any) -> bool:
    """A `(role, content)` pair `convert_to_messages` makes a message of."""
    return _is_key_value(item) and item[0] in _MESSAGE_ROLES


def written_message_dicts(
    value: Any,
    received: dict[str, Any] | None,
    keys: frozenset[str] | None,
    inputs: Any,
    sent: dict[int, Any] | None = None,
) -> list[dict[str, Any]]:
    """The messages a node writes as dicts (`message_fields`) under a key `add_messages`
    reduces, which makes message objects of them after the node ends: the key's value, or
    the new items of the key's list (the leading items it shares with the input's sequence
    under that key, `received`, skipped by pointer), in a dict output or a `Command`'s
    update (a dict, or (key, value) pairs), or in a list of Commands.

    `keys`: the node's graph's `message_keys`; None where the graph is not known before the
    run (one a node's function invokes), where a key counts if the node's `inputs` hold
    messages under it. The `(role, content)` pairs and strings in such a list are first
    replaced, in place, by the dicts `add_messages` reads the same way
    (`_convert_to_message`): a dict can carry a tag, a pair or a string cannot;
    `add_messages` still makes a new object (and id) of it at every run. A pair an internal
    node sent (`sent`: id -> object, the run's `internal_likes`) has its dict recorded
    there too. Another key's list from the node's `inputs` (that
    key's state) is never changed. (A bare pair or string as the key's whole value is read
    by LangGraph before the node ends: it stays as written.)"""
    if isinstance(value, Command):
        value = value.update
    if type(value) is list or type(value) is tuple:
        found: list[dict[str, Any]] = []
        for item in value:
            if isinstance(item, Command):
                found += written_message_dicts(item, None, keys, inputs, sent)
            elif _is_key_value(item):
                found += written_message_dicts({item[0]: item[1]}, None, keys, inputs, sent)
        return found
    if type(value) is not dict:
        return []
    found = []
    for key in [k for k in keys if k in value] if keys is not None else list(value):
        item = value[key]
        cls = item.__class__
        if cls is not dict and cls is not list and cls is not tuple:
            continue
        if keys is None:
            held = inputs.get(key) if type(inputs) is dict else None
            if not (isinstance(held, (list, tuple)) and held and isinstance(held[-1], BaseMessage)):
                continue
        if cls is dict:
            if message_fields(item) is not None:
                found.append(item)
            continue
        start = 0
        before = received.get(key) if received is not None else None
        if type(before) is tuple:
            start = received_prefix(item, before)
            if start == len(item):
                continue  # nothing past what it received (the common case)
        likes: list[int] = []  # positions of the pairs and strings
        for i, inner in enumerate(item[start:] if start else item, start):
            inner_cls = inner.__class__
            if inner_cls is dict:
                if message_fields(inner) is not None:
                    found.append(inner)
            elif inner_cls is str or inner_cls is tuple:
                likes.append(i)
        if not likes or cls is not list:
            continue
        if type(inputs) is dict and any(held is item and k != key for k, held in inputs.items()):
            continue  # another key's state (the key's own list: only its new items)
        for i in likes:
            inner = item[i]
            from_sent = sent is not None and id(inner) in sent
            like = _as_message_dict(inner)  # (a string or a tuple: a pair, or not one)
            if like is None:
                continue
            item[i] = like  # the same message to add_messages, and it can carry a tag
            found.append(like)
            if from_sent and sent is not None:
                sent[id(like)] = like
    return found


def sent_message_likes(
    send: Send,
    inputs: Any,
    received: dict[str, Any] | None,
    into: Collection[str] = (),
    messages: Collection[str] | None = (),
    exempt: Collection[str] = (),
) -> tuple[list[Any], list[dict[str, Any]]]:
    """The messages a node sends as dicts or `(role, content)` pairs in a `Send`'s input (a
    key's value, or the items of a key's list or tuple), which reaches its node as written:
    not those it received (by pointer: its input as it arrived, `received`, if kept, else
    its `inputs` now). Each found in a list the node made or appended to (or as a key's
    whole value) is replaced there by an equal copy, so that the one returned is this
    Send's alone (equal constant tuples are one object in CPython).

    `into`: the keys the receiving graph's `add_messages` reduces (a compiled subgraph's),
    whose nodes see only the objects it makes. There each such message, a string too, and
    the key's whole value if it is one, becomes the dict `add_messages` reads the same way
    (`_convert_to_message`), returned apart too: a dict can carry a tag into the object
    made of it. This is done in copies (the Send's input, a Pydantic or dataclass one too,
    and the key's list), which the Send is given: another Send may share them.

    `messages`: the keys that hold messages in the graph of the receiving node, under which
    a pair that is the key's whole value counts as one too (elsewhere it may be any pair
    of strings, which the run would then drop wherever it shows); None where that graph
    is not known before the run: then under any key but those in `exempt` (fail closed).

    Returns:
        (every message found, the dicts among them under a key of `into`).
    """
    arg = send.arg
    model = None  # a Pydantic or dataclass input: its fields are read into a dict copy
    if not isinstance(arg, dict):
        if not into or kind_of(arg.__class__) not in (_MODEL, _DATACLASS):
            return [], []
        model, arg = arg, dict(_state_fields(arg))
    held: set[int] = set()
    for value in (received if received is not None else inputs or {}).values():
        if type(value) is list or type(value) is tuple:
            held.update(map(id, value))
            if received is None:
                held.add(id(value))
        else:
            held.add(id(value))
    if model is None and any(key in arg for key in into):
        # This Send's own, its lists replaced below: a plain dict (a subgraph reads its
        # input as a mapping; a dict subclass's own copy may not take writes, or be one).
        send.arg = arg = dict(arg)
    found: list[Any] = []
    taggable: list[dict[str, Any]] = []
    changed: dict[str, Any] = {}
    for key, item in arg.items():
        reduced = key in into
        if id(item) in held or (model is not None and not reduced):
            continue
        if type(item) is dict or type(item) is str or _is_pair(item):
            like: Any = _as_message_dict(item) if reduced else item
            if type(like) is dict and message_fields(like) is not None:
                like = dict(like) if like is item else like
                if reduced:
                    taggable.append(like)
            elif (
                like is item
                and (key in messages if messages is not None else key not in exempt)
                and _is_pair(item)
            ):
                like = (item[0], item[1])
            else:
                continue
            try:
                arg[key] = like
            except Exception:  # a dict subclass that refuses writes: the item itself,
                if type(item) is tuple:  # unless it may be a constant other code shares
                    continue
                like = item
            changed[key] = like
            found.append(like)
            continue
        if type(item) is not list and type(item) is not tuple:
            continue
        if reduced and type(item) is list:
            arg[key] = changed[key] = item = list(item)
        for i, inner in enumerate(item):
            if id(inner) in held:
                continue
            if type(inner) is dict and message_fields(inner) is not None:
                made: Any = dict(inner)
            elif reduced and (type(inner) is str or _is_pair(inner)):
                made = _as_message_dict(inner)
            elif _is_pair(inner):
                made = (inner[0], inner[1])
            else:
                continue
            if type(item) is list:
                item[i] = inner = made
            found.append(inner)
            if reduced and type(item) is list:
                taggable.append(inner)
    if model is not None and taggable:
        send.arg = _with_fields(model, changed)
    return found, taggable


def _with_fields(model: Any, changed: dict[str, Any]) -> Any:
    """A shallow copy of a Pydantic model or dataclass with `changed` fields set as given
    (not validated: a message dict stays a dict, as the state would hold it)."""
    if isinstance(model, BaseModel):
        return model.model_copy(update=changed)
    twin = copy.copy(model)
    for name, value in changed.items():
        object.__setattr__(twin, name, value)  # a frozen dataclass too
    return twin


def _as_message_dict(like: Any) -> dict[str, Any] | None:
    """The dict `add_messages` reads as it reads `like`: a string (a human message), a
    `(role, content)` pair, or a dict (itself)."""
    if type(like) is str:
        return {"type": "human", "content": like}
    if type(like) is dict:
        return like
    if _is_pair(like):
        return {"role": like[0], "content": like[1]}
    return None


def sent_inputs(value: Any) -> Iterator[Send]:
    """The `Send`s in a node's output or a conditional edge's: a Send, a list of them
    (beside node names), or a `Command`'s `goto`. What a node sends is its own product,
    whoever receives it."""
    if isinstance(value, Send):
        yield value
    elif isinstance(value, Command):
        yield from sent_inputs(value.goto)
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, (Send, Command)):
                yield from sent_inputs(item)


# -- langchain-core's astream_events v2 ----------------------------------------------------
# A private contact with langchain-core (checked against 1.8.3), which the project does not
# pin tightly: unlike the LangGraph contacts above, a shape it does not recognise does not
# refuse the import. `astream_events_v2_with` answers None, and `_wrap` enforces v2 the way
# it enforces v1 (a tagging callback beside LangChain's handler, then the event filter):
# correct, a few points slower per token.

import langchain_core.runnables.base as _lc_runnable_base  # noqa: E402
import langchain_core.tracers.event_stream as _lc_event_stream  # noqa: E402
from langchain_core.callbacks import AsyncCallbackHandler as _AsyncCallbackHandler  # noqa: E402

_EVENTS_HANDLER_NAME = "_AstreamEventsCallbackHandler"
"""The global of `_astream_events_implementation_v2` that builds the events handler."""

EVENTS_HANDLER_METHODS: dict[str, tuple[str, ...]] = {
    "on_chat_model_start": (
        "self", "serialized", "messages", "run_id", "tags", "parent_run_id", "metadata",
        "name", "kwargs",
    ),
    "on_llm_start": (
        "self", "serialized", "prompts", "run_id", "tags", "parent_run_id", "metadata",
        "name", "kwargs",
    ),
    "on_llm_new_token": ("self", "token", "chunk", "run_id", "parent_run_id", "kwargs"),
    "on_llm_end": ("self", "response", "run_id", "kwargs"),
    "on_chain_start": (
        "self", "serialized", "inputs", "run_id", "tags", "parent_run_id", "metadata",
        "run_type", "name", "kwargs",
    ),
    "on_chain_end": ("self", "outputs", "run_id", "inputs", "kwargs"),
    "on_tool_start": (
        "self", "serialized", "input_str", "run_id", "tags", "parent_run_id", "metadata",
        "name", "inputs", "kwargs",
    ),
    "on_tool_end": ("self", "output", "run_id", "kwargs"),
    "on_tool_error": ("self", "error", "run_id", "parent_run_id", "tags", "kwargs"),
    "on_retriever_start": (
        "self", "serialized", "query", "run_id", "parent_run_id", "tags", "metadata", "name",
        "kwargs",
    ),
    "on_custom_event": ("self", "name", "data", "run_id", "tags", "metadata", "kwargs"),
}  # fmt: skip
"""The events handler's methods our subclass overrides, with their parameters (1.8.3)."""


def events_shape_problems(impl: Any, handler: Any, runnable_events: Any = None) -> list[str]:
    """What keeps the per-call events handler swap from being made, [] when nothing.

    `impl` is langchain-core's `_astream_events_implementation_v2`, `handler` its
    `_AstreamEventsCallbackHandler`, `runnable_events` `Runnable._astream_events_v1_v2`
    (which must be what calls `impl` for v2, so that calling our copy instead is what
    `Runnable.astream_events` would have run). (langchain-core 1.8.3)
    """
    problems: list[str] = []
    if not isinstance(impl, types.FunctionType):
        return [f"_astream_events_implementation_v2 is {type(impl).__name__}, not a function"]
    if not inspect.isasyncgenfunction(impl):
        problems.append("_astream_events_implementation_v2 is no longer an async generator")
    if _EVENTS_HANDLER_NAME not in impl.__code__.co_names:
        problems.append(f"_astream_events_implementation_v2 no longer names {_EVENTS_HANDLER_NAME}")
    if list(inspect.signature(impl).parameters)[:3] != ["runnable", "value", "config"]:
        problems.append(f"_astream_events_implementation_v2{inspect.signature(impl)} changed")
    code = getattr(runnable_events, "__code__", None)
    if runnable_events is not None and (
        code is None or "_astream_events_implementation_v2" not in _names(code)
    ):
        problems.append("Runnable._astream_events_v1_v2 no longer calls the v2 implementation")
    if not isinstance(handler, type) or not issubclass(handler, _AsyncCallbackHandler):
        problems.append(f"{_EVENTS_HANDLER_NAME} is not an async callback handler class")
        return problems
    send = getattr(handler, "_send", None)
    if send is None or inspect.iscoroutinefunction(send):
        problems.append(f"{_EVENTS_HANDLER_NAME}._send is gone or async")
    elif tuple(inspect.signature(send).parameters) != ("self", "event", "event_type"):
        problems.append(f"{_EVENTS_HANDLER_NAME}._send{inspect.signature(send)} changed")
    for method, params in EVENTS_HANDLER_METHODS.items():
        fn = getattr(handler, method, None)
        if fn is None or not inspect.iscoroutinefunction(fn):
            problems.append(f"{_EVENTS_HANDLER_NAME}.{method} is gone or not async")
        elif tuple(inspect.signature(fn).parameters) != params:
            problems.append(f"{_EVENTS_HANDLER_NAME}.{method}{inspect.signature(fn)} changed")
    return problems


def _events_contact() -> tuple[Any, type[Any] | None, list[str]]:
    impl = getattr(_lc_event_stream, "_astream_events_implementation_v2", None)
    handler = getattr(_lc_event_stream, _EVENTS_HANDLER_NAME, None)
    runnable_events = getattr(_lc_runnable_base.Runnable, "_astream_events_v1_v2", None)
    problems = events_shape_problems(impl, handler, runnable_events)
    if runnable_events is None:
        problems.append("Runnable._astream_events_v1_v2 is gone")
    if not problems and getattr(impl, "__globals__", None) is not vars(_lc_event_stream):
        problems.append("_astream_events_implementation_v2 is wrapped")
    return impl, handler if not problems else None, problems


_EVENTS_V2_IMPL, _EVENTS_HANDLER, EVENTS_SHAPE_PROBLEMS = _events_contact()

EventStreamHandler: type[Any] = _EVENTS_HANDLER or _AsyncCallbackHandler
"""langchain-core's events handler class to subclass; where its shape is not the one
checked, a plain async handler (the subclass is then defined but never built)."""


def astream_events_v2_with(build: Callable[..., Any]) -> Any:
    """langchain-core's `_astream_events_implementation_v2` for one call, building its events
    handler with `build` (called with the handler's keyword arguments), or None when the
    shape check failed (`EVENTS_SHAPE_PROBLEMS`). Like `pregel_stream_with`, a copy of the
    function with its own globals: nothing process-wide changes. (langchain-core 1.8.3)
    """
    fn = _EVENTS_V2_IMPL
    if _EVENTS_HANDLER is None or not isinstance(fn, types.FunctionType):
        return None
    return _with_globals(fn, {_EVENTS_HANDLER_NAME: build})


# -- langchain-core's astream_events v1 ----------------------------------------------------
# v1 builds its events from LangChain's `LogStreamCallbackHandler`, a sync tracer beside our
# tagging callback. LangChain's `BaseCallbackManager.merge` combines handlers as a set (it
# runs where LangGraph merges two callback managers, as for a subgraph's run), so below such
# a merge the log handler may come first; a sync run (a tool's body on a worker thread) then
# hands it a run's start before the tagger decides it, while the consumer reads the log on
# the loop's thread. So the tagger decides inside the log handler's own callbacks: this
# call's handler instance is given methods that decide first. Where the shape is not the
# one checked, `decide_before_logging` answers False and `_wrap` keeps the tagger beside it.

from langchain_core.tracers.log_stream import LogStreamCallbackHandler as _LogStream  # noqa: E402

LOG_HANDLER_METHODS = (
    "on_chain_end", "on_chain_error", "on_chain_start", "on_chat_model_start", "on_llm_end",
    "on_llm_error", "on_llm_new_token", "on_llm_start", "on_retriever_start", "on_tool_end",
    "on_tool_error", "on_tool_start",
)  # fmt: skip
"""The log handler's callbacks the tagger decides in first: every one the tagger has."""


def log_handler_shape_problems(cls: Any = _LogStream) -> list[str]:
    """What keeps the tagger from deciding inside v1's log handler, [] when nothing: the
    callbacks must be plain (sync) methods, called with the instance's attributes, and the
    handler must say which schema it streams for. (langchain-core 1.8.3)"""
    problems = []
    if "_schema_format" not in inspect.signature(cls.__init__).parameters:
        problems.append("LogStreamCallbackHandler takes no _schema_format")
    if "root_id" not in getattr(getattr(cls.__init__, "__code__", None), "co_names", ()):
        problems.append("LogStreamCallbackHandler sets no root_id")
    if not getattr(cls, "__dictoffset__", 0):
        problems.append("LogStreamCallbackHandler instances take no attributes")
    for name in (*LOG_HANDLER_METHODS, *_other_callbacks(cls)):
        fn = getattr(cls, name, None)
        if not isinstance(fn, types.FunctionType) or inspect.iscoroutinefunction(fn):
            problems.append(f"LogStreamCallbackHandler.{name} is not a plain method")
    return problems


def _other_callbacks(cls: Any) -> list[str]:
    """The handler's other callbacks (`on_retriever_end`, `on_retry`, ...): no decision to
    make in them, but `raise_error` would raise LangChain's own errors there too."""
    return [n for n in dir(cls) if n.startswith("on_") and n not in LOG_HANDLER_METHODS]


LOG_HANDLER_SHAPE_PROBLEMS = log_handler_shape_problems()


def events_v1_log_handler(callbacks: Any) -> Any:
    """The log handler of this `astream_events(version="v1")` call among `callbacks` (a
    list or a callback manager), or None: the last one, as `_astream_log_implementation`
    appends it, and only if it has seen no run yet. A v1 call made inside another one's
    run also holds the outer call's handler, further up, which has seen runs."""
    handlers = callbacks.handlers if isinstance(callbacks, _BaseCallbackManager) else callbacks
    for handler in reversed(handlers or ()):
        if type(handler) is _LogStream and handler._schema_format == "streaming_events":
            return handler if handler.root_id is None else None
    return None


def decide_before_logging(log: Any, tagger: Any) -> bool:
    """Make `log` (this call's v1 log handler) call `tagger`'s callback before each of its
    own, inline and raising the tagger's errors (an undecided run must not go on), as the
    tagger alone would; LangChain's own errors in any of its callbacks are logged, as its
    callback manager logs them. False, and `log` unchanged, where the shape check failed."""
    if LOG_HANDLER_SHAPE_PROBLEMS or "_lgv_tagger" in vars(log):
        return False
    for name in LOG_HANDLER_METHODS:
        both = _decided_first(getattr(tagger, name), getattr(log, name), name)
        setattr(log, name, both)
    for name in _other_callbacks(type(log)):
        setattr(log, name, _decided_first(_no_decision, getattr(log, name), name))
    log._lgv_tagger = tagger
    log.run_inline = True
    log.raise_error = True
    return True


_lc_manager_logger = logging.getLogger("langchain_core.callbacks.manager")


def _no_decision(*args: Any, **kwargs: Any) -> None:
    pass


def _decided_first(
    decide: Callable[..., Any], logged: Callable[..., Any], name: str
) -> Callable[..., Any]:
    def both(*args: Any, **kwargs: Any) -> Any:
        decide(*args, **kwargs)
        try:
            return logged(*args, **kwargs)
        except NotImplementedError:
            raise  # LangChain's callback manager falls back on it (chat model -> llm start)
        except Exception as error:
            _lc_manager_logger.warning(
                "Error in %s.%s callback: %s", "LogStreamCallbackHandler", name, repr(error)
            )
            return None

    return both
