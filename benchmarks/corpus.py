"""Correctness corpus: cases where the handler-side heuristics are known to fail.

Every output in a scenario carries a unique marker. Internal outputs must never reach the
user (a *leak* is an internal marker anywhere in what the variant shows); user-visible
outputs must reach the user on their channel (a *false drop* is a visible marker that
never arrives: a streamed answer must arrive as streamed tokens, an interrupt as an
interrupt). Node code writes only parsed fields to state, never raw model text, so a hit
means the raw output leaked.

What a variant "shows": for raw, subgraphs=False and lg_visibility, every part `astream`
yields (token and whole-message text including tool-call arguments, custom payloads,
messages and other fields of `values` snapshots, interrupts); for the chain, what the
chain emits. Models are `lg_visibility.testing.FakeChatModel`, which streams
whitespace-preserving word tokens and tool-call chunks through LangChain's callbacks and
works with `create_agent(response_format=...)`.

Scenarios (most end in a visible root answer `respond`, a control marked ROOTOK<n>):

- router_json: internal structured output whose first chunk is "\\n", not "{" (RTRJSON)
- export_json: a user-visible answer that is JSON because the user asked for JSON,
  streamed in a subgraph (EXPVISIBLE)
- tool_agent: an internal create_agent with a tool: tool-call args (TOOLARGS), the
  ToolMessage (TOOLRESULT), the agent's final text (AGENTFINAL)
- shared_state_note: internal prose LLM output written into the shared `messages`
  (KNWNOTE)
- agent_as_node: an internal create_agent added as a node; its structured JSON lands in
  the shared `messages` (KNWJSON)
- answer_in_subgraph: a user-visible answer streamed inside a subgraph (SUBVISIBLE)
- interrupt_in_subgraph: an internal draft (HITLDRAFT), then an interrupt from that
  internal subgraph (HITLQ)
- summary_heading: a user-visible answer with a "## SUMMARY" heading (the user asked for
  a summary) (RESPSUMMARY)
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from pydantic import BaseModel

from benchmarks._graphs import BENCH_KEYS, BenchState
from benchmarks.chain import ChainConfig, HandlerSideChain, text_content

__all__ = [
    "CORPUS_VARIANTS",
    "EXPECTED",
    "SCENARIOS",
    "CaseResult",
    "Scenario",
    "Source",
    "check",
    "mismatches",
    "run_corpus",
    "totals",
]

CORPUS_VARIANTS = ("raw", "nosub", "chain", "chain_ns", "lgv")
MODES = ["messages", "custom", "values"]
CHAIN_CONFIG = ChainConfig(custom_only_subgraphs=frozenset({"editor_subgraph", "planner"}))


@dataclass(frozen=True)
class Source:
    """One output of a scenario, with the ground truth for it."""

    case: str
    marker: str
    visibility: Literal["internal", "user_visible"]
    channel: Literal["any", "stream", "interrupt"] = "any"


@dataclass
class Scenario:
    name: str
    build: Callable[[], Any]
    policy: dict[str, Any]
    internal_subgraphs: tuple[str, ...]
    sources: tuple[Source, ...]


@dataclass
class CaseResult:
    scenario: str
    variant: str
    source: Source
    outcome: Literal["ok", "leak", "false_drop", "not_streamed"]
    where: list[str] = field(default_factory=list)


# -- models -------------------------------------------------------------------------------


def _model(*responses: Any, structured: bool = False) -> Any:
    from lg_visibility.testing import FakeChatModel

    return FakeChatModel(
        responses=list(responses),
        profile={"structured_output": True} if structured else None,
    )


def _respond(text: str) -> Callable[..., Any]:
    llm = _model(text)

    async def respond(state: BenchState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [await llm.ainvoke(state["messages"], config)]}

    return respond


def _root(sub_name: str, sub: Any, answer: str | None) -> Any:
    builder = StateGraph(BenchState)
    builder.add_node(sub_name, sub)
    builder.add_edge(START, sub_name)
    if answer is None:
        builder.add_edge(sub_name, END)
    else:
        builder.add_node("respond", _respond(answer))
        builder.add_edge(sub_name, "respond")
        builder.add_edge("respond", END)
    return builder.compile(checkpointer=InMemorySaver())


def _sub(node: str, fn: Any) -> Any:
    builder = StateGraph(BenchState)
    builder.add_node(node, fn)
    builder.add_edge(START, node)
    builder.add_edge(node, END)
    return builder.compile()


def _strip(text: str, *markers: str) -> str:
    for marker in markers:
        text = text.replace(marker, "")
    return text


# -- scenarios ------------------------------------------------------------------------------


class Route(BaseModel):
    scenarios: list[str]
    note: str


class KnowledgeQuery(BaseModel):
    normalized_question: str


def _router_json() -> Any:
    from langchain.agents import create_agent

    agent = create_agent(
        _model('\n{"scenarios": ["billing"], "note": "RTRJSON"}', structured=True),
        tools=[],
        response_format=Route,
        name="router_agent",
    )

    async def route(state: BenchState, config: RunnableConfig) -> dict[str, Any]:
        result = await agent.ainvoke({"messages": [HumanMessage("route this")]}, config)
        return {"artifacts": {"scenario": result["structured_response"].scenarios[0]}}

    return _root("router_subgraph", _sub("route", route), "Billing it is ROOTOK1.")


def _export_json() -> Any:
    llm = _model('{"invoice": 42, "status": "paid", "ref": "EXPVISIBLE"}')

    async def format_json(state: BenchState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [await llm.ainvoke(state["messages"], config)]}

    return _root("export_subgraph", _sub("format_json", format_json), "Export ready ROOTOK2.")


@tool
def search(query: str) -> str:
    """Search the ledger."""
    return "TOOLRESULT 42 rows"


def _tool_agent() -> Any:
    from langchain.agents import create_agent

    agent = create_agent(
        _model(
            AIMessage(
                "",
                tool_calls=[{"name": "search", "args": {"query": "TOOLARGS q3"}, "id": "call_c3"}],
            ),
            "AGENTFINAL found 42 rows",
        ),
        tools=[search],
        name="research_agent",
    )

    async def research(state: BenchState, config: RunnableConfig) -> dict[str, Any]:
        result = await agent.ainvoke({"messages": [HumanMessage("research")]}, config)
        rows = _strip(text_content(result["messages"][-1].content), "AGENTFINAL")
        return {"artifacts": {"rows": rows.split()[-2]}}

    return _root("research_subgraph", _sub("research", research), "42 rows ROOTOK3.")


def _shared_state_note() -> Any:
    llm = _model("Internal reflection KNWNOTE: the user seems to be in a hurry.")

    async def reflect(state: BenchState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [await llm.ainvoke(state["messages"], config)]}

    return _root("reflect_subgraph", _sub("reflect", reflect), "Sure, quickly ROOTOK4.")


def _agent_as_node() -> Any:
    from langchain.agents import create_agent

    agent = create_agent(
        _model('{"normalized_question": "KNWJSON invoices q3"}', structured=True),
        tools=[],
        response_format=KnowledgeQuery,
        name="knowledge_agent",
    )
    builder = StateGraph(BenchState)
    builder.add_node("knowledge_agent", agent)
    builder.add_edge(START, "knowledge_agent")
    builder.add_edge("knowledge_agent", END)
    return _root("knowledge_subgraph", builder.compile(), "Here is what I found ROOTOK5.")


def _answer_in_subgraph() -> Any:
    llm = _model("SUBVISIBLE the answer is forty-two.")

    async def answer(state: BenchState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [await llm.ainvoke(state["messages"], config)]}

    builder = StateGraph(BenchState)
    builder.add_node("answer_subgraph", _sub("answer", answer))
    builder.add_edge(START, "answer_subgraph")
    builder.add_edge("answer_subgraph", END)
    return builder.compile(checkpointer=InMemorySaver())


def _interrupt_in_subgraph() -> Any:
    llm = _model("HITLDRAFT plan: refund the second invoice.")

    async def draft(state: BenchState, config: RunnableConfig) -> dict[str, Any]:
        plan = await llm.ainvoke(state["messages"], config)
        answer = interrupt({"question": "HITLQ approve the plan?"})
        return {"artifacts": {"plan_len": len(text_content(plan.content)), "answer": answer}}

    return _root("approval_subgraph", _sub("draft", draft), "Done ROOTOK7.")


def _summary_heading() -> Any:
    builder = StateGraph(BenchState)
    builder.add_node(
        "respond", _respond("## SUMMARY\nRESPSUMMARY both invoices are paid.\n## DETAILS\nnone")
    )
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)
    return builder.compile(checkpointer=InMemorySaver())


def _visible(case: str, marker: str, channel: Any = "stream") -> Source:
    return Source(case, marker, "user_visible", channel)


def _internal(case: str, marker: str) -> Source:
    return Source(case, marker, "internal")


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "router_json",
        _router_json,
        {"internal": ["router_subgraph"]},
        ("router_subgraph",),
        (
            _internal("structured-output JSON, first chunk not '{'", "RTRJSON"),
            _visible("root answer (control)", "ROOTOK1"),
        ),
    ),
    Scenario(
        "export_json",
        _export_json,
        {"internal": []},
        (),
        (
            _visible("visible answer that starts with '{' (user asked for JSON)", "EXPVISIBLE"),
            _visible("root answer (control)", "ROOTOK2"),
        ),
    ),
    Scenario(
        "tool_agent",
        _tool_agent,
        {"internal": ["research_subgraph"]},
        ("research_subgraph",),
        (
            _internal("internal tool-call args", "TOOLARGS"),
            _internal("internal ToolMessage", "TOOLRESULT"),
            _internal("internal agent's final text", "AGENTFINAL"),
            _visible("root answer (control)", "ROOTOK3"),
        ),
    ),
    Scenario(
        "shared_state_note",
        _shared_state_note,
        {"internal": ["reflect_subgraph"]},
        ("reflect_subgraph",),
        (
            _internal("internal prose message written into shared `messages`", "KNWNOTE"),
            _visible("root answer (control)", "ROOTOK4"),
        ),
    ),
    Scenario(
        "agent_as_node",
        _agent_as_node,
        {"internal": ["knowledge_subgraph"]},
        ("knowledge_subgraph",),
        (
            _internal("internal agent-as-node JSON in shared `messages`", "KNWJSON"),
            _visible("root answer (control)", "ROOTOK5"),
        ),
    ),
    Scenario(
        "answer_in_subgraph",
        _answer_in_subgraph,
        {"internal": []},
        (),
        (_visible("visible answer streamed inside a subgraph", "SUBVISIBLE"),),
    ),
    Scenario(
        "interrupt_in_subgraph",
        _interrupt_in_subgraph,
        {"internal": ["approval_subgraph"]},
        ("approval_subgraph",),
        (
            _internal("internal draft before the interrupt", "HITLDRAFT"),
            _visible("interrupt from an (internal) subgraph", "HITLQ", "interrupt"),
        ),
    ),
    Scenario(
        "summary_heading",
        _summary_heading,
        {"internal": []},
        (),
        (_visible("visible answer with a '## SUMMARY' heading", "RESPSUMMARY"),),
    ),
)

# Outcomes measured for the variants that do not depend on lg_visibility, per
# (scenario, marker); anything not listed is "ok". `--quick` and the smoke test check that
# the measurement still equals this table (lg_visibility must be "ok" everywhere).
#   leak          an internal marker reached the user
#   false_drop    a visible marker never reached the user on its channel
#   not_streamed  a visible answer reached the user only as a whole message, not as tokens
_RAW_LEAKS = {
    ("router_json", "RTRJSON"): "leak",
    ("tool_agent", "TOOLARGS"): "leak",
    ("tool_agent", "TOOLRESULT"): "leak",
    ("tool_agent", "AGENTFINAL"): "leak",
    ("shared_state_note", "KNWNOTE"): "leak",
    ("agent_as_node", "KNWJSON"): "leak",
    ("interrupt_in_subgraph", "HITLDRAFT"): "leak",
}
EXPECTED: dict[str, dict[tuple[str, str], str]] = {
    # everything streams, nothing is judged
    "raw": _RAW_LEAKS,
    # the parent node re-emits what a subgraph wrote to the shared `messages` as a whole
    # message, root snapshots carry it, and answers streamed in subgraphs lose their tokens
    "nosub": {
        ("export_json", "EXPVISIBLE"): "not_streamed",
        ("shared_state_note", "KNWNOTE"): "leak",
        ("agent_as_node", "KNWJSON"): "leak",
        ("answer_in_subgraph", "SUBVISIBLE"): "not_streamed",
    },
    "chain": {
        # step 5 and 7 see "\n" first; the id goes visible, the values handler re-emits
        ("router_json", "RTRJSON"): "leak",
        # step 7 drops the legitimate JSON answer (non-response subgraph node, starts "{")
        ("export_json", "EXPVISIBLE"): "false_drop",
        # tool-call chunks have empty content, so no content rule sees them
        ("tool_agent", "TOOLARGS"): "leak",
        # steps 4-7 look at chunks only; a ToolMessage passes step 3
        ("tool_agent", "TOOLRESULT"): "leak",
        # prose from an internal subgraph: no content rule matches
        ("tool_agent", "AGENTFINAL"): "leak",
        ("shared_state_note", "KNWNOTE"): "leak",
        ("interrupt_in_subgraph", "HITLDRAFT"): "leak",
        # step 6 cuts the stream after "## "; the values handler re-emits the whole message
        ("summary_heading", "RESPSUMMARY"): "not_streamed",
    },
    # the chain, with every internal subgraph of the scenario registered in step 4: the
    # same knowledge as the policy, still guessing per chunk
    "chain_ns": {
        ("export_json", "EXPVISIBLE"): "false_drop",
        ("tool_agent", "TOOLRESULT"): "leak",
        ("summary_heading", "RESPSUMMARY"): "not_streamed",
    },
}


# -- rendering what a variant shows -----------------------------------------------------------


@dataclass
class _Shown:
    streamed: dict[str, str] = field(default_factory=dict)  # message id -> token text
    texts: dict[str, list[str]] = field(default_factory=dict)  # channel -> texts
    interrupts: list[str] = field(default_factory=list)

    def add(self, channel: str, text: str) -> None:
        self.texts.setdefault(channel, []).append(text)


def _message_text(message: BaseMessage) -> str:
    parts = [text_content(message.content)]
    for call in getattr(message, "tool_calls", None) or ():
        parts.append(json.dumps(call.get("args", {})))
    for piece in getattr(message, "tool_call_chunks", None) or ():
        parts.append(piece.get("args") or "")
    return "".join(parts)


def _render_part(shown: _Shown, part: Mapping[str, Any]) -> None:
    kind = part["type"]
    if kind == "messages":
        message, _ = part["data"]
        text = _message_text(message)
        if type(message).__name__.endswith("Chunk"):
            key = str(message.id)
            shown.streamed[key] = shown.streamed.get(key, "") + text
        else:
            shown.add("message", text)
    elif kind == "custom":
        shown.add("custom", repr(part["data"]))
    elif kind == "values":
        data = part["data"]
        if isinstance(data, dict):
            for key, value in data.items():
                if key == "messages":
                    for message in value or ():
                        shown.add("values", _message_text(message))
                else:
                    shown.add("values", repr(value))
        for item in part.get("interrupts") or ():
            shown.interrupts.append(repr(item.value))
    else:
        shown.add(kind, repr(part["data"]))


def _render_emit(shown: _Shown, item: tuple[str, Any, Any, Any]) -> None:
    kind, _, payload, _ = item
    if kind == "append":
        key = str(payload.id)
        shown.streamed[key] = shown.streamed.get(key, "") + _message_text(payload)
    elif kind in ("update", "tool_result"):
        shown.add(kind, _message_text(payload))
    elif kind == "interrupt":
        shown.interrupts.append(repr(payload.value))
    else:
        shown.add(kind, repr(payload))


def _judge(shown: _Shown, source: Source) -> tuple[str, list[str]]:
    where = [f"stream:{mid[-8:]}" for mid, text in shown.streamed.items() if source.marker in text]
    where += [ch for ch, texts in shown.texts.items() if any(source.marker in t for t in texts)]
    if any(source.marker in t for t in shown.interrupts):
        where.append("interrupt")
    if source.visibility == "internal":
        return ("leak" if where else "ok"), where
    if not where or (source.channel == "interrupt" and "interrupt" not in where):
        return "false_drop", where
    if source.channel == "stream" and not any(w.startswith("stream:") for w in where):
        return "not_streamed", where
    return "ok", where


# -- running ----------------------------------------------------------------------------------


async def _run_scenario(scenario: Scenario, variant: str, timeout: float) -> _Shown:
    graph = scenario.build()
    if variant == "lgv":
        from lg_visibility import VisibilityPolicy, with_visibility

        policy = VisibilityPolicy(user_visible_keys=BENCH_KEYS, **scenario.policy)
        graph = with_visibility(graph, policy)
    config = {"configurable": {"thread_id": f"corpus-{uuid.uuid4().hex}"}}
    kwargs = {"stream_mode": MODES, "version": "v2", "subgraphs": variant != "nosub"}
    shown = _Shown()
    chain = None
    if variant in ("chain", "chain_ns"):
        cfg = CHAIN_CONFIG
        if variant == "chain_ns":
            cfg = cfg.with_subgraphs(scenario.internal_subgraphs)
        chain = HandlerSideChain(cfg, lambda item: _render_emit(shown, item))

    async def consume() -> None:
        async for part in graph.astream({"messages": [HumanMessage("hi")]}, config, **kwargs):
            if chain is not None:
                chain.feed(part)
            else:
                _render_part(shown, part)

    await asyncio.wait_for(consume(), timeout)
    return shown


async def run_corpus(
    variants: Sequence[str] = CORPUS_VARIANTS, *, timeout: float = 30.0
) -> list[CaseResult]:
    """Run every scenario under every variant; one result per (variant, source)."""
    results = []
    for scenario in SCENARIOS:
        for variant in variants:
            shown = await _run_scenario(scenario, variant, timeout)
            for source in scenario.sources:
                outcome, where = _judge(shown, source)
                results.append(CaseResult(scenario.name, variant, source, outcome, where))  # type: ignore[arg-type]
    return results


def totals(results: Sequence[CaseResult]) -> dict[str, dict[str, int]]:
    """Per variant: leaks, false drops, answers not streamed, and how many sources were judged."""
    out: dict[str, dict[str, int]] = {}
    for r in results:
        t = out.setdefault(
            r.variant,
            {
                "leaks": 0,
                "false_drops": 0,
                "not_streamed": 0,
                "internal_sources": 0,
                "visible_sources": 0,
            },
        )
        t["internal_sources" if r.source.visibility == "internal" else "visible_sources"] += 1
        if r.outcome == "leak":
            t["leaks"] += 1
        elif r.outcome == "false_drop":
            t["false_drops"] += 1
        elif r.outcome == "not_streamed":
            t["not_streamed"] += 1
    return out


def mismatches(results: Sequence[CaseResult]) -> list[str]:
    """Differences from `EXPECTED` (and any lg_visibility leak or false drop)."""
    problems = []
    for r in results:
        key = (r.scenario, r.source.marker)
        if r.variant == "lgv":
            if r.outcome != "ok":
                problems.append(f"lgv {r.outcome}: {r.scenario}/{r.source.marker} via {r.where}")
            continue
        expected = EXPECTED.get(r.variant, {}).get(key, "ok")
        if r.outcome != expected:
            problems.append(
                f"{r.variant}: {r.scenario}/{r.source.marker} measured {r.outcome}, "
                f"expected {expected} (via {r.where})"
            )
    return problems


async def check(
    variants: Sequence[str] = CORPUS_VARIANTS, *, timeout: float = 30.0
) -> tuple[list[CaseResult], dict[str, dict[str, int]], list[str]]:
    """What `python -m benchmarks --quick` and the smoke test run: results, totals, problems."""
    results = await run_corpus(variants, timeout=timeout)
    return results, totals(results), mismatches(results)
