"""Measurement: interleaved timing, paired ratios, latency, memory, a sanity pass, a soak.

Method (from the perf-baseline harness):

- all variants of a workload run in one process, interleaved: every repetition runs each
  variant once, and the order rotates by one place per repetition;
- a sample is one full `async for` over `astream`, or the mean of `inner` consecutive runs
  when one run is short; `gc.collect()` runs before each sample, outside the timer, so
  every sample starts from the same collector state;
- the clock is the process CPU time (`time.process_time_ns`), with wall time recorded
  beside it. The models have no latency and nothing waits on I/O, so on an idle machine
  the two agree; on a machine shared with other work, CPU time does not count the time
  this process sat descheduled, which wall time does (that noise dominated wall-clock
  ratios here under a load average of 6 on 2 cores);
- ratios are paired: variant / raw of the same repetition, then the median (p25-p75);
- GC time inside the timer comes from `gc.callbacks`;
- memory is a separate pass under `tracemalloc` (peak minus the level at start), never
  mixed with timing; first-visible-token latency is a separate pass as well, so the
  timing consumer does nothing but count. In the latency pass every model is network-fed
  (`await asyncio.sleep(0)` per token): with a model that never yields, the runner
  queues a whole LLM call before the consumer runs, and "first token" would only measure
  when the visible call ends;
- each run uses a fresh `thread_id`, deleted from the saver afterwards, outside the timer.
"""

from __future__ import annotations

import gc
import os
import resource
import statistics
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks._fake import INTERNAL_MARKER
from benchmarks._graphs import HISTORY_INTERNAL_MARKER, Workload
from benchmarks.chain import text_content
from benchmarks.variants import (
    is_internal_meta,
    latency_runner,
    record_runner,
    timed_runner,
)

__all__ = [
    "GcTimer",
    "Sanity",
    "VariantResult",
    "WorkloadResult",
    "measure_workload",
    "quantiles",
    "sanity_only",
    "soak",
]


class GcTimer:
    """Sums the wall time the cyclic GC spends while `active` (via `gc.callbacks`)."""

    def __init__(self) -> None:
        self.active = False
        self.total_ns = 0
        self._start = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if not self.active:
            return
        if phase == "start":
            self._start = time.perf_counter_ns()
        elif self._start:
            self.total_ns += time.perf_counter_ns() - self._start
            self._start = 0

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def quantiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(p25, median, p75) by linear interpolation."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


@dataclass
class Sanity:
    """What one untimed run of a variant delivered to the user side, scored."""

    parts: int = 0
    delivered: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    visible_tokens: int = 0
    internal_tokens: int = 0
    visible_custom: int = 0
    values_snapshots: int = 0
    internal_in_values: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass
class VariantResult:
    variant: str
    samples_ms: list[float]  # CPU time
    wall_ms: list[float]
    ratios: list[float]
    gc_share: float
    parts: int
    delivered: int
    wall_ratios: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    latency_ratios: list[float] = field(default_factory=list)
    peak_kib: float | None = None
    sanity: Sanity | None = None

    def summary(self, wl: Workload) -> dict[str, Any]:
        p25, med, p75 = quantiles(self.samples_ms)
        r25, rmed, r75 = quantiles(self.ratios)
        out: dict[str, Any] = {
            "variant": self.variant,
            "median_ms": med,
            "p25_ms": p25,
            "p75_ms": p75,
            "wall_median_ms": quantiles(self.wall_ms)[1] if self.wall_ms else None,
            "wall_ratio": quantiles(self.wall_ratios)[1] if self.wall_ratios else None,
            "parts": self.parts,
            "delivered": self.delivered,
            "events_per_s": self.parts / (med / 1000),
            "visible_tokens_per_s": wl.visible_tokens / (med / 1000),
            "ratio": rmed,
            "ratio_p25": r25,
            "ratio_p75": r75,
            "gc_share": self.gc_share,
            "peak_kib": self.peak_kib,
        }
        if self.latency_ms:
            l25, lmed, l75 = quantiles(self.latency_ms)
            out.update(latency_ms=lmed, latency_p25_ms=l25, latency_p75_ms=l75)
            out["latency_ratio"] = quantiles(self.latency_ratios)[1]
        if self.sanity is not None:
            out["sanity"] = asdict(self.sanity)
        return out


@dataclass
class WorkloadResult:
    name: str
    family: str
    n_tokens: int
    reps: int
    inner: int
    variants: dict[str, VariantResult]
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self, wl: Workload) -> dict[str, Any]:
        out = {
            "name": self.name,
            "family": self.family,
            "n_tokens": self.n_tokens,
            "visible_tokens": wl.visible_tokens,
            "internal_tokens": wl.internal_tokens,
            "reps": self.reps,
            "inner": self.inner,
            "variants": {v: r.summary(wl) for v, r in self.variants.items()},
            "extra": self.extra,
        }
        lgv, nosub = self.variants.get("lgv"), self.variants.get("nosub")
        if lgv is not None and nosub is not None and lgv.ratios and nosub.ratios:
            # lg_visibility's ratio minus subgraphs=False's, of each repetition: the two
            # runs of one repetition share the host's state of that moment, which the
            # difference of the two medians does not pair.
            p25, med, p75 = quantiles(
                [a - b for a, b in zip(lgv.ratios, nosub.ratios, strict=True)]
            )
            out["lgv_minus_nosub"] = {"median": med, "p25": p25, "p75": p75}
        return out


# -- passes -------------------------------------------------------------------------------


async def _run_once(wl: Workload, runner: Any) -> Any:
    config = wl.new_config()
    try:
        return await runner(config)
    finally:
        wl.cleanup(config)


def _rotate(variants: Sequence[str], k: int) -> list[str]:
    k %= len(variants)
    return [*variants[k:], *variants[:k]]


async def _timing(
    wl: Workload, variants: Sequence[str], reps: int, target_ms: float, log: Any
) -> tuple[dict[str, VariantResult], int]:
    runners = {v: timed_runner(v, wl) for v in variants}
    counts: dict[str, tuple[int, int]] = {}
    # warm-up: one run each, and an estimate of one run's time for `inner`
    t_est = []
    for v in variants:
        t0 = time.perf_counter_ns()
        counts[v] = await _run_once(wl, runners[v])
        t_est.append(time.perf_counter_ns() - t0)
    inner = max(1, min(5, round(target_ms * 1e6 / max(1, min(t_est)))))
    samples: dict[str, list[float]] = {v: [] for v in variants}
    walls: dict[str, list[float]] = {v: [] for v in variants}
    gc_ns: dict[str, int] = dict.fromkeys(variants, 0)
    total_ns: dict[str, int] = dict.fromkeys(variants, 0)
    clock = time.perf_counter_ns
    cpu = time.process_time_ns
    with GcTimer() as gct:
        for rep in range(reps):
            for v in _rotate(variants, rep):
                run = runners[v]
                configs = [wl.new_config() for _ in range(inner)]
                gc.collect()
                gct.total_ns = 0
                gct.active = True
                t0 = clock()
                c0 = cpu()
                for config in configs:
                    await run(config)
                used = cpu() - c0
                elapsed = clock() - t0
                gct.active = False
                for config in configs:
                    wl.cleanup(config)
                samples[v].append(used / inner / 1e6)
                walls[v].append(elapsed / inner / 1e6)
                gc_ns[v] += gct.total_ns
                total_ns[v] += elapsed
            log(".", end="")
    log("")
    base = samples["raw"]
    results = {}
    for v in variants:
        results[v] = VariantResult(
            variant=v,
            samples_ms=samples[v],
            wall_ms=walls[v],
            wall_ratios=[s / b for s, b in zip(walls[v], walls["raw"], strict=True)],
            ratios=[s / b for s, b in zip(samples[v], base, strict=True)],
            gc_share=gc_ns[v] / max(1, total_ns[v]),
            parts=counts[v][0],
            delivered=counts[v][1],
        )
    return results, inner


async def _latency(
    wl: Workload, variants: Sequence[str], reps: int, results: dict[str, VariantResult]
) -> None:
    runners = {v: latency_runner(v, wl) for v in variants}
    lat: dict[str, list[float]] = {v: [] for v in variants}
    old = wl.set_network(True)
    try:
        for v in variants:
            await _run_once(wl, runners[v])
        for rep in range(reps):
            for v in _rotate(variants, rep):
                gc.collect()
                _, first = await _run_once(wl, runners[v])
                lat[v].append(first / 1e6)
    finally:
        wl.restore_network(old)
    for v in variants:
        results[v].latency_ms = lat[v]
        results[v].latency_ratios = [a / b for a, b in zip(lat[v], lat["raw"], strict=True)]


async def _memory(
    wl: Workload, variants: Sequence[str], results: dict[str, VariantResult], runs: int = 3
) -> None:
    for v in variants:
        runner = timed_runner(v, wl)
        peaks = []
        for _ in range(runs):
            config = wl.new_config()
            gc.collect()
            tracemalloc.start()
            tracemalloc.reset_peak()
            start = tracemalloc.get_traced_memory()[0]
            await runner(config)
            peak = tracemalloc.get_traced_memory()[1] - start
            tracemalloc.stop()
            wl.cleanup(config)
            peaks.append(peak)
        results[v].peak_kib = statistics.median(peaks) / 1024


# -- sanity: score what each variant delivered against the workload's ground truth ---------


def _values_internal(data: Any) -> int:
    """Internal markers in a delivered snapshot's messages (raw text, never parsed fields)."""
    hits = 0
    messages = data.get("messages") if isinstance(data, dict) else None
    for message in messages or ():
        text = text_content(message.content)
        if INTERNAL_MARKER in text or HISTORY_INTERNAL_MARKER in text:
            hits += 1
    return hits


def score(wl: Workload, variant: str, items: Iterable[Any]) -> Sanity:
    """Count what reached the user side: tokens by ground-truth visibility, custom, values."""
    s = Sanity()
    kinds: Counter[str] = Counter()
    internal = wl.internal_paths
    for item in items:
        s.delivered += 1
        if variant == "chain":
            kind, ns, payload, meta = item
            kinds[f"{kind}@{'sub' if ns else 'root'}"] += 1
            if kind == "append":
                if payload.content:
                    if is_internal_meta(meta, internal):
                        s.internal_tokens += 1
                    else:
                        s.visible_tokens += 1
            elif kind == "custom":
                s.visible_custom += 1
            elif kind == "update" and (
                INTERNAL_MARKER in text_content(payload.content)
                or HISTORY_INTERNAL_MARKER in text_content(payload.content)
            ):
                s.internal_in_values += 1
            continue
        kind = item["type"]
        ns = item["ns"]
        kinds[f"{kind}@{'sub' if ns else 'root'}"] += 1
        if kind == "messages":
            message, meta = item["data"]
            if type(message).__name__ == "AIMessageChunk" and message.content:
                if is_internal_meta(meta, internal):
                    s.internal_tokens += 1
                else:
                    s.visible_tokens += 1
        elif kind == "custom":
            s.visible_custom += 1
        elif kind == "values":
            s.values_snapshots += 1
            s.internal_in_values += _values_internal(item["data"])
    s.by_kind = dict(sorted(kinds.items()))
    if s.visible_tokens != wl.visible_tokens:
        s.problems.append(f"visible tokens {s.visible_tokens} != expected {wl.visible_tokens}")
    if variant in ("chain", "lgv", "nosub") and s.internal_tokens:
        s.problems.append(f"{s.internal_tokens} internal tokens delivered")
    if variant in ("chain", "lgv") and s.internal_in_values:
        s.problems.append(f"{s.internal_in_values} internal messages in delivered snapshots")
    if variant in ("chain", "lgv", "raw") and s.visible_custom != wl.visible_custom:
        s.problems.append(f"custom events {s.visible_custom} != expected {wl.visible_custom}")
    return s


async def _sanity(wl: Workload, variants: Sequence[str], results: dict[str, VariantResult]) -> None:
    for v in variants:
        items = await _run_once(wl, record_runner(v, wl))
        s = score(wl, v, items)
        s.parts = results[v].parts
        results[v].sanity = s


async def sanity_only(wl: Workload, variants: Sequence[str]) -> dict[str, Any]:
    """Only the sanity pass: what each variant delivered, scored (no timing)."""
    results: dict[str, VariantResult] = {
        v: VariantResult(v, [], [], [], 0.0, 0, 0) for v in variants
    }
    await _sanity(wl, variants, results)
    return {v: asdict(r.sanity) for v, r in results.items() if r.sanity is not None}


async def measure_workload(
    wl: Workload,
    variants: Sequence[str],
    *,
    reps: int,
    latency_reps: int,
    memory_runs: int = 3,
    target_ms: float = 40.0,
    log: Any = print,
) -> WorkloadResult:
    """All passes for one workload: sanity, timing, latency, memory."""
    log(f"  {wl.name}: sanity", end="")
    results: dict[str, VariantResult] = {
        v: VariantResult(v, [], [], [], 0.0, 0, 0) for v in variants
    }
    await _sanity(wl, variants, results)
    log(", timing ", end="")
    timed, inner = await _timing(wl, variants, reps, target_ms, lambda *a, **k: log(*a, **k))
    for v in variants:
        timed[v].sanity = results[v].sanity
    results = timed
    if latency_reps:
        log("    latency", end="")
        await _latency(wl, variants, latency_reps, results)
    if memory_runs:
        log(", memory", end="")
        await _memory(wl, variants, results, runs=memory_runs)
    log("")
    return WorkloadResult(wl.name, wl.family, wl.n_tokens, reps, inner, results)


# -- soak: nothing retained per run ----------------------------------------------------------


def _rss_kib() -> int:
    with open(f"/proc/{os.getpid()}/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


async def soak(
    wl: Workload,
    variant: str,
    runs: int,
    *,
    warmup: int = 200,
    checkpoints: int = 10,
    traced_runs: int = 300,
) -> dict[str, Any]:
    """Run `runs` times on one compiled graph; report live objects and RSS over time.

    After `warmup` runs, `gc.collect()` and count live objects (`gc.get_objects`)
    and RSS at `checkpoints` evenly spaced points. Then a last window of `traced_runs`
    runs under tracemalloc attributes any growth to source files (lg_visibility's own
    files are reported separately).
    """
    runner = timed_runner(variant, wl)
    for _ in range(warmup):
        await _run_once(wl, runner)
    gc.collect()
    points = [(0, len(gc.get_objects()), _rss_kib())]
    step = max(1, runs // checkpoints)
    t0 = time.perf_counter()
    for i in range(1, runs + 1):
        await _run_once(wl, runner)
        if i % step == 0 or i == runs:
            gc.collect()
            points.append((i, len(gc.get_objects()), _rss_kib()))
    elapsed = time.perf_counter() - t0
    # attribute growth: traced window
    gc.collect()
    tracemalloc.start(1)
    before = tracemalloc.take_snapshot()
    for _ in range(traced_runs):
        await _run_once(wl, runner)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    diff = after.compare_to(before, "filename")
    grown = sum(d.size_diff for d in diff)
    lgv_grown = sum(d.size_diff for d in diff if "lg_visibility" in str(d.traceback))
    top = [
        {"file": str(d.traceback), "size_diff": d.size_diff, "count_diff": d.count_diff}
        for d in sorted(diff, key=lambda d: -d.size_diff)[:5]
        if d.size_diff > 0
    ]
    first, last = points[0], points[-1]
    return {
        "variant": variant,
        "workload": wl.name,
        "runs": runs,
        "seconds": elapsed,
        "points": [{"run": r, "objects": o, "rss_kib": k} for r, o, k in points],
        "objects_per_1000_runs": (last[1] - first[1]) / max(1, runs) * 1000,
        "rss_kib_per_1000_runs": (last[2] - first[2]) / max(1, runs) * 1000,
        "traced_runs": traced_runs,
        "traced_bytes_per_run": grown / traced_runs,
        "traced_lg_visibility_bytes_per_run": lgv_grown / traced_runs,
        "traced_top": top,
        "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "python": sys.version.split()[0],
    }
