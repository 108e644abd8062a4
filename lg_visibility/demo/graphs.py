"""The two seed graphs: the leaking incident graph and the order flow with interrupts.

Both builders return an uncompiled `StateGraph`; every LLM call takes its model from
`model_for(role)`, so one graph runs on the scripted fakes (`fake_models`), on
`ChatOpenAI` against an OpenAI-compatible server (`openai_models`; the role is the OpenAI
`model` name), or on a real model.

Every internal LLM output carries its own marker string and every user-visible output
carries another (see the `*_MARKERS` tuples). Node code strips markers from every parsed
field it copies into other state (`strip_markers`), so a marker reaching a client means raw
LLM output leaked, never that a node passed it on. Run on the raw graph with
`subgraphs=True`, every marker, internal ones included, reaches the stream: these graphs
leak on purpose.

A node path is the node names from the root joined by ``/``. An agent called from inside
a node sits under that node (`router_subgraph/route/model`); an agent added as a node
sits under its own node name (`knowledge_subgraph/knowledge_agent/model`). Each compiled
subgraph is named after the node it is added as. Structured output is requested as an
explicit `ProviderStrategy`, so it is JSON text whatever model `model_for` returns.

Incident graph (`incident_builder`; no checkpointer needed)::

    START -> input_parser_node -> router_subgraph -> knowledge_subgraph
          -> insight_subgraph -> response_node -> END

    node path                                  role              marker       kind
    input_parser_node                          -                 -            -
    router_subgraph/route/model                router            RTRJSON      internal
    knowledge_subgraph/knowledge_agent/model   knowledge         TOOLARGS     internal
                                                                 KNWJSON      internal
    knowledge_subgraph/knowledge_agent/tools   -                 TOOLRESULT   internal
    knowledge_subgraph/expand_queries          expand            KNWINTERNAL  internal
    knowledge_subgraph/answer                  knowledge_answer  SUBVISIBLE   visible
    insight_subgraph/make_cards                insight           INSLLM       internal
    insight_subgraph/make_cards (custom card)  -                 INSCARD      visible
    insight_subgraph/static_card (custom card) -                 INSCARD      visible
    response_node                              response          RESPVISIBLE  visible

- `route` calls `create_agent(..., response_format=ProviderStrategy(Route),
  name="router_agent")` and keeps only the parsed `scenario`: the JSON never reaches
  root state. The fake JSON starts with a newline, so its first token is not ``{``.
- `knowledge_agent` is a compiled `create_agent(..., tools=[search_docs],
  response_format=ProviderStrategy(KnowledgeQuery), name="knowledge_agent")` added as a
  node, so its tool call, `ToolMessage` and JSON answer land in the shared `messages`
  channel (the incident's root `values` leak).
- `expand_queries` calls its model with `config={"tags": ["kn_internal"],
  "metadata": {"purpose": "expand"}}`.
- The cards go out through `get_stream_writer()` as `{"type": "card", ...}` and are also
  appended to the `cards` state key.

Order flow (`order_builder`; compile it with a checkpointer)::

    START -> main_agent -> order_agent -> main_answer -> END
    (main_agent -> main_answer directly if the plan does not delegate)
    order_agent: START -> plan -> lookup -> collect_missing -> approve -> respond -> END

    node path                          role          marker        kind
    main_agent                         main_planner  MAINPLAN      internal
    order_agent/plan                   order_planner ORDERPLAN     internal
    order_agent/lookup/model           order_lookup  ORDERARGS     internal
    order_agent/lookup/tools           -             ORDERRESULT   internal
    order_agent/collect_missing        -             ASKDATA       visible (interrupt)
    order_agent/approve                -             APPROVEQ      visible (interrupt)
    order_agent/respond                order_answer  ORDERVISIBLE  visible
    main_answer                        main_answer   MAINVISIBLE   visible

- `lookup` calls `create_agent(..., tools=[lookup_order], name="order_lookup_agent")`;
  `lookup_order` is `return_direct`, so the agent ends on the `ToolMessage` and the model
  is called once.
- `collect_missing` interrupts with `{"type": "missing_data", "question": "ASKDATA ...",
  "fields": ["phone"]}` when the order has no phone; resume with
  `Command(resume={"phone": "..."})`.
- `approve` interrupts with `{"type": "approval", "summary": "APPROVEQ ..."}`; resume
  with `Command(resume="approve")` or `Command(resume="reject")`.
- `respond` and `main_answer` stream their answers into the shared `messages`.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Literal, TypeAlias, cast

from langchain.agents import create_agent
from langchain.agents.structured_output import ProviderStrategy
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import tool
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from pydantic import BaseModel, Field, SecretStr
from typing_extensions import TypedDict

from lg_visibility.policy import VisibilityPolicy
from lg_visibility.testing import FakeChatModel

__all__ = [
    "FAKE_ROLES",
    "INCIDENT_INTERNAL_MARKERS",
    "INCIDENT_POLICY",
    "INCIDENT_ROLES",
    "INCIDENT_VISIBLE_MARKERS",
    "ORDER_INTERNAL_MARKERS",
    "ORDER_POLICY",
    "ORDER_ROLES",
    "ORDER_VISIBLE_MARKERS",
    "Card",
    "IncidentState",
    "KnowledgeQuery",
    "ModelFor",
    "OrderFlowState",
    "Route",
    "fake_models",
    "fake_reply",
    "incident_builder",
    "lookup_order",
    "openai_models",
    "order_builder",
    "search_docs",
    "strip_markers",
]

INCIDENT_INTERNAL_MARKERS: tuple[str, ...] = (
    "RTRJSON",
    "KNWJSON",
    "TOOLARGS",
    "TOOLRESULT",
    "KNWINTERNAL",
    "INSLLM",
)
"""Markers of the incident graph's internal outputs; none may reach a user."""

INCIDENT_VISIBLE_MARKERS: tuple[str, ...] = ("SUBVISIBLE", "INSCARD", "RESPVISIBLE")
"""Markers of the incident graph's user-visible outputs; each must reach the user."""

ORDER_INTERNAL_MARKERS: tuple[str, ...] = ("MAINPLAN", "ORDERPLAN", "ORDERARGS", "ORDERRESULT")
"""Markers of the order flow's internal outputs; none may reach a user."""

ORDER_VISIBLE_MARKERS: tuple[str, ...] = ("ASKDATA", "APPROVEQ", "ORDERVISIBLE", "MAINVISIBLE")
"""Markers of the order flow's user-visible outputs (two interrupts, two answers)."""

INCIDENT_ROLES: tuple[str, ...] = (
    "router",
    "knowledge",
    "expand",
    "knowledge_answer",
    "insight",
    "response",
)
"""The `model_for` roles the incident graph asks for, in call order."""

ORDER_ROLES: tuple[str, ...] = (
    "main_planner",
    "order_planner",
    "order_lookup",
    "order_answer",
    "main_answer",
)
"""The `model_for` roles the order flow asks for, in call order."""

FAKE_ROLES: tuple[str, ...] = INCIDENT_ROLES + ORDER_ROLES
"""Every role `fake_models` and `fake_reply` know."""

ModelFor: TypeAlias = Callable[[str], BaseChatModel]
"""Gives the chat model for a role name."""

_ALL_MARKERS = (
    INCIDENT_INTERNAL_MARKERS
    + INCIDENT_VISIBLE_MARKERS
    + ORDER_INTERNAL_MARKERS
    + ORDER_VISIBLE_MARKERS
)
_MARKER_RE = re.compile(r"\s*\b(?:" + "|".join(_ALL_MARKERS) + r")\b\s*")
# Roles whose output create_agent parses as ProviderStrategy JSON.
_JSON_ROLES = frozenset({"router", "knowledge"})


def strip_markers(text: str) -> str:
    """Remove every example marker from `text` (with its surrounding spaces)."""
    return _MARKER_RE.sub(" ", text).strip()


_UNMARK_RE = re.compile(r"\b(?:" + "|".join(_ALL_MARKERS) + r")\b ?")


def _say(text: str, marked: bool) -> str:
    """`text` as written (marked, for the tests' oracle) or without its markers (the demo)."""
    return text if marked else _UNMARK_RE.sub("", text)


# -- scripted replies -----------------------------------------------------------------


def _tool_result_since_last_human(messages: Sequence[BaseMessage]) -> bool:
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            return True
        if isinstance(message, HumanMessage):
            return False
    return False


def _tool_call(name: str, args: dict[str, Any], messages: Sequence[BaseMessage]) -> AIMessage:
    # The id depends only on the conversation (one call per human turn), so two runs of the
    # same input stream identical tool-call ids.
    turn = sum(isinstance(message, HumanMessage) for message in messages)
    call_id = f"call_{name}_{turn}"
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def fake_reply(role: str, messages: Sequence[BaseMessage], *, marked: bool = True) -> AIMessage:
    """The scripted reply of `role` to `messages`; what `fake_models(role)` answers.

    The reply depends only on the role and the messages (a tool result since the last
    human message, an order decision in the prompt), never on call order, so concurrent,
    repeated or cancelled runs all see the same script. Tool-call ids are
    `call_<tool>_<number of human messages>`. A test server can reuse it to play
    the same script over HTTP.

    With `marked=False` the replies read as plain support-assistant text, without the
    test markers (what the demo app and the CLI show).

    Raises:
        ValueError: If `role` is not one of `FAKE_ROLES`.
    """
    reply = _scripted_reply(role, messages)
    if not marked:
        reply.content = _say(reply.text, marked)
        for call in reply.tool_calls:
            call["args"] = {
                k: _say(v, marked) if isinstance(v, str) else v for k, v in call["args"].items()
            }
    return reply


def _scripted_reply(role: str, messages: Sequence[BaseMessage]) -> AIMessage:
    if role == "router":
        # Leading newline: real models sometimes start structured output with whitespace.
        return AIMessage(
            content='\n  {"scenario": "refund", "reason": "RTRJSON the user wants money back"}'
        )
    if role == "knowledge":
        if _tool_result_since_last_human(messages):
            return AIMessage(
                content=json.dumps(
                    {
                        "normalized_question": "KNWJSON how do refunds work",
                        "search_queries": ["refund policy", "refund timeline"],
                    }
                )
            )
        return _tool_call("search_docs", {"query": "TOOLARGS refund policy"}, messages)
    if role == "expand":
        return AIMessage(
            content=json.dumps(
                ["KNWINTERNAL refund to original card", "KNWINTERNAL refund processing days"]
            )
        )
    if role == "knowledge_answer":
        return AIMessage(content="SUBVISIBLE Refunds go back to the card you paid with.")
    if role == "insight":
        return AIMessage(content="INSLLM Most refund requests follow a late delivery.")
    if role == "response":
        return AIMessage(content="RESPVISIBLE Your refund will reach your card within 5 days.")
    if role == "main_planner":
        return AIMessage(
            content=json.dumps(
                {"delegate": "order_agent", "task": "MAINPLAN create order PO-1001 for ACME"}
            )
        )
    if role == "order_planner":
        return AIMessage(
            content=json.dumps(
                {
                    "action": "create_order",
                    "order_ref": "PO-1001",
                    "item": "widget",
                    "quantity": 2,
                    "note": "ORDERPLAN look up the customer first",
                }
            )
        )
    if role == "order_lookup":
        if _tool_result_since_last_human(messages):
            # Unreached while lookup_order is return_direct; kept so a loop cannot form.
            return AIMessage(content="ORDERRESULT lookup finished")
        return _tool_call("lookup_order", {"order_ref": "ORDERARGS PO-1001"}, messages)
    if role == "order_answer":
        rejected = any("decision=reject" in message.text for message in messages)
        if rejected:
            return AIMessage(content="ORDERVISIBLE Order PO-1001 was not created, as you asked.")
        return AIMessage(content="ORDERVISIBLE Order PO-1001 is created for ACME.")
    if role == "main_answer":
        return AIMessage(content="MAINVISIBLE Done: the order desk handled your request.")
    msg = f"fake_reply has no script for role {role!r}; known roles: {', '.join(FAKE_ROLES)}."
    raise ValueError(msg)


def fake_models(role: str, *, token_delay: float = 0.0, marked: bool = True) -> FakeChatModel:
    """A `FakeChatModel` playing `role` with the scripted replies of `fake_reply`.

    The model's `model_name` is the role; the JSON roles (`router`, `knowledge`) get
    `profile={"structured_output": True}`. Use `functools.partial(fake_models,
    token_delay=...)` as `model_for` for slow streams.

    Raises:
        ValueError: If `role` is not one of `FAKE_ROLES`.
    """
    if role not in FAKE_ROLES:
        msg = f"fake_models has no script for role {role!r}; known roles: {', '.join(FAKE_ROLES)}."
        raise ValueError(msg)

    def respond(messages: list[BaseMessage]) -> AIMessage:
        return fake_reply(role, messages, marked=marked)

    return FakeChatModel(
        respond=respond,
        model_name=role,
        token_delay=token_delay,
        profile={"structured_output": True} if role in _JSON_ROLES else None,
    )


def openai_models(*, base_url: str, api_key: str = "unused", **kwargs: Any) -> ModelFor:
    """A `model_for` giving `ChatOpenAI(model=role, base_url=..., ...)` for every role.

    Needs the `openai` extra (`langchain-openai`). Extra keyword arguments go to every
    `ChatOpenAI`.

    Raises:
        ImportError: If `langchain-openai` is not installed.
    """
    # Imported lazily: langchain-openai is an optional dependency.
    from langchain_openai import ChatOpenAI

    def model_for(role: str) -> BaseChatModel:
        return ChatOpenAI(model=role, base_url=base_url, api_key=SecretStr(api_key), **kwargs)

    return model_for


# -- node plumbing --------------------------------------------------------------------


class _Node(Runnable[Any, Any]):
    """A node with a sync and an async body, so a graph runs under invoke and ainvoke.

    It calls the bodies directly, like langgraph's own wrapper of a plain node function:
    no extra callback run sits between the node's task and the LLM calls it makes.
    (`RunnableLambda` would add one.)
    """

    def __init__(
        self,
        name: str,
        func: Callable[[Any], Any],
        afunc: Callable[[Any], Awaitable[Any]],
    ) -> None:
        self.name = name
        self._func = func
        self._afunc = afunc

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return self._func(input)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return await self._afunc(input)


def _call_node(
    name: str,
    runnable: Runnable[Any, Any],
    prepare: Callable[[Any], Any],
    finish: Callable[[Any, Any], dict[str, Any]],
    config: RunnableConfig | None = None,
) -> _Node:
    """A node that calls `runnable` on `prepare(state)` and returns `finish(state, out)`."""

    def run(state: Any) -> dict[str, Any]:
        return finish(state, runnable.invoke(prepare(state), config))

    async def arun(state: Any) -> dict[str, Any]:
        return finish(state, await runnable.ainvoke(prepare(state), config))

    return _Node(name, run, arun)


def _parse_json(text: str) -> Any:
    """Parse the JSON value in `text`, tolerating fences or prose around it."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        found = re.search(r"(\{.*\}|\[.*\])", text, re.DOTALL)
        if found is None:
            raise
        return json.loads(found.group(1))


def _last_human_text(messages: Sequence[BaseMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message.text
    return ""


# -- incident graph -------------------------------------------------------------------


class Route(BaseModel):
    """The router agent's structured output."""

    scenario: str
    reason: str


class KnowledgeQuery(BaseModel):
    """The knowledge agent's structured output (the JSON that leaked in the incident)."""

    normalized_question: str
    search_queries: list[str]


class Card(TypedDict):
    """A card pushed to the client through the custom stream."""

    type: str
    card_type: str
    text: str


class IncidentState(TypedDict):
    """Root state of the incident graph."""

    messages: Annotated[list[AnyMessage], add_messages]
    question: str
    scenario: str
    knowledge: list[str]
    cards: Annotated[list[Card], operator.add]


class _RouterState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    question: str
    scenario: str


class _KnowledgeState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    question: str
    scenario: str
    knowledge: list[str]


class _InsightState(TypedDict):
    question: str
    scenario: str
    knowledge: list[str]
    cards: Annotated[list[Card], operator.add]


def _search_docs_tool(marked: bool) -> Any:
    @tool
    def search_docs(query: str) -> str:
        """Search the help-centre documents for `query`."""
        return _say(
            "TOOLRESULT Refund policy: money goes back to the original card "
            f"({strip_markers(query)}).",
            marked,
        )

    return search_docs


search_docs = _search_docs_tool(True)
"""The knowledge agent's tool (the marked variant)."""


def incident_builder(
    model_for: ModelFor = fake_models, *, marked: bool = True
) -> StateGraph[IncidentState]:
    """Build the incident graph from the models `model_for` gives.

    Args:
        model_for: Gives the chat model for each of `INCIDENT_ROLES`.
        marked: Whether the texts the nodes write (tool results, cards) carry the test
            markers; pass False, with `fake_models(..., marked=False)`, for a demo.

    Returns:
        The uncompiled builder; `compile()` it, with or without a checkpointer.
    """
    # router_subgraph: an agent called from a node; only the parsed field leaves it.
    router_agent = create_agent(
        model_for("router"),
        tools=[],
        response_format=ProviderStrategy(Route),
        system_prompt="Classify the user's request into a support scenario. Answer in JSON.",
        name="router_agent",
    )

    def route_finish(state: _RouterState, out: dict[str, Any]) -> dict[str, Any]:
        parsed = cast(Route, out["structured_response"])
        return {"scenario": strip_markers(parsed.scenario)}

    router = StateGraph(_RouterState)
    router.add_node(
        "route",
        _call_node(
            "route",
            router_agent,
            lambda state: {"messages": [HumanMessage(content=state["question"])]},
            route_finish,
        ),
    )
    router.add_edge(START, "route")
    router.add_edge("route", END)

    # knowledge_subgraph: an agent added as a node writes into the shared messages.
    knowledge_agent = create_agent(
        model_for("knowledge"),
        tools=[_search_docs_tool(marked)],
        response_format=ProviderStrategy(KnowledgeQuery),
        system_prompt=(
            "Search the documents, then restate the user's question and list search "
            "queries. Answer in JSON."
        ),
        name="knowledge_agent",
    )
    expand_model = model_for("expand")
    answer_model = model_for("knowledge_answer")

    def expand_prepare(state: _KnowledgeState) -> list[BaseMessage]:
        last = next(m for m in reversed(state["messages"]) if isinstance(m, AIMessage))
        query = KnowledgeQuery.model_validate(_parse_json(last.text))
        queries = [strip_markers(q) for q in query.search_queries]
        return [
            SystemMessage(content="Expand the search queries. Answer with a JSON list."),
            HumanMessage(content=json.dumps(queries)),
        ]

    def expand_finish(state: _KnowledgeState, out: AIMessage) -> dict[str, Any]:
        return {"knowledge": [strip_markers(str(q)) for q in _parse_json(out.text)]}

    def answer_prepare(state: _KnowledgeState) -> list[BaseMessage]:
        facts = "; ".join(state.get("knowledge", []))
        return [
            SystemMessage(content=f"Answer the user briefly. Known facts: {facts}"),
            HumanMessage(content=state["question"]),
        ]

    knowledge = StateGraph(_KnowledgeState)
    knowledge.add_node("knowledge_agent", knowledge_agent)
    knowledge.add_node(
        "expand_queries",
        _call_node(
            "expand_queries",
            expand_model,
            expand_prepare,
            expand_finish,
            config={"tags": ["kn_internal"], "metadata": {"purpose": "expand"}},
        ),
    )
    knowledge.add_node(
        "answer",
        _call_node("answer", answer_model, answer_prepare, lambda state, out: {"messages": [out]}),
    )
    knowledge.add_edge(START, "knowledge_agent")
    knowledge.add_edge("knowledge_agent", "expand_queries")
    knowledge.add_edge("expand_queries", "answer")
    knowledge.add_edge("answer", END)

    # insight_subgraph: an internal draft call, then cards through the custom stream.
    insight_model = model_for("insight")

    def cards_finish(state: _InsightState, out: AIMessage) -> dict[str, Any]:
        card = Card(
            type="card",
            card_type="insight",
            text=_say(f"INSCARD {strip_markers(out.text)}", marked),
        )
        get_stream_writer()(card)
        return {"cards": [card]}

    def static_card(state: _InsightState) -> dict[str, Any]:
        card = Card(
            type="card",
            card_type="static",
            text=_say(f"INSCARD Scenario: {state['scenario']}. See the refund FAQ.", marked),
        )
        get_stream_writer()(card)
        return {"cards": [card]}

    insight = StateGraph(_InsightState)
    insight.add_node(
        "make_cards",
        _call_node(
            "make_cards",
            insight_model,
            lambda state: [
                SystemMessage(content="Draft one short insight for an agent-assist card."),
                HumanMessage(content=f"{state['scenario']}: {state['question']}"),
            ],
            cards_finish,
        ),
    )
    insight.add_node("static_card", static_card)
    insight.add_edge(START, "make_cards")
    insight.add_edge("make_cards", "static_card")
    insight.add_edge("static_card", END)

    # root
    response_model = model_for("response")

    def input_parser_node(state: IncidentState) -> dict[str, Any]:
        return {"question": " ".join(_last_human_text(state["messages"]).split())}

    def response_prepare(state: IncidentState) -> list[BaseMessage]:
        facts = "; ".join(state.get("knowledge", []))
        return [
            SystemMessage(
                content=f"Scenario: {state.get('scenario', '')}. Known facts: {facts}. "
                "Write the final answer to the user."
            ),
            HumanMessage(content=state["question"]),
        ]

    graph = StateGraph(IncidentState)
    graph.add_node("input_parser_node", input_parser_node)
    graph.add_node("router_subgraph", router.compile(name="router_subgraph"))
    graph.add_node("knowledge_subgraph", knowledge.compile(name="knowledge_subgraph"))
    graph.add_node("insight_subgraph", insight.compile(name="insight_subgraph"))
    graph.add_node(
        "response_node",
        _call_node(
            "response_node",
            response_model,
            response_prepare,
            lambda state, out: {"messages": [out]},
        ),
    )
    graph.add_edge(START, "input_parser_node")
    graph.add_edge("input_parser_node", "router_subgraph")
    graph.add_edge("router_subgraph", "knowledge_subgraph")
    graph.add_edge("knowledge_subgraph", "insight_subgraph")
    graph.add_edge("insight_subgraph", "response_node")
    graph.add_edge("response_node", END)
    return graph


# -- order flow -----------------------------------------------------------------------


class OrderFlowState(TypedDict):
    """Root state of the order flow."""

    messages: Annotated[list[AnyMessage], add_messages]
    task: str
    delegate: str


class _OrderAgentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    task: str
    order: dict[str, Any]
    phone: str
    decision: str


def _lookup_order_tool(marked: bool) -> Any:
    @tool(return_direct=True)
    def lookup_order(order_ref: str) -> str:
        """Look up an order draft and its customer by reference."""
        ref = strip_markers(order_ref)
        note = _say("ORDERRESULT no phone", marked)
        return json.dumps({"order_ref": ref, "customer": "ACME", "phone": None, "note": note})

    return lookup_order


lookup_order = _lookup_order_tool(True)
"""The order lookup agent's tool (the marked variant)."""


class PhoneAnswer(TypedDict):
    """The answer the missing-data interrupt expects: a phone number, not blank."""

    phone: Annotated[str, Field(min_length=1, pattern=r"\S")]


def _missing_data(state: _OrderAgentState, marked: bool = True) -> dict[str, Any]:
    phone = state["order"].get("phone")
    if phone:
        return {"phone": str(phone)}
    answer = interrupt(
        {
            "type": "missing_data",
            "question": _say(
                f"ASKDATA Which phone number should order {state['order']['order_ref']} use?",
                marked,
            ),
            "fields": ["phone"],
        },
        # Validated before LangGraph stores it, so a bad answer can be answered again.
        response_schema=PhoneAnswer,
    )
    return {"phone": answer["phone"]}


def _approve(state: _OrderAgentState, marked: bool = True) -> dict[str, Any]:
    order = state["order"]
    decision = interrupt(
        {
            "type": "approval",
            "summary": _say(
                f"APPROVEQ Create order {order['order_ref']} "
                f"({order['quantity']} x {order['item']}) for {order['customer']}, "
                f"phone {state['phone']}?",
                marked,
            ),
        },
        response_schema=cast(type, Literal["approve", "reject"]),
    )
    return {"decision": decision}


def order_builder(
    model_for: ModelFor = fake_models, *, marked: bool = True
) -> StateGraph[OrderFlowState]:
    """Build the order flow: a main agent delegating to an order sub-agent.

    Args:
        model_for: Gives the chat model for each of `ORDER_ROLES`.
        marked: Whether the texts the nodes write (tool result, interrupt questions)
            carry the test markers; pass False, with `fake_models(..., marked=False)`,
            for a demo.

    Returns:
        The uncompiled builder; compile it with a checkpointer (the order agent
        interrupts twice).
    """
    planner_model = model_for("main_planner")
    order_planner_model = model_for("order_planner")
    lookup_agent = create_agent(
        model_for("order_lookup"),
        tools=[_lookup_order_tool(marked)],
        system_prompt="Look the order up with the lookup_order tool.",
        name="order_lookup_agent",
    )
    order_answer_model = model_for("order_answer")
    main_answer_model = model_for("main_answer")

    # order_agent subgraph
    def plan_finish(state: _OrderAgentState, out: AIMessage) -> dict[str, Any]:
        plan = _parse_json(out.text)
        order = {
            "order_ref": strip_markers(str(plan["order_ref"])),
            "item": strip_markers(str(plan["item"])),
            "quantity": int(plan["quantity"]),
        }
        return {"order": order}

    def lookup_finish(state: _OrderAgentState, out: dict[str, Any]) -> dict[str, Any]:
        results = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        found = _parse_json(results[-1].text) if results else {}
        order = dict(state["order"])
        order["customer"] = strip_markers(str(found.get("customer") or "unknown"))
        phone = found.get("phone")
        order["phone"] = strip_markers(str(phone)) if phone else None
        return {"order": order}

    def respond_prepare(state: _OrderAgentState) -> list[BaseMessage]:
        order = state["order"]
        return [
            SystemMessage(
                content=f"You are the order desk. Order {order['order_ref']}: "
                f"{order['quantity']} x {order['item']} for {order['customer']}, "
                f"phone {state['phone']}; decision={state['decision']}. Tell the user."
            ),
            HumanMessage(content=state["task"]),
        ]

    order_agent = StateGraph(_OrderAgentState)
    order_agent.add_node(
        "plan",
        _call_node(
            "plan",
            order_planner_model,
            lambda state: [
                SystemMessage(content="Plan the order action. Answer in JSON."),
                HumanMessage(content=state["task"]),
            ],
            plan_finish,
        ),
    )
    order_agent.add_node(
        "lookup",
        _call_node(
            "lookup",
            lookup_agent,
            lambda state: {
                "messages": [HumanMessage(content=f"Look up order {state['order']['order_ref']}")]
            },
            lookup_finish,
        ),
    )

    def collect_missing(state: _OrderAgentState) -> dict[str, Any]:
        return _missing_data(state, marked)

    def approve(state: _OrderAgentState) -> dict[str, Any]:
        return _approve(state, marked)

    order_agent.add_node("collect_missing", collect_missing)
    order_agent.add_node("approve", approve)
    order_agent.add_node(
        "respond",
        _call_node(
            "respond", order_answer_model, respond_prepare, lambda state, out: {"messages": [out]}
        ),
    )
    order_agent.add_edge(START, "plan")
    order_agent.add_edge("plan", "lookup")
    order_agent.add_edge("lookup", "collect_missing")
    order_agent.add_edge("collect_missing", "approve")
    order_agent.add_edge("approve", "respond")
    order_agent.add_edge("respond", END)

    # root
    def main_prepare(state: OrderFlowState) -> list[BaseMessage]:
        return [
            SystemMessage(
                content='Decide who handles the request. Answer in JSON: {"delegate": '
                '"order_agent" or "none", "task": "<instruction for the order agent>"}.'
            ),
            *state["messages"],
        ]

    def main_finish(state: OrderFlowState, out: AIMessage) -> dict[str, Any]:
        plan = _parse_json(out.text)
        return {
            "delegate": strip_markers(str(plan.get("delegate", "none"))),
            "task": strip_markers(str(plan.get("task", ""))),
        }

    def main_answer_prepare(state: OrderFlowState) -> list[BaseMessage]:
        return [
            SystemMessage(content="Close the conversation with one short sentence."),
            *state["messages"],
        ]

    graph = StateGraph(OrderFlowState)
    graph.add_node("main_agent", _call_node("main_agent", planner_model, main_prepare, main_finish))
    graph.add_node("order_agent", order_agent.compile(name="order_agent"))
    graph.add_node(
        "main_answer",
        _call_node(
            "main_answer",
            main_answer_model,
            main_answer_prepare,
            lambda state, out: {"messages": [out]},
        ),
    )
    graph.add_edge(START, "main_agent")
    graph.add_conditional_edges(
        "main_agent",
        lambda state: "order_agent" if state["delegate"] == "order_agent" else "main_answer",
        ["order_agent", "main_answer"],
    )
    graph.add_edge("order_agent", "main_answer")
    graph.add_edge("main_answer", END)
    return graph


INCIDENT_POLICY = VisibilityPolicy(
    internal=["router_subgraph", "knowledge_subgraph", "insight_subgraph"],
    user_visible=["knowledge_subgraph/answer"],
    user_visible_keys=["cards", "knowledge", "question", "scenario"],
)
"""The incident's policy: the three subgraphs are internal, but the knowledge answer. The
state keys they return (the question, scenario, the facts found, the cards) may leave."""

ORDER_POLICY = VisibilityPolicy(internal=["main_agent", "order_agent/plan", "order_agent/lookup"])
"""The order flow's policy: planning calls and the order lookup agent are internal."""
