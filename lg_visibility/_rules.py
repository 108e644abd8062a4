"""The one ordered rule chain that decides a producer's visibility. Pure.

Precedence, the first rule that answers wins:

1. `declaration`: `{"visibility": ...}` in the run's own metadata: on the model (its
   constructor), on the call (`config={"metadata": ...}`, `with_config(metadata=...)`,
   also inside `prompt | model`), or inherited from an enclosing call inside a node (a graph
   or chain the node invokes with that config).
2. `node_declaration`: the nearest `add_node(..., metadata={"visibility": ...})` on the
   path. A wrapped graph keeps these under `NODE_DECLARATION_KEY`, not `visibility`, so
   that LangChain, which merges a call's config over a binding's own, cannot let a node's
   declaration overwrite a model's `with_config` one; a call-config declaration on the
   wrapped graph's own call joins them (it is the outermost node declaration). LangChain
   merges them into every run inside the node, the innermost winning.
3. `tag`: `VisibilityPolicy(tags={...})`, by a run tag; where two of a run's tags have
   rules that disagree, internal wins.
4. `agent`: `VisibilityPolicy(agents={...})`, by `create_agent(name=...)`.
5. `pattern`: the patterns of `internal=` / `user_visible=` (longest matching prefix).
6. `default`: `VisibilityPolicy(default=...)`.

Each rule returns a `VisibilityDecision` naming itself, or None to pass. A run is decided
once, when it starts; nothing here runs per token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from lg_visibility.errors import VisibilityConfigError

if TYPE_CHECKING:
    from lg_visibility.policy import VisibilityPolicy

__all__ = [
    "DECLARATION_KEY",
    "INTERNAL",
    "NODE_DECLARATION_KEY",
    "USER_VISIBLE",
    "Visibility",
    "VisibilityDecision",
    "check_visibility",
    "decide",
    "decide_run",
    "node_declaration",
]

Visibility = Literal["user_visible", "internal"]

DECLARATION_KEY = "visibility"
"""The metadata key a producer declares its own visibility with."""

NODE_DECLARATION_KEY = "lg_visibility_node"
"""The metadata key of a node's `add_node` declaration inside a wrapped graph (and of a
declaration on the wrapped graph's own call): set by `with_visibility`, never by users."""

RuleName = Literal["declaration", "node_declaration", "tag", "agent", "pattern", "default"]


class _Tag(str):
    """A visibility value that merges with itself.

    LangChain merges a streamed message's chunks by concatenating string metadata, so a
    plain "user_visible" on every chunk would become "user_visibleuser_visible..." (and cost
    quadratic time) in the final message. This str compares, hashes and serialises as the
    plain string, but `tag + tag` is `tag`.
    """

    __slots__ = ()

    def __add__(self, other: str) -> str:
        if other == self:
            return self
        return str.__add__(self, other)

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        # Pickle as a plain str: a checkpoint must not need lg_visibility to load.
        return (str, (str(self),))


USER_VISIBLE: Visibility = _Tag("user_visible")  # type: ignore[assignment]
INTERNAL: Visibility = _Tag("internal")  # type: ignore[assignment]
_VALUES = get_args(Visibility)


def check_visibility(value: object, *, where: str) -> Visibility:
    """Return the canonical tag for `value`, or raise VisibilityConfigError naming it."""
    if value == "user_visible":
        return USER_VISIBLE
    if value == "internal":
        return INTERNAL
    raise VisibilityConfigError(
        f"{where}: unknown visibility {value!r}; use one of {', '.join(map(repr, _VALUES))}."
    )


@dataclass(frozen=True, slots=True)
class VisibilityDecision:
    """A visibility and the rule that made it.

    Attributes:
        visibility: "user_visible" or "internal".
        rule: which rule decided: "declaration", "node_declaration", "tag", "agent",
            "pattern" or "default".
        detail: what matched: the pattern, the tag, the agent name, or the declaring path
            (None for the default and for a run's own declaration).
    """

    visibility: Visibility
    rule: RuleName
    detail: str | None = None

    def __str__(self) -> str:
        because = f"{self.rule} {self.detail!r}" if self.detail is not None else self.rule
        return f"{self.visibility} ({because})"


@dataclass(frozen=True, slots=True)
class _Query:
    path: str
    declared: object
    where: str | None
    node_declared: tuple[str | None, Visibility] | None
    tags: Iterable[str] | None
    agent: str | None


_Rule = Callable[["VisibilityPolicy", _Query], VisibilityDecision | None]


def _by_declaration(policy: VisibilityPolicy, q: _Query) -> VisibilityDecision | None:
    if q.declared is None:
        return None
    where = q.where or f"metadata {{'{DECLARATION_KEY}': ...}} of a run at {q.path or '(root)'!r}"
    return VisibilityDecision(check_visibility(q.declared, where=where), "declaration")


def _by_node_declaration(policy: VisibilityPolicy, q: _Query) -> VisibilityDecision | None:
    if q.node_declared is None:
        return None
    path, vis = q.node_declared
    return VisibilityDecision(vis, "node_declaration", path)


def _by_tag(policy: VisibilityPolicy, q: _Query) -> VisibilityDecision | None:
    # A run's tag list holds its own tags and those of every run around it, in an order
    # LangChain does not keep (a config merge sorts them), so which tag is the innermost
    # cannot be told: where the tags' rules disagree, internal wins.
    found = None
    if policy.tags and q.tags:
        for tag in q.tags:
            vis = policy.tags.get(tag)
            if vis == INTERNAL:
                return VisibilityDecision(vis, "tag", tag)
            if vis is not None and found is None:
                found = VisibilityDecision(vis, "tag", tag)
    return found


def _by_agent(policy: VisibilityPolicy, q: _Query) -> VisibilityDecision | None:
    if q.agent is not None and policy.agents:
        vis = policy.agents.get(q.agent)
        if vis is not None:
            return VisibilityDecision(vis, "agent", q.agent)
    return None


def _by_pattern(policy: VisibilityPolicy, q: _Query) -> VisibilityDecision | None:
    # The patterns always answer: with the default where none matches.
    return policy.for_path_decision(q.path)


RULES: tuple[_Rule, ...] = (
    _by_declaration,
    _by_node_declaration,
    _by_tag,
    _by_agent,
    _by_pattern,
)
"""The chain, in precedence order. `_by_pattern` answers last, with the default."""


def decide(
    policy: VisibilityPolicy,
    path: str,
    *,
    declared: object = None,
    where: str | None = None,
    node_declared: tuple[str | None, Visibility] | None = None,
    tags: Iterable[str] | None = None,
    agent: str | None = None,
) -> VisibilityDecision:
    """Run the chain for output produced at `path`.

    Args:
        policy: the policy whose tag, agent and pattern rules apply.
        path: the producer's path ("a/b/c"; "" for the root graph).
        declared: the `visibility` value of the run's own metadata, if any.
        where: how to name that declaration in an error (it is checked here).
        node_declared: (declaring path, visibility) of the nearest `add_node` declaration
            (the path None where only the value is known: a run's inherited metadata).
        tags: the run's tags.
        agent: the run's `lc_agent_name`.

    Raises:
        VisibilityConfigError: if `declared` is not a visibility value.
    """
    q = _Query(path, declared, where, node_declared, tags, agent)
    for rule in RULES:
        found = rule(policy, q)
        if found is not None:
            return found
    raise AssertionError("the pattern rule always answers")  # pragma: no cover


_RUNS_MEMO_MAX = 4096
"""How many distinct run inputs a policy remembers the answer for (then it starts over)."""


def decide_run(
    policy: VisibilityPolicy,
    path: str,
    metadata: Mapping[str, object],
    tags: Iterable[str] | None,
) -> Visibility:
    """The visibility of a run from its LangChain metadata and tags (the handler's question).

    The rule chain is pure: its answer is remembered per policy, keyed by exactly what the
    chain reads (the path, both declarations, the agent name, and the run's tags that the
    policy has rules for, in order). A value the chain refuses is never remembered.
    """
    declared = metadata.get(DECLARATION_KEY)
    node = metadata.get(NODE_DECLARATION_KEY)
    agent = metadata.get("lc_agent_name")
    rules = policy.tags
    ruled = tuple(t for t in tags if t in rules) if rules and tags else None
    key = (path, declared, node, agent, ruled)
    memo: dict[Any, Visibility] | None = policy._runs
    try:
        found = memo.get(key)  # type: ignore[union-attr]
    except TypeError:  # an unhashable declaration: the chain refuses it below
        found = memo = None
    if found is not None:
        return found
    vis = decide(
        policy,
        path,
        declared=declared,
        node_declared=node_declaration(metadata, path),
        tags=ruled,
        agent=agent if isinstance(agent, str) else None,
    ).visibility
    if memo is not None:
        if len(memo) >= _RUNS_MEMO_MAX:
            memo.clear()
        memo[key] = vis
    return vis


def node_declaration(
    metadata: Mapping[str, object], path: str
) -> tuple[str | None, Visibility] | None:
    """(None, visibility) of the node declaration a run's metadata inherits, if any."""
    value = metadata.get(NODE_DECLARATION_KEY)
    if value is None:
        return None
    where = f"metadata {{'{NODE_DECLARATION_KEY}': ...}} of a run at {path or '(root)'!r}"
    return None, check_visibility(value, where=where)
