"""The root output of an enforced run: snapshot and update events, filtered by tag and id.

Messages are decided in the handler, before they are queued. Every other event leaves the
outermost graph through one place, LangGraph's `_output` of its `stream`/`astream`, which
reads it raw, as `(ns, mode, payload)`, through the getter `OutputFilter.judged` gives it:

- values, checkpoints, debug checkpoints belong to the namespace that emitted them;
- updates, tasks, debug task events belong to the node they name;
- an event of an internal namespace or node is dropped whole; any other has the internal
  messages removed (by tag or id, never by content), in new containers, so state is untouched;
- root-namespace snapshots are always delivered (redacted), whatever the default;
- an update that carries interrupts is always delivered;
- custom events pass unless the policy sets `filter_custom`.

On `astream` with `subgraphs=True`, `OutputFilter.sink` drops some of these earlier, where a
subgraph's event crosses into the parent's queue: only those the getter would drop by the
same decision (an internal namespace's snapshots, its nodes' updates), so what leaves is the
same with it and without it, and fewer events are queued.

`HeldPut` copies the state's lists in an event as it is put, so that a node appending to
its input's list in place later changes none of the events put before.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import MutableSequence, Sequence, Set
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, ClassVar, cast

from langchain_core.messages import BaseMessage
from langgraph.types import Send
from pydantic import BaseModel

from lg_visibility._compat import (
    INTERRUPT,
    KINDS,
    LANGGRAPH_VERSION,
    MESSAGE,
    NS_END,
    NS_SEP,
    PUSH,
    UPDATE_METADATA_KEY,
    Getter,
    Put,
    caller_context,
    fields_with_values,
    kind_of,
    writer_task_ns,
)
from lg_visibility._provenance import path_of_checkpoint_ns, path_of_namespace, without_task_ids
from lg_visibility._rules import DECLARATION_KEY, INTERNAL, decide_run
from lg_visibility._run import DecidedMeta, RunState
from lg_visibility.errors import VisibilityError
from lg_visibility.policy import Visibility

__all__ = ["DROP", "HELD_MODES", "HeldPut", "OutputFilter", "held_copy", "held_write"]

DROP: Any = object()
"""Returned by the filter for an event that must not leave the graph."""

_MAX_DEPTH = 8
_ATOMS = frozenset({str, bytes, int, float, bool, type(None)})

_MEMO_MIN = 32
"""A message list at least this long is judged against the last one seen (`_ListMemo`)."""
_MEMOS_MAX = 16
"""At most this many list memos per run (a run with more message lists starts over)."""

_SINK_MODES = frozenset({"values", "checkpoints", "debug", "updates"})
"""The modes `OutputFilter.sink` may drop an event of (by its namespace first)."""

_HELD_DEPTH = {"values": 2, "updates": 3, "tasks": 3, "checkpoints": 3, "debug": 4}
"""How deep `HeldPut` looks, by mode: to a state's fields and the dicts in them in a values
snapshot and a checkpoint's `values`, an update's fields (`{node: update}`), a task's
`input` (a `@task`'s `(args, kwargs)`) and `result`, and one level further in a debug
event. (A message tagged by any route may also sit in a list in a dict field.)"""

HELD_MODES = frozenset(_HELD_DEPTH)
"""The modes whose events may hold the state's own lists (`HeldPut`)."""


def _task_key(ns: tuple[str, ...]) -> tuple[str, str | None]:
    """The task namespace `ns` belongs to ('a:<id>|1': the second subgraph task `a` runs
    belongs to task `a`), and, where a segment has no task id (a `checkpointer=True`
    graph's namespace), that key with every task id removed; else None."""
    task_ns = ns
    while task_ns and task_ns[-1].isdigit():
        task_ns = task_ns[:-1]
    key = NS_SEP.join(task_ns)
    if all(NS_END in seg for seg in task_ns):
        return key, None
    return key, without_task_ids(key)


def _within(key: str, stable: str | None, within: Set[str]) -> bool:
    """Whether the task namespace `key` (`stable`: without its task ids, see `_task_key`) is
    one `within` records: a graph run internal by its run, not its node
    (`RunState.internal_within`, a graph a visible node invoked with an internal tag;
    `internal_tool_within`, one an internal tool runs)."""
    if not within or not key:
        return False
    if key in within:
        return True
    return stable is not None and any(without_task_ids(k) == stable for k in list(within))


class OutputFilter:
    """Judge the raw `(ns, mode, payload)` items LangGraph queues for one run, before its
    `_output` formats them for the caller (v1/v2, one mode or a list, subgraphs or not).

    Args:
        run: the run's shared state (policy, internal ids, node decisions).
    """

    __slots__ = ("_internal_ns", "_keys", "_memos", "_run")

    _MEMOIZE: ClassVar[bool] = True
    """Whether long message lists are judged against the last one seen (`_ListMemo`): for
    one run's filter; a long-lived one (state reads) judges every list afresh."""

    def __init__(self, run: RunState) -> None:
        self._run = run
        self._internal_ns: dict[tuple[str, ...], bool] = {}
        self._keys = frozenset(run.policy.internal_keys)
        # id of a long message list's first item -> the memo of the last such list seen
        self._memos: dict[int, _ListMemo] | None = {} if self._MEMOIZE else None

    def judged(self, getter: Getter) -> Getter:
        """`getter` (LangGraph's queue read) returning only what may leave, redacted."""
        judge = self.__call__

        def get() -> tuple[tuple[str, ...], str, Any]:
            while True:  # the queue's empty exception passes through: it ends _output
                item = getter()
                if item[1] == "messages" and type(item[2][1]) is DecidedMeta:
                    return item  # ours, decided at the source: one type check per token
                out = judge(item)
                if out is not DROP:
                    return cast(tuple[tuple[str, ...], str, Any], out)

        return get

    def __call__(self, item: tuple[tuple[str, ...], str, Any]) -> Any:
        """`item` as it may leave (the same triple or one with a redacted payload), or DROP.

        A v2 `values` payload keeps its `__interrupt__` key (LangGraph pops it after us).
        """
        ns, mode, payload = item
        if mode == "messages":
            if type(payload[1]) is DecidedMeta:
                return item
            return item if self._foreign_part(ns, payload) else DROP
        new = self._filter(mode, ns, payload)
        if new is DROP:
            return DROP
        return item if new is payload else (ns, mode, new)

    def sink(self, put: Put) -> Put:
        """`put` (the parent-side sink of `Pregel.astream`'s subgraphs) without the events
        the getter would drop anyway, decided where they are pushed, before they are queued.

        What a subgraph's loop pushes here is its `values`, `checkpoints`, `updates`,
        `tasks` and `debug` events (its `messages`, `custom` and `tools` events are put into
        the queue directly, by the handlers and the stream writer). Dropped here: `values`,
        `checkpoints` and debug checkpoints of a namespace `_ns_internal` calls internal
        (the getter's own memoized decision: after the first, one dict lookup), and an
        update of such a namespace whose every node was decided internal when it ran
        (`node_decisions`). Everything else goes on to the getter, the one judge of what
        leaves: `tasks` (their judgment records decisions), debug task events, updates that
        carry interrupts, an update a node without a decision wrote (replayed after a
        resume), anything of a visible namespace. An event is pushed from inside its
        namespace's task, whose decision was recorded when that task started, so deciding
        here, earlier than the getter, gives the same answer.

        It runs where the subgraph's node runs, an executor thread for a sync node: it only
        reads shared dicts and writes one key of its own memo (atomic in CPython), with no
        iteration over a dict another thread may change.
        """
        ns_internal = self._ns_internal
        node_decisions = self._run.node_decisions

        def put_unless_internal(chunk: tuple[tuple[str, ...], str, Any]) -> None:
            ns, mode, payload = chunk
            if ns and mode in _SINK_MODES and ns_internal(ns):
                if mode == "values" or mode == "checkpoints":
                    return
                if mode == "debug":
                    if isinstance(payload, dict) and payload.get("type") == "checkpoint":
                        return
                elif isinstance(payload, dict) and INTERRUPT not in payload:  # updates
                    at = NS_SEP.join(ns)
                    if all(
                        name == UPDATE_METADATA_KEY or node_decisions.get((at, name)) == INTERNAL
                        for name in payload
                    ):
                        return
            put(chunk)

        return put_unless_internal

    def noting_called_tasks(self, put: Put) -> Put:
        """`put` (a loop's stream: the run's own, and with `subgraphs` its subgraphs') that
        first decides each `@task` whose start event it carries, where LangGraph puts it:
        in its caller's context (`accept_push`), which the event does not name.

        A `@task` runs under its caller's namespace (`app:<id>|research:<id>`: its path is
        `app/research`, as its runs' is), but its graph streams its task events at the
        graph's own namespace, named by the task, like a node's. Decided here, before any
        event of it is read, with its caller's namespace, its start event is judged by the
        same path as its run, whichever thread is first (`_task_start_internal`)."""
        note = self._note_called_task

        def put_noting(chunk: tuple[tuple[str, ...], str, Any]) -> None:
            mode = chunk[1]
            if mode == "tasks" or mode == "debug":
                note(chunk)
            put(chunk)

        return put_noting

    def _note_called_task(self, chunk: tuple[tuple[str, ...], str, Any]) -> None:
        ns, mode, payload = chunk
        if not isinstance(payload, dict):
            return
        task = payload.get("payload") if mode == "debug" else payload
        if (
            not isinstance(task, dict)
            or (mode == "debug" and payload.get("type") != "task")
            or "result" in task
            or PUSH not in (task.get("triggers") or ())
        ):
            return
        run = self._run
        context = caller_context()
        graph_ns = NS_SEP.join(ns)
        name, task_id = task.get("name"), task.get("id")
        if context is None or not isinstance(name, str):
            return
        caller, meta, tags = context
        below = caller.startswith(graph_ns + NS_SEP) if graph_ns else True
        if not below or caller not in run.task_decisions:
            return  # not put by a task of this run below this graph: the loop's own (a Send)
        key = f"{name}{NS_END}{task_id}"
        at = f"{graph_ns}{NS_SEP}{key}" if graph_ns else key
        if at in run.called_tasks:
            return
        # As its run will be decided: in an internal tool's body, or by the tags and
        # metadata the context hands it (a tagged chain's), beneath the task config's own.
        own = task.get("metadata") or {}
        if run.in_internal_tool_run():
            vis = INTERNAL
        else:
            vis = decide_run(
                run.policy,
                path_of_checkpoint_ns(f"{caller}{NS_SEP}{key}"),
                {**meta, **own},
                [*tags, *(own.get("tags") or ())],
            )
        run.note_called_task(at, graph_ns, name, vis)

    def custom_internal_here(self) -> bool:
        """Whether a `custom` write made now is internal (with `filter_custom`): made by a
        task decided internal (a root node's write names only the root graph), or in an
        internal namespace. Judged where it is written, on the writer's thread, as the sink
        judges a subgraph's events, so the decision is the one in force when the write was
        made, not when the consumer reads it (a graph a visible node invokes after another,
        with an internal tag, shares that node's task namespace). The getter judges the
        namespace again, from the same memo. Outside a task's context the writer itself
        decides (LangGraph's raises there, or writes nothing)."""
        task = writer_task_ns()
        if task is None:
            return False
        if self._run.task_decisions.get(task) == INTERNAL:
            return True
        return self._ns_internal(tuple(task.split(NS_SEP)[:-1]))

    # -- decisions -------------------------------------------------------------------------

    def _foreign_part(self, ns: tuple[str, ...], payload: Any) -> bool:
        """Whether a `messages` part that our handler did not emit may leave.

        Such a part was pushed into the stream by a node itself (a `RemoteGraph` does this)
        or, if our handler was never built, by LangGraph's own handler. Its metadata is the
        pusher's (a remote run's node and namespace), so it is not trusted: the part is
        judged by the task of this graph it entered through, the longest prefix of its
        namespace that names a task this run started.
        """
        run = self._run
        if not run.handler_built:
            raise VisibilityError(
                "lg_visibility's messages handler was not installed for this run, so its "
                "tokens could not be judged; the run was stopped. This happens when "
                "LangGraph's stream no longer builds the handler lg_visibility replaces "
                f"(langgraph {LANGGRAPH_VERSION}); please report it with your versions."
            )
        for end in range(len(ns), 0, -1):
            vis = run.task_decisions.get(NS_SEP.join(ns[:end]))
            if vis is not None:
                if vis == INTERNAL:
                    return False
                message = payload[0] if isinstance(payload, (tuple, list)) and payload else None
                if isinstance(message, BaseMessage):
                    return not run.is_internal(message)
                if isinstance(message, dict):  # a remote part: the message in its dict form
                    meta = message.get("response_metadata") or {}
                    return meta.get(DECLARATION_KEY) != "internal" and (
                        message.get("id") not in run.internal_ids
                    )
                return True
        return False  # entered through no task of this run: nothing vouches for it

    def _ns_internal(self, ns: tuple[str, ...]) -> bool:
        if not ns:
            return False  # root snapshots are always delivered, redacted
        cached = self._internal_ns.get(ns)
        if cached is not None:
            return cached
        run = self._run
        key, stable = _task_key(ns)
        vis = run.task_decisions.get(key)
        internal = (
            _within(key, stable, run.internal_within)
            or _within(key, stable, run.internal_tool_within)
            or vis == INTERNAL
        )
        if vis is None and not internal and stable is not None:
            # A `checkpointer=True` graph's namespace, task ids removed: the decisions of
            # every task at that place (any internal one makes it internal), else its
            # declarations and patterns. Not memoized: a later task at the same place (a
            # loop) may be decided otherwise, and shares the namespace.
            return any(
                without_task_ids(k) == stable and v == INTERNAL
                for k, v in list(run.task_decisions.items())
            ) or run.path_internal(path_of_namespace(ns))
        if vis is None and not internal:
            internal = run.policy.for_path(path_of_namespace(ns)) == INTERNAL
        self._internal_ns[ns] = internal
        return internal

    def _node_internal(self, ns: tuple[str, ...], name: str, task_id: str | None) -> bool:
        run = self._run
        called_internal = run.called_internal
        if task_id is None and called_internal and (NS_SEP.join(ns), name) in called_internal:
            # An update names a task by name alone: an internal `@task` of that name at this
            # graph makes every update of the name internal (fail closed).
            return True
        stable = _task_key(ns)[1]
        if task_id is not None:
            key = f"{name}{NS_END}{task_id}"
            vis = run.task_decisions.get(NS_SEP.join((*ns, key)) if ns else key)
            if vis is None and stable is not None:
                # In a `checkpointer=True` graph's namespace (task ids removed): its task by
                # its own id, which is unique.
                vis = next(
                    (
                        v
                        for k, v in list(run.task_decisions.items())
                        if k.rpartition(NS_SEP)[2] == key
                    ),
                    None,
                )
            if vis is not None:
                return vis == INTERNAL
        vis = run.node_decisions.get((NS_SEP.join(ns), name))
        if vis is not None:
            return vis == INTERNAL
        if stable is not None:
            # A `checkpointer=True` graph's namespace: the runs of `name` at that place (any
            # internal one makes it internal: a loop shares the namespace).
            found = [
                v
                for (graph_ns, node), v in list(run.node_decisions.items())
                if node == name and without_task_ids(graph_ns) == stable
            ]
            if found:
                return INTERNAL in found
        path = path_of_namespace(ns)
        path = f"{path}/{name}" if path else name
        # Not started yet (a task-start event): its declaration, if any, else the policy.
        return run.path_internal(path)

    def _filter(self, mode: str, ns: tuple[str, ...], payload: Any) -> Any:
        if mode == "values" or mode == "checkpoints":
            return DROP if self._ns_internal(ns) else self._redact(payload, 0)
        if mode == "updates":
            return self._updates(ns, payload)
        if mode == "tasks":
            return self._task(ns, payload)
        if mode == "debug":
            if not isinstance(payload, dict):
                return payload
            if payload.get("type") == "checkpoint":
                return DROP if self._ns_internal(ns) else self._redact(payload, 0)
            inner = payload.get("payload")
            new = self._task(ns, inner)
            if new is DROP:
                return DROP
            return payload if new is inner else {**payload, "payload": new}
        if mode == "custom":
            if self._run.policy.filter_custom and self._ns_internal(ns):
                return DROP
            return payload
        if mode == "tools":
            if self._ns_internal(ns):
                return DROP
            if isinstance(payload, dict) and payload.get("tool_call_id") in (
                self._run.internal_tool_calls
            ):
                return DROP
            return payload
        return payload

    def _updates(self, ns: tuple[str, ...], payload: Any) -> Any:
        if not isinstance(payload, dict):
            return self._redact(payload, 0)
        if INTERRUPT in payload:
            return payload  # interrupts always get through
        out: dict[str, Any] = {}
        changed = False
        for name, value in payload.items():
            if name == UPDATE_METADATA_KEY:
                continue  # about the nodes beside it: kept only if one of them is
            if self._node_internal(ns, name, None):
                changed = True
                continue
            new = self._redact(value, 0)
            if new is DROP:
                changed = True
                continue
            changed = changed or new is not value
            out[name] = new
        if not out:
            return DROP
        if not changed:
            return payload
        if UPDATE_METADATA_KEY in payload:
            out[UPDATE_METADATA_KEY] = payload[UPDATE_METADATA_KEY]
        return out

    def _task(self, ns: tuple[str, ...], payload: Any) -> Any:
        if not isinstance(payload, dict) or "name" not in payload:
            return payload
        name, task_id = payload["name"], payload.get("id")
        if "result" in payload or "error" in payload or task_id is None:
            internal = self._node_internal(ns, name, task_id)
        else:
            internal = self._task_start_internal(ns, name, task_id, payload)
        if not internal and _within(*_task_key(ns), self._run.internal_tool_within):
            internal = True  # a task of a graph an internal tool runs: nothing else says so
        interrupts = payload.get("interrupts")
        if internal:
            if interrupts and "result" in payload:
                # Interrupts always get through: an internal task's result that carries
                # them is delivered with nothing else of its own (LangGraph's server takes a
                # thread's interrupts from these events).
                result = payload["result"]
                empty = type(result)() if type(result) in (dict, list, tuple) else None
                return {**payload, "result": empty}
            return DROP
        out = self._redact(payload, 0)
        if out is DROP:
            return DROP
        out = self.state_at(out, "input")
        if interrupts and out.get("interrupts") is not interrupts:
            out = {**out, "interrupts": interrupts}  # as raised, as in snapshots
        return out

    def _task_start_internal(
        self, ns: tuple[str, ...], name: str, task_id: str, payload: dict[str, Any]
    ) -> bool:
        """Decide a task from its start event, as its run will be decided when it starts.

        LangGraph puts the task config's metadata (declarations, `lc_agent_name`) and tags
        in the payload (langgraph 1.2.24 `map_debug_tasks`): the rule chain gets the inputs
        the node's run will have, so the answer never depends on which thread is first.
        """
        run = self._run
        key = f"{name}{NS_END}{task_id}"
        at = NS_SEP.join((*ns, key)) if ns else key
        if at in run.called_tasks:  # a `@task`, decided there
            return run.task_decisions.get(at) == INTERNAL
        path = path_of_namespace(ns)
        vis = self._start_decision(f"{path}/{name}" if path else name, payload)
        run.task_decisions.setdefault(at, vis)
        run.node_decisions.setdefault((NS_SEP.join(ns), name), vis)
        return vis == INTERNAL

    def _start_decision(self, path: str, payload: dict[str, Any]) -> Visibility:
        run = self._run
        meta = payload.get("metadata") or {}
        agent = meta.get("lc_agent_name") or run.agents.get(path)
        return run.start_decision(path, meta, meta.get("tags"), agent)

    # -- redaction -------------------------------------------------------------------------

    def redact(self, value: Any) -> Any:
        """`value` without internal messages (DROP if it is one), for the other exits."""
        return self._redact(value, 0)

    def _redact(self, value: Any, depth: int) -> Any:
        """`value` without internal messages: the same object if none, else new containers."""
        cls = type(value)
        if cls in _ATOMS:
            return value  # (most values of a state: one set lookup, no ABC check)
        if (KINDS.get(cls) or kind_of(cls)) == MESSAGE:
            return DROP if self._internal(value) else value
        if depth > _MAX_DEPTH or isinstance(value, (str, bytes, int, float, type(None))):
            return value
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            # A named tuple keeps its fields: a dropped message becomes None.
            update = self._changed_fields(
                value, list(zip(value._fields, value, strict=True)), depth
            )
            return value if not update else cast(Any, value)._replace(**update)
        if isinstance(value, (list, tuple)):
            if (
                type(value) is tuple
                and self._run.internal_likes
                and id(value) in self._run.internal_likes
            ):
                return DROP  # a message an internal node sent as a (role, content) pair
            return self._redact_sequence(value, depth)
        if isinstance(value, dict):
            if (
                value.get("type") == "tool_call"
                and value.get("id") in self._run.internal_tool_calls
            ):
                return DROP  # an internal model's tool call, as a task's input carries it
            if "content" in value or "kwargs" in value:  # (an envelope: its fields in kwargs)
                meta = value.get("response_metadata")
                if (type(meta) is dict and meta.get(DECLARATION_KEY) == INTERNAL) or (
                    self._run.internal_likes and id(value) in self._run.internal_likes
                ):
                    return DROP  # a message an internal node wrote (or sent) as a dict
            out: dict[Any, Any] | None = None
            for i, (key, item) in enumerate(value.items()):
                # Interrupts always get through, values and all (v2 keeps them apart too).
                if key == INTERRUPT:
                    new = item
                elif key in self._keys:
                    new = DROP  # an internal state key: dropped, never set to None
                else:
                    new = self._redact(item, depth + 1)
                if new is not item and out is None:
                    out = dict(list(value.items())[:i])
                if out is not None and new is not DROP:
                    out[key] = new
            return value if out is None else out
        if isinstance(value, Send):
            # A conditional edge's output (its on_chain_end event): the input it sends,
            # an internal model's bare tool calls included.
            arg = self._redact(value.arg, depth + 1)
            return value if arg is value.arg else Send(value.node, None if arg is DROP else arg)
        if isinstance(value, BaseModel):
            update = self._changed_fields(
                value, fields_with_values(value, type(value).model_fields), depth
            )
        elif is_dataclass(value) and not isinstance(value, type):
            update = self._changed_fields(
                value, fields_with_values(value, [f.name for f in fields(value)]), depth
            )
        else:
            return value
        if self._keys and type(value) in self._run.state_types:
            defaults = self._key_defaults(value)  # a state object (a task's input)
            if defaults is DROP:
                return DROP
            update.update(defaults)
        return _with_fields(value, update) if update else value

    def _key_defaults(self, state: Any) -> Any:
        """A Pydantic or dataclass state object's internal keys -> their fields' defaults;
        DROP if one has none (no value that says nothing: fail closed)."""
        defaults: dict[str, Any] = {}
        if isinstance(state, BaseModel):
            model_fields = type(state).model_fields
            for key in self._keys.intersection(model_fields):
                field = model_fields[key]
                if field.is_required():
                    return DROP
                defaults[key] = field.get_default(call_default_factory=True)
            return defaults
        for f in fields(state):
            if f.name in self._keys:
                default = _dataclass_default(f)
                if default is _ABSENT:
                    return DROP
                defaults[f.name] = default
        return defaults

    def state_at(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        """`data` (a task's payload, a node run's event data), already redacted or to be,
        with the state object under `key` (its input, or a node's returned state) holding
        its internal keys' defaults, whether or not the graph's tree shows its schema (a
        graph a node's function looks up and invokes); without `key` where one has none.
        `_redact` does this for the tree's schemas: only another's is changed here."""
        state = data.get(key)
        if not self._keys or type(state) in self._run.state_types or not _is_state_object(state):
            return data
        defaults = self._key_defaults(state)
        if not defaults:
            return data
        out = {k: v for k, v in data.items() if k != key}
        if defaults is not DROP:
            out[key] = _with_fields(state, defaults)
        return out

    def _changed_fields(
        self, owner: Any, items: list[tuple[str, Any]], depth: int
    ) -> dict[str, Any]:
        update: dict[str, Any] = {}
        for key, item in items:
            new = self._redact(item, depth + 1)
            if new is not item:
                update[key] = None if new is DROP else new
        return update

    def _redact_sequence(self, value: list[Any] | tuple[Any, ...], depth: int) -> Any:
        memos = self._memos
        if memos is not None and type(value) is list and len(value) >= _MEMO_MIN:
            key = id(value[0])  # alive while its memo holds the list: the id is not reused
            memo = memos.get(key)
            if memo is not None:
                out = memo.follow(value, self._run)
                if out is not None:
                    return out
            memo = _ListMemo.start(value, self._run)
            if memo is not None:
                if len(memos) >= _MEMOS_MAX:
                    memos.clear()
                memos[key] = memo
                return memo.result(value)
        return self._redact_items(value, depth)

    def _redact_items(self, value: list[Any] | tuple[Any, ...], depth: int) -> Any:
        # This runs over every message in state (a long history, five snapshots a step, a
        # 2000-message state read): the original is returned when nothing goes.
        internal_ids = self._run.internal_ids
        if len(value) >= _MEMO_MIN and _only_messages(value):
            kept = _without_internal(value, internal_ids)
            if len(kept) == len(value):
                return value
            return kept if isinstance(value, list) else tuple(kept)
        # Anything else, item by item: one class lookup per item (isinstance against the ABC
        # would cost half the loop) and one tag lookup per message.
        keys = self._keys
        kept = []
        keep = kept.append
        changed = False
        kinds, message = KINDS, MESSAGE
        for item in value:
            cls = type(item)
            kind = kinds.get(cls)
            if kind is None:
                kind = kind_of(cls)
            if kind == message:
                if item.response_metadata.get(DECLARATION_KEY) == "internal" or (
                    internal_ids and item.id in internal_ids
                ):
                    changed = True
                else:
                    keep(item)
                continue
            if (
                keys
                and type(item) is tuple
                and len(item) == 2
                and isinstance(item[0], str)
                and item[0] in keys
            ):
                changed = True  # a (channel, value) write of an internal state key
                continue
            new = self._redact(item, depth + 1)
            if new is not item:
                changed = True
                if new is DROP:
                    continue
            keep(new)
        if not changed:
            return value
        return kept if isinstance(value, list) else tuple(kept)

    def _internal(self, message: BaseMessage) -> bool:
        return self._run.is_internal(message)


def _drops(messages: list[Any], offset: int, internal_ids: set[str]) -> list[int]:
    """`offset` + the positions of the internal ones among `messages` (all messages)."""
    key = DECLARATION_KEY
    if internal_ids:
        return [
            offset + i
            for i, m in enumerate(messages)
            if m.response_metadata.get(key) == INTERNAL or m.id in internal_ids
        ]
    return [offset + i for i, m in enumerate(messages) if m.response_metadata.get(key) == INTERNAL]


def _without_internal(messages: Sequence[Any], internal_ids: set[str]) -> list[Any]:
    """`messages` (all messages) without the internal ones: one comprehension, one tag lookup
    a message. A freshly read history's messages are out of the CPU cache, so each further
    touch of a message (a class lookup, an index) costs about as much as the tag lookup."""
    key = DECLARATION_KEY
    if internal_ids:
        return [
            m
            for m in messages
            if m.response_metadata.get(key) != INTERNAL and m.id not in internal_ids
        ]
    return [m for m in messages if m.response_metadata.get(key) != INTERNAL]


def _only_messages(items: Sequence[Any]) -> bool:
    kinds = KINDS
    return all((kinds.get(cls) or kind_of(cls)) == MESSAGE for cls in set(map(type, items)))


class _ListMemo:
    """Where the internal messages were in the last long message list of a run's snapshots.

    From one snapshot to the next, a state's message list is the same message objects plus
    new ones (`add_messages` builds a new list of the old objects), and W3-like runs redact
    a long history five times. A kept message's verdict changes only if its id becomes
    internal (`RunState.internal_log`). So a list that starts with the last one's messages
    (the same objects, or equal copies: same tag, same id), none of whose kept ids became
    internal since, keeps the last one's drops and is judged by its new items only.
    Anything else (a message replaced, removed or reordered, an item that is not a message,
    a verdict that may have changed) is judged afresh, and a list with a message without an
    id is never memoised (`add_messages` gives it an id in place later). The memo keeps a
    copy of the list and its ids: a reducer may change the state's list in place.

    Sync `stream` runs nodes, and their callbacks that note internal ids, in other threads
    while snapshots are judged: the log's length is read before judging, so an id noted
    meanwhile is checked at the next snapshot, as the memo-less filter would.
    """

    __slots__ = ("_drops", "_ids", "_log", "_seen")

    def __init__(self, value: list[Any], ids: list[Any], drops: list[int], log: int) -> None:
        self._seen = value[:]
        self._ids = ids  # the ids in _seen, by position
        self._drops = drops  # ascending positions in _seen of the internal messages
        self._log = log  # how much of RunState.internal_log they were judged with

    @classmethod
    def start(cls, value: list[Any], run: RunState) -> _ListMemo | None:
        """The memo of `value` judged whole, or None if it holds anything but messages
        with ids."""
        log = len(run.internal_log)
        if not _only_messages(value):
            return None
        ids = [m.id for m in value]
        if None in ids:
            return None
        return cls(value, ids, _drops(value, 0, run.internal_ids), log)

    def follow(self, value: list[Any], run: RunState) -> Any:
        """`value` redacted if it continues this memo's list (the memo then holds `value`),
        else None."""
        seen = self._seen
        n = len(seen)
        log = run.internal_log
        end = len(log)
        # List equality compares identical items by identity alone: C speed, no __eq__.
        if len(value) < n or value[:n] != seen:
            return None
        if end > self._log:
            if not self._still_dropped(set(log[self._log : end])):
                return None
            self._log = end
        if len(value) > n:
            new = value[n:]
            if not _only_messages(new):
                return None
            new_ids = [m.id for m in new]
            if None in new_ids:
                return None
            self._drops = self._drops + _drops(new, n, run.internal_ids)
            self._ids += new_ids
            self._seen = value[:]
        return self.result(value)

    def _still_dropped(self, new_internal: set[str]) -> bool:
        """Whether every message of the memo's list with one of these ids was dropped
        already (then no verdict changed). The ids are kept as a list, a fraction of a set's
        memory, and searched at C speed."""
        ids = self._ids
        if not any(map(new_internal.__contains__, ids)):
            return True
        drops = set(self._drops)
        return all(i in drops for i, x in enumerate(ids) if x in new_internal)

    def result(self, value: list[Any]) -> list[Any]:
        """`value` (which starts with this memo's list) without the memo's drops."""
        if not self._drops:
            return value
        kept: list[Any] = []
        start = 0
        for i in self._drops:
            kept.extend(value[start:i])
            start = i + 1
        kept.extend(value[start:])
        return kept


def held_write(chunk: Any) -> Any:
    """A `custom` write as it is when written (`HeldPut`): a node may write its state's
    list (`writer({"history": state["messages"]})`)."""
    return held_copy(chunk, 2)


class HeldPut:
    """A put handing on each event that may hold the state's lists (a snapshot, a
    checkpoint, a task's start or result, an update) as it was when it was put: every
    list in it, down to the state's fields and the dicts in them (`_HELD_DEPTH`), copied
    (not the items).

    LangGraph's events hold the state's own lists: a snapshot holds the channels' values,
    a task start its input; an update or a task result holds what the node returned,
    which becomes the channel's value where the channel keeps what is written (a plain
    list key, an `Overwrite`). A node may append to such a list in place, with no write
    (`state["messages"].append(m)`), and its message is tagged only when the node ends. So
    an event put before, read after (a consumer that keeps the items; with `subgraphs`,
    one that reads a subgraph's events while its nodes run) would show the message
    untagged. Copied where it is put, before the next step's nodes start, it holds what
    the state held then.
    """

    __slots__ = ("_put",)  # (a run's peak memory counts: no closure and cell a put)

    def __init__(self, put: Put) -> None:
        self._put = put

    def __call__(self, chunk: tuple[tuple[str, ...], str, Any]) -> None:
        ns, mode, payload = chunk
        depth = _HELD_DEPTH.get(mode)
        if depth is not None:
            held = held_copy(payload, depth)
            if held is not payload:
                chunk = (ns, mode, held)
        self._put(chunk)


_ABSENT: Any = object()


def _is_state_object(value: Any) -> bool:
    """Whether `value` is a Pydantic model or a dataclass instance (a typed state's form)."""
    return isinstance(value, BaseModel) or (is_dataclass(value) and not isinstance(value, type))


def _with_fields(obj: Any, update: dict[str, Any]) -> Any:
    """A copy of a Pydantic model or a dataclass instance with the fields in `update`."""
    if isinstance(obj, BaseModel):
        return obj.model_copy(update=update)
    clone = copy.copy(obj)
    for key, item in update.items():
        object.__setattr__(clone, key, item)
    return clone


def _dataclass_default(f: Any) -> Any:
    """A dataclass field's default (its factory's product), `_ABSENT` if it has none."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return _ABSENT


def held_copy(value: Any, depth: int) -> Any:
    """`value` with each list found within `depth` levels of dicts, tuples, Pydantic
    models and dataclasses (not messages) replaced by a copy; the same object if none."""
    cls = type(value)
    if cls is list:
        return value[:]
    if cls in _ATOMS:
        return value
    if cls is dict:
        if depth == 0:
            return value
        out: dict[Any, Any] | None = None
        for key, item in value.items():
            kind = type(item)
            if kind is list:
                new = item[:]
            elif kind in _ATOMS or (new := held_copy(item, depth - 1)) is item:
                continue
            if out is None:
                out = dict(value)
            out[key] = new
        return value if out is None else out
    if cls is tuple:
        if depth == 0:
            return value
        items = [held_copy(item, depth - 1) for item in value]
        return value if all(map(operator.is_, items, value)) else tuple(items)
    if (KINDS.get(cls) or kind_of(cls)) == MESSAGE:
        return value  # its lists (content blocks, tool calls) are its own
    if isinstance(value, MutableSequence):
        return copy.copy(value)  # a list subclass, a deque
    if depth == 0:
        return value
    if isinstance(value, BaseModel):
        names: Sequence[str] = list(cls.model_fields)
    elif is_dataclass(value) and not isinstance(value, type):
        names = [f.name for f in fields(value)]
    else:
        return value
    update = {}
    for name in names:
        item = getattr(value, name, _ABSENT)
        if item is not _ABSENT and (new := held_copy(item, depth - 1)) is not item:
            update[name] = new
    if not update:
        return value
    clone = copy.copy(value)  # (a model's fields set are kept)
    for name, new in update.items():
        object.__setattr__(clone, name, new)
    return clone
