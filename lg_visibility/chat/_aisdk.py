"""Chat events -> Vercel AI SDK UI message stream (v5) parts; pure and stateful, no I/O.

One `UIStreamEncoder` per response turns the chat events of one run (from
`ChatStreamMapper`) into the parts `useChat` assembles into one assistant `UIMessage`
(`ai` 5.x `uiMessageChunkSchema`). `lg_visibility.chat._sse.encode_part` writes each as
`data: <JSON>`; the stream ends with `data: [DONE]`.

| chat event    | UI message stream parts                                               |
| ------------- | --------------------------------------------------------------------- |
| (first)       | `start` `{messageId}`                                                 |
| `token`       | `text-start` `{id, providerMetadata}` once per message, `text-delta`  |
| `message`     | `text-end` (or start/delta/end for an unstreamed message);            |
|               | `tool-input-available` per tool call                                  |
| `tool_start`  | `tool-input-start` `{toolCallId, toolName}`                           |
| `tool_args`   | `tool-input-delta` `{toolCallId, inputTextDelta}`                     |
| `tool_result` | `tool-output-available` `{toolCallId, output}`, or                    |
|               | `tool-output-error` `{toolCallId, errorText}` when its status is error |
| `interrupt`   | `data-interrupt` `{id, data: {id, value, source}}`                    |
| `custom`      | `data-<type>` `{data: {value, source}}`; `<type>` is the payload's    |
|               | `"type"` when it is a simple name, else `custom`                      |
| `error`       | `error` `{errorText}`                                                 |
| `done`        | `text-end` of open texts, `finish` `{messageMetadata}`                |

The producer goes in `providerMetadata: {"lg_visibility": {"source": ...}}` of text and
tool parts; `text-end` and `tool-input-available`, sent once the whole message is known,
add its `provenance` (`{"path", "agent"?}`, see `lg_visibility.chat._mapper`) when it
carries one, and the AI SDK keeps a text part's metadata from its `text-end`, so the
assembled `UIMessage` holds it. Nothing is added per token. Every part comes from a
chat event, and chat events come from the enforced stream only, so nothing internal can
appear here that the mapper did not let through.

A resumed run's response builds a new assistant message, so the result of a tool call
that the interrupted run showed (a tool that called `interrupt()`) opens its card again
there, with `tool-input-start` and `tool-input-available` before its output: the input is
the one the interrupted run showed when the encoder is given the calls the thread's
responses showed and no result answered (`calls`: our router keeps them in the thread's
notes, from the chat events that left), else null. The interrupted message's own card
stays at `input-available` in a client that keeps it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lg_visibility.chat._mapper import ChatEvent, streamed_input

__all__ = ["METADATA_KEY", "UIStreamEncoder"]

METADATA_KEY = "lg_visibility"
"""Key of our entry in a part's `providerMetadata`."""

_DATA_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def _meta(source: Any, provenance: Any = None) -> dict[str, Any]:
    if provenance is None:
        return {METADATA_KEY: {"source": source}}
    return {METADATA_KEY: {"source": source, "provenance": provenance}}


class UIStreamEncoder:
    """Map the chat events of one run to AI SDK UI message stream parts.

    Args:
        message_id: The `messageId` of the assistant `UIMessage` the parts build.
        calls: For a resumed run, the tool calls the thread's earlier responses showed
            and no result answered yet, as call id -> `{"name", "args", "source"?,
            "provenance"?}` as shown (the router keeps them in the thread's notes): a
            result for one of them opens its card in this message as it was shown.
    """

    def __init__(
        self, message_id: str, calls: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        self._message_id = message_id
        self._calls = calls or {}
        self._started = False
        self._open_text: dict[str, Any] = {}  # text id -> source, started and not ended
        self._ended_text: set[str] = set()
        self._tool_started: set[str] = set()
        self._tool_input: set[str] = set()  # tool-input-available sent
        self._tool_names: dict[str, str] = {}
        self._tool_text: dict[str, list[str]] = {}  # streamed input, not yet available

    def start(self) -> list[dict[str, Any]]:
        """The `start` part, if not sent yet (it depends on no event; `encode` sends it
        with the first event otherwise)."""
        if self._started:
            return []
        self._started = True
        return [{"type": "start", "messageId": self._message_id}]

    def encode(self, event: ChatEvent) -> list[dict[str, Any]]:
        """The parts for one chat event, in order."""
        parts = self.start()
        kind, data = event.event, event.data
        if kind == "token":
            parts.extend(self._text_start(data["id"], data["source"]))
            parts.append({"type": "text-delta", "id": data["id"], "delta": data["text"]})
        elif kind == "message":
            parts.extend(self._message(data))
        elif kind == "tool_start":
            parts.extend(self._tool_start(data["tool_call_id"], data["name"], data["source"]))
        elif kind == "tool_args":
            call_id = data["tool_call_id"]
            if call_id in self._tool_started and call_id not in self._tool_input:
                self._tool_text.setdefault(call_id, []).append(data["delta"])
                parts.append(
                    {
                        "type": "tool-input-delta",
                        "toolCallId": call_id,
                        "inputTextDelta": data["delta"],
                    }
                )
        elif kind == "tool_result":
            parts.extend(self._tool_result(data))
        elif kind == "interrupt":
            parts.append(
                {
                    "type": "data-interrupt",
                    "id": data["id"],
                    "data": {"id": data["id"], "value": data["value"], "source": data["source"]},
                }
            )
        elif kind == "custom":
            payload = data["data"]
            name = payload.get("type") if isinstance(payload, dict) else None
            if not (isinstance(name, str) and _DATA_NAME.fullmatch(name)) or name == "interrupt":
                name = "custom"
            parts.append(
                {"type": f"data-{name}", "data": {"value": payload, "source": data["source"]}}
            )
        elif kind == "error":
            parts.append({"type": "error", "errorText": data["message"]})
        elif kind == "done":
            for text_id in list(self._open_text):
                parts.append(self._text_end(text_id, None))
            parts.append(
                {
                    "type": "finish",
                    "messageMetadata": {
                        "thread_id": data["thread_id"],
                        "interrupted": data["interrupted"],
                    },
                }
            )
        return parts

    # -- text ---------------------------------------------------------------------------

    def _text_start(self, text_id: str, source: Any) -> list[dict[str, Any]]:
        if text_id in self._open_text or text_id in self._ended_text:
            return []
        self._open_text[text_id] = source
        return [{"type": "text-start", "id": text_id, "providerMetadata": _meta(source)}]

    def _text_end(self, text_id: str, provenance: Any) -> dict[str, Any]:
        source = self._open_text.pop(text_id)
        self._ended_text.add(text_id)
        return {"type": "text-end", "id": text_id, "providerMetadata": _meta(source, provenance)}

    def _message(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        text_id, source, content = data["id"], data["source"], data["content"]
        provenance = data.get("provenance")
        if text_id in self._open_text:
            parts.append(self._text_end(text_id, provenance))
        elif text_id not in self._ended_text and content:
            # A message that was not streamed token by token: its whole text at once.
            parts.extend(self._text_start(text_id, source))
            parts.append({"type": "text-delta", "id": text_id, "delta": content})
            parts.append(self._text_end(text_id, provenance))
        for call in data["tool_calls"]:
            call_id = call["id"]
            if call_id is None or call_id in self._tool_input:
                continue
            parts.extend(self._tool_start(call_id, call["name"], source))
            parts.append(self._tool_available(call_id, call["args"], source, provenance))
        return parts

    # -- tools --------------------------------------------------------------------------

    def _tool_start(self, call_id: str, name: Any, source: Any) -> list[dict[str, Any]]:
        if call_id in self._tool_started:
            return []
        self._tool_started.add(call_id)
        self._tool_names[call_id] = str(name or "tool")
        return [
            {
                "type": "tool-input-start",
                "toolCallId": call_id,
                "toolName": self._tool_names[call_id],
                "providerMetadata": _meta(source),
            }
        ]

    def _tool_available(
        self, call_id: str, args: Any, source: Any, provenance: Any = None
    ) -> dict[str, Any]:
        self._tool_input.add(call_id)
        self._tool_text.pop(call_id, None)
        return {
            "type": "tool-input-available",
            "toolCallId": call_id,
            "toolName": self._tool_names[call_id],
            "input": args,
            "providerMetadata": _meta(source, provenance),
        }

    def _tool_result(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        call_id, source = data["tool_call_id"], data["source"]
        if call_id not in self._tool_input:
            # The AI SDK needs the input part first. Of a card this message opened whose
            # message was not confirmed (a return_direct tool ends the agent before a
            # snapshot): the input it streamed. Of a call an interrupted run showed (this
            # response's message is a new one): the input that run showed. Else none.
            if call_id in self._tool_started:
                call = {"args": streamed_input("".join(self._tool_text.get(call_id, ())))}
            else:
                call = dict(self._calls.get(call_id) or {})
            shown = call.get("source") or source
            parts.extend(self._tool_start(call_id, call.get("name") or data.get("name"), shown))
            parts.append(
                self._tool_available(call_id, call.get("args"), shown, call.get("provenance"))
            )
        if data["status"] == "error":
            parts.append(
                {"type": "tool-output-error", "toolCallId": call_id, "errorText": data["content"]}
            )
        else:
            parts.append(
                {"type": "tool-output-available", "toolCallId": call_id, "output": data["content"]}
            )
        return parts
