"""Where an output came from: paths from namespaces and run metadata. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from lg_visibility._compat import NS_END, NS_SEP

V = TypeVar("V")

__all__ = ["nearest", "path_of_checkpoint_ns", "path_of_namespace", "run_path", "without_task_ids"]


def path_of_namespace(ns: Iterable[str]) -> str:
    """'a/b' for a stream namespace like ('a:<task id>', 'b:<task id>').

    A segment of digits is LangGraph's count of the subgraphs one task has run
    ('a:<task id>|1' is the second): not a node name, so not part of the path. A name
    without a task id is a node whose graph was compiled with `checkpointer=True`, which
    runs under a namespace with the task ids removed ('a', 'a|b').
    """
    return "/".join(seg.partition(NS_END)[0] for seg in ns if NS_END in seg or not seg.isdigit())


def without_task_ids(checkpoint_ns: str) -> str:
    """'a|1|b' for 'a:<task id>|1|b:<task id>': the namespace a `checkpointer=True` graph
    at that place runs under."""
    return NS_SEP.join(seg.partition(NS_END)[0] for seg in checkpoint_ns.split(NS_SEP))


def runs_inside(inner: str, outer: str) -> bool:
    """Whether the task of checkpoint namespace `inner` runs inside the task of `outer`:
    `outer`'s segments begin `inner`'s, where a segment without a task id (a graph run
    with `checkpointer=True` drops its parent's) stands for any task of its name."""
    inside, around = inner.split(NS_SEP), outer.split(NS_SEP)
    if len(around) >= len(inside):
        return False
    for a, b in zip(inside, around, strict=False):
        if a != b and (
            (NS_END in a and NS_END in b) or a.partition(NS_END)[0] != b.partition(NS_END)[0]
        ):
            return False
    return True


def path_of_checkpoint_ns(checkpoint_ns: str) -> str:
    """'a/b' for a checkpoint namespace like 'a:<task id>|b:<task id>'; '' for the root."""
    if not checkpoint_ns:
        return ""
    return path_of_namespace(checkpoint_ns.split(NS_SEP))


def run_path(metadata: Mapping[str, Any]) -> str:
    """The path of the node a run belongs to, from LangGraph's run metadata."""
    return path_of_checkpoint_ns(metadata.get("langgraph_checkpoint_ns") or "")


def nearest(found: Mapping[str, V], path: str) -> tuple[str, V] | None:
    """(path, value) of the entry for `path` or, failing that, its nearest ancestor."""
    if not found:
        return None
    segments = path.split("/")
    for end in range(len(segments), 0, -1):
        at = "/".join(segments[:end])
        value = found.get(at)
        if value is not None:
            return at, value
    return None
