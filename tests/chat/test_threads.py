"""Tests for lg_visibility.chat._threads: the thread index and the cross-process busy lock.

Each behaviour runs on every store that has a table (memory, SQLite, Postgres); the
Postgres cases start a real server (`integration`). Cross-process locks are checked with a
second Python process that holds a lock and is then killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from lg_visibility.chat._threads import (
    CheckpointThreadStore,
    MemoryThreadStore,
    ThreadStore,
    open_storage,
)
from tests._support.postgres import fresh_database, postgres_url  # noqa: F401

TIMEOUT = 20
KINDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.integration)]
SHARED = ["sqlite", pytest.param("postgres", marks=pytest.mark.integration)]


def db_for(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "postgres":
        return fresh_database(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "chat.sqlite")


@pytest.fixture
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ThreadStore]:
    """A ready store of the kind named by the test's parameter."""
    kind = request.param
    if kind == "memory":
        yield MemoryThreadStore()
        return
    storage = open_storage(db_for(kind, request, tmp_path))
    await storage.setup()
    try:
        yield storage.threads
    finally:
        await storage.aclose()


@pytest.fixture
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database (SQLite path or Postgres URL) of the kind named by the parameter."""
    return db_for(request.param, request, tmp_path)


@pytest.mark.parametrize("store", KINDS, indirect=True)
async def test_store_lists_owner_threads_newest_first(store: ThreadStore) -> None:
    """list_threads returns only the owner's rows, the most recently saved first."""
    async with asyncio.timeout(TIMEOUT):
        await store.save("t1", owner="alice", title="first")
        await store.save("t2", owner="alice", title="second")
        await store.save("t3", owner="bob", title="bob's")
        await asyncio.sleep(0.002)
        await store.save("t1", owner="alice", title="ignored on update")
        rows = await store.list_threads("alice")
    assert [(r.thread_id, r.owner, r.title) for r in rows] == [
        ("t1", "alice", "first"),
        ("t2", "alice", "second"),
    ]
    assert rows[0].updated_at > rows[1].updated_at


@pytest.mark.parametrize("store", KINDS, indirect=True)
async def test_store_get_returns_the_row_or_none(store: ThreadStore) -> None:
    """get gives the saved owner and title, and None for an unknown thread."""
    async with asyncio.timeout(TIMEOUT):
        saved = await store.save("t1", owner="alice", title="hello")
        found = await store.get("t1")
        missing = await store.get("nope")
    assert found == saved
    assert (found.owner, found.title) == ("alice", "hello")
    assert missing is None


@pytest.mark.parametrize("store", KINDS, indirect=True)
async def test_store_save_refuses_another_users_thread(store: ThreadStore) -> None:
    """Saving a run of bob on alice's thread raises and leaves alice's row as it was."""
    async with asyncio.timeout(TIMEOUT):
        before = await store.save("t1", owner="alice", title="hello")
        with pytest.raises(PermissionError, match="another user"):
            await store.save("t1", owner="bob", title="mine now")
        after = await store.get("t1")
        bobs = await store.list_threads("bob")
    assert after == before
    assert bobs == []


@pytest.mark.parametrize("store", KINDS, indirect=True)
async def test_store_delete_forgets_the_thread(store: ThreadStore) -> None:
    """After delete the thread is neither found nor listed."""
    async with asyncio.timeout(TIMEOUT):
        await store.save("t1", owner="alice", title="a")
        await store.save("t2", owner="alice", title="b")
        await store.delete("t1")
        rows = await store.list_threads("alice")
        found = await store.get("t1")
    assert [r.thread_id for r in rows] == ["t2"]
    assert found is None


@pytest.mark.parametrize("store", KINDS, indirect=True)
async def test_store_lock_is_exclusive_until_released(store: ThreadStore) -> None:
    """A held lock makes a second try_lock None; after release it can be taken again."""
    async with asyncio.timeout(TIMEOUT):
        first = await store.try_lock("t1")
        second = await store.try_lock("t1")
        other = await store.try_lock("t2")
        assert first is not None and other is not None
        first.release()
        first.release()  # idempotent
        third = await store.try_lock("t1")
        while third is None:  # a backend release runs in a task; bounded by the timeout
            await asyncio.sleep(0.01)
            third = await store.try_lock("t1")
    assert second is None
    assert (first.held, third.held) == (False, True)
    third.release()
    other.release()


HOLDER = textwrap.dedent(
    """
    import asyncio, sys, time
    from lg_visibility.chat._threads import open_storage

    async def main():
        storage = open_storage(sys.argv[1])
        await storage.setup()
        lock = await storage.threads.try_lock(sys.argv[2])
        print("LOCKED" if lock else "BUSY", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def start_holder(db: str, thread_id: str) -> subprocess.Popen[str]:
    """A second process that takes the thread's lock and keeps it until killed."""
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, db, thread_id],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )


@pytest.mark.parametrize("db", SHARED, indirect=True)
async def test_store_lock_held_by_another_process_is_busy_then_freed_by_sigkill(db: str) -> None:
    """A lock taken in another process is busy here, and free within 5 s of its kill -9."""
    holder = start_holder(db, "t1")
    storage = open_storage(db)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(holder.stdout.readline), TIMEOUT)  # type: ignore[union-attr]
        assert line.strip() == "LOCKED"
        await storage.setup()
        busy = await storage.threads.try_lock("t1")
        free_other = await storage.threads.try_lock("t2")
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=TIMEOUT)
        killed_at = time.monotonic()
        lock = await storage.threads.try_lock("t1")
        while lock is None and time.monotonic() - killed_at < 5:
            await asyncio.sleep(0.05)
            lock = await storage.threads.try_lock("t1")
        assert busy is None
        assert free_other is not None
        assert lock is not None, "the lock of the killed process was not freed within 5 s"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        await storage.aclose()


async def test_checkpoint_store_reads_owner_and_title_from_metadata() -> None:
    """Without a table, owner and title come from the latest root checkpoint's metadata."""
    saver = InMemorySaver()
    config: dict[str, Any] = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}

    metadata: Any = {"lg_visibility_user": "alice", "lg_visibility_title": "hi"}
    await saver.aput(config, empty_checkpoint(), metadata, {})
    store = CheckpointThreadStore(saver)
    found = await store.get("t1")
    rows = await store.list_threads("alice")
    assert found is not None and (found.owner, found.title) == ("alice", "hi")
    assert [(r.thread_id, r.title) for r in rows] == [("t1", "hi")]
    assert await store.list_threads("bob") == []
    with pytest.raises(PermissionError):
        await store.save("t1", owner="bob", title="x")
