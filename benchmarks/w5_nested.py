"""W5: W2 with each internal call nested three subgraphs deep.

`planner/l3/l2/work` (and the same under scenario_gen and compiler): the internal LLM
runs three graph levels below the root, so every decision and every snapshot namespace
has three segments.
"""

from __future__ import annotations

from benchmarks._graphs import Workload
from benchmarks.w2_subgraphs import pipeline_workload

__all__ = ["DEFAULT_TOKENS", "build"]

DEFAULT_TOKENS = 500


def build(n_tokens: int = DEFAULT_TOKENS) -> Workload:
    """W5 with `n_tokens` tokens per call, three subgraph levels deep."""
    return pipeline_workload(f"W5-N{n_tokens}", "W5", n_tokens, depth=3)
