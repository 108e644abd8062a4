"""What leaves `get_state` / `get_state_history` (and their async twins) of an enforced graph.

A state read has no run to learn from: it judges what the checkpoint holds by what the
run that wrote it decided, i.e. the `response_metadata["visibility"]` tag the handler put
on every message at run time, and by the graph's policy (and `add_node` declarations) for
namespaces and tasks:

- a snapshot of an internal namespace (e.g. `checkpoint_ns` pointing into an internal
  subgraph, as history tasks do) has empty `values`;
- any other snapshot's `values` lose the internal messages, whether they are message
  objects or the dicts the LangGraph server's checkpoint reader produces; a key whose value
  was an internal message is dropped, never set to None (AG-UI writes what it read back);
- `tasks[].result` of an internal task is removed; a visible task's is redacted;
  the `__start__` task's result (the graph's input) is judged as the graph's values are;
  `tasks[].state` (a nested snapshot with `subgraphs=True`) is redacted the same way,
  recursively; a config pointer is kept (following it comes back here);
- `next`, `interrupts`, `config`, `metadata`, `created_at`, `parent_config` are kept.

Untagged messages count as visible: human input, and anything written outside an enforced
run (`update_state`, a run of the raw graph).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

from langgraph.constants import START

from lg_visibility._compat import CONF, NS_SEP
from lg_visibility._output_filter import DROP, OutputFilter
from lg_visibility._provenance import path_of_namespace
from lg_visibility._rules import DECLARATION_KEY
from lg_visibility._run import RunState
from lg_visibility._tree import NodeConfig
from lg_visibility.policy import Visibility, VisibilityPolicy

__all__ = [
    "RawStateReads",
    "StateRedactor",
    "acall_raw",
    "aiter_raw",
    "call_raw",
    "iter_raw",
    "reading_raw",
]

T = TypeVar("T")

# The `type` of a message serialised to a dict (BaseMessage.model_dump, langchain-core 1.8).
_MESSAGE_TYPES = frozenset(
    {
        "human",
        "ai",
        "tool",
        "system",
        "function",
        "chat",
        "remove",
        "developer",
        "HumanMessageChunk",
        "AIMessageChunk",
        "ToolMessageChunk",
        "SystemMessageChunk",
        "FunctionMessageChunk",
        "ChatMessageChunk",
    }
)


class _StateFilter(OutputFilter):
    """The output filter's redaction, also recognising messages in their dict form.

    It is long-lived (one per enforced graph), so it keeps no memo of the lists it saw."""

    __slots__ = ()

    _MEMOIZE = False

    def _redact(self, value: Any, depth: int) -> Any:
        if isinstance(value, dict) and value.get("type") in _MESSAGE_TYPES and "content" in value:
            meta = value.get("response_metadata")
            if isinstance(meta, Mapping) and meta.get(DECLARATION_KEY) == "internal":
                return DROP
            return value
        return super()._redact(value, depth)


class StateRedactor:
    """Redact the snapshots a graph's state reads return.

    Args:
        policy: the graph's policy.
        declared: path -> visibility declared with `add_node(..., metadata=...)`.
        agents: path -> the agent name of a node that runs a named `create_agent` graph.
        bound: path -> the declaration and tags in a node's runnable's own config.
    """

    __slots__ = ("_filter", "_run")

    def __init__(
        self,
        policy: VisibilityPolicy,
        declared: Mapping[str, Visibility],
        *,
        agents: Mapping[str, str] | None = None,
        bound: Mapping[str, tuple[NodeConfig, ...]] | None = None,
    ) -> None:
        self._run = RunState(policy, declared, agents, bound=bound)
        self._filter = _StateFilter(self._run)

    def internal_at(self, path: str) -> bool:
        """Whether output at `path` is internal by what is known before a run there."""
        return self._run.path_internal(path)

    def snapshot(self, snap: Any) -> Any:
        """`snap` (a StateSnapshot) as it may leave the graph."""
        checkpoint_ns = ((snap.config or {}).get(CONF) or {}).get("checkpoint_ns") or ""
        ns = tuple(checkpoint_ns.split(NS_SEP)) if checkpoint_ns else ()
        path = path_of_namespace(ns)
        if ns and self._run.path_internal(path):
            values: Any = {} if isinstance(snap.values, dict) else None
        else:
            values = self._filter.redact(snap.values)
            if values is DROP:
                values = {}
        tasks = tuple(self._task(path, task) for task in snap.tasks)
        return snap._replace(values=values, tasks=tasks)

    def _task(self, parent_path: str, task: Any) -> Any:
        if task.name == START:
            # Not a producer: its result is the graph's input (the caller's, or the state a
            # parent hands a subgraph), judged as the graph's own values are.
            internal = bool(parent_path) and self._run.path_internal(parent_path)
        else:
            path = f"{parent_path}/{task.name}" if parent_path else task.name
            internal = self._run.path_internal(path)
        update: dict[str, Any] = {}
        if task.result is not None:
            result = None if internal else self._filter.redact(task.result)
            if result is DROP:
                result = None
            if result is not task.result:
                update["result"] = result
        state = task.state
        if state is not None and hasattr(state, "tasks") and hasattr(state, "values"):
            update["state"] = self.snapshot(state)  # a nested StateSnapshot (subgraphs=True)
        return task._replace(**update) if update else task


# Set while a read runs unredacted: inside our own override (LangGraph's get_state calls a
# subgraph's, which may be a wrapped graph too) and under `graph.raw_state`.
_RAW_READ: ContextVar[bool] = ContextVar("lg_visibility_raw_state_read", default=False)


def reading_raw() -> bool:
    """True while a state read must return the raw state (see `_RAW_READ`)."""
    return _RAW_READ.get()


def call_raw(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` with state reads unredacted."""
    token = _RAW_READ.set(True)
    try:
        return fn(*args, **kwargs)
    finally:
        _RAW_READ.reset(token)


async def acall_raw(fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    """`await fn(*args, **kwargs)` with state reads unredacted."""
    token = _RAW_READ.set(True)
    try:
        return await fn(*args, **kwargs)
    finally:
        _RAW_READ.reset(token)


def iter_raw(items: Iterator[T]) -> Iterator[T]:
    """`items`, each step taken with state reads unredacted (never across a yield)."""
    while True:
        token = _RAW_READ.set(True)
        try:
            item = next(items)
        except StopIteration:
            return
        finally:
            _RAW_READ.reset(token)
        yield item


async def aiter_raw(items: AsyncIterator[T]) -> AsyncIterator[T]:
    """`items`, each step taken with state reads unredacted (never across a yield)."""
    while True:
        token = _RAW_READ.set(True)
        try:
            item = await items.__anext__()
        except StopAsyncIteration:
            return
        finally:
            _RAW_READ.reset(token)
        yield item


class RawStateReads:
    """The state reads of a wrapped graph, unredacted: for the app itself, never a client.

    Get it as `graph.raw_state`; its methods take the arguments of the graph's own
    (`get_state(config, subgraphs=...)`, `get_state_history(config, filter=..., before=...,
    limit=...)`, and the async twins) and return what the unwrapped graph returns, internal
    messages included (tagged).
    """

    __slots__ = ("_graph",)

    def __init__(self, graph: Any) -> None:
        self._graph = graph

    def get_state(self, config: Any, *, subgraphs: bool = False) -> Any:
        """The raw `StateSnapshot`."""
        return call_raw(self._graph.get_state, config, subgraphs=subgraphs)

    async def aget_state(self, config: Any, *, subgraphs: bool = False) -> Any:
        """The raw `StateSnapshot`."""
        return await acall_raw(self._graph.aget_state, config, subgraphs=subgraphs)

    def get_state_history(self, config: Any, **kwargs: Any) -> Iterator[Any]:
        """The raw snapshots, newest first."""
        return iter_raw(iter(self._graph.get_state_history(config, **kwargs)))

    def aget_state_history(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """The raw snapshots, newest first."""
        return aiter_raw(aiter(self._graph.aget_state_history(config, **kwargs)))
