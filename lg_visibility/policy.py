"""VisibilityPolicy: which producer paths are user-visible and which are internal. Pure.

A *path* names where an output was produced: the node names from the root graph down to
the producing node, joined by "/", task ids stripped (`knowledge_subgraph/model`). The root
graph has the empty path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lg_visibility._rules import (
    INTERNAL,
    USER_VISIBLE,
    Visibility,
    VisibilityDecision,
    check_visibility,
    decide,
)
from lg_visibility.errors import VisibilityConfigError

__all__ = ["INTERNAL", "USER_VISIBLE", "Visibility", "VisibilityDecision", "VisibilityPolicy"]

_CACHED_PATHS = 1024
"""Paths remembered per policy (least recently used evicted); a graph has a few dozen."""


class _Rules(dict[str, Visibility]):
    """A policy's tag or agent rules: a dict (it prints, serialises, compares and copies as
    one) that cannot be changed once made, since the policy's memos rely on its rules."""

    __slots__ = ()

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a VisibilityPolicy's rules cannot be changed; make a new policy")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))

    def __copy__(self) -> _Rules:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _Rules:
        return self


@dataclass(frozen=True)
class _Pattern:
    text: str
    segments: tuple[str, ...]
    visibility: Visibility
    literals: int

    def longest_prefix(self, path: tuple[str, ...]) -> int:
        """Length of the longest prefix of `path` this pattern matches fully, or -1."""
        best = -1
        # (pattern index, path index) pairs still to explore; paths and patterns are short.
        todo = [(0, 0)]
        seen: set[tuple[int, int]] = set()
        while todo:
            i, j = todo.pop()
            if (i, j) in seen:
                continue
            seen.add((i, j))
            if i == len(self.segments):
                best = max(best, j)
                continue
            seg = self.segments[i]
            if seg == "**":
                todo.append((i + 1, j))
                if j < len(path):
                    todo.append((i, j + 1))
            elif j < len(path) and (seg == "*" or seg == path[j]):
                todo.append((i + 1, j + 1))
        return best


def _parse_pattern(text: object, visibility: Visibility, option: str) -> _Pattern:
    if not isinstance(text, str):
        raise VisibilityConfigError(
            f"{option}: a pattern must be a str like 'router_subgraph/**', got "
            f"{type(text).__name__} {text!r}."
        )
    if text.strip() == "" or text.startswith("/") or text.endswith("/") or "//" in text:
        raise VisibilityConfigError(
            f"{option}: malformed pattern {text!r}: write node names joined by '/', with no "
            "empty segment (the root graph is covered by `default=`)."
        )
    segments = tuple(text.split("/"))
    for seg in segments:
        if seg in ("*", "**"):
            continue
        if "*" in seg:
            raise VisibilityConfigError(
                f"{option}: malformed pattern {text!r}: segment {seg!r} mixes '*' with a "
                "name; '*' and '**' must stand alone as a whole segment."
            )
        if ":" in seg or "|" in seg:
            raise VisibilityConfigError(
                f"{option}: malformed pattern {text!r}: segment {seg!r} contains ':' or '|'. "
                "Paths use node names only (task ids are stripped), e.g. 'router_subgraph/route'."
            )
        if seg != seg.strip():
            raise VisibilityConfigError(
                f"{option}: malformed pattern {text!r}: segment {seg!r} has surrounding spaces."
            )
    literals = sum(1 for s in segments if s not in ("*", "**"))
    # A pattern covers everything beneath what it matches, so a trailing `**` adds nothing.
    # Matched as written it would consume the whole path, and `a/**` would out-rank the more
    # specific `a/secret` on `a/secret/model`.
    while segments and segments[-1] == "**":
        segments = segments[:-1]
    return _Pattern(text, segments, visibility, literals)


def _list_option(value: object, option: str, of: str) -> tuple[Any, ...]:
    if isinstance(value, str):
        raise VisibilityConfigError(
            f"{option} must be a list of {of}, got the str {value!r}; write {option}=[{value!r}]."
        )
    if not isinstance(value, Iterable):
        raise VisibilityConfigError(
            f"{option} must be a list of {of}, got {type(value).__name__} {value!r}."
        )
    return tuple(value)


def _pattern_list(value: object, option: str) -> tuple[str, ...]:
    return _list_option(value, option, "patterns")  # each is checked when it is parsed


def _key_list(value: object, option: str) -> tuple[str, ...]:
    keys = _list_option(value, option, "state keys")
    for key in keys:
        if not isinstance(key, str) or not key:
            raise VisibilityConfigError(
                f"{option}: a state key must be a non-empty str, got {key!r}."
            )
        if key == "messages":
            raise VisibilityConfigError(
                f"{option}: 'messages' is judged message by message, by tag and id; list "
                "only the other state keys here."
            )
    return tuple(sorted(set(keys)))


def _rule_map(value: object, option: str) -> tuple[tuple[str, Visibility], ...]:
    if not isinstance(value, Mapping):
        raise VisibilityConfigError(
            f"{option} must map names to 'user_visible' or 'internal', got "
            f"{type(value).__name__} {value!r}."
        )
    out = []
    for key, vis in value.items():
        if not isinstance(key, str) or not key:
            raise VisibilityConfigError(f"{option}: keys must be non-empty str, got {key!r}.")
        out.append((key, check_visibility(vis, where=f"{option}[{key!r}]")))
    return tuple(out)


@dataclass(frozen=True)
class VisibilityPolicy:
    """Which producers' output is for the user.

    Args:
        internal: path patterns whose output is internal.
        user_visible: path patterns whose output is user-visible.
        default: the visibility of a path no pattern matches; "internal" fails closed.
        agents: visibility by `create_agent(name=...)` (the `lc_agent_name` of a run).
        tags: visibility by a run tag (e.g. `config={"tags": ["kn_internal"]}` on a call);
            where two tags of a run (its own or inherited) have rules that disagree,
            internal wins.
        filter_custom: put `custom` stream events under the policy too: judged where they
            are written, by the node (task) that writes them, the namespace of its graph,
            and the body of an internal tool (or of a chain a node runs with an internal
            tag or declaration); `astream_events`' custom events by their run, task and
            namespace. By default they pass: they are explicit pushes.
        internal_keys: state keys (other than messages) whose values never leave: dropped
            from snapshots, updates, task inputs and results, events and state reads.
        user_visible_keys: state keys declared fit to leave; with `internal_keys`, this is
            how a key an internal node shares with the root state is declared either way
            (`with_visibility` refuses an undeclared one).

    Patterns are node names joined by "/"; `*` matches one segment and `**` zero or more;
    a pattern also covers everything beneath what it matches. The pattern matching the
    longest prefix of a path wins; at equal length the one with more literal segments wins;
    a remaining tie goes to internal.

    Raises:
        VisibilityConfigError: for an unknown visibility value or a malformed pattern.
    """

    internal: Iterable[str] = ()
    user_visible: Iterable[str] = ()
    default: Visibility = "user_visible"
    agents: Mapping[str, Visibility] = field(default_factory=dict)
    tags: Mapping[str, Visibility] = field(default_factory=dict)
    filter_custom: bool = False
    internal_keys: Iterable[str] = ()
    user_visible_keys: Iterable[str] = ()
    _patterns: tuple[_Pattern, ...] = field(init=False, repr=False, compare=False)
    _match: Callable[[str], VisibilityDecision] = field(init=False, repr=False, compare=False)
    _runs: dict[Any, Visibility] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        internal = _pattern_list(self.internal, "internal")
        visible = _pattern_list(self.user_visible, "user_visible")
        both = sorted(set(internal) & set(visible))
        if both:
            raise VisibilityConfigError(
                f"pattern {both[0]!r} is listed both as internal and as user_visible; keep it "
                "in one list."
            )
        if not isinstance(self.filter_custom, bool):
            raise VisibilityConfigError(
                f"filter_custom must be True or False, got {self.filter_custom!r}."
            )
        internal_keys = _key_list(self.internal_keys, "internal_keys")
        visible_keys = _key_list(self.user_visible_keys, "user_visible_keys")
        both = sorted(set(internal_keys) & set(visible_keys))
        if both:
            raise VisibilityConfigError(
                f"key {both[0]!r} is listed both in internal_keys and in user_visible_keys; "
                "keep it in one list."
            )
        setattr_ = object.__setattr__
        setattr_(self, "internal_keys", internal_keys)
        setattr_(self, "user_visible_keys", visible_keys)
        setattr_(self, "internal", internal)
        setattr_(self, "user_visible", visible)
        setattr_(self, "default", check_visibility(self.default, where="default"))
        # Read-only: a policy never changes (its memos rely on it).
        setattr_(self, "agents", _Rules(_rule_map(self.agents, "agents")))
        setattr_(self, "tags", _Rules(_rule_map(self.tags, "tags")))
        setattr_(
            self,
            "_patterns",
            tuple(_parse_pattern(p, INTERNAL, "internal") for p in internal)
            + tuple(_parse_pattern(p, USER_VISIBLE, "user_visible") for p in visible),
        )
        # A bounded, thread-safe memo of a pure function: the policy itself never changes.
        setattr_(self, "_match", functools.lru_cache(maxsize=_CACHED_PATHS)(self._match_path))
        # What `decide_run` answered, by the inputs the rule chain reads (bounded there).
        setattr_(self, "_runs", {})

    def __hash__(self) -> int:
        return hash(
            (
                self.internal,
                self.user_visible,
                self.default,
                frozenset(self.agents.items()),
                frozenset(self.tags.items()),
                self.filter_custom,
                self.internal_keys,
                self.user_visible_keys,
            )
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its options: the memo is not state worth pickling.
        return (
            type(self),
            (
                self.internal,
                self.user_visible,
                self.default,
                self.agents,
                self.tags,
                self.filter_custom,
                self.internal_keys,
                self.user_visible_keys,
            ),
        )

    def _match_path(self, path: str) -> VisibilityDecision:
        segments = tuple(path.split("/")) if path else ()
        best: tuple[int, int, int] | None = None  # (prefix length, literals, internal first)
        found: _Pattern | None = None
        for pattern in self._patterns:
            length = pattern.longest_prefix(segments)
            if length < 0:
                continue
            rank = (length, pattern.literals, pattern.visibility == INTERNAL)
            if best is None or rank > best:
                best, found = rank, pattern
        if found is None:
            return VisibilityDecision(self.default, "default")
        return VisibilityDecision(found.visibility, "pattern", found.text)

    def for_path_decision(self, path: str) -> VisibilityDecision:
        """The pattern (or default) decision for a path like "a/b/c"."""
        return self._match(path)

    def for_path(self, path: str) -> Visibility:
        """The visibility the patterns (or the default) give a path like "a/b/c"."""
        return self._match(path).visibility

    def decide(
        self,
        path: str,
        *,
        tags: Iterable[str] | None = None,
        agent: str | None = None,
    ) -> Visibility:
        """Visibility of output produced at `path`, by a run with `tags` in agent `agent`.

        Tag rules beat agent rules, which beat path patterns. (Producer declarations, which
        beat all of these, are read from run metadata by the handler.)
        """
        return decide(self, path, tags=tags, agent=agent).visibility

    def explain(
        self,
        path: str,
        *,
        tags: Iterable[str] | None = None,
        agent: str | None = None,
        declared: Visibility | None = None,
    ) -> VisibilityDecision:
        """The decision for output produced at `path`, and the rule that made it.

        Args:
            path: the producer's path ("a/b/c"; "" for the root graph).
            tags: the run's tags, for the tag rules.
            agent: the `create_agent(name=...)` of the run, for the agent rules.
            declared: a producer declaration (`{"visibility": ...}` metadata), which beats
                every rule of the policy.

        Raises:
            VisibilityConfigError: if `declared` is not a visibility value.
        """
        return decide(self, path, declared=declared, tags=tags, agent=agent)
