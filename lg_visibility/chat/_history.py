"""The visible history of a thread, shaped like the live chat events.

`history_items(state_values, visible, notes)` is what `GET {prefix}/{thread_id}/messages`
returns: the stored messages a user may see (`is_user_visible`), each shaped as the
mapper's `message` event shapes it live (`lg_visibility.chat._mapper.assistant_data`), so a
UI renders live and reloaded messages with the same code.

What the checkpoint does not hold, a run's `RunNotes` keep: the producer (`source`) of each
message the run streamed, the custom events (cards) it sent, each placed after the message
it followed, and the tool calls it showed that no result answered yet (a resumed AI SDK
card shows their input again). The router stores them next to the thread's checkpoints
(`NotesBook`) when a run ends, cancelled or not, before the thread is free, so labels,
cards and calls survive a reload and a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lg_visibility.chat._mapper import (
    ChatEvent,
    assistant_data,
    is_internal,
    message_text,
    provenance,
    provenance_source,
    streamed_input,
)

__all__ = [
    "NOTES_NS",
    "NotesBook",
    "RunNotes",
    "history_item",
    "history_items",
    "is_user_visible",
]

NOTES_NS = "lg_visibility_notes"
"""Checkpoint namespace of a thread's notes; LangGraph's own namespaces are `node:task`."""

MAX_OPEN_CALLS = 100
"""Most unanswered tool calls a thread's notes keep (a card never answered stays open)."""


def is_user_visible(message: Any) -> bool:
    """History rule: user input unless tagged internal; anything else only if user_visible.

    Messages produced by the graph are tagged where they are produced (see
    `with_visibility`); an untagged AI or tool message is left out rather than risk
    showing internal output.
    """
    kind = getattr(message, "type", "")
    if kind == "human":
        return not is_internal(message)
    metadata = getattr(message, "response_metadata", None) or {}
    return kind in ("ai", "tool") and metadata.get("visibility") == "user_visible"


def history_item(message: Any, *, source: str | None = None) -> dict[str, Any]:
    """One history entry, shaped like the live events so a UI renders both alike.

    - user: `{"id", "role": "user", "content"}`
    - assistant: `{"id", "role": "assistant", "source", "provenance", "content",
      "tool_calls"}` (as the `message` event)
    - tool: `{"id", "role": "tool", "tool_call_id", "name", "provenance", "content",
      "status"}`

    `source` is the producer the live stream named (from the thread's notes); without
    one it is read from the producer the message carries (`response_metadata["provenance"]`:
    its agent, else its node), else the message's `name`, else None (no label).
    """
    kind = getattr(message, "type", "")
    if kind == "human":
        return {"id": message.id, "role": "user", "content": message_text(message)}
    if kind == "tool":
        return {
            "id": message.id,
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "name": message.name,
            "provenance": provenance(message),
            "content": message_text(message),
            "status": getattr(message, "status", None) or "success",
        }
    return assistant_data(
        message, source or provenance_source(message) or getattr(message, "name", None) or None
    )


@dataclass
class RunNotes:
    """What one thread's runs streamed beyond the stored messages: sources, cards, calls.

    Feed it every chat event of a run (`observe`); `sources` maps message id to
    producer, `cards` holds each custom event as `{"after", "source", "data"}`, where
    `after` is the id of the message streamed just before it (None: before any);
    `calls` maps the id of each tool call shown and not yet answered (an interrupted
    tool's) to `{"name", "args", "source", "provenance"}` as shown, the last
    `MAX_OPEN_CALLS` of them: a resumed run's AI SDK card shows that input again. A run
    that answers a new message (`new_turn`), not an interrupt, leaves the calls earlier
    runs left open behind: nothing can answer them any more. `results` holds the ids of
    the tool calls whose results were sent in this turn (a `tool_result` event names no
    message id): with `sources`, what a resumed run must not send again
    (`known_message_ids`).
    """

    sources: dict[str, str] = field(default_factory=dict)
    cards: list[dict[str, Any]] = field(default_factory=list)
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    results: set[str] = field(default_factory=set)
    new_turn: bool = False
    _last: str | None = None
    # the arguments of this run's calls only streamed, not confirmed
    _deltas: dict[str, list[str]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def observe(self, event: ChatEvent) -> None:
        """Record the source of a message, a card after the last message seen, or a tool
        call opened or answered."""
        data, kind = event.data, event.event
        if kind in ("token", "message") and isinstance(data.get("id"), str):
            self.sources[data["id"]] = str(data.get("source"))
            self._last = data["id"]
        if kind == "message":
            for call in data.get("tool_calls") or ():
                if isinstance(call.get("id"), str):
                    self._open(call["id"], call.get("name"), call.get("args"), data)
        elif kind == "tool_start" and isinstance(data.get("tool_call_id"), str):
            if data["tool_call_id"] not in self.calls:
                self._open(data["tool_call_id"], data.get("name"), None, data)
                self._deltas[data["tool_call_id"]] = []
        elif kind == "tool_args" and data.get("tool_call_id") in self._deltas:
            self._deltas[data["tool_call_id"]].append(str(data.get("delta", "")))
        elif kind == "tool_result" and isinstance(data.get("tool_call_id"), str):
            self.calls.pop(data["tool_call_id"], None)
            self._deltas.pop(data["tool_call_id"], None)
            self.results.add(data["tool_call_id"])
        elif kind == "custom":
            self.cards.append({"after": self._last, "source": data["source"], "data": data["data"]})

    def _open(self, call_id: str, name: Any, args: Any, data: dict[str, Any]) -> None:
        self.calls.pop(call_id, None)  # (re)opened: the newest last
        self._deltas.pop(call_id, None)
        self.calls[call_id] = {
            "name": name,
            "args": args,
            "source": data.get("source"),
            "provenance": data.get("provenance"),
        }

    def _shown_calls(self) -> dict[str, dict[str, Any]]:
        """`calls`, a card whose arguments were only streamed holding them as parsed."""
        calls = dict(self.calls)
        for call_id, deltas in self._deltas.items():
            if call_id in calls:
                calls[call_id] = {**calls[call_id], "args": streamed_input("".join(deltas))}
        return calls

    def to_json(self) -> dict[str, Any]:
        """The notes as plain JSON."""
        return {
            "sources": dict(self.sources),
            "cards": list(self.cards),
            "calls": self._shown_calls(),
            "results": sorted(self.results),
        }

    @classmethod
    def from_json(cls, value: Any) -> RunNotes:
        """Notes from `to_json()` output; anything else gives empty notes."""
        if not isinstance(value, Mapping):
            return cls()
        sources = value.get("sources")
        cards = value.get("cards")
        calls = value.get("calls")
        results = value.get("results")
        return cls(
            sources=dict(sources) if isinstance(sources, Mapping) else {},
            cards=[dict(c) for c in cards if isinstance(c, Mapping)]
            if isinstance(cards, list)
            else [],
            calls={
                k: dict(v)
                for k, v in calls.items()
                if isinstance(k, str) and isinstance(v, Mapping)
            }
            if isinstance(calls, Mapping)
            else {},
            results={r for r in results if isinstance(r, str)}
            if isinstance(results, list)
            else set(),
        )

    @property
    def empty(self) -> bool:
        """Nothing to add to a thread's notes (a new turn always has: it ends the earlier
        turns' calls and results)."""
        return not (self.new_turn or self.sources or self.cards or self.calls or self.results)

    def merged(self, later: RunNotes) -> RunNotes:
        """These notes (a thread's, as stored) followed by a later run's, whose answers
        close earlier calls (all of them, if it answered a new message)."""
        calls = {
            k: v for k, v in self.calls.items() if not later.new_turn and k not in later.results
        }
        for call_id, call in later._shown_calls().items():
            calls.pop(call_id, None)
            calls[call_id] = call
        return RunNotes(
            sources={**self.sources, **later.sources},
            cards=self.cards + later.cards,
            calls=dict(list(calls.items())[-MAX_OPEN_CALLS:]),
            # A new message ends the earlier turns: their calls cannot come back in a
            # resume (and a model may reuse a call's id in the next turn).
            results=(set() if later.new_turn else self.results) | later.results,
        )


def history_items(
    messages: Iterable[Any],
    *,
    visible: Callable[[Any], bool] = is_user_visible,
    notes: RunNotes | None = None,
) -> list[dict[str, Any]]:
    """The visible messages as history entries, with the notes' cards in place.

    A card is `{"id": "card-<n>", "role": "custom", "source", "data"}`, placed after the
    message it followed live (shown or not); a card that followed no message, or one no
    longer in state, goes at the end.
    """
    notes = notes or RunNotes()
    items: list[dict[str, Any]] = []
    pending: dict[str | None, list[dict[str, Any]]] = {}
    for n, card in enumerate(notes.cards):
        entry = {
            "id": f"card-{n}",
            "role": "custom",
            "source": card["source"],
            "data": card["data"],
        }
        pending.setdefault(card.get("after"), []).append(entry)
    for message in messages:
        message_id = getattr(message, "id", None)
        if visible(message):
            items.append(history_item(message, source=notes.sources.get(message_id or "")))
        items.extend(pending.pop(message_id, []))
    for cards in pending.values():
        items.extend(cards)
    return items


class NotesBook:
    """A thread's notes, kept as checkpoints in the namespace `NOTES_NS` of the thread.

    Any LangGraph checkpointer stores them (SQLite, Postgres, memory), `adelete_thread`
    removes them with the thread, and the graph never reads that namespace.
    """

    def __init__(self, checkpointer: Any) -> None:
        self._saver = checkpointer

    def _config(self, thread_id: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": NOTES_NS}}

    async def load(self, thread_id: str) -> RunNotes:
        """The thread's notes so far (empty if none)."""
        found = await self._saver.aget_tuple(self._config(thread_id))
        if found is None:
            return RunNotes()
        return RunNotes.from_json(found.checkpoint["channel_values"].get("notes"))

    async def add(self, thread_id: str, notes: RunNotes) -> None:
        """Append one run's notes to the thread's."""
        from langgraph.checkpoint.base import empty_checkpoint

        if notes.empty:
            return
        found = await self._saver.aget_tuple(self._config(thread_id))
        before = (
            RunNotes()
            if found is None
            else RunNotes.from_json(found.checkpoint["channel_values"].get("notes"))
        )
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"notes": before.merged(notes).to_json()}
        version = checkpoint["id"]
        checkpoint["channel_versions"] = {"notes": version}
        config = found.config if found is not None else self._config(thread_id)
        await self._saver.aput(
            config, checkpoint, {"source": "update", "step": -1}, {"notes": version}
        )
