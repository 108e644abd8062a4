"""The static tree of a compiled graph's node paths, and the checks made on it at wrap time.

Found without running anything: the root graph's nodes and, recursively, those of every
subgraph LangGraph's `get_subgraphs` finds (a compiled graph added as a node, or listed in a
node's `deps`). A node whose function invokes a graph or an agent itself has children that
cannot be known before a run: its subtree is *open*, and a pattern below it is accepted.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableWithFallbacks
from langchain_core.runnables.base import RunnableBindingBase
from pydantic import BaseModel

from lg_visibility._compat import (
    added_as_graph,
    message_keys,
    opaque_graph,
    output_keys,
    state_keys,
    static_subgraphs,
)
from lg_visibility._rules import (
    DECLARATION_KEY,
    INTERNAL,
    NODE_DECLARATION_KEY,
    Visibility,
    check_visibility,
)
from lg_visibility.errors import VisibilityConfigError

__all__ = ["GraphTree", "NodeConfig", "TreeNode", "check_typed_state", "graph_tree"]

_OWN_NODES = ("__start__", "__end__")

NodeConfig = tuple[Visibility | None, frozenset[str]]
"""(the `visibility` declared, the tags) in a node's runnable's own config."""


@dataclass(frozen=True, slots=True)
class TreeNode:
    """One node of the tree: its path, its `add_node` declaration, whether it is a graph,
    and the `create_agent(name=...)` of the graph it stands in (its runs' `lc_agent_name`)."""

    path: str
    declared: Visibility | None
    is_graph: bool
    agent: str | None = None
    open: bool = False
    """A graph found in the node's function (LangGraph lists the first it finds there): the
    function may invoke others, so a name below it that the graph lacks is not refused; or
    a remote graph (`RemoteGraph`), whose nodes are not known before a run."""
    remote: bool = False
    """A `RemoteGraph`: its parts enter through this node's task and are judged as its own,
    so a pattern below it is refused (it would not hold)."""


@dataclass(frozen=True, slots=True)
class GraphTree:
    """Every statically known node path of a graph, in the order LangGraph lists them."""

    nodes: tuple[TreeNode, ...]
    keys: dict[str, frozenset[str]]
    """Graph path ("" for the root) -> its state keys."""
    outputs: dict[str, frozenset[str]]
    """Subgraph node path -> the keys that subgraph returns to its parent."""
    messages: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    """Graph path ("" for the root) -> its keys `add_messages` reduces."""
    handed: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    """Node path -> the state keys its node hands back that are known without a run: a
    sub-agent's `output_key`."""
    tags: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    """Node path -> the tags its runnable carries in its own config (`with_config(tags=...)`
    on the node or on the graph it is), known before a run, for the tag rules."""
    bound: dict[str, tuple[NodeConfig, ...]] = dataclasses.field(default_factory=dict)
    """Node path -> (the `visibility` declared in its runnable's own config, the tags
    there): what its runs are given (`with_config(metadata=..., tags=...)` on the node, or
    a compiled graph's own config) that its task-start event does not carry; one for each
    alternative of a `with_fallbacks` configured differently (`RunState` fails closed)."""
    handed_by: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    """Node path -> the agent names of the sub-agents it runs (found through bindings
    and fallbacks, where LangGraph's subgraph list, and so `TreeNode.agent`, is not)."""
    states: frozenset[type] = frozenset()
    """The Pydantic and dataclass state schemas of the graphs (state, input, output, and
    the nodes' input schemas): the objects a task's input is, where internal keys are."""

    def node_agents(self) -> dict[str, str]:
        """Path -> the agent name of a node that runs a named `create_agent` graph."""
        return {n.path: n.agent for n in self.nodes if n.is_graph and n.agent is not None}

    def declarations(self) -> dict[str, Visibility]:
        """Path -> visibility declared with `add_node(..., metadata={"visibility": ...})`."""
        return {n.path: n.declared for n in self.nodes if n.declared is not None}

    def _open(self, path: str) -> bool:
        return any(n.path == path and n.open for n in self.nodes)

    def _remote(self, path: str) -> bool:
        return any(n.path == path and n.remote for n in self.nodes)

    def children(self, path: str) -> list[str] | None:
        """Names of the nodes directly under `path` ("" is the root); None where unknown."""
        if path:
            node = next((n for n in self.nodes if n.path == path), None)
            if node is None or not node.is_graph:
                return None
        depth = path.count("/") + 1 if path else 0
        prefix = f"{path}/" if path else ""
        return [
            n.path[len(prefix) :]
            for n in self.nodes
            if n.path.startswith(prefix) and n.path.count("/") == depth
        ]

    def check_keys(self, policy: Any) -> None:
        """Raise VisibilityConfigError for a key the policy names that no graph has, or a
        state key an internal subgraph (or sub-agent: its `output_key`) at the root returns
        undeclared into the root state, or an internal sub-agent's `output_key` below the
        root into a visible subgraph's state."""
        every = frozenset().union(*self.keys.values())
        for option in ("internal_keys", "user_visible_keys"):
            for key in getattr(policy, option):
                if key not in every:
                    close = difflib.get_close_matches(key, sorted(every), n=3)
                    hint = (
                        f"did you mean {', '.join(map(repr, close))}?"
                        if close
                        else (f"the state keys are {', '.join(map(repr, sorted(every)))}.")
                    )
                    raise VisibilityConfigError(
                        f"VisibilityPolicy({option}=[...]): {key!r} is not a state key of "
                        f"this graph or of its subgraphs; {hint}"
                    )
        declared = set(policy.internal_keys) | set(policy.user_visible_keys)
        by_path = {node.path: node for node in self.nodes}

        def internal(node: TreeNode) -> Any:
            """The node's internal decision under any agent name it runs as (fail closed),
            else None."""
            tags = self.tags.get(node.path)
            for agent in (node.agent, *sorted(self.handed_by.get(node.path, ()))):
                decision = policy.explain(node.path, tags=tags, agent=agent, declared=node.declared)
                if decision.visibility == INTERNAL:
                    return decision
            return None

        for node in self.nodes:
            handed = self.handed.get(node.path, frozenset())
            if not (node.is_graph or handed):
                continue
            decision = internal(node)
            if decision is None:
                continue
            # Into its parent graph's state: the root's, or a visible subgraph's, whose own
            # snapshots (subgraphs=True, state reads) carry it (an internal one's are
            # dropped, and what it returns further up is checked as its own node's).
            parent = node.path.rpartition("/")[0]
            above = by_path.get(parent)
            if above is not None and internal(above) is not None:
                continue
            # Below the root, only what it surely writes: a sub-agent's `output_key`. A
            # subgraph's output keys include those it only hands back as it got them (one
            # state type shared by every graph), which at the root are asked for anyway.
            returned = handed if parent else self.outputs.get(node.path, frozenset()) | handed
            shared = sorted(
                (returned & self.keys.get(parent, frozenset())) - declared - {"messages"}
            )
            if shared:
                where = "the root state" if not parent else f"the state of {parent!r}"
                raise VisibilityConfigError(
                    f"node {node.path!r} is internal ({decision}) and returns the state key "
                    f"{shared[0]!r} into {where}, where every snapshot and state read "
                    f"would carry it. Declare it: VisibilityPolicy(internal_keys=[{shared[0]!r}]"
                    f") to keep it in, or user_visible_keys=[{shared[0]!r}] to let it out."
                )

    def check_patterns(self, policy: Any) -> None:
        """`check_pattern` for every pattern of `policy`."""
        for option in ("internal", "user_visible"):
            for pattern in getattr(policy, option):
                self.check_pattern(pattern, f"VisibilityPolicy({option}=[...])")

    def check_pattern(self, pattern: str, option: str) -> None:
        """Raise VisibilityConfigError if a literal segment of `pattern` names no node.

        A segment is checked against the nodes at its level; below a node whose children
        cannot be known statically (any node that is not a graph), nothing is checked.
        """
        positions: set[str] = {""}
        for i, seg in enumerate(pattern.split("/")):
            if seg == "**":
                positions |= {n.path for n in self.nodes if _under_any(n.path, positions)}
                continue
            found: set[str] = set()
            names: list[str] = []
            for at in positions:
                if self._remote(at):
                    if len(positions) == 1:
                        raise VisibilityConfigError(
                            f"{option}: pattern {pattern!r} reaches below {at!r}, a RemoteGraph "
                            "node: what it streams enters through that node's task and is judged "
                            f"as {at!r}'s, so a rule below it would not hold. Declare {at!r} "
                            "itself, or serve the remote graph enforced (with_visibility on the "
                            "LangGraph server that runs it)."
                        )
                    continue  # another position may match; nothing below it can
                children = self.children(at)
                if children is None:
                    return  # an open subtree: the rest of the pattern cannot be checked
                if seg not in children and seg not in ("*", "**") and self._open(at):
                    return  # another graph the node's function invokes may have it
                names += children
                if seg == "*":
                    found |= {_join(at, c) for c in children}
                elif seg in children:
                    found.add(_join(at, seg))
            if not found:
                level = " or ".join(sorted(repr(p) if p else "the root graph" for p in positions))
                close = difflib.get_close_matches(seg, sorted(set(names)), n=3)
                hint = (
                    f"did you mean {', '.join(map(repr, close))}?"
                    if close
                    else f"the nodes there are {', '.join(map(repr, sorted(set(names))))}."
                )
                what = "node" if seg != "*" else "node for '*'"
                raise VisibilityConfigError(
                    f"{option}: pattern {pattern!r}: segment {i + 1} {seg!r} names no {what} "
                    f"under {level}; {hint} (A pattern names nodes from the root graph down; "
                    "below a node that invokes a graph from its function it is not checked. "
                    "A `@task` is named under the node or entrypoint that calls it: "
                    "'<caller>/<task>'.)"
                )
            positions = found


def _join(at: str, name: str) -> str:
    return f"{at}/{name}" if at else name


def _under_any(path: str, roots: Iterable[str]) -> bool:
    return any(not r or path == r or path.startswith(f"{r}/") for r in roots)


def graph_tree(graph: Any) -> GraphTree:
    """The static tree of compiled `graph`.

    Raises:
        VisibilityConfigError: if a node declares an unknown visibility.
    """
    listed = static_subgraphs(graph)
    subgraph_paths = {"/".join(segs) for segs, _ in listed}
    # A remote graph's nodes and keys are not known before a run: its subtree is open.
    remote = {"/".join(segs) for segs, g in listed if opaque_graph(g)}
    graphs: list[tuple[tuple[str, ...], Any]] = [
        ((), graph),
        *((segs, g) for segs, g in listed if not opaque_graph(g)),
    ]
    nodes: list[TreeNode] = []
    # A run inherits the nearest agent name above it: create_agent sets it on its graph's
    # config, which also covers the node that runs that graph.
    agents: dict[str, str | None] = {}
    for segments, g in graphs:
        own = ((getattr(g, "config", None) or {}).get("metadata") or {}).get("lc_agent_name")
        parent = agents.get("/".join(segments[:-1])) if segments else None
        agents["/".join(segments)] = own if isinstance(own, str) else parent
    for segments, g in graphs:
        prefix = "/".join(segments)
        for name, node in getattr(g, "nodes", {}).items():
            if name in _OWN_NODES:
                continue
            path = f"{prefix}/{name}" if prefix else name
            # A wrapped graph's copy keeps it under the node key (see `_rules`).
            metadata = getattr(node, "metadata", None) or {}
            raw = metadata.get(NODE_DECLARATION_KEY, metadata.get(DECLARATION_KEY))
            declared = (
                None
                if raw is None
                else check_visibility(
                    raw,
                    where=f"add_node({name!r}, metadata={{'{DECLARATION_KEY}': ...}}) at {path!r}",
                )
            )
            is_graph = path in subgraph_paths
            agent = agents.get(path, agents[prefix]) if is_graph else agents[prefix]
            # Added as a graph, or a graph its function names (of which LangGraph lists one)
            found_in_function = is_graph and not added_as_graph(node)
            is_remote = path in remote
            nodes.append(
                TreeNode(path, declared, is_graph, agent, found_in_function or is_remote, is_remote)
            )
    keys = {"/".join(segs): state_keys(g) for segs, g in graphs}
    outputs = {"/".join(segs): output_keys(g) for segs, g in graphs if segs}
    # A graph found in a node's function is one of those the function may invoke: its keys
    # are not that node's graph's, known before the run.
    opened = [n.path for n in nodes if n.open]
    messages = {
        path: message_keys(g)
        for path, g in (("/".join(segs), g) for segs, g in graphs)
        if not _under_any(path, opened)
    }
    states = frozenset(
        schema
        for _, g in graphs
        for schema in (getattr(getattr(g, "builder", None), "schemas", None) or {})
        if isinstance(schema, type)
        and (issubclass(schema, BaseModel) or dataclasses.is_dataclass(schema))
    )
    subagents = {
        "/".join((*segs, name)): found
        for segs, g in graphs
        for name, node in getattr(g, "nodes", {}).items()
        if (found := _subagents(getattr(node, "bound", None)))
    }
    tags = {
        "/".join((*segs, name)): carried
        for segs, g in graphs
        for name, node in getattr(g, "nodes", {}).items()
        if (carried := _static_tags(getattr(node, "bound", None)))
    }
    bound: dict[str, tuple[NodeConfig, ...]] = {}
    for segs, g in graphs:
        for name, node in getattr(g, "nodes", {}).items():
            own = _own_config(getattr(node, "bound", None), name)
            if name not in _OWN_NODES and own != ((None, frozenset()),):
                bound["/".join((*segs, name))] = own
    handed = {
        name: frozenset().union(*(keys for keys, _ in found)) for name, found in subagents.items()
    }
    handed_by = {
        name: frozenset(agent for _, agent in found if agent is not None)
        for name, found in subagents.items()
    }
    return GraphTree(
        tuple(nodes),
        keys,
        outputs,
        messages=messages,
        handed=handed,
        handed_by=handed_by,
        tags=tags,
        bound=bound,
        states=states,
    )


def _bound(runnable: Any) -> Iterator[Any]:
    """A node's runnable and what it binds: under `with_config`/`bind`/`with_retry`
    (bindings) and `with_fallbacks` (each alternative), each once."""
    pending, seen = [runnable], set()
    while pending:
        item = pending.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        if isinstance(item, RunnableBindingBase):
            pending.append(item.bound)
        elif isinstance(item, RunnableWithFallbacks):
            pending.extend((item.runnable, *item.fallbacks))


def _subagents(runnable: Any) -> list[tuple[frozenset[str], str | None]]:
    """What the sub-agents a node runs hand back (`SubagentNode.lgv_hands_back`: their
    `output_key`s, their agent names), bound or not."""
    return [
        item.lgv_hands_back
        for item in _bound(runnable)
        if isinstance(getattr(type(item), "lgv_hands_back", None), property)
    ]


def _static_tags(runnable: Any) -> frozenset[str]:
    """The tags in the configs of a node's runnable and of what it binds (`with_config`,
    `with_retry`, a compiled graph's own config, every fallback)."""
    found: set[str] = set()
    for item in _bound(runnable):
        tags = (getattr(item, "config", None) or {}).get("tags")
        if isinstance(tags, (list, tuple)):
            found.update(t for t in tags if isinstance(t, str))
    return frozenset(found)


def _own_config(runnable: Any, name: str) -> tuple[NodeConfig, ...]:
    """(the `visibility` declared, the tags) in the configs of a node's runnable and of what
    it binds, as its runs get them: the outermost declaration (LangChain merges a call's
    metadata over a binding's own). Below a `with_fallbacks` whose alternatives are
    configured differently, which one runs is known only at run time: one for each."""
    declared: Visibility | None = None
    tags: set[str] = set()
    item = runnable
    while item is not None:
        # Its own (a `with_fallbacks` hands attribute reads on to its first runnable).
        config = getattr(item, "__dict__", {}).get("config") or {}
        meta = config.get("metadata") or {}
        if declared is None and DECLARATION_KEY in meta:
            where = f"with_config(metadata={{'{DECLARATION_KEY}': ...}}) of node {name!r}"
            declared = check_visibility(meta[DECLARATION_KEY], where=where)
        found = config.get("tags")
        if isinstance(found, (list, tuple)):
            tags.update(t for t in found if isinstance(t, str))
        if isinstance(item, RunnableBindingBase):
            item = item.bound
        elif isinstance(item, RunnableWithFallbacks):
            below = {
                alt for each in (item.runnable, *item.fallbacks) for alt in _own_config(each, name)
            }
            return tuple(
                (declared or alt_declared, frozenset(tags | alt_tags))
                for alt_declared, alt_tags in sorted(below, key=repr)
            )
        else:
            item = None
    return ((declared, frozenset(tags)),)


def check_typed_state(graph: Any, policy: Any) -> None:
    """Raise VisibilityConfigError for an internal key that the graph's Pydantic or
    dataclass state requires: v2 snapshots are built as that type after the key is dropped,
    so the run would fail at its first snapshot instead of at wrap time."""
    builder = getattr(graph, "builder", None)
    for role in ("output_schema", "state_schema"):
        schema: Any = getattr(builder, role, None)
        for key in policy.internal_keys:
            if _required_field(schema, key):
                raise VisibilityConfigError(
                    f"VisibilityPolicy(internal_keys=[{key!r}]): {key!r} is a required field "
                    f"of the graph's {role} {schema.__name__}; enforced v2 snapshots are "
                    f"built as {schema.__name__} without it. Give the field a default (for "
                    "example `None`), which the snapshots then show."
                )


def _required_field(schema: Any, key: str) -> bool:
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        field = schema.model_fields.get(key)
        return field is not None and field.is_required()
    if isinstance(schema, type) and dataclasses.is_dataclass(schema):
        for found in dataclasses.fields(schema):
            if found.name == key:
                return (
                    found.default is dataclasses.MISSING
                    and found.default_factory is dataclasses.MISSING
                )
    return False
