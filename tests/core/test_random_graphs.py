"""Property test: on random graphs, policies and mode sets, the enforced stream is the raw
stream minus internal events (internal messages and tool calls redacted), in the same order
within each mode, with no internal marker anywhere and nothing visible lost.

LGV_RANDOM_EXAMPLES (default 40) sets how many seeds run, LGV_RANDOM_SEED (default 0) the
first one; LGV_RANDOM_FEATURES (comma-separated, default all) restricts the generator.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from lg_visibility import VisibilityPolicy, with_visibility
from tests._support.random_graphs import (
    ALL_FEATURES,
    Rules,
    check_example,
    describe,
    event_parts,
    expected_stream,
    make_example,
    run_stream,
)

FIRST = int(os.environ.get("LGV_RANDOM_SEED", "0"))
COUNT = int(os.environ.get("LGV_RANDOM_EXAMPLES", "40"))
FEATURES = (
    frozenset(os.environ["LGV_RANDOM_FEATURES"].split(","))
    if os.environ.get("LGV_RANDOM_FEATURES")
    else ALL_FEATURES
)


# Seeds beyond the first COUNT that showed defects on main at a51e37f: 65, 68 (A: a prompt
# passed into an invoked subgraph), 75 (D+F: a summed LCEL answer), 123 (F: leak).
# 45: a tools event of an internal tools node raced the tool run's own decision.
REGRESSION_SEEDS = [45, 65, 68, 75, 123] if "LGV_RANDOM_SEED" not in os.environ else []
SEEDS = sorted(set(range(FIRST, FIRST + COUNT)) | set(REGRESSION_SEEDS))


@pytest.mark.parametrize("seed", SEEDS)
def test_random_graph_enforced_stream_matches_oracle(seed: int) -> None:
    """A seeded random graph's enforced stream is its raw stream minus internal output."""
    ex = make_example(seed, FEATURES)
    problems = check_example(ex, with_visibility)
    assert problems == [], describe(ex) + "\n" + "\n".join(problems)


def _raw_passed_off(graph: Any, policy: VisibilityPolicy) -> Any:
    return graph


class _DropsMessages:
    """The enforced graph, with every `messages` event thrown away (a false-drop control)."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph

    def _keep(self, item: Any, kw: dict[str, Any]) -> bool:
        mode = kw["stream_mode"]
        return event_parts(item, mode, kw["subgraphs"], kw["version"])[1] != "messages"

    def stream(self, value: Any, config: Any, **kw: Any) -> Any:
        return (i for i in self.graph.stream(value, config, **kw) if self._keep(i, kw))

    async def astream(self, value: Any, config: Any, **kw: Any) -> Any:
        async for item in self.graph.astream(value, config, **kw):
            if self._keep(item, kw):
                yield item


def _drops_everything(graph: Any, policy: VisibilityPolicy) -> Any:
    return _DropsMessages(with_visibility(graph, policy))


def test_random_oracle_flags_a_leaky_wrapper() -> None:
    """The raw graph passed off as enforced fails the check wherever it shows internal output."""
    flagged = 0
    for seed in range(12):
        ex = make_example(seed)
        raw = run_stream(ex.build().compile(checkpointer=InMemorySaver()), ex)
        text = "\n".join(repr(p) for _, _, p in raw)
        if not any(m in text for m in ex.truth.internal_markers):
            continue
        problems = check_example(ex, _raw_passed_off)
        assert problems and problems[0].startswith("leak: "), describe(ex)
        assert any("stream differs" in p for p in problems)
        flagged += 1
    assert flagged >= 6


def test_random_oracle_flags_a_wrapper_that_drops_visible_output() -> None:
    """A wrapper dropping visible messages fails the check wherever visible output was expected."""
    flagged = 0
    for seed in range(12):
        ex = make_example(seed)
        raw = run_stream(ex.build().compile(checkpointer=InMemorySaver()), ex)
        expected = expected_stream(ex.truth, raw)
        text = "\n".join(repr(p) for _, m, p in expected if m == "messages")
        if not any(m in text for m in ex.truth.visible_markers):
            continue
        problems = check_example(ex, _drops_everything)
        assert any(p.startswith("messages stream differs") for p in problems), describe(ex)
        flagged += 1
    assert flagged >= 3


def test_ground_truth_reads_patterns_as_the_readme_says() -> None:
    """The generator's own pattern reading: longest prefix, then literals, then internal."""
    rules = Rules(
        internal=["a", "x/*/secret", "t"],
        user_visible=["a/b", "a/**", "x/**/secret", "*"],
    )
    assert rules.for_path("a/c") == "internal"  # `a/**` is `a`: a tie at length 1 -> internal
    assert rules.for_path("a/b/c") == "user_visible"  # the longest prefix wins
    assert rules.for_path("x/y/secret") == "internal"  # equal length and literals: internal
    assert rules.for_path("t/z") == "internal"  # `t` beats `*` by its literal
    assert rules.for_path("q") == "user_visible"
    assert Rules(default="internal").for_path("q") == "internal"
