"""W2: three subgraphs each making an internal JSON-ish call, then a visible root answer.

`planner -> scenario_gen -> compiler -> respond`; N tokens per internal call (default 500)
and N visible tokens. `stream_mode=["messages", "custom", "values"]`, `subgraphs=True`,
`version="v2"`. Each subgraph also writes two `custom` progress events: explicit pushes the
user sees (lg_visibility passes custom events unless `filter_custom=True`), which
`subgraphs=False` loses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from langchain_core.messages import HumanMessage

from benchmarks._graphs import Workload, build_pipeline
from benchmarks.chain import ChainConfig

__all__ = ["CHAIN_CONFIG", "DEFAULT_TOKENS", "POLICY", "build", "pipeline_workload"]

DEFAULT_TOKENS = 500
POLICY: dict[str, Any] = {
    "internal": ["planner", "scenario_gen", "compiler"],
    "user_visible": [],
    "default": "user_visible",
}
CHAIN_CONFIG = ChainConfig(custom_only_subgraphs=frozenset({"editor_subgraph", "planner"}))


def _hi() -> dict[str, Any]:
    return {"messages": [HumanMessage("hi")], "artifacts": {}}


def pipeline_workload(
    name: str,
    family: str,
    n_tokens: int,
    *,
    make_input: Callable[[], dict[str, Any]] = _hi,
    depth: int = 1,
    network: bool = False,
    consumer: Literal["count", "sse"] = "count",
) -> Workload:
    """A workload on W2's pipeline (W2-W5 differ in input, depth, models and consumer)."""
    graph, saver, internal, models = build_pipeline(n_tokens, depth=depth, network=network)
    return Workload(
        name=name,
        family=family,
        graph=graph,
        saver=saver,
        policy_kwargs=POLICY,
        chain_config=CHAIN_CONFIG,
        make_input=make_input,
        visible_tokens=n_tokens,
        internal_tokens=3 * n_tokens,
        visible_custom=6,
        internal_paths=internal,
        n_tokens=n_tokens,
        models=models,
        consumer=consumer,
    )


def build(n_tokens: int = DEFAULT_TOKENS) -> Workload:
    """W2 with `n_tokens` tokens per call (3 internal calls, 1 visible)."""
    return pipeline_workload(f"W2-N{n_tokens}", "W2", n_tokens)
