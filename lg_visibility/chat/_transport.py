"""The one SSE transport: sse-starlette's `EventSourceResponse` around our encoded bytes.

Every streaming route (our own SSE schema, the AI SDK UI message stream) answers with
`sse_response(frames, ...)`. `frames` yields bytes that `lg_visibility.chat._sse` encoded;
sse-starlette sends them unchanged, one ASGI body message per frame, and adds:

- keep-alive pings: the comment `: ping` every `ping` seconds (default 15) while the run
  is quiet, so proxies do not close an idle connection while a model thinks;
- a send timeout: a client that stops reading for `send_timeout` seconds (default 30)
  ends the response;
- disconnect handling: a watcher on `receive()` ends the response as soon as the client
  leaves, whatever the body is waiting for.

Cancellation, drawn::

    client leaves -> receive() = http.disconnect -> sse-starlette cancels its task group
        -> frames generator closed at its current await -> on_close() awaited
           (the chat route cancels its run there: CancelledError inside graph.astream,
           the checkpoint keeps the last completed step, the thread is released)
    send blocks > send_timeout -> SendTimeoutError (logged, not raised) -> same path
    frames ends normally -> last empty body message -> on_close() awaited

`on_close` runs however the response ends, exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import suppress
from typing import Any

from lg_visibility.chat._sse import PING

_log = logging.getLogger("lg_visibility.chat")

__all__ = ["DEFAULT_PING_SECONDS", "DEFAULT_SEND_TIMEOUT", "sse_response"]

DEFAULT_PING_SECONDS = 15.0
"""Seconds between keep-alive pings on a quiet stream."""

DEFAULT_SEND_TIMEOUT = 30.0
"""Seconds one send may block (a client that stopped reading) before the response ends."""


def _ping_event() -> Any:
    from sse_starlette import ServerSentEvent

    return ServerSentEvent(comment=PING[2:-2], sep="\n")


def sse_response(
    frames: AsyncIterator[bytes],
    *,
    headers: Mapping[str, str] | None = None,
    on_close: Callable[[], Awaitable[None]] | None = None,
    ping: float = DEFAULT_PING_SECONDS,
    send_timeout: float | None = DEFAULT_SEND_TIMEOUT,
) -> Any:
    """An `EventSourceResponse` streaming `frames` byte for byte.

    Args:
        frames: Encoded SSE messages; each is sent as one ASGI body message.
        headers: Extra response headers.
        on_close: Awaited once when the response ends, by completion, disconnect,
            send timeout or error.
        ping: Seconds between keep-alive pings; 0 disables them.
        send_timeout: Seconds one send may block; None waits forever.
    """
    from sse_starlette import EventSourceResponse
    from sse_starlette.sse import SendTimeoutError

    class _Response(EventSourceResponse):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            try:
                await super().__call__(scope, receive, send)
            except SendTimeoutError:
                # A client that stopped reading is gone as far as we are concerned; it
                # is not an application error.
                _log.info("SSE client stopped reading for %ss; response ended", send_timeout)
            finally:
                aclose = getattr(frames, "aclose", None)
                if aclose is not None:
                    # Already closed on the normal path; closing twice is a no-op. A frames
                    # generator that fails while closing must not skip on_close.
                    with suppress(Exception):
                        await aclose()
                if on_close is not None:
                    await on_close()

    response = _Response(
        frames,
        headers=dict(headers or {}),
        ping=ping,
        sep="\n",
        ping_message_factory=_ping_event,
        send_timeout=send_timeout,
    )
    response.headers["content-type"] = "text/event-stream; charset=utf-8"
    response.headers["cache-control"] = "no-cache"
    return response
