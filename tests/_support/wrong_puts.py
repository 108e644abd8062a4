"""Wrong loop-thread puts, for the controls of the batching tests: each batches
`Pregel.astream`'s `stream_put` puts blind to part of what the ready queue holds, as
`_compat.loop_thread_put` must not."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from lg_visibility import _compat


def _wrong_batch(put: Any, key: Callable[[Any], Any]) -> Any:
    """One callback for every put while `key(loop)` is what it was after the batch was
    queued."""
    if not _compat._is_stream_put(put):
        return put
    loop, put_nowait = put.func.__self__, put.args[0]
    state: dict[str, Any] = {"batch": None, "key": None}

    def put_batch(items: list[Any]) -> None:
        if items is state["batch"]:
            state["batch"] = None
        for item in items:
            put_nowait(item)

    def put_on_loop(item: Any) -> None:
        if state["batch"] is not None and key(loop) == state["key"]:
            state["batch"].append(item)
        else:
            state["batch"] = [item]
            loop.call_soon(put_batch, state["batch"])
            state["key"] = key(loop)

    return put_on_loop


def batch_by_task(put: Any) -> Any:
    """A batch of one task's run of puts, blind to what was queued between them (a first
    version of the batching did this)."""
    return _wrong_batch(put, lambda loop: asyncio.current_task())


def batch_while_as_long(put: Any) -> Any:
    """A batch while the ready queue is as long as when it was queued, blind to a callback
    taken and another queued since."""
    return _wrong_batch(put, lambda loop: len(loop._ready))
