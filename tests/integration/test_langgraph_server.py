"""End to end under the LangGraph server: `langgraph dev` serves the wrapped incident graph
and the `langgraph_sdk` client streams it.

The server (langgraph-api, in-memory runtime) copies the exported graph per run with
`graph.copy()`, which keeps the `with_visibility` subclass, and calls its `astream`. These
tests check, over HTTP, that:

- no internal marker reaches the client in any event of `runs.stream` (all of
  messages-tuple, values, updates and custom, with subgraphs), while every visible marker
  does and the visible answer arrives token by token;
- the same graph served unwrapped (`raw`) leaks every internal marker, so the checks can
  fail, and the server really ran the subclass (the `recorded` assistant logs the class and
  the arguments of each `astream` call);
- `runs.wait`, `runs.join` and the thread's `values` carry the filtered final state;
- `runs.stream` with `stream_mode="events"` (served by `astream_events(version="v2")`),
  `threads.get_state`, `threads.get_history` and `threads.get_state` at a subgraph
  checkpoint found in history carry no internal content, while the unwrapped graph leaks
  there (the checkpoint itself keeps the raw, tagged state).

The server runs offline on 127.0.0.1 (no analytics, version check, tracing or API key)
from a temporary copy of `server_app/`, since it writes `.langgraph_api/` into its
working directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import langgraph_api  # noqa: F401  (the test extra: langgraph-cli[inmem]; a missing one fails)
import pytest
from langgraph_sdk import get_client

from lg_visibility.demo.graphs import (
    INCIDENT_INTERNAL_MARKERS,
    INCIDENT_VISIBLE_MARKERS,
)
from lg_visibility.testing import split_tokens

APP_DIR = Path(__file__).parent / "server_app"
REPO_ROOT = Path(__file__).parents[2]
HOST = "127.0.0.1"
READY_TIMEOUT = 60.0  # seconds for `langgraph dev` to answer /ok
RUN_TIMEOUT = 30.0  # seconds for one run (stream, wait, join)
STOP_TIMEOUT = 15.0  # seconds to exit after SIGTERM before it is killed

INPUT = {"messages": [{"role": "user", "content": "I want a refund"}]}
STREAM_MODES = ["messages-tuple", "values", "updates", "custom"]
SUB_ANSWER = "SUBVISIBLE Refunds go back to the card you paid with."
FINAL_ANSWER = "RESPVISIBLE Your refund will reach your card within 5 days."
# Paths whose events must never reach the client from the wrapped graph.
INTERNAL_NAMESPACES = ("router_subgraph", "knowledge_agent", "expand_queries", "make_cards")


# -- server -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    url: str
    workdir: Path
    astream_log: Path

    def astream_calls(self) -> list[dict[str, Any]]:
        """The `astream` calls the `recorded` assistant logged so far."""
        if not self.astream_log.exists():
            return []
        lines = self.astream_log.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]


def _langgraph_cli() -> str:
    beside = Path(sys.executable).parent / "langgraph"
    if beside.exists():
        return str(beside)
    found = shutil.which("langgraph")
    if found is None:
        pytest.fail(
            "langgraph_api is installed but the `langgraph` CLI is not next to "
            f"{sys.executable} nor on PATH; install langgraph-cli[inmem]."
        )
    return found


def _free_port() -> int:
    # A busy --port is silently replaced by a random one, so pick a free one first.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _server_env(astream_log: Path) -> dict[str, str]:
    # No LangSmith/LangChain/LangGraph settings from the caller's environment (keys,
    # endpoints, tracing): the server must stay offline.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LANGSMITH_", "LANGCHAIN_", "LANGGRAPH_"))
    }
    env.update(
        LANGGRAPH_CLI_NO_ANALYTICS="1",
        LANGGRAPH_NO_VERSION_CHECK="true",
        LANGSMITH_TRACING="false",
        LANGCHAIN_TRACING_V2="false",
        PYTHONUNBUFFERED="1",
        LGV_ASTREAM_LOG=str(astream_log),
        # The lg_visibility under test (this checkout), not whichever one is installed.
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p),
    )
    return env


def _tail(path: Path, chars: int = 8000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"<no server log: {exc}>"
    return text[-chars:]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT)


@pytest.fixture(scope="session")
def server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("langgraph_server") / "app"
    shutil.copytree(APP_DIR, workdir, ignore=shutil.ignore_patterns("__pycache__"))
    log_path = workdir.parent / "server.log"
    astream_log = workdir.parent / "astream_calls.jsonl"
    port = _free_port()
    url = f"http://{HOST}:{port}"
    cmd = [
        _langgraph_cli(), "dev", "--no-browser", "--no-reload",
        "--host", HOST, "--port", str(port), "--config", "langgraph.json",
    ]  # fmt: skip
    failed_before = request.session.testsfailed
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, cwd=workdir, env=_server_env(astream_log), stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        with httpx.Client(trust_env=False, timeout=2.0) as http:
            while True:
                if proc.poll() is not None:
                    pytest.fail(
                        f"`langgraph dev` exited with {proc.returncode} before serving "
                        f"{url}/ok; server log:\n{_tail(log_path)}"
                    )
                try:
                    if http.get(f"{url}/ok").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"`langgraph dev` did not answer {url}/ok within {READY_TIMEOUT:.0f} s;"
                        f" server log:\n{_tail(log_path)}"
                    )
                time.sleep(0.2)
        yield Server(url=url, workdir=workdir, astream_log=astream_log)
    finally:
        _stop(proc)
        if request.session.testsfailed > failed_before:
            reporter = request.config.pluginmanager.get_plugin("terminalreporter")
            text = f"\n--- langgraph dev log ({log_path}) ---\n{_tail(log_path)}"
            if reporter is not None:
                reporter.write_line(text)
            else:
                sys.stderr.write(text + "\n")


# -- client helpers ---------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One SSE event: its stream mode, its namespace (node names, task ids stripped) and
    its data."""

    mode: str
    ns: tuple[str, ...]
    data: Any

    @property
    def text(self) -> str:
        return json.dumps(self.data, sort_keys=True, default=str)


def _event(name: str, data: Any) -> Event:
    mode, *ns = name.split("|")
    return Event(mode, tuple(seg.split(":")[0] for seg in ns), data)


def _client(server: Server) -> Any:
    # api_key=None: never read an API key from the environment.
    return get_client(url=server.url, api_key=None)


async def _stream(server: Server, assistant: str, **kwargs: Any) -> list[Event]:
    client = _client(server)
    thread = await client.threads.create()
    events: list[Event] = []
    async with asyncio.timeout(RUN_TIMEOUT):
        async for part in client.runs.stream(thread["thread_id"], assistant, input=INPUT, **kwargs):
            events.append(_event(part.event, part.data))
    errors = [e for e in events if e.mode == "error"]
    assert not errors, f"the {assistant!r} run failed: {errors}"
    return events


async def _stream_all_modes(server: Server, assistant: str) -> list[Event]:
    return await _stream(server, assistant, stream_mode=STREAM_MODES, stream_subgraphs=True)


def _markers(texts: list[str], markers: tuple[str, ...]) -> set[str]:
    return {m for m in markers if any(m in t for t in texts)}


def _contents(state: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["type"], m["content"]) for m in state["messages"]]


# The final state the wrapped graph hands out: the knowledge agent's tool call, tool result
# and JSON answer are removed from `messages`; everything else is the raw state.
VISIBLE_MESSAGES = [
    ("human", "I want a refund"),
    ("ai", SUB_ANSWER),
    ("ai", FINAL_ANSWER),
]
# The same run's state as stored in the checkpoint (and as the raw graph returns it).
RAW_MESSAGE_TYPES = ["human", "ai", "tool", "ai", "ai", "ai"]
PERSISTED_INTERNAL_MARKERS = {"TOOLARGS", "TOOLRESULT", "KNWJSON"}


# -- tests ------------------------------------------------------------------------------


async def test_stream_carries_no_internal_content(server: Server) -> None:
    events = await _stream_all_modes(server, "visible")

    leaked = {
        (e.mode, "/".join(e.ns), m)
        for e in events
        for m in INCIDENT_INTERNAL_MARKERS
        if m in e.text
    }
    assert not leaked, f"internal markers reached the client: {sorted(leaked)}"
    internal_ns = sorted({e.ns for e in events if set(e.ns) & set(INTERNAL_NAMESPACES)})
    assert not internal_ns, f"events from internal producers reached the client: {internal_ns}"

    assert _markers([e.text for e in events], INCIDENT_VISIBLE_MARKERS) == set(
        INCIDENT_VISIBLE_MARKERS
    )
    assert {e.mode for e in events} == {"metadata", "messages", "values", "updates", "custom"}
    assert {e.ns for e in events} == {(), ("knowledge_subgraph",), ("insight_subgraph",)}


async def test_visible_answers_arrive_token_by_token(server: Server) -> None:
    events = await _stream_all_modes(server, "visible")

    final = [e.data for e in events if e.mode == "values" and e.ns == ()][-1]
    assert _contents(final) == VISIBLE_MESSAGES
    for message, ns in zip(final["messages"][1:], [("knowledge_subgraph",), ()], strict=True):
        chunks = [
            e.data[0]
            for e in events
            if e.mode == "messages" and e.ns == ns and e.data[0]["id"] == message["id"]
        ]
        texts = [c["content"] for c in chunks if c["content"]]
        assert "".join(texts) == message["content"]
        assert len(texts) == len(split_tokens(message["content"])) >= 3, texts
        assert all(c["type"] == "AIMessageChunk" for c in chunks)
    # Every messages event is one of those two answers.
    answer_ids = {m["id"] for m in final["messages"][1:]}
    assert {e.data[0]["id"] for e in events if e.mode == "messages"} == answer_ids

    cards = [e.data for e in events if e.mode == "custom"]
    assert [(c["type"], c["card_type"]) for c in cards] == [("card", "insight"), ("card", "static")]
    assert all(c["text"].startswith("INSCARD ") for c in cards)


async def test_unwrapped_graph_leaks_so_the_checks_can_fail(server: Server) -> None:
    events = await _stream_all_modes(server, "raw")

    texts = [e.text for e in events]
    assert _markers(texts, INCIDENT_INTERNAL_MARKERS) == set(INCIDENT_INTERNAL_MARKERS)
    assert _markers(texts, INCIDENT_VISIBLE_MARKERS) == set(INCIDENT_VISIBLE_MARKERS)
    assert ("router_subgraph", "route") in {e.ns for e in events}
    assert ("knowledge_subgraph", "knowledge_agent") in {e.ns for e in events}


async def test_server_runs_the_subclass_astream(server: Server) -> None:
    before = len(server.astream_calls())
    events = await _stream_all_modes(server, "recorded")
    client = _client(server)
    thread = await client.threads.create()
    async with asyncio.timeout(RUN_TIMEOUT):
        state = await client.runs.wait(thread["thread_id"], "recorded", input=INPUT)

    assert not _markers([e.text for e in events], INCIDENT_INTERNAL_MARKERS)
    assert _contents(state) == VISIBLE_MESSAGES
    calls = server.astream_calls()[before:]
    # The server copies the exported graph per run and calls astream on our class. It adds
    # "debug" to the requested modes, maps messages-tuple to "messages", passes subgraphs
    # as asked and never passes `version` (so v1 tuples).
    mro = ["_RecordingGraph", "VisibleCompiledStateGraph", "_VisibleGraph", "CompiledStateGraph"]
    expected_kwargs = [
        "context", "durability", "interrupt_after", "interrupt_before", "output_keys",
        "stream_mode", "subgraphs",
    ]  # fmt: skip
    assert calls == [
        {
            "mro": mro,
            "stream_mode": ["custom", "debug", "messages", "updates", "values"],
            "subgraphs": True,
            "version": None,
            "kwargs": expected_kwargs,
        },
        {  # runs.wait
            "mro": mro,
            "stream_mode": ["debug", "values"],
            "subgraphs": False,
            "version": None,
            "kwargs": expected_kwargs,
        },
    ]


async def test_wait_and_join_return_the_filtered_state(server: Server) -> None:
    client = _client(server)
    async with asyncio.timeout(RUN_TIMEOUT):
        waited_thread = await client.threads.create()
        waited = await client.runs.wait(waited_thread["thread_id"], "visible", input=INPUT)
        raw_thread = await client.threads.create()
        raw = await client.runs.wait(raw_thread["thread_id"], "raw", input=INPUT)

        # runs.join on a run that has already finished.
        joined_thread = await client.threads.create()
        run = await client.runs.create(joined_thread["thread_id"], "visible", input=INPUT)
        while (await client.runs.get(joined_thread["thread_id"], run["run_id"]))["status"] in (
            "pending",
            "running",
        ):
            await asyncio.sleep(0.05)
        joined = await client.runs.join(joined_thread["thread_id"], run["run_id"])
        thread = await client.threads.get(joined_thread["thread_id"])
        persisted = await client.threads.get_state(joined_thread["thread_id"])

    # runs.wait/join answer with the last `values` event of the run's stream, which the
    # wrapped graph filtered; the thread's `values` are that same final event.
    for state in (waited, joined, thread["values"]):
        assert set(state) == {"messages", "question", "scenario", "knowledge", "cards"}
        assert _contents(state) == VISIBLE_MESSAGES
        assert not _markers([json.dumps(state)], INCIDENT_INTERNAL_MARKERS)
        assert _markers([json.dumps(state)], INCIDENT_VISIBLE_MARKERS) == set(
            INCIDENT_VISIBLE_MARKERS
        )
    # Only the message list differs from the unwrapped graph's result.
    assert [m["type"] for m in raw["messages"]] == RAW_MESSAGE_TYPES
    assert {k: v for k, v in waited.items() if k != "messages"} == {
        k: v for k, v in raw.items() if k != "messages"
    }
    # threads.get_state is served by the wrapped graph's aget_state: redacted like the stream.
    assert _contents(persisted["values"]) == VISIBLE_MESSAGES
    assert not _markers([json.dumps(persisted)], INCIDENT_INTERNAL_MARKERS)


async def _finished_thread(server: Server, assistant: str) -> str:
    client = _client(server)
    thread = await client.threads.create()
    async with asyncio.timeout(RUN_TIMEOUT):
        await client.runs.wait(thread["thread_id"], assistant, input=INPUT)
    return str(thread["thread_id"])


async def test_events_mode_carries_no_internal_content(server: Server) -> None:
    """`runs.stream(stream_mode="events")` (astream_events v2) of the wrapped graph has no
    internal marker and every visible one; the raw graph's leaks every internal one."""
    events = await _stream(server, "visible", stream_mode=["events"], stream_subgraphs=True)
    raw = await _stream(server, "raw", stream_mode=["events"], stream_subgraphs=True)

    assert {e.mode for e in events} == {"metadata", "events"}
    texts = [e.text for e in events]
    assert _markers(texts, INCIDENT_INTERNAL_MARKERS) == set()
    assert _markers(texts, INCIDENT_VISIBLE_MARKERS) == set(INCIDENT_VISIBLE_MARKERS)
    tokens = "".join(
        e.data["data"]["chunk"]["content"]
        for e in events
        if e.mode == "events" and e.data["event"] == "on_chat_model_stream"
    )
    assert tokens == SUB_ANSWER + FINAL_ANSWER
    assert _markers([e.text for e in raw], INCIDENT_INTERNAL_MARKERS) == set(
        INCIDENT_INTERNAL_MARKERS
    )


async def test_get_state_and_history_carry_no_internal_content(server: Server) -> None:
    """`threads.get_state` and every `threads.get_history` snapshot of the wrapped graph hold
    the visible messages only, with their producers; the raw graph's hold the internal ones."""
    client = _client(server)
    visible_id = await _finished_thread(server, "visible")
    raw_id = await _finished_thread(server, "raw")
    async with asyncio.timeout(RUN_TIMEOUT):
        state = await client.threads.get_state(visible_id, subgraphs=True)
        history = await client.threads.get_history(visible_id, limit=50)
        raw_state = await client.threads.get_state(raw_id)
        raw_history = await client.threads.get_history(raw_id, limit=50)

    assert _contents(state["values"]) == VISIBLE_MESSAGES
    assert not _markers([json.dumps(state)], INCIDENT_INTERNAL_MARKERS)
    # Each answer names its producer, as the incident graph builds them, in the served state
    # and in the newest history snapshot.
    producers = [
        (m.get("response_metadata") or {}).get("provenance") for m in state["values"]["messages"]
    ]
    assert producers == [None, {"path": "knowledge_subgraph/answer"}, {"path": "response_node"}]
    newest = history[0]["values"]["messages"]
    assert [(m.get("response_metadata") or {}).get("provenance") for m in newest] == producers
    assert len(history) == len(raw_history) == 7
    leaking = [
        h["checkpoint"]["checkpoint_id"]
        for h in history
        if _markers([json.dumps(h)], INCIDENT_INTERNAL_MARKERS)
    ]
    assert leaking == []
    assert _markers([json.dumps(history)], INCIDENT_VISIBLE_MARKERS) == set(
        INCIDENT_VISIBLE_MARKERS
    )
    assert [m["type"] for m in raw_state["values"]["messages"]] == RAW_MESSAGE_TYPES
    assert _markers([json.dumps(raw_history)], INCIDENT_INTERNAL_MARKERS) == (
        PERSISTED_INTERNAL_MARKERS
    )


def _subgraph_checkpoints(history: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Node name -> the checkpoint pointer a history task holds into that node's subgraph."""
    found: dict[str, dict[str, Any]] = {}
    for snapshot in history:
        for task in snapshot["tasks"]:
            if task.get("checkpoint"):
                found.setdefault(task["name"], task["checkpoint"])
    return found


async def test_get_state_at_a_subgraph_checkpoint_from_history(server: Server) -> None:
    """Following history's pointers: the internal router subgraph's state is empty, the
    knowledge subgraph's holds its visible answer only; the raw graph's leak."""
    client = _client(server)
    visible_id = await _finished_thread(server, "visible")
    raw_id = await _finished_thread(server, "raw")
    async with asyncio.timeout(RUN_TIMEOUT):
        pointers = _subgraph_checkpoints(await client.threads.get_history(visible_id, limit=50))
        raw_pointers = _subgraph_checkpoints(await client.threads.get_history(raw_id, limit=50))
        assert (
            sorted(pointers)
            == sorted(raw_pointers)
            == [
                "insight_subgraph",
                "knowledge_subgraph",
                "router_subgraph",
            ]
        )
        router = await client.threads.get_state(visible_id, pointers["router_subgraph"])
        knowledge = await client.threads.get_state(visible_id, pointers["knowledge_subgraph"])
        raw_knowledge = await client.threads.get_state(raw_id, raw_pointers["knowledge_subgraph"])

    assert router["values"] == {}
    assert _contents(knowledge["values"]) == [("human", "I want a refund"), ("ai", SUB_ANSWER)]
    assert not _markers([json.dumps(knowledge), json.dumps(router)], INCIDENT_INTERNAL_MARKERS)
    assert _markers([json.dumps(raw_knowledge)], INCIDENT_INTERNAL_MARKERS) == (
        PERSISTED_INTERNAL_MARKERS
    )


# -- a RemoteGraph node: a local graph that runs one of the server's graphs ---------------


def _with_remote(server: Server, assistant: str) -> Any:
    """START -> `remote` (RemoteGraph of the server's `assistant`) -> `answer` (local)."""
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.pregel.remote import RemoteGraph

    builder = StateGraph(MessagesState)
    builder.add_node("remote", RemoteGraph(assistant, url=server.url, api_key=None))
    builder.add_node("answer", lambda s: {"messages": [AIMessage("LOCALVISIBLE done")]})
    builder.add_edge(START, "remote")
    builder.add_edge("remote", "answer")
    return builder.compile()


async def _local_stream(graph: Any) -> str:
    parts = []
    async with asyncio.timeout(RUN_TIMEOUT):
        async for part in graph.astream(
            INPUT, stream_mode=["messages", "values", "updates"], subgraphs=True, version="v2"
        ):
            parts.append(repr(part))
    return "".join(parts)


@pytest.mark.parametrize("remote", ["internal", "visible"])
async def test_a_remote_graph_node_is_judged_as_its_node(server: Server, remote: str) -> None:
    """A `RemoteGraph` node wraps (its inside is not known before a run) and is judged as
    one node. Internal, nothing of the remote run leaves;
    visible and served enforced, its visible answers do and its internal output does not.
    Control: the unwrapped local graph over the server's raw graph carries every marker."""
    from lg_visibility import VisibilityPolicy, with_visibility

    raw = await _local_stream(_with_remote(server, "raw"))
    assert _markers([raw], INCIDENT_INTERNAL_MARKERS) == set(INCIDENT_INTERNAL_MARKERS)
    if remote == "internal":
        policy = VisibilityPolicy(internal=["remote"])
        sent = await _local_stream(with_visibility(_with_remote(server, "raw"), policy))
        assert _markers([sent], (*INCIDENT_INTERNAL_MARKERS, *INCIDENT_VISIBLE_MARKERS)) == set()
    else:
        graph = with_visibility(_with_remote(server, "visible"), VisibilityPolicy())
        sent = await _local_stream(graph)
        assert _markers([sent], INCIDENT_INTERNAL_MARKERS) == set()
        assert _markers([sent], INCIDENT_VISIBLE_MARKERS) == set(INCIDENT_VISIBLE_MARKERS)
    assert "LOCALVISIBLE done" in sent
