"""`python -m benchmarks [--quick]`: run the workloads, the corpus and the soak; write reports.

--quick is the smoke run: the correctness corpus plus small instances of every workload
(2 repetitions) and a short soak. It exits non-zero only on a correctness problem
(an lg_visibility leak or false drop, a corpus outcome that differs from the table in
`benchmarks.corpus.EXPECTED`, or a variant that delivered the wrong tokens in a workload);
it never judges a time. `--quick --correctness-only` (what CI runs) skips the timing,
latency, memory and soak passes and keeps only those correctness checks. The full run
(default) takes several minutes and writes `results.json`, `results.md` and `results.png`
into `--out` (default benchmarks/results/).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import corpus as corpus_mod
from benchmarks import egress, w1_root_stream, w2_subgraphs, w3_history, w4_sse_consumer, w5_nested
from benchmarks._graphs import Workload
from benchmarks.harness import measure_workload, sanity_only, soak
from benchmarks.report import (
    environment,
    evaluate_targets,
    write_chart,
    write_json,
    write_markdown,
)
from benchmarks.variants import ALL_VARIANTS

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def _lgv_available() -> bool:
    try:
        import lg_visibility._wrap  # noqa: F401
    except ImportError:
        return False
    return True


def _plan(quick: bool) -> tuple[list[Workload], list[Workload]]:
    """(main workloads, sweep workloads)."""
    if quick:
        main = [
            w1_root_stream.build(300),
            w2_subgraphs.build(100),
            w3_history.build(100, 400),
            w4_sse_consumer.build(100),
            w5_nested.build(100),
        ]
        return main, []
    main = [
        w1_root_stream.build(),
        w2_subgraphs.build(),
        w3_history.build(),
        w4_sse_consumer.build(),
        w5_nested.build(),
    ]
    sweep = [
        w1_root_stream.build(500),
        w1_root_stream.build(8000),
        w2_subgraphs.build(2000),
        w2_subgraphs.build(8000),
    ]
    return main, sweep


def _log(*args: Any, end: str = "\n") -> None:
    print(*args, end=end, flush=True)


def _render(args: argparse.Namespace) -> int:
    """Re-write results.md and results.png from a results.json (with --notes appended)."""
    import json

    src = Path(args.render)
    results = json.loads(src.read_text())
    if args.notes:
        results["notes"] = Path(args.notes).read_text()
        write_json(results, src)
    chart = write_chart(results, src.with_name("results.png"))
    write_markdown(results, src.with_name("results.md"), "results.png" if chart else None)
    _log(f"wrote {src.with_name('results.md')}" + (", results.png" if chart else ""))
    return 0


async def _main(args: argparse.Namespace) -> int:
    os.environ.pop("LANGSMITH_TRACING", None)
    os.environ.pop("LANGCHAIN_TRACING_V2", None)
    t_start = time.perf_counter()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    have_lgv = _lgv_available()
    variants = [v for v in args.variants.split(",") if v] if args.variants else list(ALL_VARIANTS)
    if not have_lgv and "lgv" in variants:
        _log("lg_visibility._wrap is not importable: the lg_visibility variant is skipped")
        variants.remove("lgv")
    if "raw" not in variants:
        variants.insert(0, "raw")
    reps = args.reps or (2 if args.quick else 15)
    latency_reps = 1 if args.quick else max(7, reps // 2 + 1)
    problems: list[str] = []
    mode = "full"
    if args.quick or args.correctness_only:
        mode = "correctness only" if args.correctness_only else "quick (smoke, times not judged)"
    results: dict[str, Any] = {
        "env": environment(),
        "mode": mode,
        "reps": reps,
        "variants": variants,
        "workloads": [],
        "sweep": [],
        "soak": [],
        "sanity": [],
    }

    # 1. correctness corpus
    if not args.skip_corpus:
        _log("corpus ...", end=" ")
        corpus_variants = [v for v in corpus_mod.CORPUS_VARIANTS if v != "lgv" or have_lgv]
        cases, totals, mismatches = await corpus_mod.check(corpus_variants)
        problems += [f"corpus: {m}" for m in mismatches]
        results["corpus"] = {
            "variants": corpus_variants,
            "totals": totals,
            "cases": [
                {
                    "scenario": c.scenario,
                    "variant": c.variant,
                    "case": c.source.case,
                    "marker": c.source.marker,
                    "visibility": c.source.visibility,
                    "outcome": c.outcome,
                    "where": c.where,
                }
                for c in cases
            ],
            "mismatches": mismatches,
        }
        _log(
            "; ".join(
                f"{v}: {t['leaks']} leaks, {t['false_drops']} false drops, "
                f"{t['not_streamed']} not streamed"
                for v, t in totals.items()
            )
        )

    # 2. workloads
    only = set(args.only.split(",")) if args.only else None
    main, sweep = _plan(args.quick or args.correctness_only)
    wanted = [w for w in main if only is None or w.family in only]
    sweep = [w for w in sweep if only is None or w.family in only]
    by_name: dict[str, Any] = {}
    if args.correctness_only:
        for wl in wanted:
            checked = await sanity_only(wl, variants)
            results["sanity"].append({"name": wl.name, "variants": checked})
            found = [f"{wl.name} {v}: {p}" for v, s in checked.items() for p in s["problems"]]
            problems += found
            _log(f"  {wl.name}: sanity " + ("ok" if not found else "PROBLEMS"))
        wanted, sweep = [], []
    for group, workloads in (("workloads", wanted), ("sweep", sweep)):
        for wl in workloads:
            res = await measure_workload(
                wl,
                variants,
                reps=reps,
                latency_reps=latency_reps if group == "workloads" else 0,
                memory_runs=1 if args.quick or group == "sweep" else 3,
                target_ms=0.0 if args.quick else 80.0,
                log=_log,
            )
            summary = res.summary(wl)
            results[group].append(summary)
            by_name[wl.name] = (wl, summary)
            for v, d in summary["variants"].items():
                for p in d["sanity"]["problems"]:
                    problems.append(f"{wl.name} {v}: {p}")
            _log(
                "    " + "  ".join(f"{v} {d['ratio']:.3f}" for v, d in summary["variants"].items())
            )

    # 2b. the other ways out: astream_events, state reads, chat encoders
    if have_lgv and (only is None or "egress" in only):
        problems += await _egress(args, reps, results)

    # 3. probes: W3 redaction cost, profiles
    if have_lgv and not args.quick:
        from benchmarks.probes import (
            memory_attribution,
            profile_variant,
            redaction_cost,
            wakeups,
            wrapper_hop,
        )

        w3 = next((w for w in wanted if w.family == "W3"), None)
        if w3 is not None:
            raw_ms = by_name[w3.name][1]["variants"]["raw"]["median_ms"]
            results["redaction"] = await redaction_cost(w3, runs=reps, raw_median_ms=raw_ms)
        w1 = next((w for w in wanted if w.family == "W1"), None)
        if w1 is not None:
            _log("  probe: the cost of one more async-generator layer (W1) ...")
            results["wrapper_hop"] = await wrapper_hop(w1, reps=31)
        results["wakeups"] = [
            await wakeups(wl, tuple(v for v in ("raw", "nosub", "lgv") if v in variants))
            for wl in wanted
            if wl.family in ("W1", "W2")
        ]
        results["memory_attribution"] = [
            await memory_attribution(wl) for wl in wanted if wl.family in ("W1", "W2", "W3")
        ]
        if args.profile:
            results["profiles"] = []
            for wl in wanted:
                if wl.family in args.profile.split(","):
                    for v in ("lgv", "raw"):
                        results["profiles"].append(await profile_variant(wl, v, runs=5))

    # 4. soak
    soak_runs = args.soak_runs if args.soak_runs is not None else (200 if args.quick else 10_000)
    if args.correctness_only:
        soak_runs = 0
    if soak_runs:
        small = w2_subgraphs.build(20)
        for v in ("raw", "lgv") if have_lgv else ("raw",):
            # raw is only the reference for LangGraph's own growth: a fifth of the runs
            runs = soak_runs if v == "lgv" else max(100, soak_runs // 5)
            _log(f"  soak {v}: {runs} runs of {small.name} ...", end=" ")
            s = await soak(
                small,
                v,
                runs,
                warmup=20 if args.quick else 200,
                traced_runs=50 if args.quick else 300,
            )
            results["soak"].append(s)
            _log(
                f"{s['objects_per_1000_runs']:+.1f} objects/1000 runs, lg_visibility retained "
                f"{s['traced_lg_visibility_bytes_per_run']:+.1f} B/run ({s['seconds']:.0f} s)"
            )

    # 5. reports
    results["targets"] = evaluate_targets(
        results, judge_times=not (args.quick or args.correctness_only)
    )
    results["problems"] = problems
    results["seconds"] = time.perf_counter() - t_start
    write_json(results, out_dir / "results.json")
    chart = write_chart(results, out_dir / "results.png")
    md = write_markdown(results, out_dir / "results.md", "results.png" if chart else None)
    if args.print_report:
        _log(md)
    _log("\ntargets:")
    for t in results["targets"]:
        _log(f"  [{t['status']}] {t['target']}: {t['measured']}")
    _log(f"\nwrote {out_dir}/results.json, results.md" + (", results.png" if chart else ""))
    _log(f"took {results['seconds']:.0f} s")
    if problems:
        _log("\nCORRECTNESS PROBLEMS:")
        for p in problems:
            _log(f"  {p}")
        return 1
    return 0


async def _egress(args: argparse.Namespace, reps: int, results: dict[str, Any]) -> list[str]:
    """astream_events (W2), state reads (a 2000-message thread), encoders (W2)."""
    small = args.quick or args.correctness_only
    events_wl = w2_subgraphs.build(40 if args.correctness_only else 100 if small else 500)
    # The thread's size is what a state read costs; the turns' token count is not.
    state_wl = w3_history.build(20, 400 if args.correctness_only else 2000)
    enc_wl = w2_subgraphs.build(40 if args.correctness_only else 100 if small else 500)
    if args.correctness_only:
        ev, p1 = await egress.check_events(events_wl)
        config = await egress._seed_thread(state_wl)
        st, p2 = await egress.check_state(state_wl, config)
        state_wl.cleanup(config)
        names = ["sse", "aisdk"] + (["agui"] if egress.agui_available() else [])
        enc, p3 = await egress.check_encoders(enc_wl, names)
        if "agui" not in names:
            p3.append("encoder agui: ag-ui-langgraph is missing (pip install -e '.[server]')")
        results["egress_sanity"] = {"astream_events": ev, "state": st, "encoders": enc}
        found = p1 + p2 + p3
        _log("  egress: sanity " + ("ok" if not found else "PROBLEMS"))
        return found
    _log(f"  astream_events {events_wl.name}: ", end="")
    results["astream_events"] = await egress.events_pass(events_wl, reps, log=_log)
    _log(f"  state reads ({state_wl.name} thread): ", end="")
    results["state_reads"] = await egress.state_pass(state_wl, reps, log=_log)
    _log(f"  encoders {enc_wl.name}: ", end="")
    results["encoders"] = await egress.encoder_pass(enc_wl, reps, log=_log)
    ev, st, enc = results["astream_events"], results["state_reads"], results["encoders"]
    _log(
        f"    astream_events lgv {ev['lgv']['ratio']:.3f} (A/A {ev['raw_aa']['ratio']:.3f}); "
        f"aget_state lgv {st['aget_state']['lgv']['ratio']:.3f}, history lgv "
        f"{st['aget_state_history']['lgv']['ratio']:.3f}; encoders "
        + ", ".join(f"{n} {enc[n]['per_s']:,.0f}/s" for n in enc["encoders"])
    )
    return ev["problems"] + st["problems"] + enc["problems"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="CI smoke run: correctness only")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 11; quick 3)")
    parser.add_argument(
        "--only",
        default="",
        help="workload families, e.g. W1,W3 (egress: astream_events, state reads, encoders)",
    )
    parser.add_argument("--variants", default="", help=f"subset of {','.join(ALL_VARIANTS)}")
    parser.add_argument("--soak-runs", type=int, default=None, help="default 10000; quick 200")
    parser.add_argument("--profile", default="", help="families to cProfile, e.g. W1,W2")
    parser.add_argument(
        "--correctness-only",
        action="store_true",
        help="only the corpus and the workloads' sanity scoring (what CI runs)",
    )
    parser.add_argument("--skip-corpus", action="store_true")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output folder")
    parser.add_argument("--print-report", action="store_true", help="print the Markdown")
    parser.add_argument(
        "--render", default="", help="only re-write results.md/.png from this results.json"
    )
    parser.add_argument(
        "--notes", default="", help="with --render: a Markdown file kept as the report's analysis"
    )
    args = parser.parse_args(argv)
    if args.render:
        return _render(args)
    return asyncio.run(_main(args))


if __name__ == "__main__":
    sys.exit(main())
