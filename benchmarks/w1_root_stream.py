"""W1: one root node streaming N visible tokens (default 2000); nothing is internal.

The cost of enforcement on a purely visible stream: every token is user-visible, so a
source-side decision can save nothing and must add (almost) nothing.
"""

from __future__ import annotations

from langchain_core.messages import HumanMessage

from benchmarks._graphs import Workload, single_node_graph
from benchmarks.chain import ChainConfig

__all__ = ["DEFAULT_TOKENS", "build"]

DEFAULT_TOKENS = 2000


def build(n_tokens: int = DEFAULT_TOKENS) -> Workload:
    """W1 with `n_tokens` visible tokens."""
    graph, saver, models = single_node_graph(n_tokens)
    return Workload(
        name=f"W1-N{n_tokens}",
        family="W1",
        graph=graph,
        saver=saver,
        # Nothing in W1 is internal; with_visibility refuses patterns that name no node.
        policy_kwargs={"internal": [], "user_visible": [], "default": "user_visible"},
        chain_config=ChainConfig(custom_only_subgraphs=frozenset({"editor_subgraph", "planner"})),
        make_input=lambda: {"messages": [HumanMessage("hi")], "artifacts": {}},
        visible_tokens=n_tokens,
        internal_tokens=0,
        visible_custom=0,
        internal_paths=("planner", "scenario_gen", "compiler"),
        n_tokens=n_tokens,
        models=models,
    )
