"""The oracle's ground truth for the demo graphs, from their test markers (never our tags)."""

from __future__ import annotations

from typing import Any

from lg_visibility import VisibilityPolicy
from lg_visibility.demo.graphs import (
    INCIDENT_INTERNAL_MARKERS,
    INCIDENT_VISIBLE_MARKERS,
    ORDER_INTERNAL_MARKERS,
    ORDER_VISIBLE_MARKERS,
)
from tests._support.oracle import Case

__all__ = [
    "ALL_MODES",
    "INCIDENT",
    "MODES",
    "ORDER",
    "ORDER_CLOSED",
    "ORDER_CLOSED_POLICY",
    "mode_id",
]

ALL_MODES = ["values", "updates", "messages", "custom", "checkpoints", "tasks", "debug"]
"""Every stream mode LangGraph has (`tools` aside)."""

MODES: list[Any] = [
    None,
    *ALL_MODES,
    ["messages", "custom", "values"],
    list(ALL_MODES),
    ["messages", "values", "updates", "tools"],
]
"""The stream_mode matrix the oracles run: the default, each mode, and three lists."""


def mode_id(mode: Any) -> str:
    """A test id for a stream_mode of `MODES`."""
    return "+".join(mode) if isinstance(mode, list) else str(mode)


INCIDENT = Case(
    internal_markers=INCIDENT_INTERNAL_MARKERS,
    visible_markers=INCIDENT_VISIBLE_MARKERS,
    internal_prefixes=("router_subgraph", "knowledge_subgraph", "insight_subgraph"),
    visible_prefixes=("knowledge_subgraph/answer",),
)
ORDER = Case(
    internal_markers=ORDER_INTERNAL_MARKERS,
    visible_markers=ORDER_VISIBLE_MARKERS,
    internal_prefixes=("main_agent", "order_agent/plan", "order_agent/lookup"),
)
# The order flow with the whole order sub-agent internal but its answer: both interrupts are
# then raised inside internal nodes of an internal subgraph, and must still reach the client.
ORDER_CLOSED = Case(
    internal_markers=ORDER_INTERNAL_MARKERS,
    visible_markers=ORDER_VISIBLE_MARKERS,
    internal_prefixes=("main_agent", "order_agent"),
    visible_prefixes=("order_agent/respond",),
)
ORDER_CLOSED_POLICY = VisibilityPolicy(
    internal=["main_agent", "order_agent"],
    user_visible=["order_agent/respond"],
    user_visible_keys=["task"],
)
