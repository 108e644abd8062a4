"""Results out: environment capture, target checks, JSON, a Markdown report and a PNG chart."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from benchmarks.variants import LABELS

__all__ = ["environment", "evaluate_targets", "write_chart", "write_json", "write_markdown"]

_PACKAGES = (
    "langgraph",
    "langchain-core",
    "langchain",
    "langgraph-checkpoint",
    "langgraph-prebuilt",
    "langsmith",
    "pydantic",
    "pydantic-core",
    "ormsgpack",
    "lg-visibility",
)
MAIN_ORDER = ("W1", "W2", "W3", "W4", "W5")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def environment() -> dict[str, Any]:
    """Versions and machine the numbers were measured on."""
    packages = {}
    for name in _PACKAGES:
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    dirty = _git("status", "--porcelain", "--", "lg_visibility")
    return {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "packages": packages,
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "lg_visibility_tree": "modified (uncommitted changes)" if dirty else "clean",
        "tracing": "off (no LangSmith env vars)",
    }


# -- targets ----------------------------------------------------------------------------------


def _main(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["family"]: w for w in results.get("workloads", [])}


def _margin(measured: float, bound: float) -> tuple[bool, str]:
    """(met, "met by x" / "missed by x"), lower is better."""
    gap = bound - measured
    return gap >= 0, (f"met by {gap:.3f}" if gap >= 0 else f"missed by {-gap:.3f}")


def _iqr(d: dict[str, Any]) -> str:
    return f"{d['ratio']:.3f} ({d['ratio_p25']:.3f}-{d['ratio_p75']:.3f})"


def evaluate_targets(results: dict[str, Any], *, judge_times: bool = True) -> list[dict[str, Any]]:
    """Issue 10's targets, each with the measured figure, met / missed and the margin.

    With `judge_times=False` (the quick smoke run) time and memory targets are reported
    but not judged.
    """
    out: list[dict[str, Any]] = []
    main = _main(results)

    def add(target: str, measured: str, met: bool | None, note: str = "") -> None:
        if not judge_times and not target.startswith("Correctness"):
            met = None
            note = "quick run: not judged"
        out.append(
            {
                "target": target,
                "measured": measured,
                "status": "n/a" if met is None else ("met" if met else "MISSED"),
                "note": note,
            }
        )

    def var(fam: str, variant: str) -> dict[str, Any] | None:
        v: dict[str, Any] | None = main.get(fam, {}).get("variants", {}).get(variant)
        return v

    def aa(fam: str) -> str:
        d = var(fam, "raw_aa")
        return "" if d is None else f"; A/A control {_iqr(d)}"

    d = var("W1", "lgv")
    if d is None:
        add("W1: lg_visibility <= 1.01 x raw", "not measured", None)
    else:
        met, note = _margin(d["ratio"], 1.01)
        c = var("W1", "chain")
        add(
            "W1: lg_visibility <= 1.01 x raw",
            f"lgv {_iqr(d)}" + (f", chain {c['ratio']:.3f}" if c else "") + aa("W1"),
            met,
            note,
        )
    for fam, extra in (("W2", 0.0), ("W5", 0.0), ("W4", 0.01)):
        lg, ns = var(fam, "lgv"), var(fam, "nosub")
        target = (
            f"{fam}: lg_visibility <= subgraphs=False + {extra:.2f}, "
            "keeping visible subgraph output"
        )
        if lg is None or ns is None:
            add(target, "not measured", None)
            continue
        s_l, s_n = lg.get("sanity") or {}, ns.get("sanity") or {}
        keeps = (s_l.get("visible_custom") or 0) > (s_n.get("visible_custom") or 0)
        met, note = _margin(lg["ratio"] - ns["ratio"], extra)
        paired = main.get(fam, {}).get("lgv_minus_nosub")
        by_rep = (
            ""
            if paired is None
            else f", paired by repetition {paired['median']:+.3f} "
            f"({paired['p25']:+.3f} to {paired['p75']:+.3f})"
        )
        add(
            target,
            f"lgv {_iqr(lg)} vs subgraphs=False {_iqr(ns)} ({lg['ratio'] - ns['ratio']:+.3f}"
            f"{by_rep}); "
            f"subgraph custom events lgv {s_l.get('visible_custom')}, subgraphs=False "
            f"{s_n.get('visible_custom')}" + aa(fam),
            met and keeps,
            note,
        )
    red = results.get("redaction")
    if red and red.get("available"):
        met, note = _margin(red["share_of_raw"], 0.01)
        lg3 = var("W3", "lgv")
        add(
            "W3: snapshot redaction <= 1% over raw",
            f"{red['values_filter_ms']:.2f} ms per run = {100 * red['share_of_raw']:.2f}% of raw "
            f"({red['messages_walked_per_run']} messages in the "
            f"{red['values_delivered_per_run']} delivered snapshots, "
            f"{red['us_per_message']:.3f} us/message); W3 ratio lgv "
            + ("n/a" if lg3 is None else _iqr(lg3)),
            met,
            note,
        )
    else:
        add("W3: snapshot redaction <= 1% over raw", "not measured", None)
    peaks = []
    worst = 0.0
    for fam in MAIN_ORDER:
        wl = main.get(fam)
        if not wl:
            continue
        p_raw = wl["variants"].get("raw", {}).get("peak_kib")
        p_lgv = wl["variants"].get("lgv", {}).get("peak_kib")
        if p_raw and p_lgv:
            peaks.append(f"{fam} {p_lgv / p_raw:.3f}")
            worst = max(worst, p_lgv / p_raw)
    attribution = results.get("memory_attribution") or []
    per_token = ", ".join(
        f"{a['workload']} {a['extra_kib']:+.0f} KiB at the peak of the visible call"
        for a in attribution
    )
    met_p, note_p = _margin(worst, 1.01) if peaks else (None, "")
    add(
        "Peak memory (tracemalloc) <= 1.01 x raw on W1-W5",
        (", ".join(peaks) or "not measured") + (f" (lgv/raw; {per_token})" if per_token else ""),
        met_p,
        f"worst {note_p}" if peaks else "",
    )
    ev = results.get("astream_events")
    if ev:
        met, note = _margin(ev["lgv"]["ratio"], 1.03)
        add(
            'astream_events(version="v2") on W2: lg_visibility <= 1.03 x raw astream_events',
            f"lgv {_iqr(ev['lgv'])}; A/A control {_iqr(ev['raw_aa'])}; events delivered "
            f"lgv {ev['lgv']['delivered']}, raw {ev['raw']['delivered']}",
            met,
            note,
        )
    st = results.get("state_reads")
    if st:
        for read, label in (
            ("aget_state", "aget_state"),
            ("aget_state_history", "aget_state_history(limit=10)"),
        ):
            d = st[read]
            met, note = _margin(d["lgv"]["ratio"], 1.02)
            floor = (
                f"; floor (raw, then each message's tag read) {_iqr(d['raw_read_tags'])}"
                if "raw_read_tags" in d
                else ""
            )
            add(
                f"{label} on a {st['thread_messages']}-message thread: lg_visibility <= 1.02 x raw",
                f"lgv {_iqr(d['lgv'])}; A/A control {_iqr(d['raw_aa'])}{floor}; raw "
                f"{d['raw']['median_ms']:.2f} ms per read",
                met,
                note,
            )
    enc = results.get("encoders")
    if enc:
        add(
            f"Encoders on {enc['workload']} (lg_visibility stream): frames per CPU second, "
            "against our SSE",
            "; ".join(
                f"{n} {enc[n]['per_s']:,.0f} frames/s ({enc[n]['delivered']} frames, run "
                f"time {enc[n]['ratio']:.3f} x sse)"
                for n in enc["encoders"]
            ),
            None,
            "reported",
        )
    soaks = {s["variant"]: s for s in results.get("soak", [])}
    s = soaks.get("lgv")
    if s:
        raw_s = soaks.get("raw")
        flat = s["traced_lg_visibility_bytes_per_run"] <= 1 and (
            raw_s is None or s["objects_per_1000_runs"] <= raw_s["objects_per_1000_runs"] + 5
        )
        measured = f"live objects {s['objects_per_1000_runs']:+.1f} per 1000 runs"
        if raw_s:
            measured += f" (raw {raw_s['objects_per_1000_runs']:+.1f})"
        measured += (
            f"; allocations from lg_visibility retained "
            f"{s['traced_lg_visibility_bytes_per_run']:+.1f} B/run"
        )
        add(f"Nothing retained per run ({s['runs']} runs on one compiled graph)", measured, flat)
    corpus = results.get("corpus", {}).get("totals", {})
    t = corpus.get("lgv")
    if t:
        add(
            "Correctness corpus: lg_visibility 0 leaks, 0 false drops",
            f"{t['leaks']} leaks / {t['internal_sources']} internal, {t['false_drops']} false "
            f"drops + {t['not_streamed']} not streamed / {t['visible_sources']} visible",
            t["leaks"] == 0 and t["false_drops"] == 0 and t["not_streamed"] == 0,
        )
    ch = corpus.get("chain")
    if ch:
        add(
            "Correctness corpus: the chain's counts, as measured",
            f"{ch['leaks']} leaks, {ch['false_drops']} false drops, {ch['not_streamed']} not "
            "streamed",
            None,
        )
    return out


# -- JSON ---------------------------------------------------------------------------------------


def write_json(results: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(results, indent=1, default=str) + "\n")


# -- Markdown -----------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.0f}%"


def _variant_rows(wl: dict[str, Any], variants: Sequence[str]) -> list[str]:
    rows = []
    raw_peak = wl["variants"]["raw"].get("peak_kib")
    for v in variants:
        d = wl["variants"].get(v)
        if d is None:
            continue
        lat = ""
        if d.get("latency_ms") is not None:
            lat = f"{d['latency_ms']:.1f} ({d['latency_ratio']:.2f})"
        peak = ""
        if d.get("peak_kib"):
            peak = f"{d['peak_kib'] / 1024:.2f} MiB"
            if raw_peak and v != "raw":
                peak += f" ({d['peak_kib'] / raw_peak:.3f})"
        rows.append(
            f"| {wl['name']} | {v} | {d['median_ms']:.1f} ({d['p25_ms']:.1f}-{d['p75_ms']:.1f}) "
            f"| {d['parts']} | {d['delivered']} | {d['events_per_s']:,.0f} "
            f"| {d['visible_tokens_per_s']:,.0f} "
            f"| **{d['ratio']:.3f}** ({d['ratio_p25']:.3f}-{d['ratio_p75']:.3f}) "
            f"| {lat} | {_pct(d['gc_share'])} | {peak} |"
        )
    return rows


_TABLE_HEAD = (
    "| workload | variant | median CPU ms (p25-p75) | parts out of astream "
    "| delivered to user side | events/s | visible tok/s | ratio to raw, paired median (p25-p75) "
    "| first visible token, CPU ms (ratio) | GC share | tracemalloc peak (ratio) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def _egress_markdown(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    add = lines.append
    rows = []
    ev = results.get("astream_events")
    if ev:
        rows.append((f'astream_events(version="v2"), {ev["workload"]}', "raw", ev, "events"))
    st = results.get("state_reads")
    if st:
        n = st["thread_messages"]
        rows.append((f"aget_state, {n}-message thread", "raw", st["aget_state"], "snapshots"))
        rows.append(
            (
                f"aget_state_history(limit=10), {n}-message thread",
                "raw",
                st["aget_state_history"],
                "snapshots",
            )
        )
    enc = results.get("encoders")
    if enc:
        rows.append((f"chat encoders, {enc['workload']} (lg_visibility)", "sse", enc, "frames"))
    if not rows:
        return lines
    add("### The other ways out: astream_events, state reads, chat encoders\n")
    add(
        "Interleaved like the workloads (order rotated each repetition, `gc.collect()` before "
        "each sample, CPU time), ratios paired per repetition against the first row of each "
        "block. Encoders: our SSE is `ChatStreamMapper` + `ChatEvent.encode`; AI SDK adds "
        "`UIStreamEncoder` + `encode_part`; AG-UI is `ag_ui_langgraph.LangGraphAgent.run` "
        "(which reads the enforced `astream_events` and `aget_state`) + ag-ui's "
        "`EventEncoder`, so its row includes LangGraph's event machinery.\n"
    )
    add(
        "| path | variant | median CPU ms (p25-p75) | delivered per run | per CPU second "
        "| ratio, paired median (p25-p75) |\n|---|---|---|---|---|---|"
    )
    for label, _base, block, unit in rows:
        names = block.get("encoders") or [
            n for n in ("raw", "raw_aa", "raw_read_tags", "lgv") if n in block
        ]
        for name in names:
            d = block[name]
            add(
                f"| {label} | {name} | {d['median_ms']:.2f} ({d['p25_ms']:.2f}-{d['p75_ms']:.2f}) "
                f"| {d['delivered']} {unit} | {d['per_s']:,.0f} | **{d['ratio']:.3f}** "
                f"({d['ratio_p25']:.3f}-{d['ratio_p75']:.3f}) |"
            )
    add("")
    checks = []
    if ev:
        checks.append(f"astream_events {ev['sanity']}")
    if st:
        checks.append(f"state reads {st['sanity']}")
    if enc:
        checks.append(f"encoders {enc['sanity']}")
    if enc and enc.get("note"):
        add(f"Encoders: {enc['note']}.\n")
    add(
        "Scored in one untimed run each against the markers (internal JSON `"
        + "INTJSON` from the fake models, `INTHIST` in the history): "
        + "; ".join(checks)
        + ".\n"
    )
    return lines


def write_markdown(results: dict[str, Any], path: Path, chart_name: str | None) -> str:
    env = results["env"]
    variants = results["variants"]
    lines: list[str] = []
    add = lines.append
    add("## Benchmarks: source-side visibility vs handler-side filtering\n")
    add(
        f"Measured {env['date']} on {env['cpu']} ({env['cpus']} CPUs of a VM on a shared "
        f"host), {env['platform']}, Python {env['python']}; "
        + ", ".join(f"{k} {v}" for k, v in env["packages"].items() if v)
        + f"; repo at {env['git_commit']} (lg_visibility tree {env['lg_visibility_tree']}). "
        f"Mode: {results['mode']}; {results['reps']} interleaved repetitions (order rotated "
        "each repetition), ratios paired per repetition, median (p25-p75).\n"
    )
    add(
        "Variants: "
        + "; ".join(f"`{v}` = {LABELS.get(v, v)}" for v in variants)
        + ". Quote ratios, not milliseconds: the machine is shared and noisy; the A/A "
        "control shows the noise floor of a ratio.\n"
    )
    if chart_name:
        add(f"![ratios, cost curve and correctness]({chart_name})\n")
    add("### Targets\n")
    add(
        "Margins: *met by x* / *missed by x* is the bound minus the measured paired median "
        "(for W2/W4/W5 the bound is subgraphs=False's ratio of the same run plus the allowance)."
        " A margin smaller than the A/A control's distance from 1.000 and its p25-p75 spread "
        "is within noise.\n"
    )
    add("| target | measured | status |\n|---|---|---|")
    for t in results.get("targets", []):
        status = t["status"] + (f" ({t['note']})" if t.get("note") else "")
        add(f"| {t['target']} | {t['measured']} | {status} |")
    add("")
    if results.get("notes"):
        add("### Analysis: the misses, where the time goes, what it would take\n")
        add(results["notes"].strip() + "\n")
    add("### Main workloads\n")
    add(_TABLE_HEAD)
    main = {w["family"]: w for w in results.get("workloads", [])}
    for fam in MAIN_ORDER:
        if fam in main:
            lines.extend(_variant_rows(main[fam], variants))
    add("")
    add(
        "*parts out of astream*: what `astream` yielded to the consumer (for the chain, all "
        "parts, before filtering); *delivered*: what reached the user side (for the chain, "
        "what it emitted; for W4, SSE events sent). Times are process CPU time (equal to wall "
        "time on an idle machine: the models have no latency and nothing waits on I/O; CPU "
        "time leaves out the time the process sat descheduled on this shared machine). "
        "*events/s* counts parts out of astream, so it favours variants that emit more. "
        "*visible tok/s*: the tokens the user should see (W1: N; W2-W5: the N root tokens) "
        "per CPU second, the fair throughput figure. *first visible token*: from the "
        "`astream` call to the first user-visible token reaching the user side, in its own "
        "interleaved pass with network-fed models (`sleep(0)` per token; otherwise the runner "
        "queues a whole call before the consumer runs). *GC share*: wall time in the cyclic "
        "GC / wall time. *tracemalloc peak*: own pass, peak minus the level at start, median "
        "of 3 runs.\n"
    )
    lines.extend(_egress_markdown(results))
    sweep = results.get("sweep", [])
    if sweep:
        add("### Cost curve (tokens swept)\n")
        add(
            "W1-N: one call of N visible tokens. W2-N: each of the 4 calls has N tokens "
            "(3 internal, 1 visible). us/token = median run time / all tokens streamed "
            "by the models.\n"
        )
        add(
            "| workload | "
            + " | ".join(f"{v} ratio" for v in variants)
            + " | raw us/token | lgv us/token | GC share raw |"
        )
        add("|---|" + "---|" * (len(variants) + 3))
        for wl in sorted(sweep, key=lambda w: (w["family"], w["n_tokens"])):
            tokens = wl["visible_tokens"] + wl["internal_tokens"]
            cells = []
            for v in variants:
                d = wl["variants"].get(v)
                cells.append("" if d is None else f"{d['ratio']:.3f}")
            raw = wl["variants"]["raw"]
            lgv = wl["variants"].get("lgv")
            lgv_cell = "" if lgv is None else f"{1000 * lgv['median_ms'] / tokens:.1f}"
            add(
                f"| {wl['name']} | "
                + " | ".join(cells)
                + f" | {1000 * raw['median_ms'] / tokens:.1f} | {lgv_cell}"
                + f" | {_pct(raw['gc_share'])} |"
            )
        add("")
    add("### What each variant delivered (one untimed run, scored against ground truth)\n")
    add(
        "| workload | variant | parts by kind | visible tokens | internal tokens | "
        "subgraph custom events | internal messages in snapshots | problems |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    checked = [
        (main[fam]["name"], {v: d.get("sanity") for v, d in main[fam]["variants"].items()})
        for fam in MAIN_ORDER
        if fam in main
    ] + [(w["name"], w["variants"]) for w in results.get("sanity", [])]
    for name, by_variant in checked:
        for v in variants:
            s = by_variant.get(v)
            if not s:
                continue
            kinds = ", ".join(f"{k} {n}" for k, n in s["by_kind"].items())
            add(
                f"| {name} | {v} | {kinds} | {s['visible_tokens']} | "
                f"{s['internal_tokens']} | {s['visible_custom']} | {s['internal_in_values']} "
                f"| {'; '.join(s['problems']) or '-'} |"
            )
    add("")
    corpus = results.get("corpus")
    if corpus:
        add("### Correctness corpus\n")
        cv = corpus["variants"]
        add(
            "Leak: an internal output reached the user. False drop: a user-visible output "
            "never reached the user. Not streamed: a visible answer reached the user only "
            "as one whole message at the end, without its tokens.\n"
        )
        add("| variant | leaks | false drops | not streamed |\n|---|---|---|---|")
        for v in cv:
            t = corpus["totals"][v]
            add(
                f"| {LABELS.get(v, v)} | {t['leaks']} / {t['internal_sources']} | "
                f"{t['false_drops']} / {t['visible_sources']} | {t['not_streamed']} |"
            )
        add("")
        add("| scenario | case | marker | " + " | ".join(cv) + " |")
        add("|---|---|---|" + "---|" * len(cv))
        rows: dict[tuple[str, str, str], dict[str, str]] = {}
        for r in corpus["cases"]:
            key = (r["scenario"], r["case"], r["marker"])
            rows.setdefault(key, {})[r["variant"]] = r["outcome"]
        for (scenario, case, marker), outcomes in rows.items():
            cells = ["ok" if outcomes.get(v) == "ok" else f"**{outcomes.get(v, '')}**" for v in cv]
            add(f"| {scenario} | {case} | {marker} | " + " | ".join(cells) + " |")
        add("")
    soak = results.get("soak")
    if soak:
        add("### Memory over many runs on one compiled graph\n")
        add(
            "| variant | workload | runs | live objects per 1000 runs | RSS KiB per 1000 runs "
            "| traced bytes retained per run (all / lg_visibility) |\n|---|---|---|---|---|---|"
        )
        for s in soak:
            add(
                f"| {s['variant']} | {s['workload']} | {s['runs']} | "
                f"{s['objects_per_1000_runs']:+.1f} | {s['rss_kib_per_1000_runs']:+.1f} | "
                f"{s['traced_bytes_per_run']:+.1f} / "
                f"{s['traced_lg_visibility_bytes_per_run']:+.1f} |"
            )
        add("")
    hop = results.get("wrapper_hop")
    if hop:
        add("### One more async-generator layer (W1)\n")
        add(
            f"{hop['reps']} interleaved repetitions of {hop['workload']} ({hop['inner']} runs "
            "per sample), paired ratio to raw: "
            + ", ".join(
                f"{name} {hop[name]['ratio']:.3f} ({hop[name]['ratio_p25']:.3f}-"
                f"{hop[name]['ratio_p75']:.3f})"
                for name in ("raw_aa", "raw_in_generator", "lgv")
            )
            + ". `raw_in_generator` re-yields raw's parts through a do-nothing `async for "
            "... yield`, the layer an `astream` override adds around LangGraph's stream.\n"
        )
    woken = results.get("wakeups") or []
    if woken:
        add("### Event-loop wake-up writes per run\n")
        add(
            "How often one run writes the event loop's self-pipe (`call_soon_threadsafe`'s "
            "wake-up: a `send`, and a `recv` when the loop drains it). LangGraph's `stream_put` "
            "writes it for every item it queues; lg_visibility's put skips it on the loop's "
            "own thread, with the same queue order (`_compat.loop_thread_put`), so its "
            "visible tokens cost less than raw's; custom events still go through LangGraph's "
            "own writer.\n"
        )
        names = [v for v in ("raw", "nosub", "lgv") if any(v in w for w in woken)]
        add("| workload | " + " | ".join(LABELS.get(v, v) for v in names) + " |")
        add("|---|" + "---|" * len(names))
        for w in woken:
            add(f"| {w['workload']} | " + " | ".join(str(w.get(v, "")) for v in names) + " |")
        add("")
    attribution = results.get("memory_attribution") or []
    if attribution:
        add("### Where lg_visibility's extra memory is (tracemalloc, by line)\n")
        add(
            "Snapshots taken while every chunk of the last (visible) LLM call is alive, "
            "lg_visibility minus raw; lines that only moved an allocation from LangGraph's "
            "handler to lg_visibility's subclass show as a +/- pair.\n"
        )
        add("| workload | line | KiB | blocks |\n|---|---|---|---|")
        for a in attribution:
            add(f"| {a['workload']} | total | {a['extra_kib']:+.1f} | |")
            for line in a["lines"]:
                add(
                    f"| {a['workload']} | `{line['line']}` | {line['size_diff_kib']:+.1f} "
                    f"| {line['count_diff']:+d} |"
                )
        add("")
    red = results.get("redaction")
    if red and red.get("available"):
        add("### Snapshot redaction (W3)\n")
        add(
            f"lg_visibility's output filter spent {red['values_filter_ms']:.2f} ms per run on "
            f"`values` parts ({red['values_parts_per_run']} judged, "
            f"{red['values_delivered_per_run']} delivered redacted, holding "
            f"{red['messages_walked_per_run']} messages: {red['us_per_message']:.3f} us per "
            f"message) and {red['all_parts_filter_ms']:.2f} ms on all parts, against a raw "
            f"median of {red['raw_median_ms']:.1f} ms: **{100 * red['share_of_raw']:.1f}%**. "
            "Measured by timing each call of the filter in its own pass.\n"
        )
    profiles = results.get("profiles") or []
    if profiles:
        add("### Where the time goes (cProfile, GC off; shares of own time)\n")
        for p in profiles:
            add(
                f"**{p['workload']} / {p['variant']}** ({p['runs']} runs): lg_visibility's own "
                f"code {100 * p['lg_visibility_own_share']:.1f}% of own time. Top functions:\n"
            )
            add("| function | calls/run | own | cumulative |\n|---|---|---|---|")
            for row in p["top"][:12]:
                add(
                    f"| `{row['function']}` | {row['ncalls_per_run']:.0f} | "
                    f"{100 * row['own_share']:.1f}% | {100 * row['cum_share']:.1f}% |"
                )
            add("")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


# -- chart --------------------------------------------------------------------------------------

_COLORS = {
    "raw": "#7f7f7f",
    "raw_aa": "#c7c7c7",
    "raw_read_tags": "#bcbd22",
    "nosub": "#1f77b4",
    "chain": "#d62728",
    "chain_ns": "#ff9896",
    "lgv": "#2ca02c",
}


def _egress_panel(ax: Any, results: dict[str, Any]) -> None:
    bars: list[tuple[str, float, float, float, str, float | None]] = []
    ev = results.get("astream_events")
    st = results.get("state_reads")
    enc = results.get("encoders")
    for label, block, bound in (
        ("astream_events\nW2", ev, 1.03),
        ("aget_state", st and st["aget_state"], 1.02),
        ("state_history\n(limit=10)", st and st["aget_state_history"], 1.02),
    ):
        if not block:
            continue
        for name in ("raw_aa", "raw_read_tags", "lgv"):
            if name not in block:
                continue
            d = block[name]
            bars.append(
                (f"{label}\n{name}", d["ratio"], d["ratio_p25"], d["ratio_p75"], name, bound)
            )
    if enc:
        for name in enc["encoders"]:
            d = enc[name]
            bars.append(
                (f"encoder\n{name} / sse", d["ratio"], d["ratio_p25"], d["ratio_p75"], "", None)
            )
    if not bars:
        ax.set_axis_off()
        return
    xs = list(range(len(bars)))
    top = 1.2
    for x, (_, r, lo, hi, name, bound) in zip(xs, bars, strict=True):
        color = _COLORS.get(name, "#8c564b")
        if r > top:  # AG-UI: drawn clipped, its value written on the bar
            ax.bar(x, top - 0.005, 0.7, color=color, hatch="//")
            ax.text(x, top - 0.06, f"{r:.2f}x", ha="center", fontsize=7, color="white")
            continue
        ax.bar(x, r, 0.7, yerr=[[r - lo], [min(hi, top) - r]], capsize=2, color=color)
        if bound is not None:
            ax.plot([x - 0.4, x + 0.4], [bound, bound], color="black", ls=":", lw=1)
        ax.text(x, min(hi, top) + 0.003, f"{r:.3f}", ha="center", va="bottom", fontsize=6)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(xs, [b[0] for b in bars], fontsize=6, rotation=60)
    low = min([0.85] + [lo - 0.05 for _, _, lo, _, _, _ in bars])  # a bar far below 1 shows
    ax.set_ylim(max(0.0, low), top)
    ax.set_ylabel("run time / raw (encoders: / our SSE)")
    ax.set_title("Other ways out (dotted: target)")


def write_chart(results: dict[str, Any], path: Path) -> bool:
    """Three panels: ratio to raw per workload, cost curve, correctness. False if no matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    variants = [v for v in results["variants"] if v != "raw"]
    main = {w["family"]: w for w in results.get("workloads", [])}
    fams = [f for f in MAIN_ORDER if f in main]
    fig, axes = plt.subplots(
        1, 4, figsize=(21, 5.2), gridspec_kw={"width_ratios": [1.5, 1.1, 1, 1.1]}
    )
    ax = axes[0]
    width = 0.8 / max(1, len(variants))
    for i, v in enumerate(variants):
        xs, ys, lo, hi = [], [], [], []
        for j, fam in enumerate(fams):
            d = main[fam]["variants"].get(v)
            if d is None:
                continue
            xs.append(j + (i - (len(variants) - 1) / 2) * width)
            ys.append(d["ratio"])
            lo.append(d["ratio"] - d["ratio_p25"])
            hi.append(d["ratio_p75"] - d["ratio"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=v, color=_COLORS.get(v))
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(fams)), [main[f]["name"] for f in fams], fontsize=8)
    ax.set_ylabel("run time / raw (paired median, p25-p75)")
    ax.set_ylim(0.5, max(1.25, ax.get_ylim()[1]))
    ax.set_title("Ratio to raw LangGraph (lower is cheaper)")
    ax.legend(fontsize=8, ncol=2)
    ax = axes[1]
    plotted = False
    sweep = results.get("sweep", []) + list(main.values())
    for fam, style in (("W1", "-o"), ("W2", "--s")):
        pts = sorted(
            {w["n_tokens"]: w for w in sweep if w["family"] == fam}.values(),
            key=lambda w: w["n_tokens"],
        )
        if len(pts) < 2:
            continue
        for v in ("raw", "nosub", "chain", "lgv"):
            if v not in pts[0]["variants"]:
                continue
            xs = [w["n_tokens"] for w in pts]
            ys = [
                1000 * w["variants"][v]["median_ms"] / (w["visible_tokens"] + w["internal_tokens"])
                for w in pts
            ]
            ax.plot(xs, ys, style, color=_COLORS[v], label=f"{fam} {v}", ms=4)
            plotted = True
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks([500, 2000, 8000], ["500", "2000", "8000"])
    ax.set_xlabel("tokens per call (N)")
    ax.set_ylabel("us per streamed token (all calls)")
    ax.set_title("Cost curve: W1 (solid), W2 (dashed)")
    if plotted:
        ax.legend(fontsize=7, ncol=2)
    ax = axes[2]
    corpus = results.get("corpus")
    if corpus:
        cv = corpus["variants"]
        tot = corpus["totals"]
        xs = range(len(cv))
        leaks = [tot[v]["leaks"] for v in cv]
        drops = [tot[v]["false_drops"] for v in cv]
        unstreamed = [tot[v]["not_streamed"] for v in cv]
        for offset, values, label, color in (
            (-0.27, leaks, "leaks", "#d62728"),
            (0.0, drops, "false drops", "#9467bd"),
            (0.27, unstreamed, "not streamed", "#bcbd22"),
        ):
            pos = [x + offset for x in xs]
            ax.bar(pos, values, 0.27, label=label, color=color)
            for x, y in zip(pos, values, strict=True):
                ax.text(x, y + 0.05, str(y), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(list(xs), cv, fontsize=8)
        n_int = tot[cv[0]]["internal_sources"]
        n_vis = tot[cv[0]]["visible_sources"]
        ax.set_title(f"Correctness corpus ({n_int} internal, {n_vis} visible outputs)")
        ax.legend(fontsize=8)
    _egress_panel(axes[3], results)
    env = results["env"]
    fig.suptitle(
        f"lg_visibility benchmarks - langgraph {env['packages'].get('langgraph')}, "
        f"langchain-core {env['packages'].get('langchain-core')}, Python {env['python']}, "
        f"{env['cpus']} CPUs ({env['cpu']}), {env['date']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
