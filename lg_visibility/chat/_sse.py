"""Byte-exact Server-Sent Events encoding: pure functions, no mapping, no I/O.

Two wire formats share these functions:

- our own chat schema, one named event per chat event:
  `event: <name>\\ndata: <compact JSON>\\n\\n` (`encode_event`);
- the Vercel AI SDK UI message stream (v5), unnamed JSON parts:
  `data: <compact JSON>\\n\\n`, ending with `data: [DONE]\\n\\n` (`encode_part`, `UI_DONE`).

Every field line ends with `\\n`, and the JSON is compact with line breaks escaped, so a
payload is always exactly one `data:` line. The transport (`lg_visibility.chat._transport`)
sends these bytes unchanged.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["PING", "UI_DONE", "dumps", "encode_event", "encode_part", "format_sse"]

_LINE_SEP = re.compile(r"\r\n|\r|\n")


def format_sse(
    *,
    data: str | None = None,
    event: str | None = None,
    id: str | None = None,
    retry: int | None = None,
    comment: str | None = None,
) -> bytes:
    """Format one SSE message as UTF-8 bytes, fields separated by `\\n`.

    Multi-line `data` and `comment` become one field line per line; line breaks in
    `event` and `id` are removed because they would split the field. The message ends
    with an empty line.

    Raises:
        TypeError: If `retry` is not an int.
    """
    lines: list[str] = []
    if comment is not None:
        lines.extend(f": {part}" for part in _LINE_SEP.split(comment))
    if id is not None:
        lines.append("id: " + _LINE_SEP.sub("", id))
    if event is not None:
        lines.append("event: " + _LINE_SEP.sub("", event))
    if data is not None:
        lines.extend(f"data: {part}" for part in _LINE_SEP.split(data))
    if retry is not None:
        if isinstance(retry, bool) or not isinstance(retry, int):
            msg = f"retry must be an int of milliseconds, got {type(retry).__name__}."
            raise TypeError(msg)
        lines.append(f"retry: {retry}")
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def _json_default(value: Any) -> Any:
    # Interrupt values and tool args are user data: pydantic models and dataclass-like
    # objects are common; anything else is shown by its str() rather than failing the
    # whole stream mid-flight.
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def dumps(data: Any) -> str:
    """Compact JSON, non-ASCII kept as is, unknown objects by `model_dump()` or `str()`, a
    float that is not finite as null (`NaN` is not JSON: a browser's parser rejects it).

    `json.dumps` escapes `\\n` and `\\r` inside strings, so the result is one line.
    """
    try:
        return _dumps(data)
    except ValueError as exc:  # a NaN or an infinity (or a cycle: raised as it was)
        try:
            return _dumps(_finite(data))
        except RecursionError:
            raise exc from None


def _dumps(data: Any) -> str:
    return json.dumps(
        data, ensure_ascii=False, separators=(",", ":"), default=_json_default, allow_nan=False
    )


def _finite(value: Any) -> Any:
    """`value` as JSON would hold it, a float that is not finite replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return _finite(_json_default(value))


def encode_event(event: Any) -> bytes:
    """Encode a chat event (`.event`, `.data`) as `event: <name>\\ndata: <JSON>\\n\\n`."""
    return format_sse(event=event.event, data=dumps(event.data))


def encode_part(part: Mapping[str, Any]) -> bytes:
    """Encode one AI SDK UI message stream part as `data: <JSON>\\n\\n`."""
    return format_sse(data=dumps(part))


UI_DONE = format_sse(data="[DONE]")
"""The AI SDK stream's closing line, `data: [DONE]\\n\\n`."""

PING = ": ping\n\n"
"""The keep-alive comment the transport sends while a run is quiet (clients ignore it)."""
