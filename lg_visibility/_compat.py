"""The only module that touches langgraph internals.

Everything here was checked against langgraph 1.2.24. The supported range is pinned in
pyproject.toml; importing lg_visibility with a langgraph outside it fails here, at import,
rather than leaking or crashing on the first streamed event.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields, is_dataclass
from importlib.metadata import version as _dist_version
from typing import Any

from langchain_core.messages import BaseMessage
from pydantic import BaseModel

__all__ = [
    "CONF",
    "CONFIG_KEY_TASK_ID",
    "INTERRUPT",
    "LANGGRAPH_VERSION",
    "NS_END",
    "NS_SEP",
    "SUPPORTED",
    "TAG_HIDDEN",
    "StreamMessagesHandler",
    "StreamMessagesHandlerV2",
    "check_version",
    "ensure_config",
    "graph_namespace",
    "is_task_config",
    "iter_messages",
    "pregel_astream_with",
    "pregel_base",
    "pregel_stream_with",
]

SUPPORTED = ((1, 2, 24), (1, 3, 0))
"""Inclusive lower bound, exclusive upper bound of the langgraph versions we support."""

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
            f"lg_visibility supports langgraph >=1.2.24,<1.3 but langgraph {found} is "
            "installed. lg_visibility replaces LangGraph's internal messages handler, so it "
            "cannot run safely on an unchecked version: install a supported langgraph "
            "(pip install 'langgraph>=1.2.24,<1.3') or an lg-visibility release that "
            "supports yours."
        )


check_version()

# Private imports, all here. (checked against langgraph 1.2.24)
import langgraph.pregel.main as _pregel_main  # noqa: E402
from langgraph._internal._config import ensure_config  # noqa: E402
from langgraph._internal._constants import (  # noqa: E402
    CONF,
    CONFIG_KEY_TASK_ID,
    INTERRUPT,
    NS_END,
    NS_SEP,
)
from langgraph.constants import TAG_HIDDEN  # noqa: E402
from langgraph.pregel._messages import (  # noqa: E402
    StreamMessagesHandler,
    StreamMessagesHandlerV2,
    graph_namespace,
)
from langgraph.types import Command  # noqa: E402

HandlerFactory = Callable[..., Any]


class _HandlerSlot:
    """Stands where `Pregel.stream` names a messages handler class, for one run.

    `Pregel.stream`/`astream` (langgraph 1.2.24) use the module globals
    `StreamMessagesHandler` and `StreamMessagesHandlerV2` twice: to build the handler for
    stream_mode="messages", and in `isinstance` checks on inherited handlers. A slot builds
    our handler when called and answers `isinstance`/`issubclass` exactly as the original
    class would, so only construction changes.
    """

    __slots__ = ("_build", "_original")

    def __init__(self, original: type, build: HandlerFactory) -> None:
        self._original = original
        self._build = build

    def __call__(self, stream: Any, subgraphs: bool, *, parent_ns: Any = None) -> Any:
        return self._build(stream, subgraphs, parent_ns=parent_ns)

    def __instancecheck__(self, obj: object) -> bool:
        return isinstance(obj, self._original)

    def __subclasscheck__(self, cls: type) -> bool:
        return issubclass(cls, self._original)


def _with_handlers(
    fn: types.FunctionType, build_v1: HandlerFactory, build_v2: HandlerFactory
) -> types.FunctionType:
    # A copy of the function whose globals name our handlers: nothing process-wide changes,
    # so other graphs in the process stream exactly as before.
    run_globals = dict(fn.__globals__)
    run_globals["StreamMessagesHandler"] = _HandlerSlot(StreamMessagesHandler, build_v1)
    run_globals["StreamMessagesHandlerV2"] = _HandlerSlot(StreamMessagesHandlerV2, build_v2)
    clone = types.FunctionType(
        fn.__code__, run_globals, fn.__name__, fn.__defaults__, fn.__closure__
    )
    clone.__kwdefaults__ = fn.__kwdefaults__
    return clone


_PREGEL_STREAM: Any = _pregel_main.Pregel.stream
_PREGEL_ASTREAM: Any = _pregel_main.Pregel.astream


def pregel_stream_with(build_v1: HandlerFactory, build_v2: HandlerFactory) -> Any:
    """`Pregel.stream` for one run, building its messages handler with our factories."""
    return _with_handlers(_PREGEL_STREAM, build_v1, build_v2)


def pregel_astream_with(build_v1: HandlerFactory, build_v2: HandlerFactory) -> Any:
    """`Pregel.astream` for one run, building its messages handler with our factories."""
    return _with_handlers(_PREGEL_ASTREAM, build_v1, build_v2)


def is_task_config(config: Mapping[str, Any]) -> bool:
    """True when a config is that of a task: the graph runs as a node of another graph."""
    return CONFIG_KEY_TASK_ID in config.get(CONF, {})


def pregel_base() -> type:
    """The Pregel class whose stream methods we copy."""
    return _pregel_main.Pregel


def _state_values(obj: Any) -> Sequence[Any]:
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, BaseModel):
        return [getattr(obj, k) for k in type(obj).model_fields]
    if is_dataclass(obj) and not isinstance(obj, type):
        return [getattr(obj, f.name) for f in fields(obj)]
    return ()


def iter_messages(value: Any) -> Iterator[BaseMessage]:
    """Messages in a node's input or output, where LangGraph's handler looks for them.

    A message, a sequence of messages, a state (dict, Pydantic model, dataclass) whose
    top-level values are messages or sequences of them, a `Command`'s update, or a list of
    any of these. (Mirrors `StreamMessagesHandler._find_and_emit_messages` and
    `on_chain_end`, langgraph 1.2.24.)
    """
    if isinstance(value, BaseMessage):
        yield value
        return
    if isinstance(value, Command):
        if value.update is not None:
            yield from iter_messages(value.update)
        return
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        for item in value:
            if isinstance(item, BaseMessage):
                yield item
            elif isinstance(item, (Command, dict)):
                yield from iter_messages(item)
        return
    for item in _state_values(value):
        if isinstance(item, BaseMessage):
            yield item
        elif isinstance(item, Sequence) and not isinstance(item, (str, bytes)):
            for inner in item:
                if isinstance(inner, BaseMessage):
                    yield inner
