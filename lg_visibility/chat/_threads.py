"""Thread stores: who owns a thread, its title, when it changed, and the "busy" lock.

The chat routes ask a `ThreadStore` four things: the thread's owner and title (`get`),
the caller's threads newest first (`list_threads`), to record a run (`save`) and to forget
a thread (`delete`); and for a thread lock held while a run answers (`try_lock`), so a
second message to the same thread is a 409 instead of two runs racing on one checkpoint.

- `PostgresThreadStore`: an index table `lg_visibility_threads` and session advisory
  locks on one dedicated connection per process. Several processes on one database
  behave as one service: a lock taken by one is busy for all, and the lock of a process
  that dies (even by `kill -9`) is freed by the server as soon as its connection drops.
- `SqliteThreadStore`: the same table in a SQLite file, and POSIX record locks
  (`fcntl.lockf`) on a `<file>.locks` side file, which the kernel frees when a process
  dies; several processes on one host share them. Without `fcntl` (Windows) the lock
  holds within one process only.
- `MemoryThreadStore`: one process, nothing persisted; for tests.
- `CheckpointThreadStore`: no table; owner and title from the metadata of the thread's
  latest checkpoint, the list by scanning checkpoints, the lock within one process. It is
  what `chat_router` uses when given no store, and works on any LangGraph checkpointer.

The run log: an AI SDK run (`POST /ui`) may be resumed (`GET /ui/{id}/stream`) on any
process, so a store shared across processes (`shares_runs`: SQLite and Postgres) keeps the
encoded parts of a thread's latest AI SDK run in `lg_visibility_run_parts` (thread id, run
id, seq, part; a NULL part is the run's end marker). `runlog_begin` deletes the rows of
the thread's previous run in the same transaction that writes the new run's first part,
so rows live until the next AI SDK run on the thread (or the thread's deletion); a reader
of an older run sees the new run's id at seq 0 and stops. `is_locked` says whether any
process holds the thread's busy lock, which bounds a reader: a run whose lock is free and
whose log has no end marker died with its worker.

`open_storage(db)` builds a checkpointer and the matching store from one value: a SQLite
path (the embedded default) or a `postgresql://` URL (`AsyncPostgresSaver` from
`langgraph-checkpoint-postgres`, on a psycopg pool shared with the store).

Schema set-up on Postgres runs under a session advisory lock, taken by polling
`pg_try_advisory_lock`: processes starting at the same moment would otherwise race on
`CREATE TABLE IF NOT EXISTS` and on the saver's migration rows (a UniqueViolation), and a
blocking `pg_advisory_lock` waiter would hold a snapshot that the saver's
`CREATE INDEX CONCURRENTLY` waits for (a deadlock).
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "ChatStorage",
    "CheckpointThreadStore",
    "MemoryThreadStore",
    "PostgresThreadStore",
    "SqliteThreadStore",
    "ThreadInfo",
    "ThreadLock",
    "ThreadStore",
    "is_postgres_url",
    "open_storage",
]

OWNER_KEY = "lg_visibility_user"  # the same keys as chat._router (metadata of each run)
TITLE_KEY = "lg_visibility_title"
TABLE = "lg_visibility_threads"
PARTS_TABLE = "lg_visibility_run_parts"
_SETUP_POLL = 0.05


def _key(text: str, bits: int = 63) -> int:
    """A stable non-negative integer key for `text` (advisory lock id, lock-file offset)."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - bits)


_SETUP_KEY = _key("lg_visibility.setup")


def _thread_key(thread_id: str) -> int:
    return _key(f"lg_visibility.thread:{thread_id}")


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass(frozen=True)
class ThreadInfo:
    """One row of the thread index: `updated_at` is ISO 8601 in UTC."""

    thread_id: str
    owner: str
    title: str
    updated_at: str

    def as_json(self) -> dict[str, Any]:
        """The shape of one entry of `GET /threads`."""
        return {"thread_id": self.thread_id, "title": self.title, "updated_at": self.updated_at}


class ThreadLock:
    """A held thread lock. `release()` is synchronous and idempotent; any work it needs
    (a database round trip) runs in a task the store awaits on `aclose()`. `arelease()`
    waits until the lock is free everywhere: call it before telling the client the run
    ended, or its next request can find the thread still busy."""

    def __init__(
        self,
        thread_id: str,
        release: Callable[[], None],
        arelease: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.thread_id = thread_id
        self._release: Callable[[], None] | None = release
        self._arelease = arelease

    @property
    def held(self) -> bool:
        """Whether `release()` has not been called yet."""
        return self._release is not None

    def release(self) -> None:
        """Free the lock (a second call does nothing)."""
        release, self._release = self._release, None
        if release is not None:
            release()

    async def arelease(self) -> None:
        """Free the lock and wait until it is free (a second call does nothing)."""
        release, self._release = self._release, None
        if release is None:
            return
        if self._arelease is None:
            release()
            return
        try:
            await self._arelease()
        except BaseException:
            release()  # cancelled or failed half-way: the synchronous path finishes it
            raise


class ThreadStore(abc.ABC):
    """Owner, title and recency of threads, and the per-thread busy lock.

    The in-process part of the lock lives here: a thread locked by this process is busy
    without asking the backend, so the backend's lock (re-entrant per session for a
    Postgres advisory lock, per process for a POSIX record lock) only has to exclude
    other processes.
    """

    def __init__(self) -> None:
        self._local: set[str] = set()
        self._pending: set[asyncio.Task[None]] = set()
        self._ready = False
        self._ready_lock: asyncio.Lock | None = None

    # -- set-up ------------------------------------------------------------------------

    async def setup(self) -> None:
        """Create what the store needs (idempotent; called on first use as well)."""
        if self._ready:
            return
        if self._ready_lock is None:
            self._ready_lock = asyncio.Lock()
        async with self._ready_lock:
            if not self._ready:
                await self._setup()
                self._ready = True

    async def _setup(self) -> None:
        return None

    async def aclose(self) -> None:
        """Wait for pending lock releases and close what the store opened."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    # -- the index ---------------------------------------------------------------------

    @abc.abstractmethod
    async def get(self, thread_id: str) -> ThreadInfo | None:
        """The thread's row, or None if there is no such thread."""

    @abc.abstractmethod
    async def save(self, thread_id: str, *, owner: str, title: str) -> ThreadInfo:
        """Record a run: create the row, or bump `updated_at` of the owner's row.

        Raises:
            PermissionError: If the thread exists and belongs to another user.
        """

    @abc.abstractmethod
    async def list_threads(self, owner: str, *, limit: int = 200) -> list[ThreadInfo]:
        """The owner's threads, newest `updated_at` first."""

    @abc.abstractmethod
    async def delete(self, thread_id: str) -> None:
        """Forget the thread (its checkpoints are the checkpointer's to delete)."""

    # -- the run log (AI SDK resume from another process) --------------------------------

    shares_runs = False
    """Whether the run log is shared with other processes (the `runlog_*` methods work)."""

    async def runlog_begin(self, thread_id: str, run_id: str, first: str) -> None:
        """Start the thread's run log with its first encoded part (seq 0), deleting the
        rows of the thread's previous run in the same transaction."""
        raise NotImplementedError

    async def runlog_append(
        self, thread_id: str, run_id: str, seq: int, parts: Sequence[str | None]
    ) -> None:
        """Append encoded parts numbered from `seq`; None is the run's end marker."""
        raise NotImplementedError

    async def runlog_read(
        self, thread_id: str, after: int
    ) -> tuple[str | None, list[tuple[int, str | None]]]:
        """(run id of the thread's log or None, its rows with seq > `after`, in order)."""
        raise NotImplementedError

    async def runlog_clear(self, thread_id: str) -> None:
        """Delete the thread's run log (no-op for a store that keeps none)."""
        return None

    async def is_locked(self, thread_id: str) -> bool:
        """Whether a run holds the thread's busy lock, in this process or another."""
        return thread_id in self._local

    # -- the lock ----------------------------------------------------------------------

    async def try_lock(self, thread_id: str) -> ThreadLock | None:
        """Take the thread's busy lock, or return None if a run holds it (here or in
        another process sharing the backend)."""
        if thread_id in self._local:
            return None
        self._local.add(thread_id)
        try:
            taken = await self._try_lock(thread_id)
        except BaseException:
            self._local.discard(thread_id)
            raise
        if not taken:
            self._local.discard(thread_id)
            return None
        return ThreadLock(
            thread_id, lambda: self._release(thread_id), lambda: self._arelease(thread_id)
        )

    def is_locked_here(self, thread_id: str) -> bool:
        """Whether this process holds the thread's lock."""
        return thread_id in self._local

    async def _try_lock(self, thread_id: str) -> bool:
        return True

    async def _unlock(self, thread_id: str) -> None:
        return None

    async def _arelease(self, thread_id: str) -> None:
        try:
            await self._unlock(thread_id)
        finally:
            self._local.discard(thread_id)

    def _release(self, thread_id: str) -> None:
        async def unlock() -> None:
            try:
                await self._unlock(thread_id)
            finally:
                self._local.discard(thread_id)

        try:
            task = asyncio.get_running_loop().create_task(unlock())
        except RuntimeError:  # no loop: the process is going away, and its locks with it
            self._local.discard(thread_id)
            return
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)


# -- in one process -------------------------------------------------------------------------


class MemoryThreadStore(ThreadStore):
    """Threads in a dict and locks in a set: one process, lost on exit (tests, demos)."""

    def __init__(self) -> None:
        super().__init__()
        self._rows: dict[str, ThreadInfo] = {}

    async def get(self, thread_id: str) -> ThreadInfo | None:
        return self._rows.get(thread_id)

    async def save(self, thread_id: str, *, owner: str, title: str) -> ThreadInfo:
        found = self._rows.get(thread_id)
        if found is not None and found.owner != owner:
            raise PermissionError(f"thread {thread_id!r} belongs to another user")
        row = ThreadInfo(thread_id, owner, found.title if found else title, _now())
        self._rows[thread_id] = row
        return row

    async def list_threads(self, owner: str, *, limit: int = 200) -> list[ThreadInfo]:
        rows = [r for r in self._rows.values() if r.owner == owner]
        return sorted(rows, key=lambda r: r.updated_at, reverse=True)[:limit]

    async def delete(self, thread_id: str) -> None:
        self._rows.pop(thread_id, None)

    def _release(self, thread_id: str) -> None:
        self._local.discard(thread_id)


class CheckpointThreadStore(ThreadStore):
    """No table: owner and title from checkpoint metadata, the list by a checkpoint scan.

    Every run must carry `{OWNER_KEY: user, TITLE_KEY: title}` as run metadata (the chat
    router does), which LangGraph copies into each checkpoint. Listing reads every root
    checkpoint of the user, so it slows down as threads grow; the lock holds within one
    process. Use `SqliteThreadStore` or `PostgresThreadStore` for an index and shared locks.
    """

    def __init__(self, checkpointer: Any) -> None:
        super().__init__()
        self.checkpointer = checkpointer

    async def get(self, thread_id: str) -> ThreadInfo | None:
        found = await self.checkpointer.aget_tuple(
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        )
        if found is None:
            return None
        metadata = found.metadata or {}
        owner = metadata.get(OWNER_KEY)
        if not isinstance(owner, str):
            return None
        title = metadata.get(TITLE_KEY) or ""
        return ThreadInfo(thread_id, owner, title, found.checkpoint.get("ts") or "")

    async def save(self, thread_id: str, *, owner: str, title: str) -> ThreadInfo:
        found = await self.get(thread_id)
        if found is not None and found.owner != owner:
            raise PermissionError(f"thread {thread_id!r} belongs to another user")
        # The run's metadata writes the row; nothing to store before it.
        return ThreadInfo(thread_id, owner, found.title if found else title, _now())

    async def list_threads(self, owner: str, *, limit: int = 200) -> list[ThreadInfo]:
        newest: dict[str, ThreadInfo] = {}
        async for found in self.checkpointer.alist(None, filter={OWNER_KEY: owner}):
            configurable = found.config["configurable"]
            if configurable.get("checkpoint_ns"):
                continue
            thread_id = configurable["thread_id"]
            ts = found.checkpoint.get("ts") or ""
            seen = newest.get(thread_id)
            if seen is None or ts > seen.updated_at:
                title = (found.metadata or {}).get(TITLE_KEY) or ""
                newest[thread_id] = ThreadInfo(thread_id, owner, title, ts)
        return sorted(newest.values(), key=lambda r: r.updated_at, reverse=True)[:limit]

    async def delete(self, thread_id: str) -> None:
        return None  # the rows are the checkpoints

    def _release(self, thread_id: str) -> None:
        self._local.discard(thread_id)


# -- SQLite -----------------------------------------------------------------------------------

_SQLITE_DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (thread_id TEXT PRIMARY KEY, owner TEXT NOT NULL, "
    "title TEXT NOT NULL DEFAULT '', updated_at TEXT NOT NULL)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_owner ON {TABLE} (owner, updated_at DESC)",
    f"CREATE TABLE IF NOT EXISTS {PARTS_TABLE} (thread_id TEXT NOT NULL, run_id TEXT NOT NULL, "
    "seq INTEGER NOT NULL, part TEXT, PRIMARY KEY (thread_id, seq))",
)
# seq 0 always comes back: it names the run the rows belong to.
_READ_PARTS = (
    f"SELECT run_id, seq, part FROM {PARTS_TABLE} WHERE thread_id = {{p}} "
    "AND (seq > {p} OR seq = 0) ORDER BY seq"
)


def _parts_page(rows: Sequence[Any]) -> tuple[str | None, list[tuple[int, str | None]]]:
    if not rows:
        return None, []
    first = rows[0]
    run_id = first["run_id"] if isinstance(first, dict) else first[0]
    out = [
        (r["seq"], r["part"]) if isinstance(r, dict) else (r[1], r[2])
        for r in rows
        if (r["run_id"] if isinstance(r, dict) else r[0]) == run_id
    ]
    return run_id, out


class SqliteThreadStore(ThreadStore):
    """The thread index in a SQLite file; locks as POSIX record locks on `<path>.locks`.

    Opens its own `aiosqlite` connection to `path` (the checkpointer's file works; the
    table is `lg_visibility_threads`) on first use, inside the serving event loop.
    The record locks are freed by the kernel when a process dies, so processes on one
    host share them; on a platform without `fcntl` they hold within one process only.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._conn: Any = None
        self._lock_fd: int | None = None

    async def _setup(self) -> None:
        import aiosqlite

        self._conn = await aiosqlite.connect(str(self.path), timeout=30)
        for statement in _SQLITE_DDL:
            await self._conn.execute(statement)
        await self._conn.commit()
        try:
            import fcntl  # noqa: F401
        except ImportError:  # pragma: no cover - Windows
            return
        self._lock_fd = os.open(f"{self.path}.locks", os.O_RDWR | os.O_CREAT, 0o600)

    async def aclose(self) -> None:
        await super().aclose()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        self._ready = False

    async def _row(self, thread_id: str) -> ThreadInfo | None:
        async with self._conn.execute(
            f"SELECT thread_id, owner, title, updated_at FROM {TABLE} WHERE thread_id = ?",
            (thread_id,),
        ) as cursor:
            row = await cursor.fetchone()
        return ThreadInfo(*row) if row else None

    async def get(self, thread_id: str) -> ThreadInfo | None:
        await self.setup()
        return await self._row(thread_id)

    async def save(self, thread_id: str, *, owner: str, title: str) -> ThreadInfo:
        await self.setup()
        await self._conn.execute(
            f"INSERT INTO {TABLE} (thread_id, owner, title, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (thread_id) DO UPDATE SET updated_at = excluded.updated_at "
            f"WHERE {TABLE}.owner = excluded.owner",
            (thread_id, owner, title, _now()),
        )
        await self._conn.commit()
        row = await self._row(thread_id)
        if row is None or row.owner != owner:
            raise PermissionError(f"thread {thread_id!r} belongs to another user")
        return row

    async def list_threads(self, owner: str, *, limit: int = 200) -> list[ThreadInfo]:
        await self.setup()
        async with self._conn.execute(
            f"SELECT thread_id, owner, title, updated_at FROM {TABLE} WHERE owner = ? "
            "ORDER BY updated_at DESC, thread_id LIMIT ?",
            (owner, limit),
        ) as cursor:
            rows = await cursor.fetchall()
        return [ThreadInfo(*row) for row in rows]

    async def delete(self, thread_id: str) -> None:
        await self.setup()
        await self._conn.execute(f"DELETE FROM {TABLE} WHERE thread_id = ?", (thread_id,))
        await self._conn.commit()

    shares_runs = True

    async def runlog_begin(self, thread_id: str, run_id: str, first: str) -> None:
        await self.setup()
        await self._conn.execute(f"DELETE FROM {PARTS_TABLE} WHERE thread_id = ?", (thread_id,))
        await self._conn.execute(
            f"INSERT INTO {PARTS_TABLE} (thread_id, run_id, seq, part) VALUES (?, ?, 0, ?)",
            (thread_id, run_id, first),
        )
        await self._conn.commit()

    async def runlog_append(
        self, thread_id: str, run_id: str, seq: int, parts: Sequence[str | None]
    ) -> None:
        await self.setup()
        await self._conn.executemany(
            f"INSERT INTO {PARTS_TABLE} (thread_id, run_id, seq, part) VALUES (?, ?, ?, ?)",
            [(thread_id, run_id, seq + i, part) for i, part in enumerate(parts)],
        )
        await self._conn.commit()

    async def runlog_read(
        self, thread_id: str, after: int
    ) -> tuple[str | None, list[tuple[int, str | None]]]:
        await self.setup()
        async with self._conn.execute(_READ_PARTS.format(p="?"), (thread_id, after)) as cursor:
            rows = await cursor.fetchall()
        return _parts_page(rows)

    async def runlog_clear(self, thread_id: str) -> None:
        await self.setup()
        await self._conn.execute(f"DELETE FROM {PARTS_TABLE} WHERE thread_id = ?", (thread_id,))
        await self._conn.commit()

    async def is_locked(self, thread_id: str) -> bool:
        await self.setup()
        if thread_id in self._local:
            return True
        if self._lock_fd is None:  # pragma: no cover - Windows
            return False
        import fcntl

        # Probe and give back at once, with no await in between: a record lock of this
        # process is in `_local`, so the probe can only meet another process's lock.
        offset = _key(thread_id, 62)
        try:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
        except OSError:
            return True
        fcntl.lockf(self._lock_fd, fcntl.LOCK_UN, 1, offset)
        return False

    async def _try_lock(self, thread_id: str) -> bool:
        await self.setup()
        if self._lock_fd is None:  # pragma: no cover - Windows
            return True
        import fcntl

        try:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _key(thread_id, 62))
        except OSError:
            return False
        return True

    async def _arelease(self, thread_id: str) -> None:
        self._release(thread_id)

    def _release(self, thread_id: str) -> None:
        # A non-blocking local call: no task needed.
        try:
            if self._lock_fd is not None:
                import fcntl

                fcntl.lockf(self._lock_fd, fcntl.LOCK_UN, 1, _key(thread_id, 62))
        finally:
            self._local.discard(thread_id)


# -- PostgreSQL -------------------------------------------------------------------------------

_PG_DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (thread_id text PRIMARY KEY, owner text NOT NULL, "
    "title text NOT NULL DEFAULT '', updated_at timestamptz NOT NULL DEFAULT clock_timestamp())",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_owner ON {TABLE} (owner, updated_at DESC)",
    f"CREATE TABLE IF NOT EXISTS {PARTS_TABLE} (thread_id text NOT NULL, run_id text NOT NULL, "
    "seq integer NOT NULL, part text, PRIMARY KEY (thread_id, seq))",
)
# A session advisory lock on one bigint key shows in pg_locks as classid = high 32 bits,
# objid = low 32 bits, objsubid = 1.
_PG_LOCKED = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 1) AS locked"
)
_PG_COLUMNS = "thread_id, owner, title, updated_at"


def _pg_row(row: Any) -> ThreadInfo:
    stamp = row["updated_at"]
    return ThreadInfo(
        row["thread_id"], row["owner"], row["title"], stamp.astimezone(UTC).isoformat()
    )


class PostgresThreadStore(ThreadStore):
    """The thread index in Postgres; locks as session advisory locks.

    Args:
        pool: A `psycopg_pool.AsyncConnectionPool` (opened by the caller) whose
            connections use `autocommit=True` and `row_factory=dict_row`, as
            `AsyncPostgresSaver` needs too; `open_storage` makes one.
        url: The database URL, for the dedicated lock connection.
        before_setup: Awaited inside the schema lock, before the table is created (the
            saver's `setup()`), so concurrent processes never race on schema set-up.

    The locks are taken with `pg_try_advisory_lock` on one dedicated connection of this
    process (a lock lives as long as its session): a process that dies loses its
    connection, and the server frees its locks at once. If that connection is lost while
    the process lives, its locks are gone with it; the next lock opens a new connection.
    """

    def __init__(
        self,
        pool: Any,
        url: str,
        *,
        before_setup: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__()
        self.pool = pool
        self.url = url
        self._before_setup = before_setup
        self._lock_conn: Any = None
        self._lock_io = asyncio.Lock()

    async def _connection(self) -> Any:
        import psycopg
        from psycopg.rows import dict_row

        if self._lock_conn is None or self._lock_conn.closed:
            self._lock_conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, row_factory=dict_row
            )
        return self._lock_conn

    async def _setup(self) -> None:
        async with self._lock_io:
            conn = await self._connection()
            # Polled, not pg_advisory_lock: a waiter blocked in a statement holds a
            # snapshot that the saver's CREATE INDEX CONCURRENTLY would wait for.
            while not (
                await (
                    await conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (_SETUP_KEY,))
                ).fetchone()
            )["ok"]:
                await asyncio.sleep(_SETUP_POLL)
            try:
                if self._before_setup is not None:
                    await self._before_setup()
                async with self.pool.connection() as db:
                    for statement in _PG_DDL:
                        await db.execute(statement)
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_KEY,))

    async def aclose(self) -> None:
        await super().aclose()
        if self._lock_conn is not None:
            await self._lock_conn.close()
            self._lock_conn = None

    async def get(self, thread_id: str) -> ThreadInfo | None:
        await self.setup()
        async with self.pool.connection() as db:
            cursor = await db.execute(
                f"SELECT {_PG_COLUMNS} FROM {TABLE} WHERE thread_id = %s", (thread_id,)
            )
            row = await cursor.fetchone()
        return _pg_row(row) if row else None

    async def save(self, thread_id: str, *, owner: str, title: str) -> ThreadInfo:
        await self.setup()
        async with self.pool.connection() as db:
            cursor = await db.execute(
                f"INSERT INTO {TABLE} (thread_id, owner, title) VALUES (%s, %s, %s) "
                "ON CONFLICT (thread_id) DO UPDATE SET updated_at = clock_timestamp() "
                f"WHERE {TABLE}.owner = excluded.owner RETURNING {_PG_COLUMNS}",
                (thread_id, owner, title),
            )
            row = await cursor.fetchone()
        if row is None:  # the conflict's WHERE failed: another user's thread
            raise PermissionError(f"thread {thread_id!r} belongs to another user")
        return _pg_row(row)

    async def list_threads(self, owner: str, *, limit: int = 200) -> list[ThreadInfo]:
        await self.setup()
        async with self.pool.connection() as db:
            cursor = await db.execute(
                f"SELECT {_PG_COLUMNS} FROM {TABLE} WHERE owner = %s "
                "ORDER BY updated_at DESC, thread_id LIMIT %s",
                (owner, limit),
            )
            rows = await cursor.fetchall()
        return [_pg_row(row) for row in rows]

    async def delete(self, thread_id: str) -> None:
        await self.setup()
        async with self.pool.connection() as db:
            await db.execute(f"DELETE FROM {TABLE} WHERE thread_id = %s", (thread_id,))

    shares_runs = True

    async def runlog_begin(self, thread_id: str, run_id: str, first: str) -> None:
        await self.setup()
        async with self.pool.connection() as db, db.transaction():
            await db.execute(f"DELETE FROM {PARTS_TABLE} WHERE thread_id = %s", (thread_id,))
            await db.execute(
                f"INSERT INTO {PARTS_TABLE} (thread_id, run_id, seq, part) VALUES (%s, %s, 0, %s)",
                (thread_id, run_id, first),
            )

    async def runlog_append(
        self, thread_id: str, run_id: str, seq: int, parts: Sequence[str | None]
    ) -> None:
        await self.setup()
        async with self.pool.connection() as db, db.cursor() as cursor:
            await cursor.executemany(
                f"INSERT INTO {PARTS_TABLE} (thread_id, run_id, seq, part) VALUES (%s, %s, %s, %s)",
                [(thread_id, run_id, seq + i, part) for i, part in enumerate(parts)],
            )

    async def runlog_read(
        self, thread_id: str, after: int
    ) -> tuple[str | None, list[tuple[int, str | None]]]:
        await self.setup()
        async with self.pool.connection() as db:
            cursor = await db.execute(_READ_PARTS.format(p="%s"), (thread_id, after))
            rows = await cursor.fetchall()
        return _parts_page(rows)

    async def runlog_clear(self, thread_id: str) -> None:
        await self.setup()
        async with self.pool.connection() as db:
            await db.execute(f"DELETE FROM {PARTS_TABLE} WHERE thread_id = %s", (thread_id,))

    async def is_locked(self, thread_id: str) -> bool:
        await self.setup()
        if thread_id in self._local:
            return True
        key = _thread_key(thread_id)
        async with self.pool.connection() as db:
            cursor = await db.execute(_PG_LOCKED, (key >> 32, key & 0xFFFFFFFF))
            row = await cursor.fetchone()
        return bool(row["locked"])

    async def _try_lock(self, thread_id: str) -> bool:
        await self.setup()
        async with self._lock_io:
            conn = await self._connection()
            cursor = await conn.execute(
                "SELECT pg_try_advisory_lock(%s) AS ok",
                (_thread_key(thread_id),),
            )
            row = await cursor.fetchone()
        return bool(row["ok"])

    async def _unlock(self, thread_id: str) -> None:
        async with self._lock_io:
            conn = self._lock_conn
            if conn is None or conn.closed:
                return  # the session, and its locks, are gone already
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_thread_key(thread_id),))


# -- one value -> a checkpointer and its store ------------------------------------------------


def is_postgres_url(db: str | Path) -> bool:
    """Whether `db` is a `postgresql://` (or `postgres://`) URL rather than a file path."""
    return isinstance(db, str) and db.startswith(("postgresql://", "postgres://"))


@dataclass
class ChatStorage:
    """A checkpointer and the matching thread store, opened and closed together.

    Build it with `open_storage(db)` inside the serving event loop, `await setup()`
    before serving (an app's lifespan) and `await aclose()` after.
    """

    checkpointer: Any
    threads: ThreadStore
    _open: Callable[[], Any] | None = None
    _close: Callable[[], Any] | None = None

    async def setup(self) -> None:
        """Open connections and create the schema (safe to run in several processes at
        once)."""
        if self._open is not None:
            await self._open()
        await self.threads.setup()

    async def aclose(self) -> None:
        """Release locks and close every connection."""
        try:
            await self.threads.aclose()
        finally:
            if self._close is not None:
                await self._close()


def open_storage(db: str | Path, *, max_connections: int = 10, serde: Any = None) -> ChatStorage:
    """A checkpointer and thread store for `db`: a SQLite path or a `postgresql://` URL.

    - SQLite: `AsyncSqliteSaver` on the file and a `SqliteThreadStore` beside it (needs
      `langgraph-checkpoint-sqlite` and `aiosqlite`).
    - Postgres: `AsyncPostgresSaver` and a `PostgresThreadStore` on one psycopg pool of
      at most `max_connections`, plus one lock connection (needs
      `langgraph-checkpoint-postgres`, `psycopg[binary]` and `psycopg-pool`).

    `serde` is the checkpointer's serializer (default: LangGraph's); pass
    `JsonPlusSerializer(allowed_msgpack_modules=[YourType, ...])` to register the types
    your graph keeps in state.

    Call it inside the event loop that will serve requests (the savers bind to it).

    Raises:
        ImportError: If the backend's packages are missing; the message names them.
    """
    if not is_postgres_url(db):
        from lg_visibility.chat._router import sqlite_checkpointer

        saver = sqlite_checkpointer(db, serde=serde)

        async def close_sqlite() -> None:
            await saver.conn.close()  # type: ignore[attr-defined]

        return ChatStorage(saver, SqliteThreadStore(db), None, close_sqlite)
    try:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool
    except ImportError as exc:
        msg = (
            "A postgresql:// database needs langgraph-checkpoint-postgres, psycopg and "
            "psycopg-pool: pip install 'lg-visibility[server]'."
        )
        raise ImportError(msg) from exc
    url = str(db)
    pool: Any = AsyncConnectionPool(
        url,
        min_size=1,
        max_size=max_connections,
        open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    )
    saver = AsyncPostgresSaver(pool, serde=serde)
    store = PostgresThreadStore(pool, url, before_setup=saver.setup)

    async def open_pool() -> None:
        await pool.open(wait=True)

    async def close_pool() -> None:
        await pool.close()

    return ChatStorage(saver, store, open_pool, close_pool)
