"""Property test: on random graphs, policies and mode sets, the enforced stream is the raw
stream minus internal events (internal messages and tool calls redacted), in the same order
within each mode, with no internal marker anywhere and nothing visible lost.

LGV_RANDOM_EXAMPLES (default 40) sets how many seeds run, LGV_RANDOM_SEED (default 0) the
first one; LGV_RANDOM_FEATURES (comma-separated, default all) restricts the generator.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from lg_visibility import VisibilityPolicy, with_visibility
from tests._support.random_graphs import (
    ALL_FEATURES,
    Rules,
    check_cached_example,
    check_events,
    check_example,
    check_state_reads,
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


def test_random_oracle_flags_in_place_appends_left_untagged_or_unheld(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where a root node appends to its input's list in place (`in_place`), the check
    fails on the enforced graph with either half of what covers it switched off: the
    node's end tagging what it added, or events holding the state as it was when put; and
    where such a node is visible, with its append taken as internal (a false drop)."""
    from lg_visibility import _wrap
    from lg_visibility._run import INTERNAL, Decider

    def in_place_visible(seed: int) -> list[bool]:
        """For each in-place writer of the seed's graph, whether the generator's own
        ground truth makes its output visible."""
        ex = make_example(seed)
        return [
            not ex.truth.marks[int(found.group(1)) - 1].internal
            for line in ex.description
            if " in_place=" in line and " in_place=None " not in line
            if (found := re.search(r" mark=(\d+)", line))
        ]

    seeds = [seed for seed in range(40) if in_place_visible(seed)]
    assert len(seeds) >= 4

    def flagged(seeds: list[int] = seeds) -> int:
        return sum(bool(check_example(make_example(seed), with_visibility)) for seed in seeds)

    assert flagged() == 0
    with monkeypatch.context() as patch:
        patch.setattr(Decider, "_tag_in_place", lambda self, entry: None)
        assert flagged() >= len(seeds) // 2
    with monkeypatch.context() as patch:
        patch.setattr(_wrap, "HELD_MODES", frozenset())
        assert flagged() >= 2
    # (the default 40 seeds have one visible writer; these are the first 10 of 200)
    visible = [seed for seed in range(200) if any(in_place_visible(seed))]
    assert len(visible) >= 10
    tag_in_place = Decider._tag_in_place
    assert flagged(visible) == 0
    with monkeypatch.context() as patch:
        patch.setattr(
            Decider,
            "_tag_in_place",
            lambda self, entry: tag_in_place(self, (INTERNAL, *entry[1:])),
        )
        assert flagged(visible) >= 3


# The node cache: raw and enforced runs of one seed on one shared cache, every root task
# cacheable (`check_cached_example`). Half the seeds: each runs the graph 4 times.
CACHED_SEEDS = SEEDS[: max(1, len(SEEDS) // 2)]


@pytest.mark.parametrize("seed", CACHED_SEEDS)
def test_random_graph_on_a_shared_node_cache_matches_oracle(seed: int) -> None:
    """An enforced run is not answered by the raw graph's cache entries (its stream is the
    raw writer's minus internal output), and an enforced run after it is answered by its
    entries as a raw run is by the raw ones (its stream is the raw reader's minus internal)."""
    ex = make_example(seed, FEATURES)
    hits: dict[str, list[str]] = {}
    problems = check_cached_example(ex, with_visibility, hits=hits)
    assert problems == [], describe(ex) + "\n" + "\n".join(problems)
    assert hits["raw reader"], "the raw reader was answered by no entry"


def test_random_cache_oracle_flags_an_unscoped_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the run's cache handed on unscoped (before the fix), the raw writer's entries
    answer the enforced runs: the check fails on every seed, and finds SECRET markers
    leaving on most. Every reader run was answered by some entry."""
    from lg_visibility import _wrap

    monkeypatch.setattr(_wrap, "with_run_cache", lambda graph, config, *_: (graph, config))
    leaked = flagged = 0
    for seed in range(12):
        ex = make_example(seed)
        hits: dict[str, list[str]] = {}
        problems = check_cached_example(ex, with_visibility, hits=hits)
        assert hits["raw reader"], describe(ex)
        flagged += bool(problems)
        leaked += any(p.startswith("writer: leak: ") for p in problems)
    assert flagged == 12
    assert leaked >= 6


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


# The other ways out, on the same random graphs. Seeds that showed defects: 171 and 183
# (astream_events v2: a visible chain's `on_chain_stream` carried an internal model's chunk).
OTHER_EXIT_SEEDS = sorted(
    set(SEEDS) | ({171, 183} if "LGV_RANDOM_SEED" not in os.environ else set())
)


@pytest.mark.filterwarnings("ignore:astream_events version='v1' is deprecated")
@pytest.mark.parametrize("seed", OTHER_EXIT_SEEDS)
def test_random_graph_state_reads_and_events_match_oracle(seed: int) -> None:
    """After each input, every state read of the thread is the raw read minus internal
    content (judged as a state read can: `check_state_reads`), and `astream_events` of the
    same inputs shows no internal marker and every visible one of the final state."""
    ex = make_example(seed, FEATURES)
    problems = check_state_reads(ex, with_visibility) + check_events(ex, with_visibility)
    assert problems == [], describe(ex) + "\n" + "\n".join(problems)


@pytest.mark.filterwarnings("ignore:astream_events version='v1' is deprecated")
def test_random_state_and_events_oracles_flag_a_leaky_wrapper() -> None:
    """The raw graph passed off as enforced fails both checks wherever its state or events
    hold internal content."""
    flagged_state = flagged_events = 0
    for seed in range(12):
        ex = make_example(seed)
        state = check_state_reads(ex, _raw_passed_off)
        events = check_events(ex, _raw_passed_off)
        flagged_state += any(p.startswith("leak: ") for p in state)
        flagged_events += any(p.startswith("leak: ") for p in events)
    assert flagged_state >= 6 and flagged_events >= 6


class _EmptiesState:
    """The enforced graph, its state reads returning no values (a false-drop control)."""

    def __init__(self, graph: Any) -> None:
        self._graph = graph

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)

    def get_state(self, config: Any, **kw: Any) -> Any:
        return self._graph.get_state(config, **kw)._replace(values={})

    async def aget_state(self, config: Any, **kw: Any) -> Any:
        return (await self._graph.aget_state(config, **kw))._replace(values={})

    def get_state_history(self, config: Any, **kw: Any) -> Any:
        return (s._replace(values={}) for s in self._graph.get_state_history(config, **kw))

    async def aget_state_history(self, config: Any, **kw: Any) -> Any:
        async for s in self._graph.aget_state_history(config, **kw):
            yield s._replace(values={})


def test_random_state_oracle_flags_a_wrapper_that_drops_visible_state() -> None:
    flagged = sum(
        any("differs from raw minus internal" in p for p in check_state_reads(ex, wrap))
        for ex in (make_example(seed) for seed in range(6))
        for wrap in [lambda g, p: _EmptiesState(with_visibility(g, p))]
    )
    assert flagged >= 5
