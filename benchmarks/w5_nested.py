"""W5: W2 with each internal call nested three subgraphs deep.

`planner/l3/l2/work` (and the same under scenario_gen and compiler): the internal LLM
runs three graph levels below the root, so every decision and every snapshot namespace
has three segments.
"""

from __future__ import annotations

from langchain_core.messages import HumanMessage

from benchmarks._graphs import Workload, build_pipeline
from benchmarks.w2_subgraphs import CHAIN_CONFIG, POLICY

__all__ = ["DEFAULT_TOKENS", "build"]

DEFAULT_TOKENS = 500


def build(n_tokens: int = DEFAULT_TOKENS) -> Workload:
    """W5 with `n_tokens` tokens per call, three subgraph levels deep."""
    graph, saver, internal, models = build_pipeline(n_tokens, depth=3)
    return Workload(
        name=f"W5-N{n_tokens}",
        family="W5",
        graph=graph,
        saver=saver,
        policy_kwargs=POLICY,
        chain_config=CHAIN_CONFIG,
        make_input=lambda: {"messages": [HumanMessage("hi")], "artifacts": {}},
        visible_tokens=n_tokens,
        internal_tokens=3 * n_tokens,
        visible_custom=6,
        internal_paths=internal,
        n_tokens=n_tokens,
        models=models,
    )
