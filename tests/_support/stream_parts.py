"""Small helpers shared by the issue-9 tests: run a graph every way, normalise its output.

Only lg_visibility's public API is used elsewhere; this file knows LangGraph's output shapes
(the same knowledge as tests/oracle.py's `event_parts`, copied, not imported).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from tests._support.oracle import event_parts

__all__ = ["Parts", "event_parts", "leaks", "missing", "modes_of", "run_parts", "texts"]

Parts = list[tuple[tuple[str, ...], str, Any]]


def modes_of(stream_mode: Any) -> list[str]:
    return [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)


def run_parts(
    graph: Any,
    inputs: Sequence[Any],
    *,
    sync: bool,
    stream_mode: Any,
    subgraphs: bool = True,
    version: str = "v2",
    thread_id: str = "t1",
    callbacks: list[Any] | None = None,
    tags: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    timeout: float = 60,
) -> Parts:
    """Every part of streaming `inputs` one after another on one thread, as (ns, mode, payload)."""
    items: list[Any] = []
    for value in inputs:
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        if callbacks:
            config["callbacks"] = callbacks
        if tags:
            config["tags"] = tags
        if metadata:
            config["metadata"] = metadata
        kw = {"stream_mode": stream_mode, "subgraphs": subgraphs, "version": version}
        if sync:
            items.extend(graph.stream(value, config, **kw))
        else:

            async def collect(
                value: Any = value, config: dict[str, Any] = config, kw: dict[str, Any] = kw
            ) -> None:
                async for item in graph.astream(value, config, **kw):
                    items.append(item)

            asyncio.run(asyncio.wait_for(collect(), timeout=timeout))
    return [event_parts(i, stream_mode, subgraphs, version) for i in items]


def texts(parts: Parts, mode: str | None = None) -> str:
    """repr() of every payload (of one mode, if given): what a client could see."""
    return "\n".join(repr(p) for _, m, p in parts if mode is None or m == mode)


def leaks(parts: Parts, markers: Sequence[str], mode: str | None = None) -> list[str]:
    text = texts(parts, mode)
    return [m for m in markers if m in text]


def missing(parts: Parts, markers: Sequence[str], mode: str | None = None) -> list[str]:
    text = texts(parts, mode)
    return [m for m in markers if m not in text]
