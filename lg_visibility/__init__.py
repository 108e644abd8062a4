"""lg_visibility: decide at the source which LangGraph output is user-visible.

Only user-visible events leave the graph: internal LLM tokens are dropped before they are
queued, internal messages are removed from every snapshot by tag and id, and interrupts
always get through.
"""

from __future__ import annotations

from lg_visibility._handlers import VisibilityHandler
from lg_visibility._run import visibility_of
from lg_visibility._wrap import compile_with_visibility, with_visibility
from lg_visibility.errors import VisibilityConfigError
from lg_visibility.policy import (
    INTERNAL,
    USER_VISIBLE,
    Visibility,
    VisibilityDecision,
    VisibilityPolicy,
)
from lg_visibility.subagent import SubagentNode, add_subagent, as_subagent

__all__ = [
    "INTERNAL",
    "SubagentNode",
    "USER_VISIBLE",
    "Visibility",
    "VisibilityConfigError",
    "VisibilityDecision",
    "VisibilityHandler",
    "VisibilityPolicy",
    "__version__",
    "add_subagent",
    "as_subagent",
    "compile_with_visibility",
    "visibility_of",
    "with_visibility",
]

__version__ = "0.1.0"
