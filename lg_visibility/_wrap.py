"""with_visibility / compile_with_visibility: a compiled graph whose stream only carries
user-visible events.

The wrapped graph is a subclass of the compiled graph's own class. Its policy is a class
attribute, so it survives `graph.copy()` (the LangGraph server copies the graph per run
through `__init__`, which drops unknown instance attributes). Enforcement happens in
`stream`/`astream`, the one choke point every LangGraph entry point (invoke, the server,
astream_events, stream_events v3) goes through, and only where the stream leaves the
outermost graph: run as a node of another graph, the wrapped graph behaves like the raw one.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import types
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from functools import partial
from typing import Any, ClassVar
from uuid import UUID, uuid4

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from lg_visibility._cache import cache_scope, held, run_scoped
from lg_visibility._compat import (
    astream_events_v2_with,
    decide_before_logging,
    ensure_config,
    events_v1_log_handler,
    has_saved_state,
    has_subgraph_cache,
    is_task_config,
    node_copies,
    pregel_astream_with,
    pregel_base,
    pregel_stream_with,
    rebuild_as,
    with_run_cache,
)
from lg_visibility._events import EventFilter
from lg_visibility._handlers import (
    EnforcingHandler,
    EnforcingHandlerV2,
    EventsHandler,
    VisibilityHandler,
)
from lg_visibility._output_filter import DROP, HELD_MODES, HeldPut, OutputFilter, held_write
from lg_visibility._rules import (
    DECLARATION_KEY,
    NODE_DECLARATION_KEY,
    Visibility,
    check_visibility,
)
from lg_visibility._run import RunState
from lg_visibility._state import (
    RawStateReads,
    StateRedactor,
    acall_raw,
    aiter_raw,
    call_raw,
    iter_raw,
    reading_raw,
)
from lg_visibility._tree import NodeConfig, check_typed_state, graph_tree
from lg_visibility.errors import VisibilityConfigError
from lg_visibility.policy import VisibilityPolicy

__all__ = ["compile_with_visibility", "internal_at", "with_visibility"]

# Set while `invoke`/`ainvoke` collect the final state: that state is returned as the raw
# graph returns it (tagged, not redacted).
_COLLECTING_STATE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "lg_visibility_collecting_state", default=False
)


# run id of an astream_events call -> the RunState its enforced astream decides into, so
# that the event filter judges with the same internal ids and task decisions.
_EVENT_RUNS: dict[UUID, list[RunState]] = {}

# An enforced graph -> the redactor of its state reads. Its tree and policy do not change
# once wrapped, and redacting records nothing, so one serves every read: built on a read,
# with the objects the read just made in the cache, it costs about 0.15 ms, 0.7% of a
# 2000-message `aget_state`. A copy (the LangGraph server copies per run) builds its own.
_REDACTORS: weakref.WeakKeyDictionary[Any, StateRedactor] = weakref.WeakKeyDictionary()


_NODE_MODES = frozenset({"updates", "tasks", "debug"})
_STARTS_MODES = frozenset({"tasks", "debug"})


def _resumes(input: Any) -> bool:
    """Whether a run's input continues a thread's saved run (None after an interrupt, or a
    Command: resume, update, goto) rather than starting one."""
    return input is None or isinstance(input, Command)


class _Plan:
    __slots__ = (
        "config",
        "filter",
        "graph",
        "notes_tasks",
        "run",
        "run_mode",
        "saved",
        "stream_mode",
    )

    def __init__(
        self,
        graph: Any,
        run: RunState,
        config: RunnableConfig | None,
        stream_mode: Any,
        filter: OutputFilter | None,
        run_mode: Any = None,
        saved: RunnableConfig | None = None,
        notes_tasks: bool = False,
    ) -> None:
        self.graph = graph
        self.run = run
        self.config = config
        self.stream_mode = stream_mode  # the caller's: the shape of what is yielded
        self.run_mode = stream_mode if run_mode is None else run_mode  # what LangGraph queues
        self.filter = filter
        # The config a resumed run's saved state is read with before it starts, if it is.
        self.saved = saved
        # Whether LangGraph queues task starts for this run (asked, printed, or added for
        # `updates`): a `@task`'s is decided where it is put (`noting_called_tasks`).
        self.notes_tasks = notes_tasks

    def start(
        self,
        copy_stream: Any,
        input: Any,
        subgraphs: bool,
        version: str,
        kw: Any,
        *,
        early_drop: bool = False,
    ) -> Any:
        """LangGraph's stream (or astream), copied for this run with our handlers and our
        judge in its output path, started: its own generator, with no layer of ours.
        `early_drop` (with subgraphs): where its subgraphs push into the run's queue, what
        the judge would drop by namespace is dropped before it is queued, decided on the
        subgraph's own thread, in the order its events are made."""
        run, flt = self.run, self.filter
        extra: dict[str, Any] = {"sink": flt.sink} if early_drop and flt is not None else {}
        modes = (self.run_mode,) if isinstance(self.run_mode, str) else self.run_mode
        if flt is not None and not HELD_MODES.isdisjoint(modes):
            # An event may hold the state's own lists, which a node may append to in place
            # after it is put: copied as it is put (`HeldPut`).
            extra["hold"] = HeldPut
        if flt is not None and "custom" in modes:
            extra["held_write"] = held_write
        if flt is not None and self.notes_tasks:
            # A `@task`'s start event names neither its caller nor its path: decided where
            # it is put, in its caller's context.
            extra["note"] = flt.noting_called_tasks
        if run.policy.filter_custom:
            # A `custom` write names no run: it is judged where it is made, by the run whose
            # body makes it (an internal tool's), the task that makes it and its namespace.
            extra["drops_write"] = _custom_drop(run, flt)
        fn = copy_stream(
            partial(EnforcingHandler, run),
            partial(EnforcingHandlerV2, run),
            None if flt is None else flt.judged,
            self.stream_mode,
            **extra,
        )
        return fn(
            self.graph,
            input,
            self.config,
            stream_mode=self.run_mode,
            subgraphs=subgraphs,
            version=version,
            **kw,
        )


def _custom_drop(run: RunState, flt: OutputFilter | None) -> Callable[[], bool]:
    """What drops a `custom` write where it is made, under `filter_custom`: made in an
    internal tool's body, by a task decided internal, or in an internal namespace. A run
    without an output filter (`invoke` collecting `values` only) has no `custom` mode, so
    its writer writes nothing; only the first is judged there."""
    in_internal_run = run.in_internal_run
    if flt is None:
        return in_internal_run
    by_namespace = flt.custom_internal_here

    def drops() -> bool:
        return in_internal_run() or by_namespace()

    return drops


def _split_callbacks(callbacks: Any) -> tuple[Any, VisibilityPolicy | None]:
    """Callbacks without VisibilityHandlers, and the policy of the last one found."""
    if callbacks is None:
        return None, None
    if isinstance(callbacks, BaseCallbackManager):
        found = [h for h in callbacks.handlers if isinstance(h, VisibilityHandler)]
        if not found:
            return callbacks, None
        manager = callbacks.copy()
        for handler in found:
            manager.remove_handler(handler)
        return manager, found[-1].policy
    found = [h for h in callbacks if isinstance(h, VisibilityHandler)]
    if not found:
        return callbacks, None
    return [h for h in callbacks if not isinstance(h, VisibilityHandler)], found[-1].policy


def _with_callback(callbacks: Any, handler: VisibilityHandler) -> Any:
    """`callbacks` with `handler` first: it tags what a run produces before any other
    handler (astream_events v1's log handler, a tracer) is handed it."""
    if callbacks is None:
        return [handler]
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
        manager.handlers = [handler, *manager.handlers]
        manager.inheritable_handlers = [handler, *manager.inheritable_handlers]
        return manager
    return [handler, *callbacks]


def _events_handler_decides(callbacks: Any, slot: list[RunState] | None, run: RunState) -> bool:
    """Whether `callbacks` hold the `EventsHandler` of this run's astream_events call, which
    decides and tags into `run` (so no tagging callback is needed beside it)."""
    if not slot or slot[0] is not run or callbacks is None:
        return False
    handlers = callbacks.handlers if isinstance(callbacks, BaseCallbackManager) else callbacks
    return any(type(h) is EventsHandler and h.slot is slot for h in handlers)


def _folded(config: Any, where: str) -> Any:
    """`config` with a `visibility` declaration in its metadata moved to the node key.

    A declaration on the wrapped graph's call (or bound to it with `with_config`) is the
    outermost node declaration of every run inside: kept under `visibility`, it would beat
    the graph's own `add_node` declarations (innermost must win), and LangChain would merge
    it over a model's `with_config(metadata=...)` inside `prompt | model`.
    """
    metadata = (config or {}).get("metadata")
    if not metadata or DECLARATION_KEY not in metadata:
        return config
    vis = check_visibility(metadata[DECLARATION_KEY], where=where)
    rest = {k: v for k, v in metadata.items() if k != DECLARATION_KEY}
    return {**config, "metadata": {**rest, NODE_DECLARATION_KEY: vis}}


def _refuse_internal_output_key(output_keys: Any, graph: Any, policy: VisibilityPolicy) -> None:
    """Refuse a run whose output is one state key (`output_keys` a string) that the policy
    calls internal: LangGraph then streams that key's value itself as every snapshot and
    update, with no key around it to drop (a list of keys is redacted as usual).

    Raises:
        VisibilityConfigError: naming the key and the fix.
    """
    keys = output_keys if output_keys is not None else getattr(graph, "output_channels", None)
    if isinstance(keys, str) and keys in policy.internal_keys:
        given = "output_keys" if output_keys is not None else "the graph's output_channels"
        raise VisibilityConfigError(
            f"{given}={keys!r} names a key of VisibilityPolicy(internal_keys=...): LangGraph "
            "streams that key's value itself, and an internal key's value never leaves an "
            f"enforced graph. Pass a list (output_keys=[{keys!r}]) for snapshots and updates "
            "without it, or stream another key."
        )


class _VisibleGraph:
    """Mixin placed before the compiled graph's class by `with_visibility`."""

    _lgv_policy: ClassVar[VisibilityPolicy]
    config: RunnableConfig | None
    stream_mode: Any

    @property
    def visibility_policy(self) -> VisibilityPolicy:
        """The policy this graph enforces when its stream leaves the outermost graph."""
        return self._lgv_policy

    def _lgv_folded(self, config: RunnableConfig | None) -> tuple[Any, Any]:
        """(graph, config) with the call's and the bound config's declaration folded."""
        graph: Any = self
        bound = _folded(self.config, "with_config(metadata={'visibility': ...}) of the graph")
        if bound is not self.config:
            graph = copy.copy(self)
            graph.config = bound
        return graph, _folded(config, "config={'metadata': {'visibility': ...}} of the call")

    def _lgv_plan(
        self,
        input: Any,
        config: RunnableConfig | None,
        stream_mode: Any,
        subgraphs: bool,
        version: str,
        kwargs: Any = None,
    ) -> _Plan | None:
        collecting = _COLLECTING_STATE.get()
        if collecting:
            # Consumed here, by the run invoke is for, so a graph that one of its nodes
            # streams is judged as usual.
            _COLLECTING_STATE.set(False)
        merged = ensure_config(self.config, config)
        if is_task_config(merged):
            return None  # a node of another graph: enforcement belongs to the outermost one
        callbacks, override = _split_callbacks((config or {}).get("callbacks"))
        if override is None:
            _, override = _split_callbacks(merged.get("callbacks"))
        graph, config = self._lgv_folded(config)
        bound, bound_override = _split_callbacks((graph.config or {}).get("callbacks"))
        if bound_override is not None:
            # A handler bound with with_config(callbacks=[...]) stands for a policy too. Left
            # attached it would tag this run with its own policy ahead of the enforcing
            # handler, which keeps a tag it finds: run a shallow copy of the graph without it.
            if graph is self:
                graph = copy.copy(self)
            graph.config = {**(graph.config or {}), "callbacks": bound}
        run = _run_state(self, override or self._lgv_policy)
        event_run = _EVENT_RUNS.get(merged.get("run_id"))  # type: ignore[arg-type]
        if event_run is not None and not event_run:
            event_run.append(run)
        if stream_mode is None:
            stream_mode = self.stream_mode
        modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
        if "messages" not in modes and not _events_handler_decides(callbacks, event_run, run):
            # No messages handler is built for this run: tag with a callback instead, so
            # that state, checkpoints and snapshots still carry the decisions (unless the
            # astream_events v2 handler of this call is ours, and decides and tags). Under
            # astream_events v1 the tagger decides inside LangChain's log handler, which a
            # merge of callback managers may put ahead of any other handler (`_compat`).
            tagger = VisibilityHandler._for_run(run)
            log = events_v1_log_handler(callbacks) if event_run is not None else None
            if log is None or not decide_before_logging(log, tagger):
                callbacks = _with_callback(callbacks, tagger)
        config = {**(config or {}), "callbacks": callbacks}
        # A node cache answers this run only with entries written under its verdicts.
        graph, config = with_run_cache(
            graph,
            config,
            merged,
            run_scoped(partial(cache_scope, run, merged)),
            _has_subgraph_cache(self),
        )
        if collecting:
            return _Plan(graph, run, config, stream_mode, None)
        kwargs = kwargs or {}
        _refuse_internal_output_key(kwargs.get("output_keys"), graph, run.policy)
        flt = OutputFilter(run)
        # Only these modes' events name a node without its task (see `node_decisions`);
        # LangGraph also queues (and prints) updates for `print_mode` and `debug`.
        printing = bool(
            kwargs.get("print_mode") or kwargs.get("debug") or getattr(self, "debug", False)
        )
        run.records_nodes = not _NODE_MODES.isdisjoint(modes) or printing
        shows_starts = not _STARTS_MODES.isdisjoint(modes)
        run_mode = None
        if "updates" in modes and not shows_starts:
            # An update LangGraph replays from pending writes after a resume has no run of
            # its own to be decided by; the task-start events LangGraph emits just before it
            # carry the metadata its run would have had. Asked for and judged; LangGraph
            # formats for the caller's stream_mode, so they are never delivered.
            run_mode = [*modes, "tasks"]
        # A resumed run whose task starts leave (tasks/debug, printed, astream_events' chain
        # starts: they carry a pending call before any run inside its task starts, see
        # `RunState.note_pending`) first reads its saved state, as the run itself will.
        saved = None
        if (
            _resumes(input)
            and (shows_starts or printing or event_run is not None)
            and has_saved_state(self, merged)
        ):
            saved = merged
        notes_tasks = shows_starts or printing or run_mode is not None
        return _Plan(graph, run, config, stream_mode, flt, run_mode, saved, notes_tasks)

    @staticmethod
    def _lgv_started(
        plan: _Plan,
        copy_stream: Any,
        resumed: Any,
        input: Any,
        subgraphs: bool,
        version: str,
        kw: Any,
    ) -> Any:
        """The planned run started: LangGraph's generator, or for a run that reads its saved
        state first, `resumed(run, config, generator)`, ours around it."""
        items = plan.start(copy_stream, input, subgraphs, version, kw, early_drop=subgraphs)
        return items if plan.saved is None else resumed(plan.run, plan.saved, items)

    # stream/astream are plain methods, not generators: the run is planned when they are
    # called, and what they return is LangGraph's own generator (closing and cancelling it
    # are LangGraph's), its output judged inside it by `OutputFilter.judged`; only a run
    # that resumes a saved thread and shows task starts gets one of ours around it, to
    # read the saved state first (closing it closes LangGraph's).

    def stream(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        stream_mode: Any = None,
        subgraphs: bool = False,
        version: str = "v1",
        **kwargs: Any,
    ) -> Iterator[Any]:
        plan = self._lgv_plan(input, config, stream_mode, subgraphs, version, kwargs)
        if plan is None:
            graph, config = self._lgv_folded(config)
            return super(_VisibleGraph, graph).stream(  # type: ignore[misc, no-any-return]
                input,
                config,
                stream_mode=stream_mode,
                subgraphs=subgraphs,
                version=version,
                **kwargs,
            )
        return self._lgv_started(  # type: ignore[no-any-return]
            plan, pregel_stream_with, self._lgv_resumed, input, subgraphs, version, kwargs
        )

    def _lgv_resumed(self, run: RunState, config: Any, items: Iterator[Any]) -> Iterator[Any]:
        # A resumed run's generator: the saved state read before LangGraph's loop starts
        # (a generator of ours, one hop per item, only where a run resumes and shows task
        # starts). `yield from` closes LangGraph's generator with this one.
        run.note_pending(call_raw(super().get_state, config, subgraphs=True))  # type: ignore[misc]
        yield from items

    def astream(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        stream_mode: Any = None,
        subgraphs: bool = False,
        version: str = "v1",
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        plan = self._lgv_plan(input, config, stream_mode, subgraphs, version, kwargs)
        if plan is None:
            graph, config = self._lgv_folded(config)
            return super(_VisibleGraph, graph).astream(  # type: ignore[misc, no-any-return]
                input,
                config,
                stream_mode=stream_mode,
                subgraphs=subgraphs,
                version=version,
                **kwargs,
            )
        return self._lgv_started(  # type: ignore[no-any-return]
            plan, pregel_astream_with, self._lgv_aresumed, input, subgraphs, version, kwargs
        )

    async def _lgv_aresumed(
        self, run: RunState, config: Any, items: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        """As `_lgv_resumed`, async: LangGraph's generator is closed with this one."""
        try:
            saved = await acall_raw(super().aget_state, config, subgraphs=True)  # type: ignore[misc]
            run.note_pending(saved)
            async for item in items:
                yield item
        finally:
            # At loop shutdown asyncio closes both generators at once: LangGraph's may be
            # closing already.
            if not getattr(items, "ag_running", False):
                await items.aclose()  # type: ignore[attr-defined]

    def astream_events(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        version: str = "v2",
        **kwargs: Any,
    ) -> Any:
        if version not in ("v1", "v2") or is_task_config(ensure_config(self.config, config)):
            # v3 runs on the enforced astream; a task's config: the outermost graph enforces.
            return super().astream_events(input, config, version=version, **kwargs)  # type: ignore[misc]
        return self._lgv_events(input, config, version, kwargs)

    async def _lgv_events(
        self, input: Any, config: RunnableConfig | None, version: str, kwargs: Any
    ) -> AsyncIterator[Any]:
        run_id = (config or {}).get("run_id") or uuid4()
        config = {**(config or {}), "run_id": run_id}
        found: list[RunState] = []
        _EVENT_RUNS[run_id] = found
        try:
            events_v2 = None
            if version == "v2" and _langchain_events(self):
                # langchain-core's v2 implementation for this call, its events handler ours
                # (`EventsHandler`): it decides and tags for the run, so no second handler
                # runs, and an internal model's tokens are never built as events. None
                # where langchain-core's shape is not the one checked (`_compat`).
                fresh = partial(_run_state, self, self._lgv_policy)
                events_v2 = astream_events_v2_with(partial(EventsHandler, found, fresh))
            if events_v2 is not None:
                events = events_v2(self, input, config, **kwargs)
            else:
                events = super().astream_events(input, config, version=version, **kwargs)  # type: ignore[misc]
            flt: EventFilter | None = None
            async with contextlib.aclosing(events):
                async for event in events:
                    if flt is None:
                        # The run our astream decided into; if it did not start (it always
                        # does before the first event), judge with a fresh one.
                        run = found[0] if found else _run_state(self, self._lgv_policy)
                        flt = EventFilter(run, str(run_id))
                    out = flt(event)
                    if out is not DROP:
                        yield out
        finally:
            _EVENT_RUNS.pop(run_id, None)

    def astream_log(self, *args: Any, **kwargs: Any) -> Any:
        config = args[1] if len(args) > 1 else kwargs.get("config")
        if is_task_config(ensure_config(self.config, config)):
            return super().astream_log(*args, **kwargs)  # type: ignore[misc]
        raise NotImplementedError(
            "astream_log() is not enforced by lg_visibility: its patches carry every run's "
            "inputs and outputs, internal ones included. Use astream_events(version='v2') "
            "(or astream) on the wrapped graph, which only yields user-visible events."
        )

    # -- state reads -------------------------------------------------------------------

    @property
    def raw_state(self) -> RawStateReads:
        """The unredacted state reads (`get_state`, `get_state_history`, async twins), for
        the app itself (a staff view, a migration), never for a client."""
        return RawStateReads(self)

    def _lgv_state(self) -> StateRedactor:
        redactor = _REDACTORS.get(self)
        if redactor is None:
            declared, agents, _, _, bound = _declared(self)
            redactor = _REDACTORS[self] = StateRedactor(
                self._lgv_policy, declared, agents=agents, bound=bound
            )
        return redactor

    def get_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> Any:
        if reading_raw() or is_task_config(config):
            return super().get_state(config, subgraphs=subgraphs)  # type: ignore[misc]
        snap = call_raw(super().get_state, config, subgraphs=subgraphs)  # type: ignore[misc]
        return self._lgv_state().snapshot(snap)

    async def aget_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> Any:
        if reading_raw() or is_task_config(config):
            return await super().aget_state(config, subgraphs=subgraphs)  # type: ignore[misc]
        snap = await acall_raw(super().aget_state, config, subgraphs=subgraphs)  # type: ignore[misc]
        return self._lgv_state().snapshot(snap)

    def get_state_history(self, config: RunnableConfig, **kwargs: Any) -> Iterator[Any]:
        history = super().get_state_history(config, **kwargs)  # type: ignore[misc]
        if reading_raw() or is_task_config(config):
            yield from history
            return
        redactor = self._lgv_state()
        for snap in iter_raw(history):
            yield redactor.snapshot(snap)

    async def aget_state_history(self, config: RunnableConfig, **kwargs: Any) -> AsyncIterator[Any]:
        history = super().aget_state_history(config, **kwargs)  # type: ignore[misc]
        if reading_raw() or is_task_config(config):
            async for snap in history:
                yield snap
            return
        redactor = self._lgv_state()
        async for snap in aiter_raw(history):
            yield redactor.snapshot(snap)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        token = _COLLECTING_STATE.set(kwargs.get("stream_mode", "values") == "values")
        try:
            return super().invoke(input, config, **kwargs)  # type: ignore[misc]
        finally:
            _COLLECTING_STATE.reset(token)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        token = _COLLECTING_STATE.set(kwargs.get("stream_mode", "values") == "values")
        try:
            return await super().ainvoke(input, config, **kwargs)  # type: ignore[misc]
        finally:
            _COLLECTING_STATE.reset(token)


# One class per (graph class, policy), shared by every graph wrapped with them; weak, so that
# policies made per request do not pile up classes once their graphs are gone.
_CLASSES: weakref.WeakValueDictionary[tuple[type, VisibilityPolicy], type] = (
    weakref.WeakValueDictionary()
)


def _visible_class(base: type, policy: VisibilityPolicy) -> type:
    key = (base, policy)
    cls = _CLASSES.get(key)
    if cls is None:
        cls = type(
            f"Visible{base.__name__}",
            (_VisibleGraph, base),
            {"_lgv_policy": policy, "__module__": __name__},
        )
        _CLASSES[key] = cls
    return cls


def _langchain_events(graph: Any) -> bool:
    """Whether `graph`'s astream_events beyond ours is Pregel's, which runs langchain-core's
    `Runnable.astream_events` for v1 and v2: only then may a copy of its v2 implementation
    run in its place."""
    found = getattr(super(_VisibleGraph, graph).astream_events, "__func__", None)
    return found is vars(pregel_base()).get("astream_events")


def _check_parent_hooks(builder: Any) -> None:
    # LangGraph gives a node no hook into the graph it is added to, so a node that needs to
    # check its parent's state schema (a sub-agent added with plain add_node) offers
    # `_lgv_check_parent(builder, name)`, called here.
    for name, spec in (getattr(builder, "nodes", None) or {}).items():
        check = getattr(getattr(spec, "runnable", None), "_lgv_check_parent", None)
        if callable(check):
            check(builder, name)


_Declared = tuple[
    Mapping[str, Visibility],
    Mapping[str, str],
    Mapping[str, frozenset[str]],
    frozenset[type],
    Mapping[str, tuple[NodeConfig, ...]],
]
# An enforced graph -> what its static tree declares (add_node declarations, node agents,
# message keys, typed state schemas), which every run of it and its state redactor read and
# none writes: like `_REDACTORS`, made once per graph (about 50 us for W5's ten graphs, per
# run before), and a copy makes its own.
_DECLARED: weakref.WeakKeyDictionary[Any, _Declared] = weakref.WeakKeyDictionary()


def _declared(graph: Any) -> _Declared:
    """(path -> visibility declared with add_node(..., metadata=...), path -> agent name of a
    node that runs a named create_agent graph, graph path -> its `add_messages` keys, its
    Pydantic and dataclass state schemas, node path -> the declaration and tags in its
    runnable's own config) in `graph` and its subgraphs; raises
    VisibilityConfigError for an unknown declared value."""
    found = _DECLARED.get(graph)
    if found is None:
        tree = graph_tree(graph)
        found = _DECLARED[graph] = (
            types.MappingProxyType(tree.declarations()),
            types.MappingProxyType(tree.node_agents()),
            types.MappingProxyType(tree.messages),
            tree.states,
            types.MappingProxyType(tree.bound),
        )
    return found


_SUBGRAPH_CACHES: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _has_subgraph_cache(graph: Any) -> bool:
    """Whether a subgraph of `graph` added as a node has a cache of its own (remembered)."""
    found = _SUBGRAPH_CACHES.get(graph)
    if found is None:
        found = _SUBGRAPH_CACHES[graph] = has_subgraph_cache(graph)
    return found


def _run_state(graph: Any, policy: VisibilityPolicy) -> RunState:
    """A new run's state: the policy, and what the graph's static tree declares."""
    return RunState(policy, *_declared(graph))


def _check_policy(policy: VisibilityPolicy, graph: Any) -> None:
    tree = graph_tree(graph)
    tree.check_patterns(policy)
    tree.check_keys(policy)
    check_typed_state(graph, policy)


def internal_at(graph: Any, path: str) -> bool:
    """Whether output at `path` ("a/b", the node names from the root) of an enforced graph
    is internal by what is known before a run there (its policy and static tree); False for
    a graph nobody wrapped."""
    state = getattr(graph, "_lgv_state", None)
    return bool(state is not None and state().internal_at(path))


def with_visibility(graph: Any, policy: VisibilityPolicy) -> Any:
    """Return `graph` enforcing `policy`: only user-visible events leave its stream.

    Args:
        graph: a compiled graph (`builder.compile(...)`, `create_agent(...)`).
        policy: which producers are internal.

    Returns:
        A copy of `graph` whose class is a subclass of the graph's own class.

    Raises:
        TypeError: if `graph` is not a compiled graph, or its class overrides `stream`.
        VisibilityConfigError: if `policy` is not a VisibilityPolicy, a node declares an
            unknown visibility in its metadata, or a sub-agent added with `as_subagent` does
            not fit the parent's state schema.
    """
    pregel = pregel_base()
    if not isinstance(graph, pregel):
        hint = (
            " call builder.compile() first, or use compile_with_visibility(builder, policy)."
            if hasattr(graph, "compile")
            else ""
        )
        raise TypeError(
            f"with_visibility takes a compiled LangGraph graph, got {type(graph).__name__}"
            f" {graph!r:.80};{hint or ' pass the result of builder.compile().'}"
        )
    if not isinstance(policy, VisibilityPolicy):
        raise VisibilityConfigError(
            f"with_visibility takes a VisibilityPolicy, got {type(policy).__name__} "
            f"{policy!r:.80}; write with_visibility(graph, VisibilityPolicy(internal=[...]))."
        )
    base = type(graph)
    if isinstance(graph, _VisibleGraph):
        base = next(b for b in base.__mro__[1:] if not issubclass(b, _VisibleGraph))
    for method in ("stream", "astream"):
        if getattr(base, method) is not getattr(pregel, method):
            raise TypeError(
                f"{base.__name__} overrides {method}(); lg_visibility replaces LangGraph's own "
                f"{method}() and would bypass it. Wrap the graph before customising it."
            )
    _check_policy(policy, graph)
    _check_parent_hooks(getattr(graph, "builder", None))
    # The wrapped graph's own copies of its node specs keep add_node declarations under
    # the node key (the user's graph objects, which may be shared, are not touched): see
    # `_rules` for why they must not share the key of a run's own declaration.
    # A subgraph's own node cache is held unused in them: each run scopes it in copies
    # of its own (`_cache`, `_lgv_plan`).
    nodes = node_copies(graph, DECLARATION_KEY, NODE_DECLARATION_KEY, held)
    return rebuild_as(graph, _visible_class(base, policy), nodes)


def compile_with_visibility(builder: Any, policy: VisibilityPolicy, **compile_kwargs: Any) -> Any:
    """`with_visibility(builder.compile(**compile_kwargs), policy)`.

    Raises:
        TypeError: if `builder` has no `compile()` (pass a StateGraph).
    """
    compile_ = getattr(builder, "compile", None)
    if not callable(compile_):
        raise TypeError(
            f"compile_with_visibility takes a graph builder such as StateGraph, got "
            f"{type(builder).__name__}; for a compiled graph use with_visibility(graph, policy)."
        )
    if not isinstance(policy, VisibilityPolicy):
        raise VisibilityConfigError(
            f"compile_with_visibility takes a VisibilityPolicy, got {type(policy).__name__} "
            f"{policy!r:.80}; write compile_with_visibility(builder, VisibilityPolicy(...))."
        )
    _check_parent_hooks(builder)
    return with_visibility(compile_(**compile_kwargs), policy)
