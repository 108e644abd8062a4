"""`lg-visibility explain`: a graph's statically known node paths, each with its decision.

Users see their policy on their own graph before any run: every node path of the root
graph and of the subgraphs LangGraph can find, the visibility the policy gives output
produced there, and the rule that made it (a declaration, an agent rule, a pattern, the
default). Tag rules and declarations made on a call apply only at run time; nodes a
node's function invokes are not known before a run.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from lg_visibility._compat import pregel_base
from lg_visibility._provenance import nearest
from lg_visibility._rules import decide
from lg_visibility._tree import graph_tree
from lg_visibility.errors import VisibilityConfigError
from lg_visibility.policy import VisibilityPolicy

__all__ = ["explain_lines", "load_object"]


def load_object(spec: str, *, what: str) -> Any:
    """The object `package.module:attr` names (the working directory is importable).

    Raises:
        VisibilityConfigError: naming the spec, for a malformed one or a failed import.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise VisibilityConfigError(
            f"{what} {spec!r}: write package.module:attribute, e.g. myapp.graph:graph."
        )
    if "" not in sys.path:
        sys.path.insert(0, "")  # as uvicorn does: the working directory is importable
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise VisibilityConfigError(
            f"{what} {spec!r}: cannot import {module_name!r}: {exc}"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise VisibilityConfigError(f"{what} {spec!r}: {module_name!r} has no {attr!r}.")
        obj = getattr(obj, part)
    return obj


def explain_lines(graph: Any, policy: VisibilityPolicy | None = None) -> list[str]:
    """The tree of `graph`'s node paths, one line each, with the decision for each.

    Args:
        graph: a compiled graph, wrapped or not.
        policy: the policy to explain; by default the wrapped graph's own.

    Raises:
        VisibilityConfigError: if there is no policy to explain, or a pattern names no node.
        TypeError: if `graph` is not a compiled graph.
    """
    if not isinstance(graph, pregel_base()):
        raise TypeError(
            f"explain takes a compiled LangGraph graph, got {type(graph).__name__}; point "
            "--graph at builder.compile() or a graph wrapped with with_visibility."
        )
    if policy is None:
        policy = getattr(graph, "visibility_policy", None)
        if policy is None:
            raise VisibilityConfigError(
                "this graph is not wrapped with with_visibility: pass --policy "
                "package.module:attr naming a VisibilityPolicy."
            )
    if not isinstance(policy, VisibilityPolicy):
        raise VisibilityConfigError(
            f"--policy must name a VisibilityPolicy, got {type(policy).__name__}."
        )
    tree = graph_tree(graph)
    tree.check_patterns(policy)
    declared = tree.declarations()
    rows = [("(root graph)", "root snapshots are always delivered, redacted")]
    by_path = {node.path: node for node in tree.nodes}

    def walk(at: str, depth: int) -> None:
        for name in tree.children(at) or ():
            node = by_path[f"{at}/{name}" if at else name]
            label = "  " * (depth + 1) + name + ("/" if node.is_graph else "")
            decision = decide(
                policy, node.path, node_declared=nearest(declared, node.path), agent=node.agent
            )
            rows.append((label, str(decision)))
            if node.is_graph:
                walk(node.path, depth + 1)

    walk("", 0)
    width = max(len(label) for label, _ in rows) + 2
    lines = [f"{label:<{width}}{text}" for label, text in rows]
    lines.append(
        "Not known before a run: tag rules, declarations on a model or call, and nodes a "
        "node's function invokes (their output follows the rule of the path they run under)."
    )
    return lines
