"""Two `lg-visibility serve` processes on one PostgreSQL database behave as one service.

A real server is started by the `postgres_url` fixture (Debian's postgresql, a temp dir, a
free port); the workers are `python -m lg_visibility.demo.cli serve --graph ... --db
postgresql://...` processes on 127.0.0.1, started at the same moment. The graph is
tests/integration/pg_graph.py: an internal planner, one visible step, then a slow answer
or an approval interrupt. One test runs two workers on one SQLite file instead, for the AI
SDK run log that both backends share across processes.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests._support.aisdk import UIStreamError, parse_ui_message_stream
from tests._support.postgres import fresh_database, postgres_url  # noqa: F401
from tests.integration.pg_graph import ACK, ANSWER, PG_INTERNAL

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ALICE = {"X-User-Id": "alice"}
BOB = {"X-User-Id": "bob"}
TIMEOUT = 30
READY_TIMEOUT = 60


@dataclass
class Worker:
    """One serve process and its base URL."""

    proc: subprocess.Popen[bytes]
    base: str
    log: Path

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_worker(db: str, log: Path) -> Worker:
    """Start `lg-visibility serve` on the test graph; returns before it is ready."""
    port = free_port()
    args = [sys.executable, "-m", "lg_visibility.demo.cli", "serve"]
    args += ["--graph", "tests.integration.pg_graph:graph"]
    args += ["--policy", "tests.integration.pg_graph:policy"]
    args += ["--db", db, "--host", "127.0.0.1", "--port", str(port)]
    out = open(log, "wb")  # the child keeps its own copy
    proc = subprocess.Popen(
        args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )
    out.close()
    return Worker(proc, f"http://127.0.0.1:{port}", log)


def wait_ready(worker: Worker) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if worker.proc.poll() is not None:
            pytest.fail(f"worker exited with {worker.proc.returncode}:\n{worker.tail()}")
        try:
            if httpx.get(f"{worker.base}/api/chat/threads", headers=ALICE).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"worker not ready after {READY_TIMEOUT} s:\n{worker.tail()}")


def stop(worker: Worker) -> None:
    if worker.proc.poll() is None:
        worker.proc.send_signal(signal.SIGTERM)
        try:
            worker.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait()


@dataclass
class Service:
    db: str
    a: Worker
    b: Worker
    tmp: Path


@pytest.fixture(scope="module")
def service(
    postgres_url: str,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Service]:
    """Workers A and B on a fresh database, both started at the same moment."""
    tmp = tmp_path_factory.mktemp("workers")
    db = fresh_database(postgres_url)
    a, b = start_worker(db, tmp / "a.log"), start_worker(db, tmp / "b.log")
    try:
        wait_ready(a)
        wait_ready(b)
        yield Service(db, a, b, tmp)
    finally:
        stop(a)
        stop(b)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        yield client


def parse_sse(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in body.decode().split("\n\n"):
        if block.strip():
            fields = dict(line.split(": ", 1) for line in block.split("\n") if ": " in line)
            events.append((fields["event"], json.loads(fields["data"])))
    return events


async def post_sse(
    http: httpx.AsyncClient, url: str, body: Any
) -> tuple[httpx.Response, list[tuple[str, dict[str, Any]]]]:
    response = await asyncio.wait_for(http.post(url, json=body, headers=ALICE), TIMEOUT)
    assert response.status_code == 200, response.text
    assert PG_INTERNAL not in response.text
    return response, parse_sse(response.content)


def messages_of(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [data["content"] for name, data in events if name == "message"]


async def history(http: httpx.AsyncClient, base: str, thread_id: str) -> dict[str, Any]:
    response = await http.get(f"{base}/api/chat/{thread_id}/messages", headers=ALICE)
    assert response.status_code == 200, response.text
    assert PG_INTERNAL not in response.text
    body: dict[str, Any] = response.json()
    return body


def contents(found: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in found["messages"]]


async def test_workers_start_together_without_a_schema_race(service: Service) -> None:
    """Both workers started at once are up, and each migration was applied exactly once."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    with psycopg.connect(service.db) as conn:
        versions = [r[0] for r in conn.execute("SELECT v FROM checkpoint_migrations ORDER BY v")]
        table = conn.execute("SELECT to_regclass('lg_visibility_threads')::text").fetchone()
    assert (service.a.proc.poll(), service.b.proc.poll()) == (None, None)
    assert versions == list(range(len(AsyncPostgresSaver.MIGRATIONS)))
    assert table == ("lg_visibility_threads",)


async def test_workers_interrupt_on_a_is_resumed_on_b(
    service: Service, http: httpx.AsyncClient
) -> None:
    """An order interrupted on worker A is approved on worker B and finishes there."""
    response, first = await post_sse(
        http, f"{service.a.base}/api/chat/stream", {"message": "order"}
    )
    thread_id = response.headers["x-thread-id"]
    _, second = await post_sse(
        http, f"{service.b.base}/api/chat/{thread_id}/resume", {"resume": "approve"}
    )
    assert messages_of(first) == [ACK]
    assert [name for name, _ in first][-2:] == ["interrupt", "done"]
    assert first[-1][1]["interrupted"] is True
    assert messages_of(second) == ["Order placed: approve"]
    assert second[-1] == ("done", {"thread_id": thread_id, "interrupted": False})


async def test_workers_delete_on_b_while_a_resumes_is_409(
    service: Service, http: httpx.AsyncClient
) -> None:
    """While A streams the answer to a resume, deleting the thread on B is a 409."""
    response, _ = await post_sse(http, f"{service.a.base}/api/chat/stream", {"message": "order"})
    thread_id = response.headers["x-thread-id"]
    url = f"{service.a.base}/api/chat/{thread_id}/resume"
    async with http.stream("POST", url, json={"resume": "approve"}, headers=ALICE) as running:
        lines = running.aiter_lines()
        seen = [await asyncio.wait_for(anext(lines), TIMEOUT)]
        while "token" not in seen[-1]:
            seen.append(await asyncio.wait_for(anext(lines), TIMEOUT))
        busy = await http.delete(f"{service.b.base}/api/chat/{thread_id}", headers=ALICE)
        rest = [line async for line in lines]
    assert (busy.status_code, busy.json()["detail"]["code"]) == (409, "thread_busy")
    assert messages_of(parse_sse("\n".join(seen + rest).encode())) == ["Order placed: approve"]


async def test_workers_second_stream_on_b_during_a_slow_answer_is_409(
    service: Service, http: httpx.AsyncClient
) -> None:
    """During A's slow streamed answer, a new message to the thread on B is a 409."""
    response, _ = await post_sse(http, f"{service.a.base}/api/chat/stream", {"message": "order"})
    thread_id = response.headers["x-thread-id"]
    await post_sse(http, f"{service.b.base}/api/chat/{thread_id}/resume", {"resume": "no"})
    body = {"message": "tell me more", "thread_id": thread_id}
    async with http.stream(
        "POST", f"{service.a.base}/api/chat/stream", json=body, headers=ALICE
    ) as running:
        lines = running.aiter_lines()
        while "token" not in await asyncio.wait_for(anext(lines), TIMEOUT):
            pass
        busy = await http.post(f"{service.b.base}/api/chat/stream", json=body, headers=ALICE)
    assert (busy.status_code, busy.json()["detail"]["code"]) == (409, "thread_busy")


async def test_workers_history_and_thread_list_are_the_same_from_both(
    service: Service, http: httpx.AsyncClient
) -> None:
    """After a run, A and B return the same history and the same thread list."""
    response, _ = await post_sse(http, f"{service.a.base}/api/chat/stream", {"message": "order"})
    thread_id = response.headers["x-thread-id"]
    await post_sse(http, f"{service.b.base}/api/chat/{thread_id}/resume", {"resume": "yes"})
    from_a = await history(http, service.a.base, thread_id)
    from_b = await history(http, service.b.base, thread_id)
    list_a = (await http.get(f"{service.a.base}/api/chat/threads", headers=ALICE)).json()
    list_b = (await http.get(f"{service.b.base}/api/chat/threads", headers=ALICE)).json()
    assert from_a == from_b
    assert contents(from_a) == [
        ("user", "order"),
        ("assistant", ACK),
        ("assistant", "Order placed: yes"),
    ]
    assert list_a == list_b
    assert list_a["threads"][0]["thread_id"] == thread_id


async def test_worker_killed_mid_answer_loses_no_completed_step(
    service: Service, http: httpx.AsyncClient
) -> None:
    """kill -9 of a worker mid-answer keeps the completed step, and B continues the thread."""
    c = start_worker(service.db, service.tmp / "c.log")
    try:
        wait_ready(c)
        async with http.stream(
            "POST", f"{c.base}/api/chat/stream", json={"message": "explain"}, headers=ALICE
        ) as running:
            thread_id = running.headers["x-thread-id"]
            seen: list[str] = []
            lines = running.aiter_lines()
            while sum("event: token" in line for line in seen) < 3:
                seen.append(await asyncio.wait_for(anext(lines), TIMEOUT))
            c.proc.send_signal(signal.SIGKILL)
            c.proc.wait(timeout=TIMEOUT)
    finally:
        stop(c)
    assert any(ACK in line for line in seen)  # the ack step completed before the kill
    after_kill = await history(http, service.b.base, thread_id)
    body = {"message": "again", "thread_id": thread_id}
    killed_at = time.monotonic()
    while True:  # the killed worker's lock is freed when its connection drops
        response = await http.post(f"{service.b.base}/api/chat/stream", json=body, headers=ALICE)
        if response.status_code != 409 or time.monotonic() - killed_at > 5:
            break
        await asyncio.sleep(0.1)
    assert response.status_code == 200, response.text
    assert contents(after_kill) == [("user", "explain"), ("assistant", ACK)]
    assert messages_of(parse_sse(response.content)) == [ACK, ANSWER]
    assert contents(await history(http, service.b.base, thread_id)) == [
        ("user", "explain"),
        ("assistant", ACK),
        ("user", "again"),
        ("assistant", ACK),
        ("assistant", ANSWER),
    ]


# -- the AI SDK resume route across workers ---------------------------------------------


def ui_body(chat_id: str, text: str) -> dict[str, Any]:
    """A `useChat` request body for one new user message."""
    message = {"id": f"u-{chat_id}", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": chat_id, "messages": [message], "trigger": "submit-message"}


def data_lines(body: bytes) -> list[str]:
    """The `data:` lines of an SSE body (pings and blank lines dropped)."""
    return [line for line in body.decode().split("\n") if line.startswith("data: ")]


async def read_until(chunks: AsyncIterator[bytes], seen: list[bytes], needle: bytes) -> None:
    """Append chunks to `seen` until their concatenation holds `needle`."""
    while needle not in b"".join(seen):
        seen.append(await asyncio.wait_for(anext(chunks), TIMEOUT))


def text_of(message: dict[str, Any]) -> list[str]:
    return [part["text"] for part in message["parts"] if part["type"] == "text"]


async def assert_replayed_on_b(http: httpx.AsyncClient, a: str, b: str, chat_id: str) -> None:
    """Start a slow AI SDK answer on `a`, resume it on `b` mid-answer, compare the two."""
    async with http.stream(
        "POST", f"{a}/api/chat/ui", json=ui_body(chat_id, "explain"), headers=ALICE
    ) as running:
        assert running.status_code == 200
        chunks = running.aiter_bytes()
        seen: list[bytes] = []
        await read_until(chunks, seen, b'"type":"text-delta","id"')  # the answer is streaming
        resumed = await asyncio.wait_for(
            http.get(f"{b}/api/chat/ui/{chat_id}/stream", headers=ALICE), TIMEOUT
        )
        seen += [chunk async for chunk in chunks]
    own = b"".join(seen)
    assert resumed.status_code == 200, resumed.text
    assert resumed.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert data_lines(resumed.content) == data_lines(own)
    assert data_lines(own)[-1] == "data: [DONE]"
    from_b = parse_ui_message_stream(resumed.content)
    assert from_b == parse_ui_message_stream(own)
    assert text_of(from_b) == [ACK, ANSWER]
    assert PG_INTERNAL not in resumed.text


async def test_workers_aisdk_run_on_a_is_replayed_from_its_start_on_b(
    service: Service, http: httpx.AsyncClient
) -> None:
    """GET .../stream on B during A's slow AI SDK answer replays it from the start and
    follows it to the end: the AI SDK assembles the same message from both bodies."""
    await assert_replayed_on_b(http, service.a.base, service.b.base, "ui-resume-1")


async def test_workers_aisdk_on_one_sqlite_file_replay_across_processes(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """Two workers on one SQLite file share the AI SDK run log as Postgres workers do."""
    db = str(tmp_path / "chat.sqlite")
    a = start_worker(db, tmp_path / "a.log")
    try:
        wait_ready(a)  # one at a time: the first creates the file's schema
        b = start_worker(db, tmp_path / "b.log")
        try:
            wait_ready(b)
            await assert_replayed_on_b(http, a.base, b.base, "ui-sqlite-1")
        finally:
            stop(b)
    finally:
        stop(a)


async def test_workers_aisdk_resume_on_b_is_204_when_nothing_runs(
    service: Service, http: httpx.AsyncClient
) -> None:
    """B answers 204 for an unknown chat, for a chat whose AI SDK run ended on A, and for
    a chat answering on A through our own SSE route (no AI SDK run to resume)."""
    chat_id = "ui-idle-1"
    done = await asyncio.wait_for(
        http.post(f"{service.a.base}/api/chat/ui", json=ui_body(chat_id, "order"), headers=ALICE),
        TIMEOUT,
    )
    assert done.status_code == 200
    stream = f"{service.b.base}/api/chat/ui/{{}}/stream"
    unknown = await http.get(stream.format("ui-never-seen"), headers=ALICE)
    ended = await http.get(stream.format(chat_id), headers=ALICE)
    url = f"{service.a.base}/api/chat/{chat_id}/resume"
    async with http.stream("POST", url, json={"resume": "yes"}, headers=ALICE) as running:
        lines = running.aiter_lines()
        while "token" not in await asyncio.wait_for(anext(lines), TIMEOUT):
            pass
        during_sse = await http.get(stream.format(chat_id), headers=ALICE)
        busy = await http.post(
            f"{service.b.base}/api/chat/ui", json=ui_body(chat_id, "x"), headers=ALICE
        )
    assert (unknown.status_code, ended.status_code, during_sse.status_code) == (204, 204, 204)
    assert busy.status_code == 409  # the SSE run really was active on A


async def test_workers_aisdk_resume_of_another_users_chat_is_404_on_b(
    service: Service, http: httpx.AsyncClient
) -> None:
    """During Alice's AI SDK run on A, Bob's GET of her chat's stream on B is 404."""
    chat_id = "ui-owned-1"
    async with http.stream(
        "POST", f"{service.a.base}/api/chat/ui", json=ui_body(chat_id, "explain"), headers=ALICE
    ) as running:
        chunks = running.aiter_bytes()
        await read_until(chunks, [], b'"type":"text-delta","id"')
        other = await http.get(f"{service.b.base}/api/chat/ui/{chat_id}/stream", headers=BOB)
        [chunk async for chunk in chunks]
    assert (other.status_code, other.json()["detail"]["code"]) == (404, "thread_not_found")
    assert PG_INTERNAL not in other.text


async def test_workers_aisdk_resume_on_b_ends_when_a_is_killed_mid_run(
    service: Service, http: httpx.AsyncClient
) -> None:
    """kill -9 of the worker running an AI SDK answer ends B's resume stream within
    seconds with an `error` part, after the parts written before the kill."""
    c = start_worker(service.db, service.tmp / "c-ui.log")
    chat_id = "ui-killed-1"
    try:
        wait_ready(c)
        async with http.stream(
            "POST", f"{c.base}/api/chat/ui", json=ui_body(chat_id, "explain"), headers=ALICE
        ) as running:
            chunks = running.aiter_bytes()
            seen: list[bytes] = []
            await read_until(chunks, seen, b'"type":"text-delta","id"')
            url = f"{service.b.base}/api/chat/ui/{chat_id}/stream"
            async with http.stream("GET", url, headers=ALICE) as resumed:
                assert resumed.status_code == 200
                parts = resumed.aiter_bytes()
                got: list[bytes] = []
                await read_until(parts, got, b"part3")  # mid-answer
                c.proc.send_signal(signal.SIGKILL)
                c.proc.wait(timeout=TIMEOUT)
                killed_at = time.monotonic()
                got += await asyncio.wait_for(_rest(parts), 10)
                ended_after = time.monotonic() - killed_at
    finally:
        stop(c)
    body = b"".join(got)
    lines = data_lines(body)
    assert lines[-1] == (
        'data: {"type":"error","errorText":"The answer stopped before it finished; '
        'send your message again."}'
    )
    assert "data: [DONE]" not in lines
    assert '"type":"finish"' not in body.decode()
    assert ended_after < 10
    with pytest.raises(UIStreamError, match="The answer stopped before it finished"):
        parse_ui_message_stream(body)
    # What B replayed before the error is what the AI SDK assembles up to that point.
    partial = parse_ui_message_stream("\n\n".join(lines[:-1]).encode() + b"\n\n")
    assert text_of(partial)[0] == ACK
    answered = text_of(partial)[1]
    assert ANSWER.startswith(answered)
    assert "part3" in answered
    assert answered != ANSWER
    assert PG_INTERNAL not in body.decode()


async def _rest(chunks: AsyncIterator[bytes]) -> list[bytes]:
    return [chunk async for chunk in chunks]


RAW_SETUP = """
import asyncio, sys, time
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

async def main():
    async with AsyncPostgresSaver.from_conn_string(sys.argv[1]) as saver:
        await asyncio.sleep(max(0.0, float(sys.argv[2]) - time.time()))
        try:
            await saver.setup()
            print("OK")
        except Exception as exc:
            print("ERR", type(exc).__name__)

asyncio.run(main())
"""


def test_control_saver_setup_without_the_lock_races(postgres_url: str) -> None:  # noqa: F811
    """Control: two bare AsyncPostgresSaver.setup() calls at one instant collide."""
    outcomes = []
    for _ in range(5):  # timing-dependent; collides on the first try on this machine
        db, start = fresh_database(postgres_url), time.time() + 2.0
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", RAW_SETUP, db, str(start)], stdout=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        outcomes.append(sorted(p.communicate(timeout=TIMEOUT)[0].strip() for p in procs))
        if any(o.startswith("ERR") for o in outcomes[-1]):
            break
    assert any(o.startswith("ERR") for o in outcomes[-1]), outcomes
