"""Targeted measurements beside the timing table: snapshot-redaction cost and profiles.

- `redaction_cost`: how long lg_visibility's output filter spends on `values` parts (the
  snapshot redaction) per run, measured directly by timing each call of the filter in a
  separate pass, as a share of the raw variant's median run. This isolates the W3 target
  from the token savings that the variant ratio mixes in.
- `memory_attribution`: tracemalloc snapshots taken while every chunk of the last LLM call
  is alive (the peak of a streamed call), for raw and lg_visibility, compared by source
  line: where lg_visibility's extra memory is allocated.
- `wrapper_hop`: what one more async-generator layer around `astream` costs by itself
  (raw, raw re-yielded by a do-nothing `async for ... yield`, lg_visibility; 31
  interleaved repetitions): the part of lg_visibility's W1 overhead that comes from
  filtering in an `astream` override rather than in the stream itself.
- `wakeups`: how many times one run of each variant writes the event loop's self-pipe (the
  wake-up `call_soon_threadsafe` does, a `send` plus a `recv` when the loop drains it),
  counted on the running loop. LangGraph's `stream_put` writes it for every queued item;
  lg_visibility's put skips it on the loop's own thread (`_compat.loop_thread_put`), which
  is why it can cost less per visible token than raw and `subgraphs=False`.
- `profile_variant`: cProfile over a few runs (GC off, so GC pauses are not charged to
  random allocators), returning the top functions by own time and the share of own time
  spent in lg_visibility's files. cProfile inflates absolute time about 2-3x; only shares
  are meaningful.

Both reach into `lg_visibility._wrap.OutputFilter`, a private name (checked against the
working tree of lg_visibility 0.1.0); if it moves, the probe reports "unavailable".
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import pstats
import statistics
import time
import tracemalloc
from typing import Any

from benchmarks._fake import FastStreamingChat
from benchmarks._graphs import Workload
from benchmarks.harness import _rotate, _run_once, quantiles
from benchmarks.variants import timed_runner

__all__ = ["memory_attribution", "profile_variant", "redaction_cost", "wakeups", "wrapper_hop"]


async def redaction_cost(wl: Workload, runs: int, raw_median_ms: float) -> dict[str, Any]:
    """Per-run time lg_visibility's output filter spends on values / on all parts."""
    try:
        import lg_visibility._output_filter as lgv_stream
        import lg_visibility._wrap as lgv_graph_module

        base = lgv_graph_module.OutputFilter
        lgv_stream.DROP  # noqa: B018
    except (ImportError, AttributeError) as exc:
        return {"available": False, "reason": f"{type(exc).__name__}: {exc}"}
    acc = {
        "values_ns": 0,
        "all_ns": 0,
        "values_parts": 0,
        "delivered": 0,
        "messages_in_snapshots": 0,
    }
    clock = time.process_time_ns  # the timing table's clock

    class TimedFilter(base):  # type: ignore[misc, valid-type]
        def __call__(self, item: Any) -> Any:
            t0 = clock()
            out = super().__call__(item)
            dt = clock() - t0
            acc["all_ns"] += dt
            if item[1] == "values":  # a raw (ns, mode, payload) from LangGraph's queue
                acc["values_ns"] += dt
                acc["values_parts"] += 1
                data = item[2]
                if out is not lgv_stream.DROP and isinstance(data, dict):
                    acc["delivered"] += 1
                    acc["messages_in_snapshots"] += len(data.get("messages") or ())
            return out

    runner = timed_runner("lgv", wl)
    per_run_values: list[float] = []
    per_run_all: list[float] = []
    lgv_graph_module.OutputFilter = TimedFilter  # type: ignore[misc]
    try:
        await _run_once(wl, runner)  # warm-up
        for _ in range(runs):
            for key in acc:
                acc[key] = 0
            gc.collect()
            await _run_once(wl, runner)
            per_run_values.append(acc["values_ns"] / 1e6)
            per_run_all.append(acc["all_ns"] / 1e6)
    finally:
        lgv_graph_module.OutputFilter = base  # type: ignore[misc]
    values_ms = statistics.median(per_run_values)
    return {
        "available": True,
        "runs": runs,
        "values_filter_ms": values_ms,
        "all_parts_filter_ms": statistics.median(per_run_all),
        "values_parts_per_run": acc["values_parts"],
        "values_delivered_per_run": acc["delivered"],
        "messages_walked_per_run": acc["messages_in_snapshots"],
        "us_per_message": values_ms * 1000 / max(1, acc["messages_in_snapshots"]),
        "raw_median_ms": raw_median_ms,
        "share_of_raw": values_ms / raw_median_ms,
    }


async def profile_variant(wl: Workload, variant: str, runs: int, top: int = 25) -> dict[str, Any]:
    """cProfile `runs` runs of one variant; own-time shares by function and for lg_visibility."""
    runner = timed_runner(variant, wl)
    await _run_once(wl, runner)
    gc.collect()
    gc.disable()
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        for _ in range(runs):
            await _run_once(wl, runner)
        profiler.disable()
    finally:
        gc.enable()
    stats = pstats.Stats(profiler)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    lgv_own = 0.0
    for (filename, line, name), (_, ncalls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "lg_visibility" in filename:
            lgv_own += tottime
        rows.append((tottime, cumtime, ncalls, f"{_short(filename)}:{line}({name})"))
    rows.sort(reverse=True)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return {
        "workload": wl.name,
        "variant": variant,
        "runs": runs,
        "total_s": total,
        "lg_visibility_own_share": lgv_own / total if total else 0.0,
        "top": [
            {
                "function": f,
                "ncalls_per_run": n / runs,
                "own_share": t / total,
                "cum_share": c / total,
            }
            for t, c, n, f in rows[:top]
        ],
        "text": text.getvalue(),
    }


def _short(filename: str) -> str:
    for marker in ("site-packages/", "lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    if "/benchmarks/" in filename:
        return "benchmarks/" + filename.split("/benchmarks/", 1)[1]
    if "/lg_visibility/" in filename:
        return "lg_visibility/" + filename.split("/lg_visibility/", 1)[1]
    return filename


async def memory_attribution(wl: Workload, top: int = 6) -> dict[str, Any]:
    """lg_visibility's extra live memory at the peak of the last streamed call, by line."""
    snaps: dict[str, Any] = {}
    for variant in ("raw", "lgv"):
        runner = timed_runner(variant, wl)
        await _run_once(wl, runner)
        taken: list[Any] = []

        def take(taken: list[Any] = taken) -> None:
            taken[:] = []  # drop the previous call's snapshot before taking this one
            taken.append(tracemalloc.take_snapshot())

        FastStreamingChat.before_last = take
        gc.collect()
        tracemalloc.start()
        try:
            await _run_once(wl, runner)
        finally:
            tracemalloc.stop()
            FastStreamingChat.before_last = None
        snaps[variant] = taken[-1]
    diff = snaps["lgv"].compare_to(snaps["raw"], "lineno")
    total = sum(d.size_diff for d in diff)
    rows = sorted(diff, key=lambda d: -abs(d.size_diff))[:top]
    raw_total = sum(stat.size for stat in snaps["raw"].statistics("filename"))
    return {
        "workload": wl.name,
        "raw_live_kib": raw_total / 1024,
        "extra_kib": total / 1024,
        "extra_bytes_per_visible_token": total / max(1, wl.visible_tokens),
        "lines": [
            {
                "line": _short(str(d.traceback)),
                "size_diff_kib": d.size_diff / 1024,
                "count_diff": d.count_diff,
            }
            for d in rows
        ],
    }


async def wrapper_hop(wl: Workload, reps: int = 31, inner: int = 2) -> dict[str, Any]:
    """Paired ratios to raw of: raw again, raw inside a re-yielding generator, lg_visibility."""
    graph = wl.graph
    kwargs = {**wl.stream_kwargs, "subgraphs": True}
    make_input = wl.make_input

    async def passthrough(gen: Any) -> Any:
        async for item in gen:
            yield item

    async def wrapped(config: dict[str, Any]) -> None:
        async for _ in passthrough(graph.astream(make_input(), config, **kwargs)):
            pass

    runners = {
        "raw": timed_runner("raw", wl),
        "raw_aa": timed_runner("raw", wl),
        "raw_in_generator": wrapped,
        "lgv": timed_runner("lgv", wl),
    }
    names = list(runners)
    for name in names:
        await _run_once(wl, runners[name])
    samples: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(reps):
        for name in _rotate(names, rep):
            configs = [wl.new_config() for _ in range(inner)]
            gc.collect()
            t0 = time.process_time_ns()
            for config in configs:
                await runners[name](config)
            samples[name].append((time.process_time_ns() - t0) / inner / 1e6)
            for config in configs:
                wl.cleanup(config)
    out: dict[str, Any] = {"workload": wl.name, "reps": reps, "inner": inner}
    for name in names:
        ratios = [a / b for a, b in zip(samples[name], samples["raw"], strict=True)]
        p25, med, p75 = quantiles(ratios)
        out[name] = {"ratio": med, "ratio_p25": p25, "ratio_p75": p75}
    return out


async def wakeups(wl: Workload, variants: tuple[str, ...]) -> dict[str, Any]:
    """Self-pipe writes of the running event loop during one run of each variant."""
    loop: Any = asyncio.get_running_loop()
    original = loop._write_to_self
    count = 0

    def counting() -> None:
        nonlocal count
        count += 1
        original()

    out: dict[str, Any] = {"workload": wl.name}
    loop._write_to_self = counting  # an instance attribute: only this loop, only here
    try:
        for variant in variants:
            runner = timed_runner(variant, wl)
            await _run_once(wl, runner)
            count = 0
            await _run_once(wl, runner)
            out[variant] = count
    finally:
        del loop._write_to_self
    return out
