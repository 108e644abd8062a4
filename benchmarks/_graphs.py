"""The graphs the timing workloads run, and the `Workload` record the harness consumes.

Shape shared by W2-W5 (the perf-baseline's W2): root `planner -> scenario_gen -> compiler
-> respond`. Each of the first three is a compiled subgraph (optionally nested `depth`
levels deep) whose innermost node `work` writes a `custom` progress event, makes one
internal LLM call (JSON-ish tokens), writes a second progress event and stores a parsed
field in `state["artifacts"]` (never the raw text, so the internal marker stays out of
state). `respond` streams the visible answer and appends it to `messages`. Subgraphs share
the root state schema, so their snapshots carry the whole `messages` list, as
`create_agent`-style subgraphs do.

The chain is told what the perf-baseline harness told it: `planner` is a registered
subgraph (step 4), scenario_gen's JSON starts with '{"scenarios":' (step 5) and compiler's
with '{' (step 7), so each subgraph is dropped by a different rule.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from benchmarks._fake import INTERNAL_MARKER, FastStreamingChat, json_tokens, prose_tokens
from benchmarks.chain import ChainConfig

__all__ = [
    "BENCH_KEYS",
    "HISTORY_INTERNAL_MARKER",
    "STAGES",
    "BenchState",
    "Workload",
    "build_pipeline",
    "history",
    "single_node_graph",
]

MODES = ["messages", "custom", "values"]
STAGES = (("planner", '{"plan":'), ("scenario_gen", '{"scenarios":'), ("compiler", '{"program":'))
HISTORY_INTERNAL_MARKER = "INTHIST"
_PROMPT = [HumanMessage("produce the structured step output")]


def _merge(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    return {**(left or {}), **(right or {})}


class BenchState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    artifacts: Annotated[dict[str, Any], _merge]
    steps: Annotated[int, operator.add]


BENCH_KEYS = ["artifacts", "steps"]
"""BenchState's non-message keys: lengths and counts, no content, declared fit to leave."""


@dataclass
class Workload:
    """One timing workload: graphs, inputs, and what the user should see.

    `visible_tokens` is the number of tokens the user should see; `internal_paths` are
    the path prefixes (node names joined by "/") whose output is internal, the ground
    truth the sanity pass scores delivered events against.
    """

    name: str
    family: str
    graph: Any
    saver: InMemorySaver
    policy_kwargs: dict[str, Any]
    chain_config: ChainConfig
    make_input: Callable[[], dict[str, Any]]
    visible_tokens: int
    internal_tokens: int
    visible_custom: int
    internal_paths: tuple[str, ...]
    n_tokens: int
    consumer: Literal["count", "sse"] = "count"
    models: list[FastStreamingChat] = field(default_factory=list)
    note: str = ""
    stream_kwargs: dict[str, Any] = field(
        default_factory=lambda: {"stream_mode": MODES, "version": "v2"}
    )
    _lgv_graph: Any = None

    def lgv_graph(self) -> Any:
        """The same compiled graph wrapped by `with_visibility` (built once, lazily)."""
        if self._lgv_graph is None:
            from lg_visibility import VisibilityPolicy, with_visibility

            policy = VisibilityPolicy(user_visible_keys=BENCH_KEYS, **self.policy_kwargs)
            self._lgv_graph = with_visibility(self.graph, policy)
        return self._lgv_graph

    def set_network(self, network: bool) -> dict[int, bool]:
        """Make every model of the workload network-fed (or not); returns the old settings."""
        old = {id(m): m.network for m in self.models}
        for m in self.models:
            m.network = network
        return old

    def restore_network(self, old: dict[int, bool]) -> None:
        for m in self.models:
            m.network = old[id(m)]

    def new_config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex}"}}

    def cleanup(self, config: dict[str, Any]) -> None:
        """Delete the run's thread so the saver's heap stays flat (outside the timer)."""
        self.saver.delete_thread(config["configurable"]["thread_id"])


def history(n: int, *, internal_every: int = 20) -> list[AnyMessage]:
    """`n` earlier messages: alternating user/assistant turns.

    Every `internal_every`-th assistant message is an internal message persisted by an
    earlier turn (tagged `response_metadata["visibility"] = "internal"`, carrying
    `HISTORY_INTERNAL_MARKER`), so a snapshot redactor has real work on every snapshot.
    """
    out: list[AnyMessage] = []
    for i in range(n):
        if i % 2 == 0:
            out.append(HumanMessage(f"question {i} about invoices", id=f"h-{i}"))
        elif (i // 2) % internal_every == internal_every - 1:
            out.append(
                AIMessage(
                    f'{{"{HISTORY_INTERNAL_MARKER}": {i}}}',
                    id=f"hi-{i}",
                    response_metadata={"visibility": "internal"},
                )
            )
        else:
            out.append(AIMessage(f"answer {i}: the invoice was paid", id=f"a-{i}"))
    return out


def _work_node(stage: str, llm: FastStreamingChat) -> Callable[..., Any]:
    async def work(state: BenchState, config: RunnableConfig) -> dict[str, Any]:
        writer = get_stream_writer()
        writer({"stage": stage, "status": "started"})
        message = await llm.ainvoke(_PROMPT, config)
        writer({"stage": stage, "status": "done"})
        # A parsed field, never the raw text: state must not carry the internal marker.
        text = message.content if isinstance(message.content, str) else ""
        return {"artifacts": {stage: len(text.replace(INTERNAL_MARKER, ""))}, "steps": 1}

    return work


def _nest(inner: Any, names: list[str]) -> Any:
    """Wrap compiled graph `inner` in one more single-node subgraph per name, innermost first."""
    graph = inner
    for name in names:
        builder = StateGraph(BenchState)
        builder.add_node(name, graph)
        builder.add_edge(START, name)
        builder.add_edge(name, END)
        graph = builder.compile()
    return graph


def _respond_node(llm: FastStreamingChat) -> Callable[..., Any]:
    async def respond(state: BenchState, config: RunnableConfig) -> dict[str, Any]:
        message = await llm.ainvoke(state["messages"], config)
        return {"messages": [message]}

    return respond


def build_pipeline(
    n_tokens: int,
    *,
    visible_tokens: int | None = None,
    depth: int = 1,
    network: bool = False,
) -> tuple[Any, InMemorySaver, tuple[str, ...], list[FastStreamingChat]]:
    """W2's graph: three internal subgraph stages, then a visible root `respond`.

    Args:
        n_tokens: tokens per internal call.
        visible_tokens: tokens of the visible answer (default `n_tokens`).
        depth: subgraph levels around each `work` node (1 = W2; 3 = W5).
        network: models sleep(0) per token.

    Returns:
        The compiled graph, its saver, the internal path prefixes and the models.
    """
    saver = InMemorySaver()
    builder = StateGraph(BenchState)
    previous = START
    internal = []
    models = []
    for stage, prefix in STAGES:
        llm = FastStreamingChat(tokens=json_tokens(n_tokens, prefix), network=network)
        models.append(llm)
        inner = StateGraph(BenchState)
        inner.add_node("work", _work_node(stage, llm))
        inner.add_edge(START, "work")
        inner.add_edge("work", END)
        # levels between the stage node and `work`: stage -> l2 -> l3 -> work for depth 3
        sub = _nest(inner.compile(), [f"l{level}" for level in range(depth, 1, -1)])
        builder.add_node(stage, sub)
        builder.add_edge(previous, stage)
        previous = stage
        internal.append(stage)
    answer = FastStreamingChat(
        tokens=prose_tokens(visible_tokens if visible_tokens is not None else n_tokens),
        network=network,
    )
    models.append(answer)
    builder.add_node("respond", _respond_node(answer))
    builder.add_edge(previous, "respond")
    builder.add_edge("respond", END)
    return builder.compile(checkpointer=saver), saver, tuple(internal), models


def single_node_graph(n_tokens: int) -> tuple[Any, InMemorySaver, list[FastStreamingChat]]:
    """W1's graph: one root node streaming `n_tokens` visible tokens."""
    saver = InMemorySaver()
    builder = StateGraph(BenchState)
    llm = FastStreamingChat(tokens=prose_tokens(n_tokens))
    builder.add_node("respond", _respond_node(llm))
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)
    return builder.compile(checkpointer=saver), saver, [llm]
