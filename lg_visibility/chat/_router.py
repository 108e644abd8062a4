"""A FastAPI chat backend over SSE on top of the enforced stream.

`chat_router(graph)` returns an `APIRouter` with:

- `POST {prefix}/stream` `{"message": str, "thread_id"?: str}` -> `text/event-stream`
- `POST {prefix}/{thread_id}/resume` `{"resume": value | {interrupt_id: value}}` -> SSE
- `GET {prefix}/{thread_id}/messages` -> the visible history, from the checkpoint by tag
- `GET {prefix}/threads` -> the caller's threads, newest first
- `DELETE {prefix}/{thread_id}` -> 204

The SSE events are those of `lg_visibility.chat._mapper`; the thread id of a new conversation is
in the `X-Thread-Id` response header and in the closing `done` event.

Ownership, titles, the thread list and the "busy" lock come from a thread store
(`lg_visibility.chat._threads`): an index table with cross-process locks
(`SqliteThreadStore`, `PostgresThreadStore`, both built by `open_storage(db)`), or by
default `CheckpointThreadStore`, which reads the run metadata naming the user
(`lg_visibility_user`) that LangGraph copies into each checkpoint, so any checkpointer
works. A thread that does not exist and a thread of another user are both 404.

FastAPI is imported lazily (install the `server` extra); importing this module without
FastAPI installed raises an ImportError that names the extra.

Cancellation: the SSE response races two tasks, the body (`astream` -> mapper -> bytes
-> `send`) and a watcher on `receive()`::

    client leaves -> receive() = http.disconnect -> watcher done
        -> body task cancelled -> CancelledError inside graph.astream (LangGraph cancels
           the running nodes; the checkpoint keeps the last completed step)
        -> body generator closed, thread released (a later message continues it)
    graph finishes -> done event -> end of body -> watcher cancelled
    graph raises   -> error event -> done event (interrupted read from the checkpoint)
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from lg_visibility.chat._auth import header_user_id
from lg_visibility.chat._mapper import ChatStreamMapper, is_internal, message_text
from lg_visibility.chat._threads import (
    OWNER_KEY,
    TITLE_KEY,
    CheckpointThreadStore,
    ThreadInfo,
    ThreadLock,
    ThreadStore,
)

if TYPE_CHECKING:
    from fastapi import APIRouter
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = [
    "OWNER_KEY",
    "TITLE_KEY",
    "ResumeBody",
    "StreamBody",
    "chat_router",
    "default_input",
    "header_user_id",
    "history_item",
    "is_user_visible",
    "sqlite_checkpointer",
]

_TITLE_CHARS = 80
_log = logging.getLogger("lg_visibility.chat._router")


class StreamBody(BaseModel):
    """Body of `POST /stream`: the user's message and, to continue, the thread id."""

    model_config = ConfigDict(extra="forbid")
    message: str
    thread_id: str | None = None


class ResumeBody(BaseModel):
    """Body of `POST /{thread_id}/resume`: one value, or a map from interrupt id to value."""

    model_config = ConfigDict(extra="forbid")
    resume: Any


def _require_fastapi() -> Any:
    try:
        import fastapi
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        msg = (
            "lg_visibility.chat._router needs FastAPI; install the server extra: "
            "pip install 'lg-visibility[server]'."
        )
        raise ImportError(msg) from exc
    return fastapi


# -- pieces users can reuse or replace -------------------------------------------------


def sqlite_checkpointer(path: str | Path) -> BaseCheckpointSaver[Any]:
    """The embedded default checkpointer: an `AsyncSqliteSaver` on the file at `path`.

    Call it inside the event loop that will serve requests: `AsyncSqliteSaver` binds to
    the running loop (and raises "no running event loop" otherwise). The connection opens
    on first use; close it with `await saver.conn.close()` on shutdown
    (`lg_visibility.demo.app` does so in its lifespan). Needs `langgraph-checkpoint-sqlite`
    and `aiosqlite`.
    """
    try:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    except ImportError as exc:
        msg = (
            "sqlite_checkpointer() needs langgraph-checkpoint-sqlite and aiosqlite: "
            "pip install langgraph-checkpoint-sqlite aiosqlite."
        )
        raise ImportError(msg) from exc
    return AsyncSqliteSaver(aiosqlite.connect(str(path), check_same_thread=False))


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


def history_item(message: Any) -> dict[str, Any]:
    """One history entry, shaped like the live events so a UI renders both alike.

    - user: `{"id", "role": "user", "content"}`
    - assistant: `{"id", "role": "assistant", "source", "content", "tool_calls"}` (as
      the `message` event)
    - tool: `{"id", "role": "tool", "tool_call_id", "name", "content", "status"}`

    The checkpoint does not record which agent produced a message, so `source` is the
    message's `name` when set and None otherwise (a UI then shows no producer label).
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
            "content": message_text(message),
            "status": getattr(message, "status", None) or "success",
        }
    return {
        "id": message.id,
        "role": "assistant",
        "source": getattr(message, "name", None) or None,
        "content": message_text(message),
        "tool_calls": [
            {"id": call.get("id"), "name": call.get("name"), "args": call.get("args", {})}
            for call in getattr(message, "tool_calls", None) or []
        ],
    }


def default_input(message: str) -> dict[str, Any]:
    """The graph input for a new user message: `{"messages": [{"role": "user", ...}]}`."""
    return {"messages": [{"role": "user", "content": message}]}


def _error(status: int, code: str, message: str) -> Exception:
    fastapi = _require_fastapi()
    exc: Exception = fastapi.HTTPException(
        status_code=status, detail={"code": code, "message": message}
    )
    return exc


# -- transport ---------------------------------------------------------------------------


@functools.cache
def _sse_response_class() -> type[Any]:
    """The SSE response class, built on first use so Starlette is imported lazily."""
    from starlette.responses import Response

    class SSEResponse(Response):
        """An ASGI response streaming SSE bytes, cancelled as soon as the client leaves.

        Starlette's StreamingResponse watches for `http.disconnect` only under ASGI spec
        < 2.4 and otherwise notices a gone client on the next failed send, which does not
        come while a model is thinking. This one always races the body against
        `receive()`, and closes the body generator and calls `on_close` however it ends.
        """

        media_type = "text/event-stream"

        def __init__(
            self,
            body: AsyncIterator[bytes],
            *,
            headers: Mapping[str, str],
            on_close: Callable[[], None],
        ) -> None:
            self._body = body
            self._on_close = on_close
            self.status_code = 200
            self.background = None
            self.raw_headers = [
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no"),
                *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()),
            ]

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            async def stream() -> None:
                start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
                await send(start)
                async for chunk in self._body:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})

            async def disconnected() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass

            try:
                streamer = asyncio.ensure_future(stream())
                watcher = asyncio.ensure_future(disconnected())
                try:
                    finished, _ = await asyncio.wait(
                        {streamer, watcher}, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    for task in (streamer, watcher):
                        task.cancel()
                    await asyncio.gather(streamer, watcher, return_exceptions=True)
                if streamer in finished and not streamer.cancelled():
                    streamer.result()  # re-raise a transport error
            finally:
                try:
                    await self._body.aclose()  # type: ignore[attr-defined]
                finally:
                    self._on_close()

    return SSEResponse


# -- the router ---------------------------------------------------------------------------


def chat_router(
    graph: Any,
    *,
    user_id: Callable[..., Any] | None = None,
    prefix: str = "/api/chat",
    max_message_chars: int = 8000,
    stream_mode: Sequence[str] = ("messages", "values"),
    make_input: Callable[[str], Any] = default_input,
    visible: Callable[[Any], bool] = is_user_visible,
    root_source: str = "main",
    thread_store: ThreadStore | None = None,
) -> APIRouter:
    """Build the chat API for a compiled (visibility-wrapped) graph.

    Args:
        graph: A compiled graph with a checkpointer, normally
            `with_visibility(builder.compile(checkpointer=...), policy)`. Use
            `sqlite_checkpointer(path)` for the embedded default, or any LangGraph
            saver (e.g. `AsyncPostgresSaver`).
        user_id: A FastAPI dependency returning the caller's user id; defaults to
            `header_user_id("X-User-Id")`.
        prefix: URL prefix of every route.
        max_message_chars: Longest accepted user message; longer is a 413.
        stream_mode: Modes requested from `astream`; must include "messages" and
            "values", may add "custom".
        make_input: Builds the graph input from the user's message text.
        visible: Which checkpoint messages the history shows.
        root_source: The `source` of events from the root graph.
        thread_store: Where owners, titles and busy locks live; `open_storage(db).threads`
            for an index table and locks shared by several processes. Default:
            `CheckpointThreadStore(checkpointer)` (checkpoint metadata, one process).

    Raises:
        ValueError: If the graph has no checkpointer, or an option is out of range.
        ImportError: If FastAPI is not installed.
    """
    fastapi = _require_fastapi()
    from langgraph.types import Command

    checkpointer = getattr(graph, "checkpointer", None)
    if checkpointer is None or isinstance(checkpointer, bool):
        msg = (
            f"chat_router() needs a graph compiled with a checkpointer, got checkpointer="
            f"{checkpointer!r}; compile with checkpointer=sqlite_checkpointer('chat.sqlite') "
            "or any LangGraph saver (Postgres for scale)."
        )
        raise ValueError(msg)
    if max_message_chars < 1:
        msg = f"max_message_chars must be >= 1, got {max_message_chars!r}."
        raise ValueError(msg)
    modes = list(stream_mode)
    if not {"messages", "values"} <= set(modes) or not set(modes) <= {
        "messages",
        "values",
        "custom",
    }:
        msg = (
            f"stream_mode must contain 'messages' and 'values' and may add 'custom', got {modes!r}."
        )
        raise ValueError(msg)

    router: APIRouter = fastapi.APIRouter(prefix=prefix)
    current_user = fastapi.Depends(user_id or header_user_id())
    store = thread_store if thread_store is not None else CheckpointThreadStore(checkpointer)

    def config_for(thread_id: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread_id}}

    async def owned_thread(thread_id: str, user: str) -> ThreadInfo:
        """The thread's index row, or 404 if missing or not the user's."""
        if not thread_id or len(thread_id) > 256:
            raise _error(404, "thread_not_found", f"No thread {thread_id!r}.")
        found = await store.get(thread_id)
        if found is None or found.owner != user:
            raise _error(404, "thread_not_found", f"No thread {thread_id!r}.")
        return found

    async def pending_interrupts(thread_id: str) -> list[Any]:
        state = await graph.aget_state(config_for(thread_id))
        return list(state.interrupts)

    async def claim(thread_id: str, user: str, title: str) -> ThreadLock:
        """Take the thread's busy lock (409 if a run holds it, in any process) and index
        the run."""
        lock = await store.try_lock(thread_id)
        if lock is None:
            raise _error(
                409, "thread_busy", f"Thread {thread_id!r} is already answering; wait for done."
            )
        try:
            await store.save(thread_id, owner=user, title=title)
        except PermissionError:
            lock.release()
            raise _error(404, "thread_not_found", f"No thread {thread_id!r}.") from None
        except BaseException:
            lock.release()
            raise
        return lock

    async def run(thread_id: str, payload: Any, config: dict[str, Any]) -> AsyncIterator[bytes]:
        mapper = ChatStreamMapper(root=root_source)
        parts = graph.astream(payload, config, stream_mode=modes, subgraphs=True, version="v2")
        try:
            async with aclosing(parts):
                async for part in parts:
                    for event in mapper.feed(part):
                        yield event.encode()
        except Exception as exc:
            # The graph failed: the user gets an error and a done, never a 500 or a
            # hung stream; the checkpoint keeps the last completed step, so the thread
            # takes the next message.
            _log.exception("chat run on thread %s failed", thread_id)
            yield mapper.error(exc).encode()
            failed = True
        else:
            failed = False
        try:
            # From the checkpoint, not from the events: after a failed resume the
            # interrupt is still pending and the UI must show its form again.
            interrupted = bool(await pending_interrupts(thread_id))
        except Exception:
            _log.exception("reading the state of thread %s failed", thread_id)
            interrupted = bool(mapper.interrupt_ids) and not failed
        yield mapper.done(thread_id=thread_id, interrupted=interrupted).encode()

    def respond(thread_id: str, payload: Any, metadata: dict[str, Any], lock: ThreadLock) -> Any:
        config = {**config_for(thread_id), "metadata": metadata}
        return _sse_response_class()(
            run(thread_id, payload, config),
            headers={"X-Thread-Id": thread_id},
            on_close=lock.release,
        )

    @router.post("/stream", response_model=None)
    async def stream(body: StreamBody, user: str = current_user) -> Any:
        text = body.message
        if not text.strip():
            raise _error(422, "empty_message", "The message is empty; type something to send.")
        if len(text) > max_message_chars:
            raise _error(
                413,
                "message_too_long",
                f"The message has {len(text)} characters; the limit is {max_message_chars}.",
            )
        if body.thread_id is None:
            thread_id = str(uuid.uuid4())
            title = " ".join(text.split())[:_TITLE_CHARS]
        else:
            thread_id = body.thread_id
            title = (await owned_thread(thread_id, user)).title
            if await pending_interrupts(thread_id):
                raise _error(
                    409,
                    "interrupt_pending",
                    "The assistant is waiting for an answer to its question; "
                    f"POST it to {prefix}/{thread_id}/resume.",
                )
        lock = await claim(thread_id, user, title)
        return respond(thread_id, make_input(text), {OWNER_KEY: user, TITLE_KEY: title}, lock)

    @router.post("/{thread_id}/resume", response_model=None)
    async def resume(thread_id: str, body: ResumeBody, user: str = current_user) -> Any:
        found = await owned_thread(thread_id, user)
        pending = await pending_interrupts(thread_id)
        if not pending:
            raise _error(409, "nothing_to_resume", f"Thread {thread_id!r} is not waiting.")
        value = body.resume
        ids = {interrupt.id for interrupt in pending}
        if value is None:
            raise _error(422, "invalid_resume", "resume must be a value, not null.")
        if isinstance(value, dict) and value and set(value) <= ids:
            command: Any = Command(resume=value)
        elif len(pending) == 1:
            command = Command(resume=value)
        else:
            raise _error(
                422,
                "invalid_resume",
                f"{len(pending)} interrupts are pending; send resume as a map from "
                f"interrupt id to value, with ids among {sorted(ids)}.",
            )
        lock = await claim(thread_id, user, found.title)
        return respond(thread_id, command, {OWNER_KEY: user, TITLE_KEY: found.title}, lock)

    @router.get("/threads")
    async def threads(user: str = current_user) -> dict[str, Any]:
        return {"threads": [row.as_json() for row in await store.list_threads(user)]}

    @router.get("/{thread_id}/messages")
    async def messages(thread_id: str, user: str = current_user) -> dict[str, Any]:
        await owned_thread(thread_id, user)
        state = await graph.aget_state(config_for(thread_id))
        values = state.values if isinstance(state.values, Mapping) else {}
        return {
            "thread_id": thread_id,
            "messages": [history_item(m) for m in values.get("messages", []) if visible(m)],
            "interrupts": [{"id": i.id, "value": i.value} for i in state.interrupts],
        }

    @router.delete("/{thread_id}", status_code=204, response_model=None)
    async def delete(thread_id: str, user: str = current_user) -> None:
        await owned_thread(thread_id, user)
        lock = await store.try_lock(thread_id)
        if lock is None:
            raise _error(409, "thread_busy", f"Thread {thread_id!r} is answering; wait for done.")
        try:
            await checkpointer.adelete_thread(thread_id)
            await store.delete(thread_id)
        finally:
            lock.release()

    return router
