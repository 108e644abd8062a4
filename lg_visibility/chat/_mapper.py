"""The one chat event mapper: the enforced v2 stream -> chat events, pure and stateful.

This module turns the enforced v2 stream of a graph wrapped by `with_visibility`
(`astream(..., stream_mode=["messages", "values"], subgraphs=True, version="v2")`) into
the events a chat UI consumes. It knows nothing about any web framework or wire format:
`lg_visibility.chat._sse` encodes the events as our SSE, `lg_visibility.chat._aisdk` as
the AI SDK UI message stream, `lg_visibility.chat._history` shapes stored messages like
the `message` event, and the demo CLI folds them into its chat view.

Events (every `data` is one JSON object on one line):

| event         | data                                                   | UI merge rule        |
| ------------- | ------------------------------------------------------ | -------------------- |
| `token`       | `id`, `source`, `text`                                 | APPEND to message id |
| `message`     | `id`, `source`, `provenance`, `role`, `content`,       | UPDATE message id    |
|               | `tool_calls`                                           |                      |
| `tool_start`  | `tool_call_id`, `message_id`, `source`, `name`         | open a tool card     |
| `tool_args`   | `tool_call_id`, `source`, `delta`                      | APPEND to its args   |
| `tool_result` | `tool_call_id`, `source`, `provenance`, `name`,        | fill the card        |
|               | `content`, `status`                                    |                      |
| `tool_end`    | `tool_call_id`, `source`, `status`                     | close the card       |
| `interrupt`   | `id`, `source`, `value`                                | show a form          |
| `custom`      | `source`, `data` (only with stream_mode "custom")      | app-defined          |
| `error`       | `message`, `type`                                      | show an error        |
| `done`        | `thread_id`, `interrupted`                             | stop the spinner     |

An `interrupt` comes from the `values` part that carries it, or, for one no part carries (a
static breakpoint: `interrupt_before`/`interrupt_after`), at the end of the run from the
pending interrupts `achat_events(..., pending=...)` reads, with the root's `source`.

`source` is a readable producer name: the `lc_agent_name` that `create_agent(name=...)`
stamps on its events, else the node name of the innermost namespace segment
(`("order_agent:<task id>",)` -> `"order_agent"`), else the root name (`"main"`). Raw
namespace ids never leave this module. `provenance` is the producer the message itself
carries, decided at the source with its visibility (`response_metadata["provenance"]`:
`{"path": "knowledge_subgraph/answer", "agent"?: "kn_agent"}`), or None when it carries
none (a message of a plain graph); tokens carry only `source`, so nothing is added per token.

A message is streamed as `token` events and then confirmed once by a `message` event
carrying the whole message, taken from the first `values` snapshot that holds it (the
`messages` stream does not repeat a message it streamed token by token). Only messages
seen in this run's `messages` stream are confirmed, so a message that the enforced
stream dropped can never come back through a snapshot. Anything tagged
`response_metadata["visibility"] == "internal"` is dropped as a second line of defence.

Some messages never come through the `messages` stream (LangGraph streams the message
objects a node returns): what a node writes as a dict or a `(role, content)` pair, and
what a subgraph's node hands to its parent with `Command(graph=Command.PARENT,
update=...)`. A message new in a graph's state (not in that graph's first snapshot of the
run, nor `known`) that the stream never carried is sent whole, once, as one `message`
event (or a tool's `tool_result`), from the first snapshot that holds it, the root's or a
visible subgraph's (each graph keyed by its namespace; a subgraph's first snapshot is its
input, or, if its input schema has no messages, its first step's writes, which are then
not sent), and only if it is tagged `user_visible` where it was written: an untagged one,
on which nothing enforced decided, is left out, as in the history. So a handoff inside a
subgraph shows when it happens, not when the subgraph ends, and a subgraph whose messages
never reach the root (a node that drops its result) shows them live only, as its streamed
ones. Once an interrupt went through a graph (where it was raised, and each parent), that
graph's snapshots are not read for them: the resumed run sends what the interrupted
step's finished tasks wrote; a parallel branch's own snapshots still are. A resumed run is
given `known`: what the thread and its subgraphs already hold (the raw read's ids,
`known_message_ids(graph.raw_state.get_state(config, subgraphs=True))`: the redacted read
empties an internal subgraph's snapshot, visible nodes' messages in it too), which
LangGraph adds to the root state during the run (a finished sibling's message, an
interrupted subgraph's messages as it ends) and an earlier run already streamed; nor is
a known message sent again when the `messages` stream carries it (LangGraph streams a
subgraph's output again when a run continues past an `interrupt_after` on its last step).
"""

from __future__ import annotations

import logging
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from dataclasses import dataclass
from json import loads
from typing import Any, Literal, TypeAlias

from langchain_core.messages import BaseMessageChunk

from lg_visibility._compat import NS_END, NS_SEP, message_fields
from lg_visibility.chat._sse import dumps, encode_event

__all__ = [
    "ERROR_TEXT",
    "ChatEvent",
    "ChatEventType",
    "ChatStreamMapper",
    "achat_events",
    "assistant_data",
    "chat_events",
    "is_internal",
    "known_message_ids",
    "message_text",
    "pending_written_ids",
    "provenance",
    "source_name",
    "streamed_input",
    "tool_calls",
]

_EMPTY: frozenset[str] = frozenset()

ERROR_TEXT = "The assistant failed while answering; please try again."
"""What a client is told of an error by default: an exception's text may quote internal
state (an internal node's `OutputParserException` quotes the model's text)."""

ChatEventType: TypeAlias = Literal[
    "token",
    "message",
    "tool_start",
    "tool_args",
    "tool_result",
    "tool_end",
    "interrupt",
    "custom",
    "error",
    "done",
]

_ROOT = "main"
_log = logging.getLogger("lg_visibility.chat")


@dataclass(frozen=True, slots=True)
class ChatEvent:
    """One chat event: its SSE event name and its JSON payload."""

    event: ChatEventType
    data: dict[str, Any]

    def encode(self) -> bytes:
        """Encode as SSE bytes; see `encode_event`."""
        return encode_event(self)


# -- helpers on LangChain messages (duck-typed, so this module imports no langchain) ----


def is_internal(message: Any) -> bool:
    """Whether a message carries the `internal` visibility tag."""
    metadata = getattr(message, "response_metadata", None) or {}
    return bool(metadata.get("visibility") == "internal")


def provenance(message: Any) -> dict[str, Any] | None:
    """The producer a message carries (`{"path", "agent"?}`), a copy; None if it has none."""
    found = (getattr(message, "response_metadata", None) or {}).get("provenance")
    return dict(found) if isinstance(found, Mapping) else None


def message_text(message: Any) -> str:
    """The text of a message: its string content, or its text blocks joined."""
    content = getattr(message, "content", message)
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    return str(content)


def source_name(
    ns: Sequence[str], metadata: Mapping[str, Any] | None = None, *, root: str = _ROOT
) -> str:
    """A readable name for the producer of an event.

    `lc_agent_name` from the event metadata wins; otherwise the node name of the
    innermost namespace segment (`"order_agent:<task id>"` -> `"order_agent"`);
    otherwise `root`.
    """
    if metadata:
        agent = metadata.get("lc_agent_name")
        if isinstance(agent, str) and agent:
            return agent
    # The innermost segment naming a node; LangGraph numbers a task's second and later
    # subgraphs with a bare counter segment ("1"), which names nothing.
    for segment in reversed(ns):
        name, sep, _ = segment.partition(NS_END)
        if sep:
            return name.split(NS_SEP, 1)[0] or root
    return root


def _role(message: Any) -> str:
    kind = getattr(message, "type", "")
    if kind in ("ai", "AIMessageChunk"):
        return "assistant"
    if kind in ("human", "HumanMessageChunk"):
        return "user"
    if kind in ("tool", "ToolMessageChunk"):
        return "tool"
    return str(kind)


def provenance_source(message: Any) -> str | None:
    """The readable producer of a stored message: its agent, else its node; None if unknown."""
    found = provenance(message)
    if found is None:
        return None
    agent = found.get("agent")
    if isinstance(agent, str) and agent:
        return agent
    path = found.get("path")
    return path.rsplit("/", 1)[-1] if isinstance(path, str) and path else None


def known_message_ids(
    snapshot: Any,
    *,
    sent: Collection[str] | None = None,
    results: Collection[str] = (),
) -> set[str]:
    """The ids of the messages a state snapshot holds (`values["messages"]`), of those its
    pending tasks already wrote (`tasks[].result["messages"]`: an interrupted step's
    finished tasks), and, with `subgraphs=True`, the same of each pending task's subgraph
    (`tasks[].state`): for `ChatStreamMapper(known=...)` on a resumed run.

    A message a pending task wrote as a dict with an id of its own is in the read only
    because it applies the finished tasks' writes; the interrupted run never sent the
    dict (the `messages` stream carries objects, and an interrupted graph's snapshots are
    not read), though it may have sent the same id as an object (a streamed answer the
    task stored as a dict). The chat router's notes decide: such a message is known only
    if a run sent it (`sent`, `RunNotes.sources`), a tool message only if a run sent the
    result of its call (`results`, `RunNotes.results`: a `tool_result` event names no
    message id). Without `sent`, every id is known: nothing is sent twice, and such a
    message is not sent live."""
    held, wrote = _pending_messages(snapshot)
    known = _ids(held) | _ids(wrote)
    if sent is None:
        return known
    return known - {
        f["id"]
        for f in _written(wrote)
        if (f["tool_call_id"] not in results if "tool_call_id" in f else f["id"] not in sent)
    }


def pending_written_ids(snapshot: Any) -> set[str]:
    """The ids of the messages a snapshot's pending tasks (its subgraphs' too) wrote as
    dicts with an id of their own: whether a run sent them, the notes must say."""
    return {f["id"] for f in _written(_pending_messages(snapshot)[1])}


def _pending_messages(snapshot: Any) -> tuple[list[Any], list[Any]]:
    """The message lists of each snapshot (the nested ones too), and of each pending task."""
    held: list[Any] = []
    wrote: list[Any] = []
    pending = [snapshot]
    while pending:
        snap = pending.pop()
        values = getattr(snap, "values", None)
        held.append(values.get("messages") if isinstance(values, Mapping) else None)
        for task in getattr(snap, "tasks", None) or ():
            result = getattr(task, "result", None)
            wrote.append(result.get("messages") if isinstance(result, Mapping) else None)
            state = getattr(task, "state", None)
            if state is not None and hasattr(state, "values"):  # a nested StateSnapshot
                pending.append(state)
    return held, wrote


def _items(messages: Any) -> Any:
    return messages if isinstance(messages, (list, tuple)) else [messages]


def _ids(lists: list[Any]) -> set[str]:
    return {
        message.id
        for messages in lists
        for message in _items(messages)
        if isinstance(getattr(message, "id", None), str)
    }


def _written(lists: list[Any]) -> list[dict[str, Any]]:
    """The fields of each message written as a dict with an id of its own."""
    return [
        fields
        for messages in lists
        for item in _items(messages)
        if (fields := message_fields(item)) is not None and isinstance(fields.get("id"), str)
    ]


def tool_calls(message: Any) -> list[dict[str, Any]]:
    """The tool calls of an AI message as `{"id", "name", "args"}` dicts."""
    return [
        {"id": call.get("id"), "name": call.get("name"), "args": call.get("args", {})}
        for call in getattr(message, "tool_calls", None) or []
    ]


def streamed_input(text: str) -> Any:
    """A tool call's input from its `tool_args` deltas joined, as the AI SDK (`ai` 5) reads
    it once complete: `{}` if blank; None if it is not JSON (`NaN` and `Infinity` are not)."""
    if not text.strip():
        return {}
    try:
        return loads(text, parse_constant=_not_json)
    except ValueError:
        return None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def assistant_data(message: Any, source: str | None) -> dict[str, Any]:
    """The payload of a `message` event; the history shows stored messages the same way."""
    return {
        "id": message.id,
        "source": source,
        "provenance": provenance(message),
        "role": "assistant",
        "content": message_text(message),
        "tool_calls": tool_calls(message),
    }


# -- mapping ----------------------------------------------------------------------------


class ChatStreamMapper:
    """Map v2 stream parts of one run to chat events; stateful, pure, no I/O.

    Create one mapper per run (per `astream` call). Feed every part in order with
    `feed`; when the stream has ended call `done`, or `error` and then `done` if it
    raised. `achat_events`/`chat_events` do exactly that around an iterable of parts.

    Args:
        root: Source name for events from the root graph that carry no agent name.
        known: Ids of messages the thread holds before the run beyond each graph's first
            snapshot: for a resumed run, what the interrupted step's finished tasks wrote
            and what its interrupted subgraphs hold
            (`known_message_ids(graph.raw_state.get_state(config, subgraphs=True))`), which
            LangGraph adds to the root state during the run and which an earlier run
            already streamed.
    """

    def __init__(self, *, root: str = _ROOT, known: Iterable[str] = ()) -> None:
        self._root = root
        self._known = frozenset(known)
        # message id -> source, for messages whose tokens were emitted in this run
        self._streamed: dict[str, str] = {}
        self._finalized: set[str] = set()
        self._internal: set[str] = set()
        # (message id, chunk index) -> tool call id; chunks after the first carry no id
        self._tool_index: dict[tuple[str, int], str] = {}
        self._tool_source: dict[str, str] = {}
        self._tools_started: set[str] = set()
        self._tools_ended: set[str] = set()
        self._interrupts: dict[str, Any] = {}
        # namespace -> ids of the messages in its graph's first snapshot of the run (the
        # root's: the thread before the run; a subgraph's, beyond the root's: what the run
        # added before the subgraph started, or its first step wrote if that was first)
        self._before: dict[tuple[str, ...], set[str]] = {}
        # ids of the messages sent whole from a snapshot (once, whichever graph's)
        self._sent_whole: set[str] = set()
        # namespaces an interrupt went through (where it was raised, and their parents)
        self._interrupted: set[tuple[str, ...]] = set()

    @property
    def interrupt_ids(self) -> list[str]:
        """Ids of the interrupts emitted so far, in order."""
        return list(self._interrupts)

    def feed(self, part: Mapping[str, Any]) -> list[ChatEvent]:
        """Map one v2 stream part (`{"type", "ns", "data", ...}`) to chat events.

        Parts of modes other than messages, values and custom map to nothing.

        Raises:
            TypeError: If `part` is not a v2 stream part (a tuple from the v1 format).
        """
        if not isinstance(part, Mapping) or "type" not in part:
            msg = (
                f"ChatStreamMapper.feed() takes v2 stream parts (dicts with 'type', 'ns', "
                f"'data'), got {type(part).__name__}; call astream(..., version='v2')."
            )
            raise TypeError(msg)
        kind = part["type"]
        ns = tuple(part.get("ns") or ())
        if kind == "values":
            return self._values(ns, part)
        if kind == "messages":
            message, metadata = part["data"]
            return self._message(ns, message, metadata or {})
        if kind == "custom":
            return [
                ChatEvent(
                    "custom", {"source": source_name(ns, root=self._root), "data": part["data"]}
                )
            ]
        return []

    def error(self, exc: BaseException, *, message: str | None = None) -> ChatEvent:
        """The `error` event for an exception raised by the run.

        The exception's text is not sent by default: it may quote internal state.
        """
        text = message or ERROR_TEXT
        return ChatEvent("error", {"message": text, "type": type(exc).__name__})

    def pending(self, interrupts: Iterable[Any]) -> list[ChatEvent]:
        """`interrupt` events for the pending interrupts this run's events did not carry:
        a static breakpoint's (`interrupt_before`/`interrupt_after`, which no `values` part
        carries), or any when the stream has no `values` mode. Call it once the stream has
        ended, with what the checkpoint holds; each has an `id` and a `value`."""
        events: list[ChatEvent] = []
        for interrupt in interrupts:
            interrupt_id = getattr(interrupt, "id", None)
            if interrupt_id is None or interrupt_id in self._interrupts:
                continue
            value = getattr(interrupt, "value", None)
            self._interrupts[interrupt_id] = value
            events.append(
                ChatEvent("interrupt", {"id": interrupt_id, "source": self._root, "value": value})
            )
        return events

    def done(self, *, thread_id: str | None, interrupted: bool | None = None) -> ChatEvent:
        """The closing `done` event; `interrupted` defaults to "an interrupt was seen"."""
        if interrupted is None:
            interrupted = bool(self._interrupts)
        return ChatEvent("done", {"thread_id": thread_id, "interrupted": interrupted})

    # -- values: interrupts first, then confirm streamed messages ----------------------

    def _values(self, ns: tuple[str, ...], part: Mapping[str, Any]) -> list[ChatEvent]:
        events: list[ChatEvent] = []
        # Interrupts before messages: when a run is interrupted the snapshot that carries
        # the interrupt can be the last part, and the UI must switch to the form.
        for interrupt in part.get("interrupts") or ():
            self._interrupted.update(ns[:depth] for depth in range(len(ns) + 1))
            interrupt_id = getattr(interrupt, "id", None)
            if interrupt_id is None and isinstance(interrupt, Mapping):
                interrupt_id = interrupt.get("id")
            if interrupt_id is None or interrupt_id in self._interrupts:
                continue
            value = getattr(interrupt, "value", None)
            if value is None and isinstance(interrupt, Mapping):
                value = interrupt.get("value")
            self._interrupts[interrupt_id] = value
            events.append(
                ChatEvent(
                    "interrupt",
                    {
                        "id": interrupt_id,
                        "source": source_name(ns, root=self._root),
                        "value": value,
                    },
                )
            )
        data = part.get("data")
        # v2 keeps the state's type: a dict, or a Pydantic or dataclass state's object.
        if isinstance(data, Mapping):
            messages = data.get("messages")
        else:
            messages = getattr(data, "messages", None)
        before = self._before.get(ns)
        # Not in a graph an interrupt went through, once it did: its last snapshots show
        # the interrupted step's finished tasks' writes applied, as the resumed run applies
        # them again, and a message written as a dict gets a new id each time. (A parallel
        # branch's own snapshots are its steps, whose ids its result keeps.)
        new_here = before is not None and ns not in self._interrupted
        thread = self._before.get(()) or _EMPTY
        if before is None:
            # The graph's first snapshot in the run (the root's, or a subgraph's, keyed by
            # its namespace): nothing new in it yet. A subgraph's keeps only what the
            # root's first one does not hold (its input is mostly the thread).
            before = self._before[ns] = {
                m.id
                for m in messages or ()
                if isinstance(getattr(m, "id", None), str) and m.id not in thread
            }
        for message in messages or ():
            message_id = getattr(message, "id", None)
            if message_id in self._streamed:
                if (
                    message_id not in self._finalized
                    and message_id not in self._internal
                    and not is_internal(message)
                ):
                    events.extend(self._final(message, self._streamed[message_id]))
            elif (
                new_here
                and message_id not in thread  # (most are: a long thread's history)
                and message_id not in before
                and message_id not in self._known
                and message_id not in self._sent_whole
                and isinstance(message_id, str)
            ):
                events.extend(self._written(message_id, message))
        return events

    def _written(self, message_id: str, message: Any) -> list[ChatEvent]:
        """A message new in a graph's state that the `messages` stream never carried, sent
        whole from the first snapshot that holds it (the root's, or a visible subgraph's):
        what a node wrote as a dict or a `(role, content)` pair, or handed to its parent
        with `Command(graph=Command.PARENT, update=...)`, which LangGraph's `messages` mode
        does not stream. Only if tagged visible where it was written: an untagged one is
        left out, as in the history."""
        if (
            message_id in self._internal
            or (getattr(message, "response_metadata", None) or {}).get("visibility")
            != "user_visible"
        ):
            return []
        self._sent_whole.add(message_id)
        source = provenance_source(message) or self._root
        role = _role(message)
        if role == "assistant":
            return self._whole(message_id, message, source)
        if role == "tool":
            return self._tool_result(message, source)
        return []

    # -- messages: tokens, tool-call chunks, whole messages ----------------------------

    def _message(
        self, ns: tuple[str, ...], message: Any, metadata: Mapping[str, Any]
    ) -> list[ChatEvent]:
        message_id = getattr(message, "id", None)
        if is_internal(message):
            if message_id is not None:
                self._internal.add(message_id)
            return []
        if message_id is not None and (message_id in self._internal or message_id in self._known):
            # (known: the thread held it before this resumed run, which an earlier run
            # showed; LangGraph streams a subgraph's output again when a run continues
            # past a breakpoint after the subgraph's last step)
            return []
        source = source_name(ns, metadata, root=self._root)
        role = _role(message)
        if role == "tool":
            return self._tool_result(message, source)
        if role != "assistant" or message_id is None:
            return []
        if isinstance(message, BaseMessageChunk):
            return self._chunk(message_id, message, source)
        # A whole AIMessage in the messages stream: a node returned it without streaming.
        if message_id in self._finalized:
            return []
        return self._whole(message_id, message, source)

    def _whole(self, message_id: str, message: Any, source: str) -> list[ChatEvent]:
        events: list[ChatEvent] = []
        for call in tool_calls(message):
            call_id = call["id"]
            if call_id is None or call_id in self._tools_started:
                continue
            events.append(self._tool_start(call_id, message_id, source, call["name"]))
            events.append(
                ChatEvent(
                    "tool_args",
                    {"tool_call_id": call_id, "source": source, "delta": dumps(call["args"])},
                )
            )
        self._streamed.setdefault(message_id, source)
        events.extend(self._final(message, source))
        return events

    def _tool_start(self, call_id: str, message_id: str, source: str, name: Any) -> ChatEvent:
        self._tools_started.add(call_id)
        self._tool_source[call_id] = source
        return ChatEvent(
            "tool_start",
            {"tool_call_id": call_id, "message_id": message_id, "source": source, "name": name},
        )

    def _chunk(self, message_id: str, chunk: Any, source: str) -> list[ChatEvent]:
        events: list[ChatEvent] = []
        self._streamed.setdefault(message_id, source)
        text = message_text(chunk)
        if text:
            events.append(ChatEvent("token", {"id": message_id, "source": source, "text": text}))
        for piece in getattr(chunk, "tool_call_chunks", None) or []:
            index = piece.get("index")
            key = (message_id, index if isinstance(index, int) else 0)
            call_id = piece.get("id") or self._tool_index.get(key)
            if call_id is None:
                continue  # args before any id: the provider broke the protocol; skip
            self._tool_index[key] = call_id
            if call_id not in self._tools_started:
                events.append(self._tool_start(call_id, message_id, source, piece.get("name")))
            delta = piece.get("args")
            if delta:
                events.append(
                    ChatEvent(
                        "tool_args", {"tool_call_id": call_id, "source": source, "delta": delta}
                    )
                )
        return events

    def _final(self, message: Any, source: str) -> list[ChatEvent]:
        self._finalized.add(message.id)
        return [ChatEvent("message", assistant_data(message, source))]

    def _tool_result(self, message: Any, source: str) -> list[ChatEvent]:
        call_id = getattr(message, "tool_call_id", None)
        if call_id is None or call_id in self._tools_ended:
            return []
        self._tools_ended.add(call_id)
        source = self._tool_source.get(call_id, source)
        status = getattr(message, "status", None) or "success"
        return [
            ChatEvent(
                "tool_result",
                {
                    "tool_call_id": call_id,
                    "source": source,
                    "provenance": provenance(message),
                    "name": getattr(message, "name", None),
                    "content": message_text(message),
                    "status": status,
                },
            ),
            ChatEvent("tool_end", {"tool_call_id": call_id, "source": source, "status": status}),
        ]


# -- whole-run helpers -----------------------------------------------------------------


async def achat_events(
    parts: AsyncIterable[Mapping[str, Any]],
    *,
    thread_id: str | None,
    root: str = _ROOT,
    interrupted: Callable[[bool], Awaitable[bool]] | None = None,
    known: Iterable[str] = (),
    pending: Callable[[], Awaitable[Sequence[Any] | None]] | None = None,
) -> AsyncIterator[ChatEvent]:
    """Map a whole run's v2 stream to chat events, ending with exactly one `done`.

    An exception raised by the stream is logged and becomes an `error` event followed by
    `done`; cancellation (`asyncio.CancelledError`) is not caught and propagates. The
    stream is closed however the mapping ends.

    Args:
        parts: The enforced v2 stream of one run.
        thread_id: Goes into the `done` event.
        root: Source name for root events without an agent name.
        interrupted: Decides `done`'s `interrupted` once the stream has ended; it gets the
            events' own view (an interrupt was seen and the run did not fail). A chat
            server reads the checkpoint here: after a failed resume the interrupt is
            still pending.
        known: See `ChatStreamMapper`.
        pending: Instead of `interrupted`: reads the thread's pending interrupts once the
            stream has ended (a chat server reads the checkpoint), or None if it cannot
            (then `done` says what the events saw). Those the events did not carry (a
            static breakpoint's) are sent as `interrupt` events unless the run failed;
            `done.interrupted` is whether any is pending.
    """
    _one_decider(interrupted, pending)
    mapper = ChatStreamMapper(root=root, known=known)
    failed = False
    try:
        async with _closing(parts):
            async for part in parts:
                for event in mapper.feed(part):
                    yield event
    except Exception as exc:
        _log.exception("chat run on thread %s failed", thread_id)
        yield mapper.error(exc)
        failed = True
    seen = bool(mapper.interrupt_ids) and not failed
    if pending is not None:
        for event in _ending(mapper, await pending(), seen, failed, thread_id):
            yield event
        return
    yield mapper.done(
        thread_id=thread_id, interrupted=seen if interrupted is None else await interrupted(seen)
    )


def chat_events(
    parts: Iterable[Mapping[str, Any]],
    *,
    thread_id: str | None,
    root: str = _ROOT,
    interrupted: Callable[[bool], bool] | None = None,
    known: Iterable[str] = (),
    pending: Callable[[], Sequence[Any] | None] | None = None,
) -> Iterator[ChatEvent]:
    """Sync twin of `achat_events`."""
    _one_decider(interrupted, pending)
    mapper = ChatStreamMapper(root=root, known=known)
    failed = False
    try:
        for part in parts:
            yield from mapper.feed(part)
    except Exception as exc:
        _log.exception("chat run on thread %s failed", thread_id)
        yield mapper.error(exc)
        failed = True
    finally:
        close = getattr(parts, "close", None)
        if callable(close):
            close()
    seen = bool(mapper.interrupt_ids) and not failed
    if pending is not None:
        yield from _ending(mapper, pending(), seen, failed, thread_id)
        return
    yield mapper.done(
        thread_id=thread_id, interrupted=seen if interrupted is None else interrupted(seen)
    )


def _one_decider(interrupted: Any, pending: Any) -> None:
    if interrupted is not None and pending is not None:
        msg = "pass `interrupted` or `pending`, not both: each decides `done.interrupted`."
        raise TypeError(msg)


def _ending(
    mapper: ChatStreamMapper,
    waiting: Sequence[Any] | None,
    seen: bool,
    failed: bool,
    thread_id: str | None,
) -> list[ChatEvent]:
    """The events after a run's stream, given its pending interrupts (None: unread)."""
    if waiting is None:
        return [mapper.done(thread_id=thread_id, interrupted=seen)]
    events = [] if failed else mapper.pending(waiting)
    return [*events, mapper.done(thread_id=thread_id, interrupted=bool(waiting))]


@asynccontextmanager
async def _closing(parts: Any) -> AsyncIterator[None]:
    try:
        yield
    finally:
        aclose = getattr(parts, "aclose", None)
        if callable(aclose):
            await aclose()
