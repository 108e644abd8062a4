"""Deciding at the source: once per LLM run and once per node run, never per token.

Two kinds of handler share the deciding and tagging (`_Decider`):

- `EnforcingHandler` / `EnforcingHandlerV2` subclass LangGraph's own messages handler and
  take its place for an enforced run (see `graph.py`). An internal LLM run is never
  registered for streaming, so each of its tokens costs one dict miss; a visible token costs
  one dict lookup and one dict store (the tag) more than LangGraph's own handler.
- `VisibilityHandler` is the public callback: in `config["callbacks"]` of a wrapped graph it
  replaces the policy for that run; on a plain compiled graph it only tags.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import fields, is_dataclass
from typing import Any
from uuid import UUID, uuid4

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, GenerationChunk, LLMResult
from pydantic import BaseModel

from lg_visibility._compat import (
    NS_SEP,
    TAG_HIDDEN,
    StreamMessagesHandler,
    StreamMessagesHandlerV2,
    graph_namespace,
)
from lg_visibility._provenance import run_path
from lg_visibility.errors import VisibilityConfigError
from lg_visibility.policy import (
    INTERNAL,
    USER_VISIBLE,
    Visibility,
    VisibilityPolicy,
    check_visibility,
)

__all__ = [
    "DECLARATION_KEY",
    "EnforcingHandler",
    "EnforcingHandlerV2",
    "RunState",
    "VisibilityHandler",
    "iter_messages",
    "visibility_of",
]

DECLARATION_KEY = "visibility"
"""The metadata key a producer uses to declare its own visibility."""


def visibility_of(message: BaseMessage) -> Visibility | None:
    """The visibility tag a message carries, or None if it has none."""
    value = message.response_metadata.get(DECLARATION_KEY)
    return value if value in ("user_visible", "internal") else None


def _state_values(obj: Any) -> Sequence[Any]:
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, BaseModel):
        return [getattr(obj, k) for k in type(obj).model_fields]
    if is_dataclass(obj) and not isinstance(obj, type):
        return [getattr(obj, f.name) for f in fields(obj)]
    return ()


def iter_messages(value: Any) -> Iterator[BaseMessage]:
    """Messages in a node's input or output, where LangGraph's handler looks for them.

    A message, a sequence of messages, a state (dict, Pydantic model, dataclass) whose
    top-level values are messages or sequences of them, a `Command`'s update, or a list of
    any of these. (Mirrors `StreamMessagesHandler._find_and_emit_messages`, langgraph 1.2.24.)
    """
    if isinstance(value, BaseMessage):
        yield value
        return
    update = getattr(value, "update", None) if type(value).__name__ == "Command" else None
    if update is not None:
        yield from iter_messages(update)
        return
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        for item in value:
            if isinstance(item, BaseMessage):
                yield item
            elif type(item).__name__ == "Command" or isinstance(item, dict):
                yield from iter_messages(item)
        return
    for item in _state_values(value):
        if isinstance(item, BaseMessage):
            yield item
        elif isinstance(item, Sequence) and not isinstance(item, (str, bytes)):
            for inner in item:
                if isinstance(inner, BaseMessage):
                    yield inner


class RunState:
    """What one enforced run has decided, shared by its handler and its output filter."""

    __slots__ = (
        "declared",
        "internal_ids",
        "internal_tool_calls",
        "node_decisions",
        "policy",
        "task_decisions",
    )

    def __init__(
        self, policy: VisibilityPolicy, declared: Mapping[str, Visibility] | None = None
    ) -> None:
        self.policy = policy
        # path -> visibility declared with add_node(..., metadata=...): what decides a node
        # whose event arrives before the node has started (a task-start event).
        self.declared: Mapping[str, Visibility] = declared or {}
        self.internal_ids: set[str] = set()
        self.internal_tool_calls: set[str] = set()
        # checkpoint namespace of a node task ("a:<id>|b:<id>") -> that node's decision, so
        # that producer declarations also govern the node's snapshots and updates.
        self.task_decisions: dict[str, Visibility] = {}
        # (checkpoint namespace of the graph running it, node name) -> the node's decision,
        # for events that name a node but not its task (updates).
        self.node_decisions: dict[tuple[str, str], Visibility] = {}

    def declared_for(self, path: str) -> Visibility | None:
        """The declaration governing `path`: its node's own, else the nearest enclosing one
        (a node's metadata is inherited by every run inside it)."""
        declared = self.declared
        if not declared:
            return None
        segments = path.split("/")
        for end in range(len(segments), 0, -1):
            vis = declared.get("/".join(segments[:end]))
            if vis is not None:
                return vis
        return None

    def note_internal(self, message: BaseMessage) -> None:
        if message.id is not None:
            self.internal_ids.add(message.id)
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id"):
                    self.internal_tool_calls.add(call["id"])  # type: ignore[arg-type]

    def is_internal(self, message: BaseMessage) -> bool:
        if message.response_metadata.get(DECLARATION_KEY) == "internal":
            return True
        return message.id is not None and message.id in self.internal_ids


class _Decider:
    """Decide a run's visibility from its metadata and tag what it produces."""

    _policy: VisibilityPolicy
    _run: RunState | None

    def _init_decider(self, policy: VisibilityPolicy, run: RunState | None) -> None:
        self._policy = policy
        self._run = run
        self._llm_runs: dict[UUID, Visibility] = {}
        self._node_runs: dict[UUID, tuple[Visibility, Any]] = {}
        # Without a run (a VisibilityHandler on a plain graph or in a graph's config): ids of
        # internal LLM runs' tool calls whose ToolMessage has not been tagged yet.
        self._unanswered_internal_calls: set[str] = set()

    def _decide(self, metadata: dict[str, Any], tags: list[str] | None) -> Visibility:
        declared = metadata.get(DECLARATION_KEY)
        if declared is not None:
            return check_visibility(
                declared,
                where=f"metadata {{'{DECLARATION_KEY}': ...}} of a run at "
                f"{run_path(metadata) or '(root)'!r}",
            )
        return self._policy.decide(
            run_path(metadata), tags=tags, agent=metadata.get("lc_agent_name")
        )

    def _start_llm(
        self, run_id: UUID, metadata: dict[str, Any] | None, tags: list[str] | None
    ) -> Visibility:
        vis = self._decide(metadata or {}, tags)
        self._llm_runs[run_id] = vis
        return vis

    def _end_llm(self, run_id: UUID, response: LLMResult) -> None:
        vis = self._llm_runs.pop(run_id, None)
        if vis is None:
            return
        for generations in response.generations:
            for gen in generations:
                if isinstance(gen, ChatGeneration):
                    gen.message.response_metadata[DECLARATION_KEY] = vis
                    if vis is not INTERNAL:
                        continue
                    if self._run is not None:
                        self._run.note_internal(gen.message)
                    elif isinstance(gen.message, AIMessage):
                        for call in gen.message.tool_calls:
                            if call_id := call.get("id"):
                                self._unanswered_internal_calls.add(call_id)

    def _start_node(
        self,
        run_id: UUID,
        inputs: Any,
        tags: list[str] | None,
        metadata: dict[str, Any] | None,
        name: Any,
    ) -> bool:
        """Decide a node run; False if the chain run is not a node."""
        if not metadata or name != metadata.get("langgraph_node"):
            return False
        vis = self._decide(metadata, tags)
        # The input itself, not its message ids: they are read only if the node's output
        # holds an untagged message with an id, which keeps a long history out of memory.
        self._node_runs[run_id] = (vis, inputs)
        if self._run is not None:
            task_ns = metadata.get("langgraph_checkpoint_ns") or ""
            self._run.task_decisions[task_ns] = vis
            self._run.node_decisions[(task_ns.rpartition(NS_SEP)[0], name)] = vis
        return True

    def _start_tool(
        self,
        run_id: UUID,
        metadata: dict[str, Any] | None,
        tags: list[str] | None,
        tool_call_id: Any,
    ) -> None:
        # A tool run in an internal node (or declared internal itself): the `tools` events
        # LangGraph's tool handler emits next are keyed by this id, so the filter drops them.
        if self._run is not None and metadata and self._decide(metadata, tags) == INTERNAL:
            self._run.internal_tool_calls.add(tool_call_id or str(run_id))

    def _answers_internal_call(self, call_id: str) -> bool:
        if self._run is not None:
            return call_id in self._run.internal_tool_calls
        if call_id not in self._unanswered_internal_calls:
            return False
        # A call is answered once; forgetting it keeps a long-lived handler small.
        self._unanswered_internal_calls.discard(call_id)
        return True

    def _end_node(self, run_id: UUID, response: Any) -> None:
        entry = self._node_runs.pop(run_id, None)
        if entry is None:
            return
        vis, inputs = entry
        known: set[str] | None = None
        run = self._run
        for message in iter_messages(response):
            tag = message.response_metadata.get(DECLARATION_KEY)
            if tag is None:
                if message.id is not None:
                    if known is None:
                        known = {m.id for m in iter_messages(inputs) if m.id is not None}
                    if message.id in known:
                        continue  # passed through from the node's input: not produced here
                # Built by this node by hand (or a tool's result): it belongs to the node,
                # unless it answers a tool call that was itself internal, or it is an
                # internal run's message the node rebuilt (e.g. summed from its chunks).
                tag = vis
                if isinstance(message, ToolMessage) and self._answers_internal_call(
                    message.tool_call_id
                ):
                    tag = INTERNAL
                elif run is not None and message.id in run.internal_ids:
                    tag = INTERNAL
                message.response_metadata[DECLARATION_KEY] = tag
            if tag == "internal" and run is not None:
                run.note_internal(message)


class VisibilityHandler(_Decider, BaseCallbackHandler):
    """Tag every message with its visibility where it is produced.

    Put it in `config["callbacks"]`:

    - on a graph wrapped by `with_visibility`, it replaces the graph's policy for that run
      (for example a staff view that shows internal steps); it is not added as a callback.
    - on a plain compiled graph it tags: every AIMessage an LLM run produces and every
      message a node builds gets `response_metadata["visibility"]`, in state and in
      checkpoints, and so do streamed chunks. It drops nothing; the stream is LangGraph's.

    Args:
        policy: the policy to apply.

    Raises:
        VisibilityConfigError: if `policy` is not a VisibilityPolicy.
    """

    run_inline = True
    raise_error = True

    def __init__(self, policy: VisibilityPolicy) -> None:
        if not isinstance(policy, VisibilityPolicy):
            raise VisibilityConfigError(
                f"VisibilityHandler takes a VisibilityPolicy, got {type(policy).__name__} "
                f"{policy!r}; write VisibilityHandler(VisibilityPolicy(internal=[...]))."
            )
        self.policy = policy
        self._init_decider(policy, None)

    @classmethod
    def _for_run(cls, run: RunState) -> VisibilityHandler:
        handler = cls(run.policy)
        handler._run = run
        return handler

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        self._start_llm(run_id, metadata, tags)

    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        vis = self._llm_runs.get(run_id)
        if vis is not None and isinstance(chunk, ChatGenerationChunk):
            chunk.message.response_metadata[DECLARATION_KEY] = vis

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._end_llm(run_id, response)

    def on_llm_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._llm_runs.pop(run_id, None)

    def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        self._start_node(run_id, inputs, tags, metadata, kwargs.get("name"))

    def on_chain_end(
        self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._end_node(run_id, outputs)

    def on_chain_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._node_runs.pop(run_id, None)

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        self._start_tool(run_id, metadata, tags, kwargs.get("tool_call_id"))


class _EnforcingMixin(_Decider):
    """Decide, tag and drop, in place of LangGraph's messages handler (langgraph 1.2.24)."""

    run_inline = True
    raise_error = True
    seen: set[Any]
    metadata: dict[UUID, Any]
    subgraphs: bool
    parent_ns: tuple[str, ...] | None
    _run: RunState

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        if self._start_llm(run_id, metadata, tags) is USER_VISIBLE:
            # Only a visible run is registered: an internal one never reaches the stream.
            super().on_chat_model_start(  # type: ignore[misc]
                serialized,
                messages,
                run_id=run_id,
                parent_run_id=parent_run_id,
                tags=tags,
                metadata=metadata,
                **kwargs,
            )

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._end_llm(run_id, response)
        super().on_llm_end(response, run_id=run_id, parent_run_id=parent_run_id, **kw)  # type: ignore[misc]

    def on_llm_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._llm_runs.pop(run_id, None)
        super().on_llm_error(error, run_id=run_id, parent_run_id=parent_run_id, **kw)  # type: ignore[misc]

    def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        if not self._start_node(run_id, inputs, tags, metadata, kwargs.get("name")):
            return
        # Then what StreamMessagesHandler.on_chain_start does (langgraph 1.2.24): register
        # the node for emitting its output, and its input messages as already seen.
        assert metadata is not None  # a node run always has metadata
        if tags and TAG_HIDDEN in tags:
            return
        ns = graph_namespace(metadata)
        if not self.subgraphs and len(ns) > 0 and ns != self.parent_ns:
            return
        self.metadata[run_id] = (ns, metadata)
        self.seen.update(m.id for m in iter_messages(inputs) if m.id is not None)

    def on_chain_end(
        self, response: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._end_node(run_id, response)  # tag first: the emission below reads the tags
        super().on_chain_end(response, run_id=run_id, parent_run_id=parent_run_id, **kw)  # type: ignore[misc]

    def on_chain_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._node_runs.pop(run_id, None)
        super().on_chain_error(error, run_id=run_id, parent_run_id=parent_run_id, **kw)  # type: ignore[misc]

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        self._start_tool(run_id, metadata, tags, kwargs.get("tool_call_id"))

    def _emit(self, meta: Any, message: BaseMessage, *, dedupe: bool = False) -> None:
        # dedupe=True is every emission of a whole message (an LLM's final message, a node's
        # output); its own tag and id decide, not the node that re-emits it.
        if dedupe and (message.id in self.seen or self._run.is_internal(message)):
            return
        super()._emit(meta, message, dedupe=dedupe)  # type: ignore[misc]


class EnforcingHandler(_EnforcingMixin, StreamMessagesHandler):  # type: ignore[misc]
    """LangGraph's v1 messages handler, deciding visibility at the source."""

    def __init__(
        self,
        run: RunState,
        stream: Any,
        subgraphs: bool,
        *,
        parent_ns: tuple[str, ...] | None = None,
    ) -> None:
        StreamMessagesHandler.__init__(self, stream, subgraphs, parent_ns=parent_ns)
        self._init_decider(run.policy, run)

    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        # The per-token hot path: one dict lookup; an internal run's token stops here.
        meta = self.metadata.get(run_id)
        if meta is None or not isinstance(chunk, ChatGenerationChunk):
            return
        message = chunk.message
        message.response_metadata[DECLARATION_KEY] = USER_VISIBLE
        if message.id is None:
            message.id = str(uuid4())
        self.seen.add(message.id)
        self.stream((meta[0], "messages", (message, meta[1])))


class EnforcingHandlerV2(_EnforcingMixin, StreamMessagesHandlerV2):  # type: ignore[misc]
    """LangGraph's v2 (protocol-event) messages handler, deciding visibility at the source."""

    def __init__(
        self,
        run: RunState,
        stream: Any,
        subgraphs: bool,
        *,
        parent_ns: tuple[str, ...] | None = None,
    ) -> None:
        StreamMessagesHandlerV2.__init__(self, stream, subgraphs, parent_ns=parent_ns)
        self._init_decider(run.policy, run)
