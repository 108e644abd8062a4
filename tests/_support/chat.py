"""Helpers shared by the chat, demo and browser tests."""

from __future__ import annotations

import asyncio
from typing import Any


def leftover_tasks(baseline: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Tasks started since `baseline`, except the caller's own and sse-starlette's
    shutdown watcher (one per event loop, started by the first response, by design)."""
    return {
        task
        for task in asyncio.all_tasks() - baseline - {asyncio.current_task()}
        if getattr(task.get_coro(), "__qualname__", "") != "_shutdown_watcher"
    }
