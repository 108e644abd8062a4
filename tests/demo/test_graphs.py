"""Tests for lg_visibility.demo.graphs: the seed graphs run on the fakes and really leak."""

from __future__ import annotations

import asyncio
import functools
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import ValidationError

from lg_visibility.demo.graphs import (
    FAKE_ROLES,
    INCIDENT_INTERNAL_MARKERS,
    INCIDENT_ROLES,
    INCIDENT_VISIBLE_MARKERS,
    ORDER_INTERNAL_MARKERS,
    ORDER_ROLES,
    ORDER_VISIBLE_MARKERS,
    fake_models,
    fake_reply,
    incident_builder,
    order_builder,
    strip_markers,
)
from lg_visibility.testing import FakeChatModel

TIMEOUT = 20.0
MODES = ["messages", "custom", "values", "updates"]
QUESTION = "I want my money back"
ORDER_REQUEST = "Create an order of 2 widgets"

INCIDENT_CARDS = [
    {
        "type": "card",
        "card_type": "insight",
        "text": "INSCARD Most refund requests follow a late delivery.",
    },
    {
        "type": "card",
        "card_type": "static",
        "text": "INSCARD Scenario: refund. See the refund FAQ.",
    },
]

INCIDENT_MESSAGE_PATHS = {
    "RTRJSON": {"router_subgraph/route/model"},
    "TOOLARGS": {"knowledge_subgraph/knowledge_agent/model"},
    "TOOLRESULT": {"knowledge_subgraph/knowledge_agent/tools"},
    "KNWJSON": {"knowledge_subgraph/knowledge_agent/model"},
    "KNWINTERNAL": {"knowledge_subgraph/expand_queries"},
    "SUBVISIBLE": {"knowledge_subgraph/answer"},
    "INSLLM": {"insight_subgraph/make_cards"},
    "RESPVISIBLE": {"response_node"},
}

ORDER_MESSAGE_PATHS = {
    "MAINPLAN": {"main_agent"},
    "ORDERPLAN": {"order_agent/plan"},
    "ORDERARGS": {"order_agent/lookup/model"},
    "ORDERRESULT": {"order_agent/lookup/tools"},
    "ORDERVISIBLE": {"order_agent/respond"},
    "MAINVISIBLE": {"main_answer"},
}


@dataclass
class RawStream:
    """Everything a v2 astream/stream produced, unfiltered."""

    parts: list[dict[str, Any]] = field(default_factory=list)

    def add(self, part: dict[str, Any]) -> None:
        self.parts.append(part)

    def message_texts(self) -> dict[tuple[str, str], str]:
        """Per (message id, node path): content plus tool-call args, concatenated."""
        texts: dict[tuple[str, str], list[str]] = defaultdict(list)
        for part in self.parts:
            if part["type"] != "messages":
                continue
            message: BaseMessage = part["data"][0]
            node: str = part["data"][1]["langgraph_node"]
            path = "/".join([*names(part["ns"]), node])
            key = (str(message.id), path)
            texts[key].append(message.text)
            if isinstance(message, AIMessageChunk):
                texts[key].extend(c["args"] or "" for c in message.tool_call_chunks)
            elif isinstance(message, AIMessage):
                texts[key].extend(str(c["args"]) for c in message.tool_calls)
        return {key: "".join(parts) for key, parts in texts.items()}

    def message_paths(self, markers: Iterable[str]) -> dict[str, set[str]]:
        """For each marker, the node paths of the messages-mode messages that carry it."""
        found: dict[str, set[str]] = {m: set() for m in markers}
        for (_, path), text in self.message_texts().items():
            for marker in found:
                if marker in text:
                    found[marker].add(path)
        return found

    def text(self) -> str:
        """All of the stream as one searchable string (messages concatenated per id)."""
        others = [repr(part) for part in self.parts if part["type"] != "messages"]
        return "\n".join([*self.message_texts().values(), *others])

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [part for part in self.parts if part["type"] == kind]


def names(ns: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(segment.split(":")[0] for segment in ns)


def stream_sync(
    graph: Any, payload: Any, config: Any = None, raw: RawStream | None = None
) -> RawStream:
    raw = raw if raw is not None else RawStream()
    parts: Iterator[dict[str, Any]] = graph.stream(
        payload, config, subgraphs=True, stream_mode=MODES, version="v2"
    )
    for part in parts:
        raw.add(part)
    return raw


async def stream_async(
    graph: Any, payload: Any, config: Any = None, raw: RawStream | None = None
) -> RawStream:
    raw = raw if raw is not None else RawStream()

    async def run() -> None:
        parts: AsyncIterator[dict[str, Any]] = graph.astream(
            payload, config, subgraphs=True, stream_mode=MODES, version="v2"
        )
        async for part in parts:
            raw.add(part)

    await asyncio.wait_for(run(), TIMEOUT)
    return raw


def incident_input() -> Any:
    return {"messages": [HumanMessage(content=QUESTION)]}


def order_input() -> Any:
    return {"messages": [HumanMessage(content=ORDER_REQUEST)]}


def thread(name: str) -> RunnableConfig:
    return {"configurable": {"thread_id": name}}


def root_interrupts(raw: RawStream) -> list[Any]:
    return [
        interrupt.value
        for part in raw.of_type("values")
        if part["ns"] == ()
        for interrupt in part["interrupts"]
    ]


# -- markers and fakes ----------------------------------------------------------------


def test_marker_tuples_are_disjoint() -> None:
    """The 17 markers are distinct and none contains another, so `in` checks are exact."""
    every = (
        INCIDENT_INTERNAL_MARKERS
        + INCIDENT_VISIBLE_MARKERS
        + ORDER_INTERNAL_MARKERS
        + ORDER_VISIBLE_MARKERS
    )
    assert len(set(every)) == len(every) == 17
    assert [(a, b) for a in every for b in every if a != b and a in b] == []


def test_strip_markers_removes_markers_and_spaces() -> None:
    """strip_markers drops each marker with its spaces and leaves other words alone."""
    assert strip_markers("RTRJSON refund") == "refund"
    assert strip_markers("a KNWINTERNAL b") == "a b"
    assert strip_markers("TOOLARGSX stays") == "TOOLARGSX stays"


def test_fake_models_rejects_unknown_role() -> None:
    """fake_models names the unknown role and the known ones."""
    with pytest.raises(ValueError, match=r"role 'nope'; known roles: router, knowledge"):
        fake_models("nope")


def test_fake_reply_rejects_unknown_role() -> None:
    """fake_reply names the unknown role."""
    with pytest.raises(ValueError, match=r"no script for role 'nope'"):
        fake_reply("nope", [])


def test_fake_models_name_and_profile() -> None:
    """Each fake reports its role as model name; only the JSON roles claim structured output."""
    models = {role: fake_models(role) for role in FAKE_ROLES}
    assert {role: m.model_name for role, m in models.items()} == {r: r for r in FAKE_ROLES}
    assert sorted(r for r, m in models.items() if m.profile) == ["knowledge", "router"]


def test_fake_router_json_starts_with_whitespace() -> None:
    """The router's scripted JSON streams a first token that starts with a newline."""
    first = next(iter(fake_models("router").stream("hi")))
    assert first.content == '\n  {"scenario": '


def test_builders_ask_for_exactly_their_roles() -> None:
    """Each builder asks model_for for its documented roles, in order, once each."""
    asked: list[str] = []

    def model_for(role: str) -> BaseChatModel:
        asked.append(role)
        return fake_models(role)

    incident_builder(model_for)
    assert tuple(asked) == INCIDENT_ROLES
    asked.clear()
    order_builder(model_for)
    assert tuple(asked) == ORDER_ROLES


# -- incident graph -------------------------------------------------------------------


def assert_incident_final(state: dict[str, Any]) -> None:
    messages: list[BaseMessage] = state["messages"]
    assert [m.type for m in messages] == ["human", "ai", "tool", "ai", "ai", "ai"]
    assert isinstance(messages[1], AIMessage)
    assert messages[1].tool_calls[0]["args"] == {"query": "TOOLARGS refund policy"}
    assert messages[2].text == (
        "TOOLRESULT Refund policy: money goes back to the original card (refund policy)."
    )
    assert messages[3].text == (
        '{"normalized_question": "KNWJSON how do refunds work", '
        '"search_queries": ["refund policy", "refund timeline"]}'
    )
    assert messages[4].text == "SUBVISIBLE Refunds go back to the card you paid with."
    assert messages[5].text == "RESPVISIBLE Your refund will reach your card within 5 days."
    assert {k: v for k, v in state.items() if k != "messages"} == {
        "question": QUESTION,
        "scenario": "refund",
        "knowledge": ["refund to original card", "refund processing days"],
        "cards": INCIDENT_CARDS,
    }


def test_incident_invoke_final_state() -> None:
    """invoke runs the incident graph end to end to the exact final state."""
    state = incident_builder().compile().invoke(incident_input())
    assert_incident_final(state)


async def test_incident_ainvoke_final_state() -> None:
    """Async twin: ainvoke reaches the same exact final state."""
    graph = incident_builder().compile()
    state = await asyncio.wait_for(graph.ainvoke(incident_input()), TIMEOUT)
    assert_incident_final(state)


def test_incident_invoke_with_checkpointer_final_state() -> None:
    """With a checkpointer the incident graph still reaches the exact final state."""
    graph = incident_builder().compile(checkpointer=InMemorySaver())
    assert_incident_final(graph.invoke(incident_input(), thread("incident")))


async def test_incident_astream_carries_every_marker() -> None:
    """The raw astream (subgraphs=True, v2, four modes) carries all nine markers."""
    raw = await stream_async(incident_builder().compile(), incident_input())
    text = raw.text()
    missing = [m for m in INCIDENT_INTERNAL_MARKERS + INCIDENT_VISIBLE_MARKERS if m not in text]
    assert missing == []
    assert_incident_final(raw.of_type("values")[-1]["data"])


def test_incident_stream_carries_every_marker() -> None:
    """Sync twin: the raw stream carries all nine markers."""
    text = stream_sync(incident_builder().compile(), incident_input()).text()
    missing = [m for m in INCIDENT_INTERNAL_MARKERS + INCIDENT_VISIBLE_MARKERS if m not in text]
    assert missing == []


async def test_incident_messages_come_from_documented_paths() -> None:
    """Each LLM marker arrives in messages mode from exactly the node path the docs list."""
    raw = await stream_async(incident_builder().compile(), incident_input())
    assert raw.message_paths(INCIDENT_MESSAGE_PATHS) == INCIDENT_MESSAGE_PATHS


async def test_incident_cards_arrive_as_custom_events() -> None:
    """The two cards arrive as exactly two custom events from insight_subgraph."""
    raw = await stream_async(incident_builder().compile(), incident_input())
    customs = [(names(p["ns"]), p["data"]) for p in raw.of_type("custom")]
    assert customs == [(("insight_subgraph",), card) for card in INCIDENT_CARDS]


async def test_incident_router_first_token_is_not_brace() -> None:
    """The router's first streamed token starts with a newline, not '{'."""
    raw = await stream_async(incident_builder().compile(), incident_input())
    router_tokens = [
        p["data"][0].text
        for p in raw.of_type("messages")
        if names(p["ns"]) == ("router_subgraph", "route")
    ]
    assert router_tokens[0] == '\n  {"scenario": '


async def test_incident_expand_call_carries_tags_and_metadata() -> None:
    """The expand_queries tokens carry the kn_internal tag and purpose metadata."""
    raw = await stream_async(incident_builder().compile(), incident_input())
    metas = [
        p["data"][1]
        for p in raw.of_type("messages")
        if p["data"][1]["langgraph_node"] == "expand_queries"
    ]
    assert len(metas) == 10
    assert {(tuple(m["tags"]), m["purpose"]) for m in metas} == {(("kn_internal",), "expand")}


# -- order flow -----------------------------------------------------------------------

ASK = {
    "type": "missing_data",
    "question": "ASKDATA Which phone number should order PO-1001 use?",
    "fields": ["phone"],
}
APPROVAL = {
    "type": "approval",
    "summary": "APPROVEQ Create order PO-1001 (2 x widget) for ACME, phone 555-0100?",
}


def assert_order_final(state: dict[str, Any], *, approved: bool = True) -> None:
    messages: list[BaseMessage] = state["messages"]
    assert [m.type for m in messages] == ["human", "ai", "ai"]
    assert messages[0].text == ORDER_REQUEST
    assert messages[1].text == (
        "ORDERVISIBLE Order PO-1001 is created for ACME."
        if approved
        else "ORDERVISIBLE Order PO-1001 was not created, as you asked."
    )
    assert messages[2].text == "MAINVISIBLE Done: the order desk handled your request."
    assert state["task"] == "create order PO-1001 for ACME"
    assert state["delegate"] == "order_agent"


def test_order_stream_interrupts_resumes_and_answers() -> None:
    """stream -> missing-data interrupt -> resume -> approval interrupt -> resume -> answers."""
    graph = order_builder().compile(checkpointer=InMemorySaver())
    config = thread("order-sync")
    first = stream_sync(graph, order_input(), config)
    assert root_interrupts(first) == [ASK]
    second = stream_sync(graph, Command(resume={"phone": "555-0100"}), config)
    assert root_interrupts(second) == [APPROVAL]
    third = stream_sync(graph, Command(resume="approve"), config)
    assert root_interrupts(third) == []
    assert_order_final(third.of_type("values")[-1]["data"])
    assert graph.get_state(config).next == ()


async def test_order_astream_interrupts_resumes_and_answers() -> None:
    """Async twin: the three astream runs interrupt twice, then answer."""
    graph = order_builder().compile(checkpointer=InMemorySaver())
    config = thread("order-async")
    first = await stream_async(graph, order_input(), config)
    assert root_interrupts(first) == [ASK]
    second = await stream_async(graph, Command(resume={"phone": "555-0100"}), config)
    assert root_interrupts(second) == [APPROVAL]
    third = await stream_async(graph, Command(resume="approve"), config)
    assert root_interrupts(third) == []
    assert_order_final(third.of_type("values")[-1]["data"])


async def test_order_astream_carries_every_marker() -> None:
    """Across the three runs the raw astream carries all eight order markers."""
    graph = order_builder().compile(checkpointer=InMemorySaver())
    config = thread("order-markers")
    raw = RawStream()
    await stream_async(graph, order_input(), config, raw)
    await stream_async(graph, Command(resume={"phone": "555-0100"}), config, raw)
    await stream_async(graph, Command(resume="approve"), config, raw)
    text = raw.text()
    missing = [m for m in ORDER_INTERNAL_MARKERS + ORDER_VISIBLE_MARKERS if m not in text]
    assert missing == []


async def test_order_messages_come_from_documented_paths() -> None:
    """Each LLM marker of the order flow arrives from exactly its documented node path."""
    graph = order_builder().compile(checkpointer=InMemorySaver())
    config = thread("order-paths")
    raw = RawStream()
    await stream_async(graph, order_input(), config, raw)
    await stream_async(graph, Command(resume={"phone": "555-0100"}), config, raw)
    await stream_async(graph, Command(resume="approve"), config, raw)
    assert raw.message_paths(ORDER_MESSAGE_PATHS) == ORDER_MESSAGE_PATHS


async def test_order_interrupts_surface_at_subgraph_and_root() -> None:
    """Each interrupt appears in updates at the order_agent namespace and at root."""
    graph = order_builder().compile(checkpointer=InMemorySaver())
    raw = await stream_async(graph, order_input(), thread("order-ns"))
    seen = [
        (names(p["ns"]), [i.value for i in p["data"]["__interrupt__"]])
        for p in raw.of_type("updates")
        if "__interrupt__" in p["data"]
    ]
    assert seen == [(("order_agent",), [ASK]), ((), [ASK])]


def test_order_invoke_reject_path() -> None:
    """invoke with resume "reject" ends with the order agent's refusal answer."""
    graph = order_builder().compile(checkpointer=InMemorySaver())
    config = thread("order-reject")
    graph.invoke(order_input(), config)
    assert [i.value for i in graph.get_state(config).interrupts] == [ASK]
    graph.invoke(Command(resume={"phone": "555-0100"}), config)
    assert [i.value for i in graph.get_state(config).interrupts] == [APPROVAL]
    state = graph.invoke(Command(resume="reject"), config)
    assert_order_final(state, approved=False)


async def test_order_ainvoke_approve_path() -> None:
    """Async twin: ainvoke with resume "approve" ends with the created-order answer."""
    graph = order_builder().compile(checkpointer=InMemorySaver())
    config = thread("order-ainvoke")
    await asyncio.wait_for(graph.ainvoke(order_input(), config), TIMEOUT)
    await asyncio.wait_for(graph.ainvoke(Command(resume={"phone": "555-0100"}), config), TIMEOUT)
    state = await asyncio.wait_for(graph.ainvoke(Command(resume="approve"), config), TIMEOUT)
    assert_order_final(state)


@pytest.mark.parametrize(
    ("resumes", "good", "field"),
    [
        ([{"mobile": "1"}], {"phone": "555-0100"}, "phone"),
        ([{"phone": "1"}, "yes"], "approve", "approve"),
    ],
)
def test_order_bad_resume_raises_and_can_be_answered_again(
    resumes: list[Any], good: Any, field: str
) -> None:
    """A resume value of the wrong shape fails before it is stored; a right one then works."""
    graph = order_builder().compile(checkpointer=InMemorySaver())
    config = thread("order-bad")
    graph.invoke(order_input(), config)
    for resume in resumes[:-1]:
        graph.invoke(Command(resume=resume), config)
    with pytest.raises(ValidationError, match=field):
        graph.invoke(Command(resume=resumes[-1]), config)
    out = graph.invoke(Command(resume=good), config)
    assert out["__interrupt__"] if field == "phone" else "__interrupt__" not in out


def test_order_without_delegation_answers_directly() -> None:
    """When the plan does not delegate, main_answer answers and the order agent never runs."""

    def model_for(role: str) -> BaseChatModel:
        if role == "main_planner":
            return FakeChatModel(responses=['{"delegate": "none", "task": "MAINPLAN chat"}'])
        return fake_models(role)

    graph = order_builder(model_for).compile(checkpointer=InMemorySaver())
    state = graph.invoke(order_input(), thread("order-direct"))
    assert [m.text for m in state["messages"]] == [
        ORDER_REQUEST,
        "MAINVISIBLE Done: the order desk handled your request.",
    ]


async def test_slow_fakes_stream_the_same_answer() -> None:
    """fake_models with a token delay (via functools.partial) gives the same final state."""
    slow = functools.partial(fake_models, token_delay=0.001)
    state = await asyncio.wait_for(
        incident_builder(slow).compile().ainvoke(incident_input()), TIMEOUT
    )
    assert_incident_final(state)


def test_fake_tool_call_ids_depend_only_on_the_conversation() -> None:
    """Two runs of one compiled graph stream the same tool-call id."""
    graph = incident_builder().compile()
    first = graph.invoke(incident_input())["messages"][1].tool_calls
    second = graph.invoke(incident_input())["messages"][1].tool_calls
    assert [c["id"] for c in first + second] == ["call_search_docs_1", "call_search_docs_1"]
