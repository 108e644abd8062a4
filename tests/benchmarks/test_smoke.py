"""Smoke test of the benchmarks' correctness columns (never a time).

Runs the correctness corpus through `benchmarks.corpus.check`, the code
`python -m benchmarks --quick` runs, and the sanity scoring of one small workload.
"""

from __future__ import annotations

import asyncio

import pytest

from benchmarks import corpus, w2_subgraphs
from benchmarks.harness import _run_once, score
from benchmarks.variants import ALL_VARIANTS, record_runner


@pytest.fixture(scope="module")
def measured() -> tuple[list[corpus.CaseResult], dict[str, dict[str, int]], list[str]]:
    return asyncio.run(asyncio.wait_for(corpus.check(timeout=30.0), 90.0))


def _outcomes(results: list[corpus.CaseResult], variant: str) -> dict[tuple[str, str], str]:
    return {
        (r.scenario, r.source.marker): r.outcome
        for r in results
        if r.variant == variant and r.outcome != "ok"
    }


def test_corpus_lg_visibility_has_no_leak_and_no_false_drop(measured) -> None:
    """lg_visibility delivers every visible output streamed and no internal output."""
    results, totals, _ = measured
    assert _outcomes(results, "lgv") == {}
    assert totals["lgv"] == {
        "leaks": 0,
        "false_drops": 0,
        "not_streamed": 0,
        "internal_sources": 7,
        "visible_sources": 9,
    }


def test_corpus_chain_counts_equal_the_measured_table(measured) -> None:
    """The seed-000 chain fails exactly where the corpus table says it does."""
    results, totals, _ = measured
    assert _outcomes(results, "chain") == corpus.EXPECTED["chain"]
    assert (totals["chain"]["leaks"], totals["chain"]["false_drops"]) == (6, 1)
    assert totals["chain"]["not_streamed"] == 1


@pytest.mark.parametrize("variant", ["raw", "nosub", "chain_ns"])
def test_corpus_reference_variants_equal_the_measured_table(measured, variant: str) -> None:
    """raw, subgraphs=False and the chain with every subgraph registered match the table."""
    results, _, _ = measured
    assert _outcomes(results, variant) == corpus.EXPECTED[variant]


def test_corpus_check_reports_no_mismatch(measured) -> None:
    """The check `--quick` exits on finds nothing to report."""
    _, _, problems = measured
    assert problems == []


@pytest.mark.parametrize("variant", ALL_VARIANTS)
def test_workload_sanity_every_variant_delivers_the_visible_tokens(variant: str) -> None:
    """In a small W2 every variant delivers the 40 visible tokens and nothing it must not."""
    wl = w2_subgraphs.build(40)
    items = asyncio.run(asyncio.wait_for(_run_once(wl, record_runner(variant, wl)), 30.0))
    sanity = score(wl, variant, items)
    assert sanity.problems == []
    assert sanity.visible_tokens == 40
    expected_internal = 120 if variant in ("raw", "raw_aa") else 0
    assert sanity.internal_tokens == expected_internal
