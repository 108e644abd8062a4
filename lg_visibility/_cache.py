"""What a node cache (`CachePolicy`) may answer an enforced run: entries written under the
same verdicts.

A cache hit runs no node: its writes come back as stored, with the tags of the run that
wrote them, as a checkpoint's do. An entry the raw graph, a run under another policy (a
staff view's `VisibilityHandler`) or the policy before a change wrote would answer a
client's run for a node it judges internal with messages tagged visible, or untagged,
and those would leave in `values`, `tasks` and `debug`. So an enforced run reads and
writes its graph's cache under keys of its own: LangGraph's key plus a digest of what
decides the tags (the policy, the static tree's declarations, and the ruled tags and
declarations of the call). Runs under the same verdicts share entries; no other run's
entry answers one, and `clear_cache` (by namespace) still clears them all.

A subgraph added as a node and compiled with a cache of its own runs its loop with that
one, not the run's: the enforced graph's copy of that subgraph holds it as a `HeldCache`
(used by nobody), and each run replaces that in copies of its own by the cache scoped
for the run. A subgraph a node's function invokes, or one inside a composition added as a
node, is not the copy's to change; two different graphs sharing one cache are not told
apart (LangGraph's own keys do not tell them apart either). See README, Known limits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackManager
from langgraph.cache.base import BaseCache, FullKey, Namespace

from lg_visibility._rules import DECLARATION_KEY, NODE_DECLARATION_KEY
from lg_visibility._run import RunState
from lg_visibility.policy import VisibilityPolicy

__all__ = ["HeldCache", "ScopedCache", "cache_scope", "held", "run_scoped"]

_AGENT_KEY = "lc_agent_name"


class _Over(BaseCache[Any]):
    """A cache over `inner`, the cache a graph was compiled with: cleared as `inner` is
    (`clear_cache` clears by namespace, every scope with it)."""

    def __init__(self, inner: BaseCache[Any]) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        self.inner.clear(namespaces)

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        await self.inner.aclear(namespaces)


class ScopedCache(_Over):
    """`inner`, read and written under keys that end in a run's scope. `scope` is called
    once, when the run first reads or writes the cache (a graph may have a cache and no
    node that uses it)."""

    def __init__(self, inner: BaseCache[Any], scope: Callable[[], str]) -> None:
        super().__init__(inner)
        self._scope = scope
        self._suffix_of_scope: str | None = None

    @property
    def _suffix(self) -> str:
        if self._suffix_of_scope is None:
            self._suffix_of_scope = f"#lg-visibility:{self._scope()}"
        return self._suffix_of_scope

    def _scoped(self, keys: Sequence[FullKey]) -> dict[FullKey, FullKey]:
        suffix = self._suffix
        return {(tuple(ns), key + suffix): (ns, key) for ns, key in keys}

    def _unscoped(self, keys: dict[FullKey, FullKey], found: Mapping[FullKey, Any]) -> Any:
        return {keys[(tuple(ns), key)]: value for (ns, key), value in found.items()}

    def _pairs(self, pairs: Mapping[FullKey, Any]) -> dict[FullKey, Any]:
        suffix = self._suffix
        return {(ns, key + suffix): value for (ns, key), value in pairs.items()}

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        scoped = self._scoped(keys)
        return self._unscoped(scoped, self.inner.get(list(scoped)))  # type: ignore[no-any-return]

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        scoped = self._scoped(keys)
        return self._unscoped(scoped, await self.inner.aget(list(scoped)))  # type: ignore[no-any-return]

    def set(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        self.inner.set(self._pairs(pairs))

    async def aset(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        await self.inner.aset(self._pairs(pairs))


class HeldCache(_Over):
    """`inner`, a subgraph's own cache, as the enforced graph's copy of that subgraph holds
    it: neither read nor written. A run of the enforced graph replaces it, in copies made
    for that run (`_compat.with_run_cache`), by `inner` scoped for the run; anywhere else
    (the enforced graph run as a node of a graph nobody wrapped, whose run decides nothing)
    no entry can be told to be the run's own, so none is used."""

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return {}

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return {}

    def set(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        return None

    async def aset(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        return None


def held(cache: BaseCache[Any]) -> BaseCache[Any]:
    """`cache` as the enforced graph's copy of a subgraph holds it (once)."""
    return cache if isinstance(cache, HeldCache) else HeldCache(cache)


def run_scoped(scope: Callable[[], str]) -> Callable[[BaseCache[Any]], BaseCache[Any]]:
    """What a run hands LangGraph for a cache: a `ScopedCache` of it (of the cache a
    `HeldCache` holds), under `scope`, made once for all the run's caches."""

    def scoped(cache: BaseCache[Any]) -> BaseCache[Any]:
        inner = cache.inner if isinstance(cache, HeldCache) else cache
        return ScopedCache(inner, scope)

    return scoped


def cache_scope(run: RunState, config: Mapping[str, Any]) -> str:
    """The scope of a run's cache entries: a digest of its policy, the static tree's
    declarations and what the call's `config` (tags and metadata, its own and those its
    callback manager hands down) adds to the rule chain's inputs for every run inside."""
    policy = run.policy
    tags = set(config.get("tags") or ())
    metadata = dict(config.get("metadata") or {})
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        tags.update(callbacks.inheritable_tags or ())
        metadata = {**(callbacks.inheritable_metadata or {}), **metadata}
    ruled = tuple(sorted(t for t in tags if t in policy.tags))
    declared = tuple(
        repr(metadata.get(key)) for key in (DECLARATION_KEY, NODE_DECLARATION_KEY, _AGENT_KEY)
    )
    return _digest(policy, _tree_of(run), ruled, declared)


def _tree_of(run: RunState) -> tuple[Any, ...]:
    return (
        tuple(sorted(run.declared.items())),
        tuple(sorted(run.agents.items())),
        tuple(
            sorted(
                (path, tuple((vis, tuple(sorted(tags))) for vis, tags in configs))
                for path, configs in run.bound.items()
            )
        ),
    )


def _digest(
    policy: VisibilityPolicy, tree: tuple[Any, ...], ruled: tuple[str, ...], declared: Any
) -> str:
    options = (
        tuple(sorted(policy.internal)),
        tuple(sorted(policy.user_visible)),
        policy.default,
        tuple(sorted(policy.agents.items())),
        tuple(sorted(policy.tags.items())),
        policy.filter_custom,
        tuple(sorted(policy.internal_keys)),
        tuple(sorted(policy.user_visible_keys)),
    )
    text = repr((options, tree, ruled, declared))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
