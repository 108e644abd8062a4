"""W3: W2 with 2000 earlier messages in state (the cost of redacting snapshots).

The history is passed as input on a fresh thread. One assistant message in 20 is an
internal message persisted by an earlier turn (tagged internal), so every root `values`
snapshot has something to redact.
"""

from __future__ import annotations

from langchain_core.messages import HumanMessage

from benchmarks._graphs import Workload, history
from benchmarks.w2_subgraphs import pipeline_workload

__all__ = ["DEFAULT_HISTORY", "DEFAULT_TOKENS", "build"]

DEFAULT_TOKENS = 500
DEFAULT_HISTORY = 2000


def build(n_tokens: int = DEFAULT_TOKENS, n_history: int = DEFAULT_HISTORY) -> Workload:
    """W3 with `n_history` prior messages and `n_tokens` tokens per call."""
    prior = history(n_history)

    def make_input() -> dict[str, object]:
        return {"messages": [*prior, HumanMessage("hi", id="h-now")], "artifacts": {}}

    return pipeline_workload(f"W3-N{n_tokens}-H{n_history}", "W3", n_tokens, make_input=make_input)
