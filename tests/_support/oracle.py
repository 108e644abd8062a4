"""The oracle: what an enforced stream must be, computed from the raw stream independently.

It knows which output is internal from the example graphs' markers (content the test put
there), never from lg_visibility's tags, and which nodes are internal from a plain prefix
table written out here. Streams are compared in a canonical form where run-specific ids
(task ids, message ids, checkpoint ids, timestamps) are numbered by first appearance.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langgraph.types import Interrupt
from pydantic import BaseModel

__all__ = [
    "Case",
    "Recorder",
    "canon",
    "event_parts",
    "expected_stream",
    "message_text",
    "run_stream",
]

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b[0-9a-f]{32}\b")
_TIME_KEYS = {"timestamp", "ts", "created_at"}


@dataclasses.dataclass(frozen=True)
class Case:
    """An example graph's ground truth for the oracle."""

    internal_markers: tuple[str, ...]
    visible_markers: tuple[str, ...]
    internal_prefixes: tuple[str, ...]
    visible_prefixes: tuple[str, ...] = ()
    internal_keys: tuple[str, ...] = ()
    """State keys whose values the test declares internal: never anywhere in the output."""

    def path_internal(self, path: str) -> bool:
        """Longest matching prefix wins; a path no prefix matches is visible (the default)."""
        best, internal = -1, False
        for prefixes, vis in ((self.internal_prefixes, True), (self.visible_prefixes, False)):
            for p in prefixes:
                if path == p or path.startswith(p + "/"):
                    length = p.count("/") + 1
                    if length > best:
                        best, internal = length, vis
        return internal


def message_text(message: BaseMessage) -> str:
    """Everything a message carries that a client could show: content and tool-call args."""
    parts = [message.content if isinstance(message.content, str) else json.dumps(message.content)]
    if isinstance(message, AIMessage):
        parts += [json.dumps(c.get("args")) for c in message.tool_calls]
    if isinstance(message, AIMessageChunk):
        parts += [str(c.get("args") or "") for c in message.tool_call_chunks]
    if isinstance(message, ToolMessage):
        parts.append(str(message.tool_call_id))
    return " ".join(parts)


def event_parts(item: Any, stream_mode: Any, subgraphs: bool, version: str) -> tuple:
    """(ns, mode, payload) of one item `stream` yielded, whatever its shape."""
    if version == "v2":
        if item.get("interrupts"):
            # v2 moves a values snapshot's interrupts beside its data; keep both
            return (
                tuple(item["ns"]),
                item["type"],
                {
                    "data": item["data"],
                    "__interrupt__": item["interrupts"],
                },
            )
        return tuple(item["ns"]), item["type"], item["data"]
    if isinstance(stream_mode, list):
        if subgraphs:
            ns, mode, payload = item
            return tuple(ns), mode, payload
        mode, payload = item
        return (), mode, payload
    if subgraphs:
        ns, payload = item
        return tuple(ns), stream_mode, payload
    return (), stream_mode, item


def _path(ns: Iterable[str]) -> str:
    return "/".join(seg.split(":", 1)[0] for seg in ns)


class Recorder(BaseCallbackHandler):
    """Records every message produced in a run (LLM outputs, node outputs)."""

    def __init__(self) -> None:
        self.messages: list[BaseMessage] = []

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        for gens in response.generations:
            for gen in gens:
                if hasattr(gen, "message"):
                    self.messages.append(gen.message)

    def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
        self.messages.extend(_walk_messages(outputs, 0))


def _walk_messages(value: Any, depth: int) -> Iterable[BaseMessage]:
    if depth > 6:
        return
    if isinstance(value, BaseMessage):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _walk_messages(v, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _walk_messages(v, depth + 1)
    elif hasattr(value, "update") and type(value).__name__ == "Command":
        yield from _walk_messages(value.update, depth + 1)


def run_stream(
    graph: Any,
    inputs: Sequence[Any],
    *,
    thread_id: str,
    sync: bool,
    callbacks: list[Any] | None = None,
    on_arrival: Callable[[Any], Any] | None = None,
    **kwargs: Any,
) -> list[Any]:
    """All items of streaming `inputs` one after another on one thread, sync or async;
    given `on_arrival`, each as `on_arrival(item)`, called as the item arrives."""
    items: list[Any] = []
    for value in inputs:
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        if callbacks:
            config["callbacks"] = callbacks
        if sync:
            for item in graph.stream(value, config, **kwargs):
                items.append(item if on_arrival is None else on_arrival(item))
        else:

            async def collect(value: Any = value, config: dict[str, Any] = config) -> None:
                async for item in graph.astream(value, config, **kwargs):
                    items.append(item if on_arrival is None else on_arrival(item))

            asyncio.run(asyncio.wait_for(collect(), timeout=60))
    return items


def _is_internal_message(case: Case, ids: set[str], message: BaseMessage) -> bool:
    if message.id is not None and message.id in ids:
        return True
    text = message_text(message)
    return any(marker in text for marker in case.internal_markers)


def _internal_ids(case: Case, raw: list[tuple]) -> set[str]:
    """Ids of every message the raw stream shows with an internal marker.

    Content and tool-call-chunk args are concatenated per message id first: a marker can be
    split across tokens.
    """
    texts: dict[str, list[str]] = {}
    for _, _, payload in raw:
        for message in _walk_messages(payload, 0):
            if not message.id:
                continue
            parts = texts.setdefault(message.id, ["", ""])
            if isinstance(message, AIMessageChunk):
                parts[0] += message.content if isinstance(message.content, str) else ""
                parts[1] += "".join(str(c.get("args") or "") for c in message.tool_call_chunks)
            else:
                parts.append(message_text(message))
    return {
        mid
        for mid, parts in texts.items()
        if any(m in part for part in parts for m in case.internal_markers)
    }


def _redact(case: Case, ids: set[str], value: Any, depth: int = 0) -> Any:
    if isinstance(value, BaseMessage):
        return _DROP if _is_internal_message(case, ids, value) else value
    if (
        isinstance(value, dict)
        and isinstance(value.get("content"), str)
        and (value.get("role") or value.get("type")) in _MESSAGE_ROLES
        and any(marker in value["content"] for marker in case.internal_markers)
    ):
        return _DROP  # a message written as a dict, as a task's result or input holds it
    if depth > 8:
        return value
    if (
        type(value) is tuple
        and len(value) == 2
        and isinstance(value[0], str)
        and value[0] in case.internal_keys
    ):
        return _DROP  # a (key, value) write of an internal key
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        kept = [_redact(case, ids, v, depth + 1) for v in value]
        kept = [v for v in kept if v is not _DROP]
        return kept if isinstance(value, list) else tuple(kept)
    if isinstance(value, dict):
        out = {
            k: _redact(case, ids, v, depth + 1)
            for k, v in value.items()
            if k not in case.internal_keys
        }
        return {k: v for k, v in out.items() if v is not _DROP}
    if isinstance(value, BaseModel) and not isinstance(value, BaseMessage):
        update = {
            k: _redact(case, ids, getattr(value, k), depth + 1) for k in type(value).model_fields
        }
        return value.model_copy(update={k: (None if v is _DROP else v) for k, v in update.items()})
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        twin = copy.copy(value)  # a field nobody set (`init=False`) stays unset
        for f in dataclasses.fields(value):
            if hasattr(value, f.name):
                v = _redact(case, ids, getattr(value, f.name), depth + 1)
                object.__setattr__(twin, f.name, None if v is _DROP else v)
        return twin
    return value


_DROP = object()
_MESSAGE_ROLES = frozenset({"human", "user", "ai", "assistant", "system", "tool"})


def expected_stream(case: Case, raw: list[tuple]) -> list[tuple]:
    """The raw (ns, mode, payload) parts minus internal events, snapshots redacted."""
    ids = _internal_ids(case, raw)
    out: list[tuple] = []
    for ns, mode, payload in raw:
        path = _path(ns)
        if mode == "messages":
            if not _is_internal_message(case, ids, payload[0]):
                out.append((ns, mode, payload))
        elif mode == "custom":
            out.append((ns, mode, payload))
        elif mode in ("values", "checkpoints") or (
            mode == "debug" and payload.get("type") == "checkpoint"
        ):
            if not (ns and case.path_internal(path)):
                out.append((ns, mode, _redact(case, ids, payload)))
        elif mode == "updates":
            if "__interrupt__" in payload:
                out.append((ns, mode, payload))
                continue
            kept = {
                name: _redact(case, ids, value)
                for name, value in payload.items()
                if not case.path_internal(f"{path}/{name}" if path else name)
            }
            kept = {k: v for k, v in kept.items() if v is not _DROP}
            if kept:
                out.append((ns, mode, kept))
        elif mode in ("tasks", "debug"):
            task = payload["payload"] if mode == "debug" else payload
            name = task["name"]
            if not case.path_internal(f"{path}/{name}" if path else name):
                out.append((ns, mode, with_interrupts(_redact(case, ids, payload), payload)))
            elif task.get("interrupts") and "result" in task:
                out.append((ns, mode, interrupts_only(payload)))
        elif mode == "tools":
            if not (ns and case.path_internal(path)):
                out.append((ns, mode, payload))
        else:
            out.append((ns, mode, payload))
    return out


def _task_of(payload: dict[str, Any]) -> dict[str, Any]:
    return payload["payload"] if payload.get("type") in ("task", "task_result") else payload


def with_interrupts(redacted: Any, payload: dict[str, Any]) -> Any:
    """A task event `redacted`, with the interrupts of the raw `payload` as raised."""
    interrupts = _task_of(payload).get("interrupts")
    if not interrupts or redacted is _DROP:
        return redacted
    if "payload" in redacted and payload.get("type") in ("task", "task_result"):
        return {**redacted, "payload": {**redacted["payload"], "interrupts": interrupts}}
    return {**redacted, "interrupts": interrupts}


def interrupts_only(payload: dict[str, Any]) -> dict[str, Any]:
    """An internal task's result event that carries interrupts: they always get through,
    with nothing else of the task's (its result emptied)."""
    task = _task_of(payload)
    result = task["result"]
    empty = type(result)() if type(result) in (dict, list, tuple) else None
    task = {**task, "result": empty}
    return {**payload, "payload": task} if payload.get("type") == "task_result" else task


def canon(parts: list[tuple]) -> list[Any]:
    """A comparable form: ids numbered by first appearance, timestamps and tags removed."""
    numbers: dict[str, str] = {}

    def ids(text: str) -> str:
        return _UUID.sub(lambda m: numbers.setdefault(m.group(0), f"<id{len(numbers)}>"), text)

    def walk(value: Any, depth: int = 0) -> Any:
        if depth > 12:
            return repr(value)
        if isinstance(value, BaseMessage):
            return (
                "msg",
                type(value).__name__,
                walk(value.content, depth + 1),
                walk(getattr(value, "tool_calls", None), depth + 1),
                walk(getattr(value, "tool_call_chunks", None), depth + 1),
                walk(getattr(value, "tool_call_id", None), depth + 1),
                walk(value.id, depth + 1),
            )
        if isinstance(value, Interrupt):
            return ("interrupt", walk(value.value, depth + 1), walk(value.id, depth + 1))
        if isinstance(value, str):
            return ids(value)
        if isinstance(value, dict):
            out = {
                walk(k, depth + 1): ("<ts>" if k in _TIME_KEYS else walk(v, depth + 1))
                for k, v in value.items()
                if k not in ("visibility", "lg_visibility_node")
            }
            # A message written as a dict carries its tag in response_metadata (with the
            # provenance beside it), where the raw one has none.
            meta = out.get("response_metadata")
            if isinstance(meta, dict) and set(meta) <= {"provenance"}:
                del out["response_metadata"]
            # The dict lg_visibility writes in place of a pair or a string it must tag (an
            # internal node's, or a visible node's below an internal graph) reads as those.
            if set(out) == {"role", "content"}:
                return [out["role"], out["content"]]
            if set(out) == {"type", "content"} and out["type"] == "human":
                return out["content"]
            return out
        if isinstance(value, list | tuple):
            return [walk(v, depth + 1) for v in value]
        if isinstance(value, BaseModel):  # field by field: a message in it stays one
            return (
                type(value).__name__,
                {
                    k: walk(getattr(value, k), depth + 1) if hasattr(value, k) else "<unset>"
                    for k in type(value).model_fields
                },
            )
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return (
                type(value).__name__,
                {
                    f.name: walk(getattr(value, f.name), depth + 1)
                    if hasattr(value, f.name)
                    else "<unset>"
                    for f in dataclasses.fields(value)
                },
            )
        if isinstance(value, int | float | bool | type(None)):
            return value
        return ids(repr(value))

    return [(walk(list(ns)), mode, walk(payload)) for ns, mode, payload in parts]


def all_text(parts: list[tuple]) -> str:
    """Every string a client could see in these events, messages included."""
    chunks: list[str] = []

    def walk(value: Any, depth: int = 0) -> None:
        if depth > 12:
            return
        if isinstance(value, BaseMessage):
            chunks.append(message_text(value))
            chunks.append(str(value.id))
        elif isinstance(value, dict):
            for k, v in value.items():
                chunks.append(str(k))
                walk(v, depth + 1)
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v, depth + 1)
        elif isinstance(value, BaseModel):
            walk(value.model_dump(), depth + 1)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            walk(
                {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}, depth + 1
            )
        else:
            chunks.append(repr(value))

    for ns, _mode, payload in parts:
        chunks.extend(ns)
        walk(payload)
    return "\n".join(chunks)


Predicate = Callable[[str], bool]


# -- astream_events -------------------------------------------------------------------------

_PROMPT_EVENTS = frozenset(
    {"on_chat_model_start", "on_chat_model_end", "on_llm_start", "on_llm_end", "on_llm_error"}
)


def event_path(event: dict[str, Any]) -> str:
    """The node path of the run an event belongs to, from LangGraph's task metadata."""
    ns = (event.get("metadata") or {}).get("langgraph_checkpoint_ns") or ""
    return _path(seg for seg in ns.split("|") if ":" in seg) if ns else ""


def event_parts_of(events: list[dict[str, Any]]) -> list[tuple]:
    """Events as (ns, mode, payload) parts, for `canon`, `all_text` and the internal ids."""
    return [((event_path(e),), f"{e['event']}:{e['name']}", e.get("data")) for e in events]


def expected_events(
    case: Case, raw: list[dict[str, Any]], root_output: Any
) -> list[dict[str, Any]]:
    """The raw events of `astream_events` minus those of internal runs, data redacted.

    The root run's `on_chain_stream` events are left out (they are the enforced stream,
    checked on their own); its v1 `on_chain_end` output is `root_output`; a chat model's
    prompt (`data.input` of its start and end events) is removed.
    """
    ids = _internal_ids(case, event_parts_of(raw))
    root = raw[0]["run_id"]
    out: list[dict[str, Any]] = []
    for event in raw:
        kind, data = event["event"], dict(event.get("data") or {})
        if event["run_id"] == root:
            if kind == "on_chain_stream":
                continue
            if kind == "on_chain_end" and root_output is not _NO_OUTPUT:
                data["output"] = root_output
        elif kind != "on_custom_event" and case.path_internal(event_path(event)):
            continue
        if kind in _PROMPT_EVENTS:
            data.pop("input", None)
        out.append({**event, "data": _redact(case, ids, data)})
    return out


_NO_OUTPUT: Any = object()
"""`expected_events(root_output=...)` when the root's end event keeps its own output (v2)."""


def without_root_stream(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`events` without the root run's `on_chain_stream` events."""
    root = events[0]["run_id"]
    return [e for e in events if not (e["run_id"] == root and e["event"] == "on_chain_stream")]


def chunk_of(part: tuple, stream_mode: Any, subgraphs: bool) -> Any:
    """The v1 stream item a (ns, mode, payload) part stands for (inverse of event_parts)."""
    ns, mode, payload = part
    if isinstance(stream_mode, list):
        return (ns, mode, payload) if subgraphs else (mode, payload)
    return (ns, payload) if subgraphs else payload


def canon_events(events: list[dict[str, Any]]) -> list[Any]:
    """`canon` of events: kind, name, path and data (run ids, parents and tags left out)."""
    return canon(event_parts_of(events))


def interrupt_values(parts: list[tuple]) -> list[Any]:
    """Canonical values of the interrupts surfaced in `values` or `updates` parts."""
    found = []
    for _, mode, payload in parts:
        if mode == "updates" and isinstance(payload, dict) and "__interrupt__" in payload:
            found += [canon([((), "i", i.value)])[0][2] for i in payload["__interrupt__"]]
        if mode == "values" and isinstance(payload, dict):
            found += [
                canon([((), "i", i.value)])[0][2]
                for i in payload.get("__interrupt__", ())
                if isinstance(i, Interrupt)
            ]
    return found


# -- state reads ----------------------------------------------------------------------------


def expected_snapshot(case: Case, snapshot: Any, ids: set[str] | None = None) -> Any:
    """A raw StateSnapshot as a state read of the enforced graph must return it.

    Values of an internal namespace are empty; other values lose their internal messages
    (keys whose value was one are dropped); an internal task's result is removed, a visible
    one's redacted (`__start__`'s, the graph's input, as the graph's values); nested
    snapshots likewise; everything else is kept.
    """
    ids = ids or set()
    checkpoint_ns = snapshot.config["configurable"].get("checkpoint_ns") or ""
    path = _path(seg for seg in checkpoint_ns.split("|") if ":" in seg) if checkpoint_ns else ""
    if path and case.path_internal(path):
        values: Any = {}
    else:
        values = _redact(case, ids, snapshot.values)
    tasks = []
    for task in snapshot.tasks:
        # `__start__`'s result is the graph's input: judged as the graph's values are.
        task_path = path if task.name == "__start__" else f"{path}/{task.name}".lstrip("/")
        update: dict[str, Any] = {}
        if task.result is not None:
            internal = bool(task_path) and case.path_internal(task_path)
            result = None if internal else _redact(case, ids, task.result)
            update["result"] = None if result is _DROP else result
        if task.state is not None and hasattr(task.state, "tasks"):  # a nested snapshot
            update["state"] = expected_snapshot(case, task.state, ids)
        tasks.append(task._replace(**update))
    return snapshot._replace(values=values, tasks=tuple(tasks))


def snapshot_pointers(snapshots: Any) -> list[str]:
    """Checkpoint namespaces of the subgraph tasks the snapshots point to, first-seen order
    (nested snapshots, with `subgraphs=True`, walked too)."""
    found: list[str] = []

    def walk(snap: Any) -> None:
        for task in snap.tasks:
            state = task.state
            if hasattr(state, "tasks"):
                walk(state)
                state = state.config
            ns = ((state or {}).get("configurable") or {}).get("checkpoint_ns")
            if ns and ns not in found:
                found.append(ns)

    for snap in snapshots:
        walk(snap)
    return found


def snapshot_text(snapshot: Any) -> str:
    """Every string a client could see in a snapshot (values, tasks, interrupts, metadata)."""
    return all_text([((), "snapshot", snapshot._asdict())]) + all_text(
        [((), "tasks", [t._asdict() for t in snapshot.tasks])]
    )
