"""The callback handlers: thin, each delegating its decisions to one `Decider` (`_run`).

- `EnforcingHandler` / `EnforcingHandlerV2` are LangGraph's own messages handlers, taking
  their place for an enforced run (see `_wrap`). An internal LLM run is never registered for
  streaming, so each of its tokens costs one dict miss; a visible token costs one dict
  lookup and one dict store (the tag) more than LangGraph's own handler.
- `VisibilityHandler` is the public callback: in `config["callbacks"]` of a wrapped graph it
  replaces the policy for that run; on a plain compiled graph it only tags.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk, GenerationChunk, LLMResult

from lg_visibility._compat import StreamMessagesHandler, StreamMessagesHandlerV2
from lg_visibility._rules import DECLARATION_KEY, USER_VISIBLE
from lg_visibility._run import DecidedMeta, Decider, RunState
from lg_visibility.errors import VisibilityConfigError
from lg_visibility.policy import VisibilityPolicy

__all__ = ["EnforcingHandler", "EnforcingHandlerV2", "VisibilityHandler"]


class _Deciding(BaseCallbackHandler):
    """The callbacks every handler delegates alike: to its decider, then to its base class."""

    _decider: Decider

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._decider.end_llm(run_id, response)
        return super().on_llm_end(response, run_id=run_id, parent_run_id=parent_run_id, **kw)

    def on_llm_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._decider.forget_llm(run_id)
        return super().on_llm_error(error, run_id=run_id, parent_run_id=parent_run_id, **kw)

    def on_chain_end(self, *args: Any, **kwargs: Any) -> Any:
        # LangChain names the output `outputs`, LangGraph's handler `response`; both pass it
        # first and positionally, the run id by keyword. Tag first: the emission reads it.
        self._decider.end_node(kwargs["run_id"], args[0])
        return super().on_chain_end(*args, **kwargs)

    def on_chain_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._decider.forget_node(run_id)
        return super().on_chain_error(error, run_id=run_id, parent_run_id=parent_run_id, **kw)

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
        self._decider.start_tool(run_id, metadata, tags, kwargs.get("tool_call_id"))
        return super().on_tool_start(
            serialized,
            input_str,
            run_id=run_id,
            parent_run_id=parent_run_id,
            tags=tags,
            metadata=metadata,
            **kwargs,
        )


class VisibilityHandler(_Deciding):
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
        self._decider = Decider(policy, None)

    @classmethod
    def _for_run(cls, run: RunState) -> VisibilityHandler:
        handler = _RunTagger(run.policy)
        handler._decider = Decider(run.policy, run)
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
        self._decider.start_llm(run_id, metadata, tags)

    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> Any:
        vis = self._decider.llm_visibility(run_id)
        if vis is not None and isinstance(chunk, ChatGenerationChunk):
            chunk.message.response_metadata[DECLARATION_KEY] = vis

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
        self._decider.start_node(run_id, inputs, tags, metadata, kwargs.get("name"), parent_run_id)


class _RunTagger(VisibilityHandler):
    """The tagging handler of an enforced run without `messages` mode (`_wrap` adds it).

    Its chunks only leave through `astream_events`, where the run's decision judges them:
    like the enforcing handler it tags the first chunk of each message, not every chunk.
    """

    def __init__(self, policy: VisibilityPolicy) -> None:
        super().__init__(policy)
        self._first_seen: set[str] = set()

    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> Any:
        if not isinstance(chunk, ChatGenerationChunk):
            return
        message_id = chunk.message.id
        if message_id is not None and message_id in self._first_seen:
            return
        vis = self._decider.llm_visibility(run_id)
        if vis is not None:
            chunk.message.response_metadata[DECLARATION_KEY] = vis
            if message_id is not None:
                self._first_seen.add(message_id)


class EnforcingHandler(_Deciding, StreamMessagesHandler):
    """LangGraph's v1 messages handler, deciding visibility at the source (langgraph 1.2.24).

    Each callback decides (and tags) first, then does what LangGraph's handler does, except
    that an internal LLM run is never registered and an internal message never emitted.
    """

    raise_error = True  # a decision that fails must stop the run, never let output through

    def __init__(
        self,
        run: RunState,
        stream: Any,
        subgraphs: bool,
        *,
        parent_ns: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__(stream, subgraphs, parent_ns=parent_ns)
        self._run = run
        self._decider = Decider(run.policy, run)
        run.handler_built = True

    def _mark(self, run_id: UUID) -> None:
        # The run's metadata, as LangGraph registered it, becomes a DecidedMeta once: every
        # part emitted for the run then carries the mark at no cost per token.
        entry = self.metadata.get(run_id)
        if entry is not None and type(entry[1]) is not DecidedMeta:
            self.metadata[run_id] = (entry[0], DecidedMeta(entry[1]))

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
        if self._decider.start_llm(run_id, metadata, tags) is USER_VISIBLE:
            # Only a visible run is registered: an internal one never reaches the stream.
            super().on_chat_model_start(
                serialized,
                messages,
                run_id=run_id,
                parent_run_id=parent_run_id,
                tags=tags,
                metadata=metadata,
                **kwargs,
            )
            self._mark(run_id)

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
        # (What StreamMessagesHandler._emit does, inlined; its shape is checked in _compat.)
        meta = self.metadata.get(run_id)
        if meta is None or not isinstance(chunk, ChatGenerationChunk):
            return
        message = chunk.message
        if message.id is None:
            message.id = str(uuid4())
        if message.id not in self.seen:
            # Every chunk that leaves an enforced graph is visible by construction; the first
            # of each message carries the tag, so a client merging by id has it from the
            # first token, and the final message (state, checkpoints) is tagged at its end.
            message.response_metadata[DECLARATION_KEY] = USER_VISIBLE
            self.seen.add(message.id)
        self.stream((meta[0], "messages", (message, meta[1])))

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
        if self._decider.start_node(
            run_id, inputs, tags, metadata, kwargs.get("name"), parent_run_id
        ):
            super().on_chain_start(
                serialized,
                inputs,
                run_id=run_id,
                parent_run_id=parent_run_id,
                tags=tags,
                metadata=metadata,
                **kwargs,
            )
            self._mark(run_id)

    def _emit(self, meta: Any, message: BaseMessage, *, dedupe: bool = False) -> None:
        # dedupe=True is every emission of a whole message (an LLM's final message, a node's
        # output); its own tag and id decide, not the node that re-emits it.
        if dedupe and (message.id in self.seen or self._run.is_internal(message)):
            return
        super()._emit(meta, message, dedupe=dedupe)


class EnforcingHandlerV2(EnforcingHandler, StreamMessagesHandlerV2):
    """LangGraph's v2 (protocol-event) messages handler, deciding visibility at the source.

    LangGraph's v2 handler ignores v1 tokens; so does this one. Its protocol events get a
    new metadata dict per event (`on_stream_event`), so they are marked as they are put.
    """

    def __init__(
        self,
        run: RunState,
        stream: Any,
        subgraphs: bool,
        *,
        parent_ns: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__(run, stream, subgraphs, parent_ns=parent_ns)
        put = self.stream

        def put_marked(chunk: Any) -> None:
            ns, mode, (data, meta) = chunk
            put((ns, mode, (data, meta if type(meta) is DecidedMeta else DecidedMeta(meta))))

        self.stream = put_marked

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
        """A v1 token on a v2 run is not streamed, as in `StreamMessagesHandlerV2`."""
