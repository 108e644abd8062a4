"""The variants a workload runs in, and their consumers.

- `raw`: `graph.astream(..., subgraphs=True)` consumed with a counter. The floor; it
  shows everything, internal tokens included.
- `raw_aa`: `raw` again, as its own variant: an A/A control for noise and order bias.
- `nosub`: the same call with `subgraphs=False` (the reference for "drop everything
  below the root").
- `chain`: `raw` plus the seed-000 handler-side chain (`benchmarks.chain`) on every part.
- `lgv`: the same compiled graph wrapped by `lg_visibility.with_visibility`.

Each variant has three runners: `timed` (the consumer does only what the variant needs),
`latency` (also notes when the first user-visible token arrives) and `record` (keeps
every delivered item for the sanity pass). W4's consumers map and encode SSE per event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from benchmarks._graphs import Workload
from benchmarks.chain import HandlerSideChain, text_content

__all__ = [
    "ALL_VARIANTS",
    "LABELS",
    "chain_chat_event",
    "is_internal_meta",
    "latency_runner",
    "record_runner",
    "timed_runner",
]

ALL_VARIANTS = ("raw", "raw_aa", "nosub", "chain", "lgv")
LABELS = {
    "raw": "raw LangGraph",
    "raw_aa": "raw (A/A control)",
    "nosub": "subgraphs=False",
    "chain": "handler-side chain (seed 000)",
    "chain_ns": "chain + all internal subgraph names in step 4",
    "lgv": "lg_visibility",
}

Runner = Callable[[dict[str, Any]], Awaitable[Any]]


def _graph_and_kwargs(variant: str, wl: Workload) -> tuple[Any, dict[str, Any]]:
    graph = wl.lgv_graph() if variant == "lgv" else wl.graph
    return graph, {**wl.stream_kwargs, "subgraphs": variant != "nosub"}


def node_path(metadata: Mapping[str, Any]) -> str:
    """'a/b/node' from `langgraph_checkpoint_ns` (task ids stripped)."""
    ns = metadata.get("langgraph_checkpoint_ns") or ""
    return "/".join(seg.split(":", 1)[0] for seg in ns.split("|")) if ns else ""


def is_internal_meta(metadata: Mapping[str, Any], internal_paths: tuple[str, ...]) -> bool:
    """Ground truth for the timing workloads: does this event come from an internal path?"""
    path = node_path(metadata)
    return any(path == p or path.startswith(p + "/") for p in internal_paths)


# -- chat events for the SSE consumer -------------------------------------------------------


def chain_chat_event(item: tuple[str, tuple[str, ...], Any, Any]) -> Any:
    """The `ChatEvent` a seed-000 server would send for one chain emit."""
    from lg_visibility.chat._mapper import ChatEvent, source_name

    kind, ns, payload, meta = item
    source = source_name(ns, meta)
    if kind == "append":
        data: dict[str, Any] = {
            "id": payload.id,
            "source": source,
            "text": text_content(payload.content),
        }
        if payload.tool_call_chunks:
            data["tool_call_chunks"] = payload.tool_call_chunks
        return ChatEvent("token", data)
    if kind == "update":
        return ChatEvent(
            "message",
            {
                "id": payload.id,
                "source": source,
                "role": "assistant",
                "content": text_content(payload.content),
                "tool_calls": payload.tool_calls,
            },
        )
    if kind == "tool_result":
        return ChatEvent(
            "tool_result",
            {
                "tool_call_id": payload.tool_call_id,
                "source": source,
                "name": payload.name,
                "content": text_content(payload.content),
                "status": payload.status,
            },
        )
    if kind == "interrupt":
        return ChatEvent("interrupt", {"id": payload.id, "source": source, "value": payload.value})
    return ChatEvent("custom", {"source": source, "data": payload})


# -- timed ----------------------------------------------------------------------------------


def timed_runner(variant: str, wl: Workload) -> Runner:
    """An async `run(config) -> (parts yielded, items delivered to the user side)`."""
    graph, kwargs = _graph_and_kwargs(variant, wl)
    make_input = wl.make_input
    if wl.consumer == "sse":
        return _sse_runner(variant, wl, graph, kwargs)
    if variant == "chain":
        cfg = wl.chain_config

        async def run_chain(config: dict[str, Any]) -> tuple[int, int]:
            # Emitted items are handed over and released, as a server sends and forgets
            # them (keeping them all would hold every chunk past on_llm_end).
            out: list[Any] = []
            feed = HandlerSideChain(cfg, out.append).feed
            n = sent = 0
            async for part in graph.astream(make_input(), config, **kwargs):
                n += 1
                feed(part)
                if out:
                    sent += len(out)
                    out.clear()
            return n, sent

        return run_chain

    async def run(config: dict[str, Any]) -> tuple[int, int]:
        n = 0
        async for _ in graph.astream(make_input(), config, **kwargs):
            n += 1
        return n, n

    return run


def _sse_runner(variant: str, wl: Workload, graph: Any, kwargs: dict[str, Any]) -> Runner:
    from lg_visibility.chat._mapper import ChatStreamMapper

    make_input = wl.make_input
    sleep = asyncio.sleep
    if variant == "chain":
        cfg = wl.chain_config

        async def run_chain(config: dict[str, Any]) -> tuple[int, int]:
            out: list[Any] = []
            chain = HandlerSideChain(cfg, out.append)
            n = sent = 0
            async for part in graph.astream(make_input(), config, **kwargs):
                n += 1
                chain.feed(part)
                if out:
                    for item in out:
                        chain_chat_event(item).encode()
                        sent += 1
                        await sleep(0)
                    out.clear()
            return n, sent

        return run_chain

    async def run(config: dict[str, Any]) -> tuple[int, int]:
        mapper = ChatStreamMapper()
        n = sent = 0
        async for part in graph.astream(make_input(), config, **kwargs):
            n += 1
            for event in mapper.feed(part):
                event.encode()
                sent += 1
                await sleep(0)
        mapper.done(thread_id=None).encode()
        return n, sent

    return run


# -- latency --------------------------------------------------------------------------------


def latency_runner(variant: str, wl: Workload) -> Runner:
    """An async `run(config) -> (total ns, ns until the first user-visible token arrived)`.

    "Arrived" means handed to the user side: for raw/nosub/lgv the part leaves `astream`;
    for the chain the chain emits it. For W4 the token's SSE event has been encoded.
    The clock is process CPU time, like the timing pass (the models have no latency, so
    on an idle machine this is the wall-clock latency).
    """
    graph, kwargs = _graph_and_kwargs(variant, wl)
    make_input = wl.make_input
    internal = wl.internal_paths
    sse = wl.consumer == "sse"
    clock = time.process_time_ns

    def visible_token(ns: Any, message: Any, meta: Any) -> bool:
        if type(message).__name__ != "AIMessageChunk" or not message.content:
            return False
        return not is_internal_meta(meta, internal)

    if variant == "chain":
        cfg = wl.chain_config

        async def run_chain(config: dict[str, Any]) -> tuple[int, int]:
            out: list[Any] = []
            chain = HandlerSideChain(cfg, out.append)
            first = 0
            t0 = clock()
            async for part in graph.astream(make_input(), config, **kwargs):
                chain.feed(part)
                if out:
                    for item in out:
                        if sse:
                            chain_chat_event(item).encode()
                            await asyncio.sleep(0)
                        if not first and item[0] == "append" and visible_token(*item[1:]):
                            first = clock()
                    out.clear()
            return clock() - t0, first - t0

        return run_chain

    async def run(config: dict[str, Any]) -> tuple[int, int]:
        mapper = None
        if sse:
            from lg_visibility.chat._mapper import ChatStreamMapper

            mapper = ChatStreamMapper()
        first = 0
        t0 = clock()
        async for part in graph.astream(make_input(), config, **kwargs):
            if mapper is not None:
                for event in mapper.feed(part):
                    event.encode()
                    await asyncio.sleep(0)
            if (
                not first
                and part["type"] == "messages"
                and visible_token(part["ns"], *part["data"])
            ):
                first = clock()
        return clock() - t0, first - t0

    return run


# -- record ---------------------------------------------------------------------------------


def record_runner(variant: str, wl: Workload) -> Runner:
    """An async `run(config) -> list of delivered items`.

    For raw/nosub/lgv an item is the v2 part; for the chain it is the chain's emit tuple.
    """
    graph, kwargs = _graph_and_kwargs(variant, wl)
    make_input = wl.make_input

    async def run(config: dict[str, Any]) -> list[Any]:
        out: list[Any] = []
        if variant == "chain":
            chain = HandlerSideChain(wl.chain_config, out.append)
            async for part in graph.astream(make_input(), config, **kwargs):
                chain.feed(part)
        else:
            async for part in graph.astream(make_input(), config, **kwargs):
                out.append(part)
        return out

    return run
