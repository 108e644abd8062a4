"""Helpers shared by the chat, demo and browser tests."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


def leftover_tasks(baseline: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Tasks started since `baseline`, except the caller's own and sse-starlette's
    shutdown watcher (one per event loop, started by the first response, by design)."""
    return {
        task
        for task in asyncio.all_tasks() - baseline - {asyncio.current_task()}
        if getattr(task.get_coro(), "__qualname__", "") != "_shutdown_watcher"
    }


@contextlib.contextmanager
def serve_in_thread(make_app: Callable[[], Any], *, timeout: float = 20.0) -> Iterator[str]:
    """Serve `make_app()` with uvicorn on 127.0.0.1 and a free port, in a thread with its
    own event loop (the app is built inside it); yields the base URL, stops it after."""
    import uvicorn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    servers: list[uvicorn.Server] = []
    failures: list[BaseException] = []

    async def main() -> None:
        config = uvicorn.Config(make_app(), host="127.0.0.1", port=port, log_level="warning")
        server = uvicorn.Server(config)
        servers.append(server)
        await server.serve()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to the test below
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not (servers and servers[0].started):
        if failures or not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on port {port}: {failures!r}")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        servers[0].should_exit = True
        thread.join(timeout)
        assert not thread.is_alive(), "uvicorn did not stop"


def marked_demo_app(*, raw: bool = False, token_delay: float = 0.0) -> Any:
    """The demo app on the marker-carrying demo graph (in memory), enforced or, as a
    control, raw; build it inside the serving loop."""
    import functools

    from langgraph.checkpoint.memory import InMemorySaver

    from lg_visibility import with_visibility
    from lg_visibility.demo.app import DEMO_POLICY, create_app, demo_builder
    from lg_visibility.demo.graphs import fake_models

    models = functools.partial(fake_models, token_delay=token_delay)
    compiled = demo_builder(models, token_delay=token_delay).compile(checkpointer=InMemorySaver())
    return create_app(graph=compiled if raw else with_visibility(compiled, DEMO_POLICY))
