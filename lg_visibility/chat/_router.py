"""The FastAPI chat backend on top of the enforced stream: named routes over one service.

`chat_router(graph)` returns an `APIRouter` with:

- `POST {prefix}/stream` `{"message": str, "thread_id"?: str}` -> our SSE schema
- `POST {prefix}/{thread_id}/resume` `{"resume": value | {interrupt_id: value}}` -> SSE
- `GET {prefix}/{thread_id}/messages` -> the visible history, with sources and cards
- `GET {prefix}/threads` -> the caller's threads, newest first
- `DELETE {prefix}/{thread_id}` -> 204
- `POST {prefix}/ui` (the AI SDK `useChat` body) -> UI message stream v5
- `GET {prefix}/ui/{chat_id}/stream` -> the active run's UI stream from its start; 204 if none

Layers, each in its own module: `_mapper` (v2 stream -> chat events), `_sse` (events ->
bytes), `_aisdk` (events -> UI stream parts), `_history` (stored messages -> entries),
`_transport` (bytes -> sse-starlette response). Here: `ChatService` runs the graph and
holds the per-process state; the route functions below are thin, one per route.

A run executes in its own task and logs its chat events, so several responses can follow
it (the AI SDK's resume replays from the start). Our SSE route cancels the run when its
client leaves (the checkpoint keeps the last completed step; the next message continues
the thread); the AI SDK route lets the run finish, so a reloaded page can resume it.
With a thread store shared across processes (`shares_runs`: SQLite, Postgres), an AI SDK
run also writes its encoded parts to the store as they are produced (`_RunLog`), so the
resume route of any process replays them from the start and polls for new ones until the
end marker; the marker is written before the busy lock is freed, so a free lock without
a marker means the run's process died, and the reader ends the stream with an `error`
part instead of waiting.

Ownership, titles, the thread list and the "busy" lock come from a thread store
(`lg_visibility.chat._threads`): an index table with cross-process locks
(`SqliteThreadStore`, `PostgresThreadStore`, both built by `open_storage(db)`), or by
default `CheckpointThreadStore`, which reads the run metadata naming the user
(`lg_visibility_user`) that LangGraph copies into each checkpoint, so any checkpointer
works (one process). Every route takes the same steps: the identity dependency, then
`owned` (a thread that does not exist and a thread of another user are both 404), then
`claim` (the busy lock, 409 if held in any process, and the index row); the run releases
the lock when it ends.

Every 4xx has one JSON shape, `{"detail": {"code", "message", "field"?}}`, FastAPI's
request validation errors included (`code` "invalid_request").

FastAPI is imported lazily (install the `server` extra); importing this module without
FastAPI installed raises an ImportError that names the extra.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lg_visibility._compat import CONF
from lg_visibility._wrap import internal_at
from lg_visibility.chat._aisdk import UIStreamEncoder
from lg_visibility.chat._auth import header_user_id
from lg_visibility.chat._history import NotesBook, RunNotes, history_items, is_user_visible
from lg_visibility.chat._mapper import (
    ChatEvent,
    achat_events,
    known_message_ids,
    message_text,
    pending_written_ids,
)
from lg_visibility.chat._sse import UI_DONE, encode_part
from lg_visibility.chat._threads import (
    OWNER_KEY,
    TITLE_KEY,
    CheckpointThreadStore,
    ThreadInfo,
    ThreadLock,
    ThreadStore,
)
from lg_visibility.chat._transport import DEFAULT_PING_SECONDS, DEFAULT_SEND_TIMEOUT, sse_response

if TYPE_CHECKING:
    from fastapi import APIRouter
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = [
    "BREAKPOINT",
    "OWNER_KEY",
    "TITLE_KEY",
    "Breakpoint",
    "ChatService",
    "Durability",
    "ResumeBody",
    "StreamBody",
    "UIChatBody",
    "chat_router",
    "check_durability",
    "claim_thread",
    "default_input",
    "default_thread_store",
    "error_detail",
    "find_thread",
    "has_breakpoints",
    "header_user_id",
    "is_interrupt_id",
    "lock_thread",
    "sqlite_checkpointer",
    "stale_answer",
    "thread_title",
]

Durability = Literal["sync", "async", "exit"]
"""LangGraph's `durability` for the routers' runs (see `chat_router`)."""

_TITLE_CHARS = 80
_LOG_POLL = 0.1  # seconds between reads of a run log written by another process
_LOST_RUN = "The answer stopped before it finished; send your message again."
_MAX_ID = 256
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


class UIChatBody(BaseModel):
    """Body of `POST /ui`, as the AI SDK's `DefaultChatTransport` sends it.

    `id` is the chat id, which is the thread id; `messages` are `UIMessage`s, of which
    only the last user message's text parts are read (the thread's history lives in the
    checkpoint). Extra keys (the transport's `body` option) are allowed; `resume`
    answers a pending interrupt.
    """

    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1, max_length=_MAX_ID)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    trigger: str | None = None
    messageId: str | None = None
    resume: Any = None


def _require_fastapi() -> Any:
    try:
        import fastapi
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        msg = (
            "lg_visibility.chat needs FastAPI and sse-starlette; install the server extra: "
            "pip install 'lg-visibility[server]'."
        )
        raise ImportError(msg) from exc
    return fastapi


# -- errors: one JSON shape ----------------------------------------------------------------


def error_detail(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    """The `detail` of every 4xx this router returns: `{"code", "message", "field"?}`."""
    detail: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        detail["field"] = field
    return detail


def _error(status: int, code: str, message: str, field: str | None = None) -> Exception:
    fastapi = _require_fastapi()
    exc: Exception = fastapi.HTTPException(
        status_code=status, detail=error_detail(code, message, field)
    )
    return exc


def _validation_detail(errors: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """FastAPI's validation error list as our shape, naming the first bad field."""
    first = errors[0] if errors else {}
    loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path")]
    field = ".".join(loc) or None
    text = str(first.get("msg", "Invalid request"))
    message = f"{field}: {text}" if field else text
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more)"
    return error_detail("invalid_request", message, field)


def _route_class() -> type[Any]:
    """An APIRoute that answers request validation errors in our error shape."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from fastapi.routing import APIRoute

    class ErrorShapeRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Any], Coroutine[Any, Any, Any]]:
            handler = super().get_route_handler()

            async def handle(request: Any) -> Any:
                try:
                    return await handler(request)
                except RequestValidationError as exc:
                    return JSONResponse(
                        {"detail": _validation_detail(exc.errors())}, status_code=422
                    )

            return handle

    return ErrorShapeRoute


# -- pieces users can reuse or replace -------------------------------------------------


def sqlite_checkpointer(path: str | Path, *, serde: Any = None) -> BaseCheckpointSaver[Any]:
    """The embedded default checkpointer: an `AsyncSqliteSaver` on the file at `path`.

    `serde` is the saver's serializer; pass
    `JsonPlusSerializer(allowed_msgpack_modules=[YourModel, ...])` to register the types
    your graph keeps in state (LangGraph warns about unregistered ones and will block them).

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
    return AsyncSqliteSaver(aiosqlite.connect(str(path), check_same_thread=False), serde=serde)


def default_input(message: str) -> dict[str, Any]:
    """The graph input for a new user message: `{"messages": [{"role": "user", ...}]}`."""
    return {"messages": [{"role": "user", "content": message}]}


# -- threads: ownership and the busy lock, the same for every protocol -----------------


async def find_thread(store: ThreadStore, thread_id: str, user: str) -> ThreadInfo | None:
    """The thread's row if it is the user's, None if there is no such thread; 404 if it
    is another user's (the same answer as for an id that cannot exist)."""
    if not thread_id or len(thread_id) > _MAX_ID:
        raise _error(404, "thread_not_found", f"No thread {thread_id!r}.")
    found = await store.get(thread_id)
    if found is not None and found.owner != user:
        raise _error(404, "thread_not_found", f"No thread {thread_id!r}.")
    return found


async def lock_thread(store: ThreadStore, thread_id: str) -> ThreadLock:
    """The thread's busy lock; 409 if a run holds it, in this process or another."""
    lock = await store.try_lock(thread_id)
    if lock is None:
        raise _busy(thread_id)
    return lock


def _busy(thread_id: str) -> Exception:
    return _error(409, "thread_busy", f"Thread {thread_id!r} is already answering; wait for done.")


async def claim_thread(
    store: ThreadStore,
    thread_id: str,
    user: str,
    title: str,
    *,
    check: Callable[[], Awaitable[None]] | None = None,
) -> ThreadLock:
    """Take the thread's busy lock (409 if held), await `check`, and index the run under
    the user.

    `check` reads what the thread waits for and judges the request by it: under the lock,
    no other run can answer it between the read and this run's start. What it raises
    releases the lock and indexes nothing. The first run on a new thread id makes it the
    user's; if another user indexed it meanwhile, 404.
    """
    lock = await lock_thread(store, thread_id)
    try:
        if check is not None:
            await check()
        await store.save(thread_id, owner=user, title=title)
    except PermissionError:
        lock.release()
        raise _error(404, "thread_not_found", f"No thread {thread_id!r}.") from None
    except BaseException:
        lock.release()
        raise
    return lock


_DEFAULT_STORES: weakref.WeakKeyDictionary[Any, ThreadStore] = weakref.WeakKeyDictionary()


def default_thread_store(checkpointer: Any) -> ThreadStore:
    """The `CheckpointThreadStore` of `checkpointer`, one per checkpointer, so that
    `chat_router` and `agui_router` on one graph share its in-process busy lock."""
    try:
        store = _DEFAULT_STORES.get(checkpointer)
        if store is None:
            store = _DEFAULT_STORES[checkpointer] = CheckpointThreadStore(checkpointer)
    except TypeError:  # not weak-referenceable or not hashable: one store per router
        return CheckpointThreadStore(checkpointer)
    return store


def check_durability(durability: Any) -> None:
    """ValueError unless `durability` is one of LangGraph's three modes."""
    if durability not in ("sync", "async", "exit"):
        msg = f"durability must be 'sync', 'async' or 'exit', got {durability!r}."
        raise ValueError(msg)


def thread_title(text: str) -> str:
    """A thread's title: its first message, whitespace collapsed, shortened."""
    return " ".join(text.split())[:_TITLE_CHARS]


# -- runs -------------------------------------------------------------------------------


class _Run:
    """One graph run on a thread, in its own task; its events are logged for followers."""

    def __init__(
        self,
        thread_id: str,
        lock: ThreadLock,
        message_id: str | None = None,
        calls: dict[str, dict[str, Any]] | None = None,
        known: set[str] | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.lock = lock
        # A resumed run's `known` ids, from the read its route made under the lock.
        self.known = known
        # The AI SDK assistant message the run builds, and the calls it may answer.
        self.message_id = message_id or f"msg-{uuid.uuid4()}"
        self.calls = calls or {}
        self.notes = RunNotes()  # what the run's events showed, stored once when it ends
        self.notes_written: asyncio.Future[None] | None = None
        self.events: list[ChatEvent] = []
        self.log: _RunLog | None = None  # set for an AI SDK run on a shared store
        self.finished = False
        self.task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    def push(self, event: ChatEvent) -> None:
        self.events.append(event)
        self._wake()

    def finish(self) -> None:
        self.finished = True
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def follow(self) -> AsyncIterator[ChatEvent]:
        """Every event of the run from its start, then each new one until it ends."""
        sent = 0
        while True:
            changed = self._changed
            while sent < len(self.events):
                yield self.events[sent]
                sent += 1
            if self.finished:
                return
            await changed.wait()

    async def cancel(self) -> None:
        """Cancel the run and wait until its task has ended."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


class _RunLog:
    """Writes one AI SDK run's encoded UI stream parts to a shared thread store, in order.

    `add(event)` encodes at once (the same parts the run's own response sends) and a
    flusher task writes what has piled up, one batch per round trip; `finish()` writes
    the end marker and waits until everything is written. A failed write stops the log
    (logged): readers then end when the run's lock is freed.
    """

    def __init__(
        self,
        store: ThreadStore,
        thread_id: str,
        message_id: str,
        calls: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.store = store
        self.thread_id = thread_id
        self.run_id = str(uuid.uuid4())
        self._encoder = UIStreamEncoder(message_id, calls)
        self._pending: list[str | None] = []
        self._seq = 1
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def begin(self) -> None:
        """Write seq 0 (the `start` part), replacing the thread's previous run log."""
        first = "".join(encode_part(part).decode() for part in self._encoder.start())
        await self.store.runlog_begin(self.thread_id, self.run_id, first)
        self._task = asyncio.ensure_future(self._flush())

    def add(self, event: ChatEvent) -> None:
        if self._closed:
            return
        self._pending += [encode_part(part).decode() for part in self._encoder.encode(event)]
        if event.event == "done":
            self._pending.append(UI_DONE.decode())
        self._wake.set()

    async def finish(self) -> None:
        """Write the end marker and wait for the flusher (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._pending.append(None)
        self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def abandon(self) -> None:
        """Stop without an end marker (a run cancelled before it started)."""
        if not self._closed:
            self._closed = True
            if self._task is not None:
                self._task.cancel()

    async def _flush(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if batch:
                try:
                    await self.store.runlog_append(self.thread_id, self.run_id, self._seq, batch)
                except Exception:
                    _log.exception("writing the run log of thread %s failed", self.thread_id)
                    return
                self._seq += len(batch)
            if self._closed and not self._pending:
                return


BREAKPOINT = "breakpoint"


@dataclass(frozen=True, slots=True)
class Breakpoint:
    """A static breakpoint (`interrupt_before`/`interrupt_after`) a thread stopped at,
    pending like an interrupt: `id` `"breakpoint:<checkpoint id>"` (of the innermost graph
    that stopped), `value` `{"type": "breakpoint", "next": [the steps the stopped graphs
    will run]}` (an internal step's name left out). Any answer continues the run.

    LangGraph records no interrupt for one: a thread waits at it when its graph (or a
    subgraph the graph lists) has static breakpoints, no run holds it, and its checkpoint
    has steps to run and none of them failed, as LangGraph's own client (`useStream`) reads
    it. A run cancelled in a step (its client left) does not wait: LangGraph records the
    cancellation as the step's error, except with `durability="exit"`, where it waits."""

    id: str
    next: list[str]

    @property
    def value(self) -> dict[str, Any]:
        return {"type": BREAKPOINT, "next": self.next}


def has_breakpoints(graph: Any) -> bool:
    """Whether `graph` or a subgraph of it was compiled with static breakpoints."""
    graphs = [graph, *(sub for _, sub in graph.get_subgraphs(recurse=True))]
    return any(
        getattr(g, "interrupt_before_nodes", None) or getattr(g, "interrupt_after_nodes", None)
        for g in graphs
    )


class ChatService:
    """What the routes share: the graph, the threads, the running runs; no FastAPI here."""

    def __init__(
        self,
        graph: Any,
        *,
        threads: ThreadStore,
        stream_mode: Sequence[str],
        make_input: Callable[[str], Any],
        visible: Callable[[Any], bool],
        root_source: str,
        max_message_chars: int,
        ping: float,
        send_timeout: float | None,
        prefix: str,
        durability: Durability = "sync",
    ) -> None:
        self.graph = graph
        self.durability = durability
        self.threads = threads
        self.notes = NotesBook(graph.checkpointer)
        self.stream_mode = list(stream_mode)
        self.make_input = make_input
        self.visible = visible
        self.root_source = root_source
        self.max_message_chars = max_message_chars
        self.ping = ping
        self.send_timeout = send_timeout
        self.prefix = prefix
        self.runs: dict[str, _Run] = {}
        self.breakpoints = has_breakpoints(graph)

    @staticmethod
    def config_for(thread_id: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread_id}}

    async def pending_interrupts(
        self, thread_id: str, *, held: bool = False, state: Any = None, deep: bool = False
    ) -> list[Any]:
        """What the thread waits for: its interrupts, else a static breakpoint it stopped
        at (see `Breakpoint`). `held`: the caller holds the thread's lock (a route about
        to start a run, a run as it ends); else a thread a run holds waits for nothing yet.
        `state`: the thread's state if the caller has read it already (redacted or raw:
        only its interrupts, next steps, tasks' errors, names and nested states, and
        config are read), `deep` if that read had `subgraphs=True`."""
        if not held and await self.threads.is_locked(thread_id):
            return []  # being answered: an answered question is pending until its step ends
        config = self.config_for(thread_id)
        if state is None:
            state = await self.graph.aget_state(config)
        if state.interrupts:
            return list(state.interrupts)
        if not (self.breakpoints and state.next) or any(task.error for task in state.tasks):
            return []
        return [await self._breakpoint(config, state, deep=deep)]

    async def resume_state(self, thread_id: str) -> tuple[Any, bool, set[str]]:
        """The thread's state before a run that answers it, read once for both uses: what
        it waits for (`pending_interrupts(..., state=..., deep=...)`), whether that read
        holds its subgraphs' states, and the ids of the messages it already holds
        (`known_message_ids`, for the run: it does not send them again).

        Raw: the redacted read empties an internal subgraph's snapshot, which may hold a
        visible node's messages. With the subgraphs' states, else the root's alone (a
        subgraph's read, a remote one's, may fail); if the raw read fails, the graph's
        own and no ids: the run goes on, at worst sending again what the thread held.
        Where a pending task wrote a message as a dict with an id of its own, the notes
        say whether a run sent it (`known_message_ids(..., sent=...)`); if they cannot be
        read, it is taken as sent."""
        config = self.config_for(thread_id)
        reads = getattr(self.graph, "raw_state", self.graph)
        for subgraphs in (True, False):
            try:
                state = await reads.aget_state(config, subgraphs=subgraphs)
            except Exception:
                _log.exception("reading the state of thread %s failed", thread_id)
                continue
            notes = await self.thread_notes(thread_id) if pending_written_ids(state) else None
            if notes is None:
                return state, subgraphs, known_message_ids(state)
            known = known_message_ids(state, sent=notes.sources, results=notes.results)
            return state, subgraphs, known
        return await self.graph.aget_state(config), False, set()

    async def thread_notes(self, thread_id: str) -> RunNotes | None:
        """The thread's notes (`RunNotes`), None if they cannot be read (logged)."""
        try:
            return await self.notes.load(thread_id)
        except Exception:
            _log.exception("reading the notes of thread %s failed", thread_id)
            return None

    async def _breakpoint(self, config: dict[str, Any], state: Any, *, deep: bool) -> Breakpoint:
        """The breakpoint `state` stopped at, named by the first innermost graph that
        stopped (a subgraph's own checkpoint changes with each pause in one step of the
        root), with the steps the stopped graphs will run, an internal one's name left out
        (by what is known before a run: patterns, declarations on nodes, tags). `deep`:
        `state` holds its subgraphs' (else they are read here)."""
        if not deep:
            try:
                state = await self.graph.aget_state(config, subgraphs=True)
            except Exception:  # a subgraph's read (a remote one's) may fail: the root's then
                _log.exception("reading the subgraph state of %s failed", config)
        stopped: list[tuple[str, Any]] = []  # (path, snapshot) of the innermost ones
        pending = [("", state)]
        while pending:
            prefix, snap = pending.pop(0)
            inner = [
                (f"{prefix}/{t.name}" if prefix else t.name, t.state)
                for t in snap.tasks
                if hasattr(t.state, "next") and t.state.next
            ]
            if inner:
                pending.extend(inner)
            else:
                stopped.append((prefix, snap))
        steps = [
            name
            for prefix, snap in stopped
            for name in snap.next
            if not internal_at(self.graph, f"{prefix}/{name}" if prefix else name)
        ]
        checkpoint_id = stopped[0][1].config[CONF]["checkpoint_id"]
        return Breakpoint(f"{BREAKPOINT}:{checkpoint_id}", steps)

    async def open_calls(self, thread_id: str) -> dict[str, dict[str, Any]]:
        """The tool calls the thread's responses showed and no result answered yet (from
        its notes, so only what left the enforced stream); none if they cannot be read (a
        resumed card then shows no input)."""
        notes = await self.thread_notes(thread_id)
        return {} if notes is None else notes.calls

    # -- threads: the steps every route takes (shared with the AG-UI router) ----------

    async def find(self, thread_id: str, user: str) -> ThreadInfo | None:
        """See `find_thread`."""
        return await find_thread(self.threads, thread_id, user)

    async def owned(self, thread_id: str, user: str) -> ThreadInfo:
        """The thread's row; 404 if it does not exist or is not the user's."""
        found = await self.find(thread_id, user)
        if found is None:
            raise _error(404, "thread_not_found", f"No thread {thread_id!r}.")
        return found

    async def lock(self, thread_id: str) -> ThreadLock:
        """See `lock_thread`."""
        return await lock_thread(self.threads, thread_id)

    async def claim(
        self,
        thread_id: str,
        user: str,
        title: str,
        *,
        check: Callable[[], Awaitable[None]] | None = None,
    ) -> ThreadLock:
        """See `claim_thread`."""
        return await claim_thread(self.threads, thread_id, user, title, check=check)

    def check_message(self, text: str) -> None:
        """422 for an empty message, 413 for one over the limit."""
        if not text.strip():
            raise _error(
                422, "empty_message", "The message is empty; type something to send.", "message"
            )
        if len(text) > self.max_message_chars:
            raise _error(
                413,
                "message_too_long",
                f"The message has {len(text)} characters; the limit is {self.max_message_chars}.",
                "message",
            )

    def resume_command(self, pending: Sequence[Any], value: Any) -> Any:
        """The `Command(resume=...)` for `value`, validated before the graph runs; None
        (continue) for a static breakpoint.

        Raises 422 `invalid_resume`, naming the field, when the value does not fit the
        interrupt's `response_schema` or cannot be matched to the pending interrupts.
        """
        from langgraph.types import Command

        by_id = {interrupt.id: interrupt for interrupt in pending}
        if value is None:
            raise _error(422, "invalid_resume", "resume must be a value, not null.", "resume")
        if isinstance(value, dict) and value and all(map(is_interrupt_id, value)):
            # A map of ids (as LangGraph reads one): a key not pending is a retry of an
            # answer already sent, never the answer to what the thread waits for next.
            stale = [key for key in value if key not in by_id]
            if stale:
                raise stale_answer(stale[0], by_id)
        if isinstance(pending[0], Breakpoint):
            # Continue with no input: `Command(resume=value)` would answer the next step's
            # first `interrupt()` with `value` before the user saw its question.
            return None
        if isinstance(value, dict) and value and set(value) <= set(by_id):
            for interrupt_id, answer in value.items():
                _check_schema(by_id[interrupt_id], answer, f"resume.{interrupt_id}")
            return Command(resume=value)
        if len(pending) == 1:
            _check_schema(pending[0], value, "resume")
            return Command(resume=value)
        raise _error(
            422,
            "invalid_resume",
            f"{len(pending)} interrupts are pending; send resume as a map from "
            f"interrupt id to value, with ids among {sorted(by_id)}.",
            "resume",
        )

    def start(
        self,
        lock: ThreadLock,
        payload: Any,
        metadata: dict[str, Any],
        *,
        message_id: str | None = None,
        log: _RunLog | None = None,
        calls: dict[str, dict[str, Any]] | None = None,
        known: set[str] | None = None,
    ) -> _Run:
        """Start a run on a claimed thread; its lock is released when the run ends.
        `known`: for a resumed run, `known_message_ids` of the state the route read."""
        thread_id = lock.thread_id
        run = _Run(thread_id, lock, message_id, calls, known)
        run.log = log
        config = {**self.config_for(thread_id), "metadata": metadata}
        self.runs[thread_id] = run
        run.task = asyncio.ensure_future(self._run(run, payload, config))
        # A task cancelled before its first step never enters `_run`'s finally.
        run.task.add_done_callback(lambda _: self._ended(run))
        return run

    async def _run(self, run: _Run, payload: Any, config: dict[str, Any]) -> None:
        try:
            await self._execute(run, payload, config)
        finally:
            # Also when cancelled (an SSE client left) before or while its `done` stored
            # them: written whole before the thread is free.
            await asyncio.shield(self._store_notes(run))
            if run.log is not None:  # the end marker before the lock: see the module doc
                await run.log.finish()
            # Free before the followers hear the end: a client's next request must not
            # find the thread busy (a Postgres unlock is a round trip).
            await run.lock.arelease()
            self._ended(run)

    def _ended(self, run: _Run) -> None:
        """The run is over: wake its followers, forget it and free the thread (idempotent)."""
        run.finish()
        if run.log is not None:
            run.log.abandon()
        if self.runs.get(run.thread_id) is run:
            del self.runs[run.thread_id]
        run.lock.release()

    async def _execute(self, run: _Run, payload: Any, config: dict[str, Any]) -> None:
        thread_id = run.thread_id

        async def pending() -> list[Any] | None:
            try:
                # From the checkpoint, not from the events: after a failed resume the
                # interrupt is still pending and the UI must show its form again; a
                # static breakpoint is in no event.
                return await self.pending_interrupts(thread_id, held=True)
            except Exception:
                _log.exception("reading the state of thread %s failed", thread_id)
                return None

        from langgraph.types import Command

        resuming = payload is None or isinstance(payload, Command)  # None: a breakpoint's
        run.notes.new_turn = not resuming
        # A resumed run's: what the interrupted step holds, read by its route (resume_state)
        known = run.known or set()
        parts = self.graph.astream(
            payload,
            config,
            stream_mode=self.stream_mode,
            subgraphs=True,
            version="v2",
            durability=self.durability,
        )
        # A graph failure becomes an error and a done, never a 500 or a hung stream; the
        # checkpoint keeps the last completed step, so the thread takes the next message.
        async for event in achat_events(
            parts,
            thread_id=thread_id,
            root=self.root_source,
            pending=pending,
            known=known,
        ):
            if run.log is not None:
                run.log.add(event)
            if event.event == "done":
                await asyncio.shield(self._store_notes(run))
                if run.log is not None:
                    await run.log.finish()
                # The graph is done; free the thread before the client hears `done`.
                await run.lock.arelease()
            run.notes.observe(event)
            run.push(event)

    def _store_notes(self, run: _Run) -> asyncio.Future[None]:
        """The run's notes write, started once (a cancelled run's is awaited again)."""
        if run.notes_written is None:
            run.notes_written = asyncio.ensure_future(self._write_notes(run))
        return run.notes_written

    async def _write_notes(self, run: _Run) -> None:
        try:
            await self.notes.add(run.thread_id, run.notes)
        except Exception:
            # Only the history's labels and cards, a resumed AI SDK card's input and what
            # a resume makes of a dict message written under an id this run sent (it may
            # be sent again; a tool result under a call id an earlier turn answered is not
            # sent live) depend on the notes; the answer is in the checkpoint already.
            _log.exception("storing the notes of thread %s failed", run.thread_id)

    # -- responses --------------------------------------------------------------------

    def chat_response(self, run: _Run) -> Any:
        """Our SSE schema for a run; the run is cancelled when the client leaves."""

        async def frames() -> AsyncIterator[bytes]:
            async for event in run.follow():
                yield event.encode()

        return sse_response(
            frames(),
            headers={"X-Thread-Id": run.thread_id},
            on_close=run.cancel,
            ping=self.ping,
            send_timeout=self.send_timeout,
        )

    def ui_response(self, run: _Run) -> Any:
        """The AI SDK UI message stream of a run, from its start; the run outlives it."""

        async def frames() -> AsyncIterator[bytes]:
            encoder = UIStreamEncoder(run.message_id, run.calls)
            async for event in run.follow():
                for part in encoder.encode(event):
                    yield encode_part(part)
            if run.events and run.events[-1].event == "done":
                yield UI_DONE

        return self._ui_sse(frames(), run.thread_id)

    def _ui_sse(self, frames: AsyncIterator[bytes], thread_id: str) -> Any:
        return sse_response(
            frames,
            headers={"X-Thread-Id": thread_id, "x-vercel-ai-ui-message-stream": "v1"},
            ping=self.ping,
            send_timeout=self.send_timeout,
        )

    async def logged_ui_response(self, thread_id: str) -> Any | None:
        """The UI stream of an AI SDK run active in another process, from its log; None
        when the thread has no such run (no log, its end marker written, or its lock
        free)."""
        store = self.threads
        run_id, rows = await store.runlog_read(thread_id, -1)
        if run_id is None or rows[-1][1] is None or not await store.is_locked(thread_id):
            return None

        async def frames() -> AsyncIterator[bytes]:
            last, lock_free = -1, False
            while True:
                current, rows = await store.runlog_read(thread_id, last)
                if current != run_id:  # replaced by the next run (or deleted)
                    break
                fresh = [(seq, part) for seq, part in rows if seq > last]
                for seq, part in fresh:
                    last = seq
                    if part is None:
                        return
                    yield part.encode()
                if lock_free:
                    break  # the lock was free before this read and still no end marker
                if not fresh and not await store.is_locked(thread_id):
                    lock_free = True
                    continue
                await asyncio.sleep(_LOG_POLL)
            yield encode_part({"type": "error", "errorText": _LOST_RUN})

        return self._ui_sse(frames(), thread_id)


_INTERRUPT_ID = re.compile(r"[0-9a-f]{32}")


def stale_answer(key: Any, pending: Mapping[str, Any]) -> Exception:
    """409 `stale_answer`: `key` names a question or breakpoint already answered."""
    return _error(
        409,
        "stale_answer",
        f"{key!r} was already answered; the thread now waits for "
        f"{sorted(pending) if pending else 'nothing'}.",
        "resume",
    )


def is_interrupt_id(key: Any) -> bool:
    """Whether a resume map's key names an interrupt (LangGraph's 32 hex digits) or a
    breakpoint, rather than being part of an answer that is itself a mapping."""
    return isinstance(key, str) and (
        key.startswith(f"{BREAKPOINT}:") or _INTERRUPT_ID.fullmatch(key) is not None
    )


def _check_schema(interrupt: Any, value: Any, field: str) -> None:
    """422 naming the field when `value` does not fit the interrupt's JSON Schema."""
    schema = getattr(interrupt, "response_schema", None)
    if not isinstance(schema, dict):
        return
    import jsonschema_rs

    for problem in jsonschema_rs.validator_for(schema).iter_errors(value):
        path = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in problem.instance_path
        )
        where = field + path
        raise _error(422, "invalid_resume", f"{where}: {problem.message}", where)


def _user_text(message: Mapping[str, Any]) -> str:
    """The text of a `UIMessage`: its text parts joined (or a plain `content`)."""
    parts = message.get("parts")
    if isinstance(parts, list):
        return "".join(
            str(part.get("text", ""))
            for part in parts
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return message_text(message.get("content", ""))


# -- routes: one named function each; `chat_router` binds them -----------------------------


async def post_stream(chat: ChatService, body: StreamBody, user: str) -> Any:
    """Start a run on a new or existing thread with the user's message."""
    text = body.message
    chat.check_message(text)
    check = None
    if body.thread_id is None:
        thread_id = str(uuid.uuid4())
        title = thread_title(text)
    else:
        thread_id = body.thread_id
        title = (await chat.owned(thread_id, user)).title

        async def check() -> None:
            if await chat.pending_interrupts(thread_id, held=True):
                raise _error(
                    409,
                    "interrupt_pending",
                    "The assistant is waiting for your answer to its question; answer it first.",
                )

    lock = await chat.claim(thread_id, user, title, check=check)
    run = chat.start(lock, chat.make_input(text), {OWNER_KEY: user, TITLE_KEY: title})
    return chat.chat_response(run)


async def post_resume(chat: ChatService, thread_id: str, body: ResumeBody, user: str) -> Any:
    """Answer the thread's pending interrupt(s) and continue the run."""
    found = await chat.owned(thread_id, user)
    command = None
    known: set[str] | None = None

    async def check() -> None:
        nonlocal command, known
        state, deep, known = await chat.resume_state(thread_id)  # one read, for both
        pending = await chat.pending_interrupts(thread_id, held=True, state=state, deep=deep)
        if not pending:
            raise _error(409, "nothing_to_resume", f"Thread {thread_id!r} is not waiting.")
        command = chat.resume_command(pending, body.resume)

    lock = await chat.claim(thread_id, user, found.title, check=check)
    run = chat.start(lock, command, {OWNER_KEY: user, TITLE_KEY: found.title}, known=known)
    return chat.chat_response(run)


async def get_threads(chat: ChatService, user: str) -> dict[str, Any]:
    """The caller's threads, newest first."""
    return {"threads": [row.as_json() for row in await chat.threads.list_threads(user)]}


async def get_messages(chat: ChatService, thread_id: str, user: str) -> dict[str, Any]:
    """The thread's visible history, its cards and its pending interrupts."""
    await chat.owned(thread_id, user)
    state = await chat.graph.aget_state(chat.config_for(thread_id))
    values = state.values if isinstance(state.values, Mapping) else {}
    # Without its notes (they cannot be read), the history labels each message by the
    # producer it carries and shows no cards.
    notes = await chat.thread_notes(thread_id)
    pending = await chat.pending_interrupts(thread_id, state=state)
    return {
        "thread_id": thread_id,
        "messages": history_items(values.get("messages", []), visible=chat.visible, notes=notes),
        "interrupts": [{"id": i.id, "value": i.value} for i in pending],
    }


async def delete_thread(chat: ChatService, thread_id: str, user: str) -> None:
    """Delete the thread; 409 while it is answering (in any process)."""
    await chat.owned(thread_id, user)
    lock = await chat.lock(thread_id)
    try:
        await chat.graph.checkpointer.adelete_thread(thread_id)
        await chat.threads.runlog_clear(thread_id)
        await chat.threads.delete(thread_id)
    finally:
        lock.release()


async def post_ui(chat: ChatService, body: UIChatBody, user: str) -> Any:
    """The AI SDK `useChat` endpoint: a new message, or the answer to a pending interrupt."""
    if body.trigger not in (None, "submit-message"):
        raise _error(
            422,
            "unsupported_trigger",
            f"trigger {body.trigger!r} is not supported; send 'submit-message'.",
            "trigger",
        )
    thread_id = body.id
    found = await chat.find(thread_id, user)
    users = [m for m in body.messages if m.get("role") == "user"]
    text = _user_text(users[-1]) if users else ""
    title = found.title if found is not None else thread_title(text)
    resuming = False
    payload: Any = None
    known: set[str] | None = None

    async def check() -> None:
        nonlocal payload, resuming, known
        # Found again under the lock: another request may have started the thread since.
        if await chat.find(thread_id, user) is not None:
            state, deep, ids = await chat.resume_state(thread_id)  # one read, for both
            pending = await chat.pending_interrupts(thread_id, held=True, state=state, deep=deep)
            if pending:
                answer = body.resume if body.resume is not None else text
                payload = chat.resume_command(pending, answer)
                resuming, known = True, ids
                return
            if body.resume is not None:  # an answer, not a new message (null: none)
                raise _error(409, "nothing_to_resume", f"Thread {thread_id!r} is not waiting.")
        chat.check_message(text)
        payload = chat.make_input(text)

    lock = await chat.claim(thread_id, user, title, check=check)
    message_id = body.messageId or f"msg-{uuid.uuid4()}"
    log = None
    try:
        # Under the lock, so the interrupted run's notes are stored: a resumed card's input.
        calls = await chat.open_calls(thread_id) if resuming else {}
        if chat.threads.shares_runs:
            log = _RunLog(chat.threads, thread_id, message_id, calls)
            await log.begin()
    except BaseException:
        lock.release()
        raise
    run = chat.start(
        lock,
        payload,
        {OWNER_KEY: user, TITLE_KEY: title},
        message_id=message_id,
        log=log,
        calls=calls,
        known=known,
    )
    return chat.ui_response(run)


async def get_ui_stream(chat: ChatService, chat_id: str, user: str) -> Any:
    """Resume: the active run's UI stream from its start; 204 when no run is active."""
    from fastapi import Response

    found = await chat.find(chat_id, user)
    if found is None:
        return Response(status_code=204)
    run = chat.runs.get(chat_id)
    if run is not None and not run.finished:
        return chat.ui_response(run)
    if chat.threads.shares_runs:  # a run in another process sharing the store
        logged = await chat.logged_ui_response(chat_id)
        if logged is not None:
            return logged
    return Response(status_code=204)


def _endpoint(route: Callable[..., Any], chat: ChatService, user: Any) -> Callable[..., Any]:
    """`route` as a FastAPI endpoint: `chat` bound, `user` from the user dependency."""
    signature = inspect.signature(route)
    params = [
        p.replace(default=user) if p.name == "user" else p
        for p in list(signature.parameters.values())[1:]
    ]

    async def endpoint(**kwargs: Any) -> Any:
        return await route(chat, **kwargs)

    endpoint.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    endpoint.__name__ = route.__name__
    endpoint.__doc__ = route.__doc__
    return endpoint


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
    ping: float = DEFAULT_PING_SECONDS,
    send_timeout: float | None = DEFAULT_SEND_TIMEOUT,
    thread_store: ThreadStore | None = None,
    durability: Durability = "sync",
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
        ping: Seconds between keep-alive pings on a quiet stream (0: none).
        send_timeout: Seconds one send may block before the response ends (None: no
            limit).
        thread_store: Where owners, titles and busy locks live; `open_storage(db).threads`
            for an index table and locks shared by several processes. Default:
            `CheckpointThreadStore(checkpointer)` (checkpoint metadata, one process),
            shared with an `agui_router` on the same checkpointer.
        durability: LangGraph's `durability` for every run. "sync" (the default) writes
            each step's checkpoint before the next step starts, so a worker killed
            mid-answer loses no completed step; "async" overlaps the write with the next
            step (faster, but a kill can lose the step just finished); "exit" writes
            only when the run ends.

    Raises:
        ValueError: If the graph has no checkpointer, or an option is out of range.
        ImportError: If FastAPI or sse-starlette is not installed.
    """
    fastapi = _require_fastapi()
    try:
        import jsonschema_rs  # noqa: F401 - checked here, used to validate resume values
        import sse_starlette  # noqa: F401
    except ImportError as exc:
        msg = (
            f"chat_router() needs {exc.name}; install the server extra: "
            "pip install 'lg-visibility[server]'."
        )
        raise ImportError(msg) from exc

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
    if ping < 0:
        msg = f"ping must be >= 0 seconds (0 disables pings), got {ping!r}."
        raise ValueError(msg)
    check_durability(durability)
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

    chat = ChatService(
        graph,
        threads=thread_store if thread_store is not None else default_thread_store(checkpointer),
        stream_mode=modes,
        make_input=make_input,
        visible=visible,
        root_source=root_source,
        max_message_chars=max_message_chars,
        ping=ping,
        send_timeout=send_timeout,
        prefix=prefix,
        durability=durability,
    )
    user = fastapi.Depends(user_id or header_user_id())
    router: APIRouter = fastapi.APIRouter(prefix=prefix, route_class=_route_class())

    def add(method: str, path: str, route: Callable[..., Any], **options: Any) -> None:
        router.add_api_route(
            path, _endpoint(route, chat, user), methods=[method], response_model=None, **options
        )

    add("POST", "/stream", post_stream)
    add("POST", "/ui", post_ui)
    add("GET", "/ui/{chat_id}/stream", get_ui_stream)
    add("GET", "/threads", get_threads)
    add("POST", "/{thread_id}/resume", post_resume)
    add("GET", "/{thread_id}/messages", get_messages)
    add("DELETE", "/{thread_id}", delete_thread, status_code=204)
    return router
