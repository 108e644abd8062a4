"""Smoke test of the benchmarks' correctness columns (never a time).

Runs the correctness corpus through `benchmarks.corpus.check`, the code
`python -m benchmarks --quick` runs, and the sanity scoring of one small workload.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from benchmarks import corpus, egress, w2_subgraphs, w3_history
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


# -- the other ways out: astream_events, state reads, chat encoders ---------------------------


def test_egress_astream_events_delivers_the_visible_tokens_and_no_internal_one() -> None:
    """Enforced astream_events(v2) on a small W2: 40 visible tokens, no internal token or marker."""
    wl = w2_subgraphs.build(40)
    scores, problems = asyncio.run(asyncio.wait_for(egress.check_events(wl), 30.0))
    assert problems == []
    assert (scores["lgv"]["visible"], scores["lgv"]["internal"], scores["lgv"]["markers"]) == (
        40,
        0,
        0,
    )


def test_egress_astream_events_oracle_sees_the_raw_graph_leak() -> None:
    """Control: the same oracle counts raw astream_events' 120 internal tokens and markers."""
    wl = w2_subgraphs.build(40)
    scores, _ = asyncio.run(asyncio.wait_for(egress.check_events(wl), 30.0))
    assert scores["raw"]["internal"] == 120
    assert scores["raw"]["markers"] > 0


def test_egress_state_reads_redact_internal_history_and_keep_the_rest() -> None:
    """aget_state / aget_state_history(limit=10) of an enforced graph drop exactly the internal
    history messages the raw reads hold, and keep every visible one."""
    wl = w3_history.build(10, 200)

    async def go() -> tuple[dict[str, Any], list[str]]:
        config = await egress._seed_thread(wl)
        return await egress.check_state(wl, config)

    scores, problems = asyncio.run(asyncio.wait_for(go(), 30.0))
    assert problems == []
    state, hist = scores["aget_state"], scores["aget_state_history"]
    assert state["lgv"] == {"snapshots": 1, "internal_messages": 0, "visible_messages": 199}
    assert state["raw"]["internal_messages"] == 5
    assert hist["lgv"]["internal_messages"] == 0
    assert hist["lgv"]["snapshots"] == hist["raw"]["snapshots"] == 10
    assert hist["lgv"]["visible_messages"] == hist["raw"]["visible_messages"]


def test_egress_encoders_send_every_visible_token_and_no_internal_content() -> None:
    """Our SSE, the AI SDK stream and AG-UI over a small enforced W2: 40 text frames each, no
    frame with the internal marker."""
    wl = w2_subgraphs.build(40)
    names = ["sse", "aisdk", "agui"]
    scores, problems = asyncio.run(asyncio.wait_for(egress.check_encoders(wl, names), 30.0))
    assert problems == []
    assert [(scores[n]["text_frames"], scores[n]["internal"]) for n in names] == [(40, 0)] * 3


def test_egress_encoder_oracle_catches_a_leaky_graph() -> None:
    """Control: the encoder check run over the raw graph finds the internal marker."""
    wl = w2_subgraphs.build(40)
    wl._lgv_graph = wl.graph  # a "wrapper" that lets everything through
    scores, problems = asyncio.run(asyncio.wait_for(egress.check_encoders(wl, ["sse"]), 30.0))
    assert scores["sse"]["internal"] > 0
    assert any("internal marker" in p for p in problems)
