"""The graph `lg-visibility serve --graph` runs in tests/integration/test_postgres_workers.py.

Compiled without a checkpointer (serve attaches one from --db) and not wrapped (serve wraps
it with --policy). `planner` writes internal content (PG_INTERNAL); `ack` is one complete,
visible step; then `assistant` streams a long answer slowly (a worker can be killed in the
middle of it), or `order` asks for an approval (an interrupt, resumed on another worker).
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from typing_extensions import TypedDict

from lg_visibility import VisibilityPolicy
from lg_visibility.testing import FakeChatModel

PG_INTERNAL = "PG-INTERNAL-PLAN-5d1c"
ACK = "Working on it."
ANSWER = " ".join(f"part{i}" for i in range(40))
TOKEN_DELAY = 0.1  # 40+ tokens: about 4 s of answer


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


_model = FakeChatModel(responses=[ANSWER], token_delay=TOKEN_DELAY)
_closing = FakeChatModel(respond=lambda ms: f"Order placed: {ms[-1].content}", token_delay=0.3)


def _last_human(state: State) -> str:
    return str([m for m in state["messages"] if m.type == "human"][-1].content)


def planner(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage(content=f"plan: {PG_INTERNAL}", name="planner")]}


def ack(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage(content=ACK)]}


async def assistant(state: State) -> dict[str, Any]:
    return {"messages": [await _model.ainvoke([m for m in state["messages"] if m.type == "human"])]}


async def order(state: State) -> dict[str, Any]:
    decision = interrupt({"type": "approval", "summary": "Approve the order?"})
    return {"messages": [await _closing.ainvoke([AIMessage(content=str(decision))])]}


def _route(state: State) -> str:
    return "order" if "order" in _last_human(state) else "assistant"


builder = StateGraph(State)
builder.add_node("planner", planner)
builder.add_node("ack", ack)
builder.add_node("assistant", assistant)
builder.add_node("order", order)
builder.add_edge(START, "planner")
builder.add_edge("planner", "ack")
builder.add_conditional_edges("ack", _route, ["assistant", "order"])
builder.add_edge("assistant", END)
builder.add_edge("order", END)

graph = builder.compile()
policy = VisibilityPolicy(internal=["planner"], default="user_visible")
