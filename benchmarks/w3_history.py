"""W3: W2 with 2000 earlier messages in state (the cost of redacting snapshots).

The history is passed as input on a fresh thread. One assistant message in 20 is an
internal message persisted by an earlier turn (tagged internal), so every root `values`
snapshot has something to redact.
"""

from __future__ import annotations

from langchain_core.messages import HumanMessage

from benchmarks._graphs import Workload, build_pipeline, history
from benchmarks.w2_subgraphs import CHAIN_CONFIG, POLICY

__all__ = ["DEFAULT_HISTORY", "DEFAULT_TOKENS", "build"]

DEFAULT_TOKENS = 500
DEFAULT_HISTORY = 2000


def build(n_tokens: int = DEFAULT_TOKENS, n_history: int = DEFAULT_HISTORY) -> Workload:
    """W3 with `n_history` prior messages and `n_tokens` tokens per call."""
    graph, saver, internal, models = build_pipeline(n_tokens)
    prior = history(n_history)

    def make_input() -> dict[str, object]:
        return {"messages": [*prior, HumanMessage("hi", id="h-now")], "artifacts": {}}

    return Workload(
        name=f"W3-N{n_tokens}-H{n_history}",
        family="W3",
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
    )
