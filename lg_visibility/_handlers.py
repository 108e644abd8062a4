"""The callback handlers: thin, each delegating its decisions to one `Decider` (`_run`).

- `EnforcingHandler` / `EnforcingHandlerV2` are LangGraph's own messages handlers, taking
  their place for an enforced run (see `_wrap`). An internal LLM run is never registered for
  streaming, so each of its tokens costs at most one dict miss (none when the token before
  it was the same run's); a visible token is put as LangGraph's handler puts it, with the
  first chunk of each message tagged.
- `EventsHandler` is langchain-core's `astream_events` v2 handler, taking its place for an
  `astream_events` call of an enforced graph (see `_wrap`): it decides and tags as the run's
  tagger would, and builds no event for an internal model's token.
- `VisibilityHandler` is the public callback: in `config["callbacks"]` of a wrapped graph it
  replaces the policy for that run; on a plain compiled graph it only tags.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID, uuid4

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk, GenerationChunk, LLMResult

from lg_visibility._compat import (
    EventStreamHandler,
    StreamMessagesHandler,
    StreamMessagesHandlerV2,
    name_unsent_messages,
    registers_node_run,
)
from lg_visibility._output_filter import held_copy
from lg_visibility._rules import DECLARATION_KEY, INTERNAL, USER_VISIBLE, Visibility
from lg_visibility._run import DecidedMeta, Decider, RunState
from lg_visibility.errors import VisibilityConfigError
from lg_visibility.policy import VisibilityPolicy

_lc_logger = logging.getLogger("langchain_core.callbacks.manager")

__all__ = ["EnforcingHandler", "EnforcingHandlerV2", "EventsHandler", "VisibilityHandler"]


class _Deciding(BaseCallbackHandler):
    """The callbacks every handler delegates alike: to its decider, then to its base class."""

    _decider: Decider

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        # A plain (non-chat) LLM: no message to tag, but inside an internal tool its run is
        # internal, and the event filter must know before its first event.
        self._decider.start_llm(run_id, metadata, tags, parent_run_id)
        return super().on_llm_start(
            serialized,
            prompts,
            run_id=run_id,
            parent_run_id=parent_run_id,
            tags=tags,
            metadata=metadata,
            **kwargs,
        )

    def on_retriever_start(
        self,
        serialized: dict[str, Any],
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> Any:
        self._decider.start_retriever(run_id, parent_run_id, kwargs.get("tags"))
        return super().on_retriever_start(
            serialized, query, run_id=run_id, parent_run_id=parent_run_id, **kwargs
        )

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
        return self._base_chain_end(*args, **kwargs)

    def _base_chain_end(self, *args: Any, **kwargs: Any) -> Any:
        """The base class's `on_chain_end` (LangChain's or LangGraph's handler)."""
        return super().on_chain_end(*args, **kwargs)

    def on_chain_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._decider.fail_node(run_id, error)
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
        self._decider.start_tool(run_id, metadata, tags, kwargs.get("tool_call_id"), parent_run_id)
        return super().on_tool_start(
            serialized,
            input_str,
            run_id=run_id,
            parent_run_id=parent_run_id,
            tags=tags,
            metadata=metadata,
            **kwargs,
        )

    def on_tool_end(
        self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._decider.end_tool(run_id, output)  # tag first: LangGraph's tools event reads it
        return super().on_tool_end(output, run_id=run_id, parent_run_id=parent_run_id, **kw)

    def on_tool_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._decider.forget_tool(run_id)
        return super().on_tool_error(error, run_id=run_id, parent_run_id=parent_run_id, **kw)


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
        self._decider.start_llm(run_id, metadata, tags, parent_run_id)

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


_NO_TOKEN_RUN: tuple[UUID | None, Any] = (None, None)


def _tag_first_chunk(seen: set[str], message: BaseMessage, vis: Visibility) -> None:
    """Tag a chunk whose message id is not in `seen` (the first of its message, or any
    chunk without an id) with `vis`, so a client that merges chunks by id sees the tag from
    the first token. Callers test `message.id not in seen` inline: the per-token path."""
    message.response_metadata[DECLARATION_KEY] = vis
    if message.id is not None:
        seen.add(message.id)


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
        if not isinstance(chunk, ChatGenerationChunk) or chunk.message.id in self._first_seen:
            return
        vis = self._decider.llm_visibility(run_id)
        if vis is not None:
            _tag_first_chunk(self._first_seen, chunk.message, vis)


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
        # The last LLM run a token came from and its registered metadata (None: internal).
        # The callback manager passes a run's own UUID object with each of its tokens, so
        # an identity check spares the UUID's hash (a Python call) on nearly every token.
        # Forgotten when that run starts, ends or errors, which is when LangGraph's handler
        # (and ours) change a model run's `metadata` entry. A node run's entry changes at its
        # own start and end, but no token names a node run.
        self._token_run: tuple[UUID | None, Any] = _NO_TOKEN_RUN
        # Internal node runs LangGraph's handler would have taken (`registers_node_run`).
        self._unsent: set[UUID] = set()
        run.handler_built = True

    def _forget_token_run(self, run_id: UUID) -> None:
        if self._token_run[0] is run_id:
            self._token_run = _NO_TOKEN_RUN

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
        self._forget_token_run(run_id)
        if self._decider.start_llm(run_id, metadata, tags, parent_run_id) is not USER_VISIBLE:
            # An internal run is never registered, so it never reaches the stream; an entry
            # left by an earlier call given the same `run_id` (a visible stream never
            # closed, so never ended) must not stream it either.
            self.metadata.pop(run_id, None)
        else:
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
        # The per-token hot path: an identity check, else one dict lookup; an internal run's
        # token stops here. (What StreamMessagesHandler._emit does, inlined; its shape is
        # checked in _compat.)
        last = self._token_run
        if last[0] is run_id:
            meta = last[1]
        else:
            meta = self.metadata.get(run_id)
            self._token_run = (run_id, meta)
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
        name = kwargs.get("name")
        if not self._decider.start_node(run_id, inputs, tags, metadata, name, parent_run_id):
            if registers_node_run(self, metadata, tags, name):
                # LangGraph's handler would take this internal node run and, sending its
                # output, name each id-less message of it: named, not sent (at its end).
                self._unsent.add(run_id)
        else:
            try:
                super().on_chain_start(
                    serialized,
                    inputs,
                    run_id=run_id,
                    parent_run_id=parent_run_id,
                    tags=tags,
                    metadata=metadata,
                    **kwargs,
                )
            except Exception as exc:
                # LangGraph's own walk of the input (a dataclass state with an unset
                # `field(init=False)` has no value to read): the raw graph's handler logs it
                # and leaves the run as far as it got, and so does this one.
                _swallowed(self, "on_chain_start", exc)
            self._mark(run_id)

    def on_chain_end(self, *args: Any, **kwargs: Any) -> Any:
        run_id = kwargs["run_id"]
        unsent = self._unsent
        if unsent and run_id in unsent:
            unsent.discard(run_id)
            try:
                name_unsent_messages(args[0], run_id)  # before they are judged
            except Exception as exc:  # LangGraph's walk of the output, as below
                _swallowed(self, "on_chain_end", exc)
        return super().on_chain_end(*args, **kwargs)  # the decider's errors are raised

    def _base_chain_end(self, *args: Any, **kwargs: Any) -> Any:
        try:
            # LangGraph's handler: its walk of the output (a state object with a field
            # that holds no value, see `on_chain_start`) is logged, as the raw graph's
            # handler logs it.
            return super()._base_chain_end(*args, **kwargs)
        except Exception as exc:
            _swallowed(self, "on_chain_end", exc)
            return None

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> Any:
        self._unsent.discard(run_id)
        return super().on_chain_error(error, run_id=run_id, **kw)

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._forget_token_run(run_id)
        return super().on_llm_end(response, run_id=run_id, parent_run_id=parent_run_id, **kw)

    def on_llm_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> Any:
        self._forget_token_run(run_id)
        return super().on_llm_error(error, run_id=run_id, parent_run_id=parent_run_id, **kw)

    def _emit(self, meta: Any, message: BaseMessage, *, dedupe: bool = False) -> None:
        # dedupe=True is every emission of a whole message (an LLM's final message, a node's
        # output); its own tag and id decide, not the node that re-emits it.
        if dedupe and (message.id in self.seen or self._run.is_internal(message)):
            if message.id is None:
                message.id = str(uuid4())  # named as LangGraph's `_emit` names it, unsent
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


def _swallowed(handler: Any, method: str, error: Exception) -> None:
    # LangChain's own handler does not raise its errors (raise_error is False): the callback
    # manager logs them and the run goes on. Ours raises its decisions' errors only.
    _lc_logger.warning("Error in %s.%s callback: %s", type(handler).__name__, method, repr(error))


class EventsHandler(EventStreamHandler):  # type: ignore[misc]
    """langchain-core's `astream_events` v2 handler, deciding and tagging for the run.

    Built by `_compat.astream_events_v2_with` for one `astream_events(version="v2")` call
    of an enforced graph, in place of LangChain's own, so that no second handler runs: each
    callback decides (and tags) first, then builds the event as LangChain's does, except
    that a token of a model run decided internal is never built or queued. It tags what
    `_RunTagger` tags (the final message of every model run, what a node produces, the first
    chunk of each visible message); the event filter still judges every event it builds.

    Args:
        slot: the call's `_wrap._EVENT_RUNS` entry, which holds the RunState the enforced
            astream decides into once it has started (before any callback).
        fresh: a new RunState, for a call whose astream did not fill the slot.
    """

    raise_error = True  # a decision that fails must stop the run, never let output through

    def __init__(self, slot: list[RunState], fresh: Callable[[], RunState], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slot = slot
        self._fresh = fresh
        self._decider: Decider | None = None
        self._llm_runs: dict[UUID, Any] = {}
        self._first_seen: set[str] = set()

    @property
    def _decides(self) -> Decider:
        # Bound at the first callback of the call: the root graph's own chain start, which
        # the enforced astream makes after its plan put the RunState into the slot.
        if self._decider is None:
            if not self.slot:
                self.slot.append(self._fresh())
            run = self.slot[0]
            self._decider = Decider(run.policy, run)
            self._llm_runs = self._decider._llm_runs
        return self._decider

    def _send(self, event: Any, event_type: str) -> None:
        """LangChain's own `_send`, which queues the event it built, with the event's data
        held as it is now: a chain's input and output hold a state's own lists, which a
        node may append to in place later (`_output_filter.HeldPut`), and the consumer
        reads the event later still. A model's events hold only its own lists, and the
        graph's own stream events (no parents) are the enforced astream's items, held."""
        if (
            event_type != "chat_model"
            and event_type != "llm"
            and (event["event"] != "on_chain_stream" or event.get("parent_ids"))
        ):
            data = event.get("data")
            if data:
                held = held_copy(data, 4)  # data, its input or output, a state, a field
                if held is not data:
                    event = {**event, "data": held}
        EventStreamHandler._send(self, event, event_type)

    async def _langchain(self, method: str, *args: Any, **kwargs: Any) -> None:
        """LangChain's own `method`, which builds the event; its errors are logged, never
        raised (the callback manager treats LangChain's handler so); ours are raised."""
        try:
            await getattr(EventStreamHandler, method)(self, *args, **kwargs)
        except Exception as exc:
            _swallowed(self, method, exc)

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._decides.start_llm(run_id, metadata, tags, kwargs.get("parent_run_id"))
        await self._langchain(
            "on_chat_model_start",
            serialized,
            messages,
            run_id=run_id,
            tags=tags,
            metadata=metadata,
            **kwargs,
        )

    async def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._decides.start_llm(run_id, metadata, tags, kwargs.get("parent_run_id"))
        await self._langchain(
            "on_llm_start",
            serialized,
            prompts,
            run_id=run_id,
            tags=tags,
            metadata=metadata,
            **kwargs,
        )

    async def on_retriever_start(
        self, serialized: dict[str, Any], query: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        self._decides.start_retriever(run_id, kwargs.get("parent_run_id"), kwargs.get("tags"))
        await self._langchain("on_retriever_start", serialized, query, run_id=run_id, **kwargs)

    async def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._decides.run
        if run is not None and run.policy.filter_custom and run.in_internal_run():
            # Dispatched in an internal tool's body with the config injected into it (it
            # names the tools node's run, so the event filter would judge it visible), or
            # in the body of a chain a visible node ran with an internal tag.
            return
        await self._langchain("on_custom_event", name, data, run_id=run_id, **kwargs)

    async def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        # The per-token hot path: one dict lookup; an internal run's token stops here,
        # before LangChain builds its event. LangChain's callback is called inline here,
        # not through `_langchain`: one coroutine less per visible token.
        vis = self._llm_runs.get(run_id)
        if vis is INTERNAL:
            if isinstance(chunk, ChatGenerationChunk):
                # A chain streaming the model's output (`prompt | model`) carries this very
                # chunk in its own `on_chain_stream`: the tag drops it there.
                chunk.message.response_metadata[DECLARATION_KEY] = INTERNAL
            return
        if (
            vis is not None
            and isinstance(chunk, ChatGenerationChunk)
            and chunk.message.id not in self._first_seen
        ):
            _tag_first_chunk(self._first_seen, chunk.message, vis)
        try:
            await super().on_llm_new_token(token, chunk=chunk, run_id=run_id, **kwargs)
        except Exception as exc:
            _swallowed(self, "on_llm_new_token", exc)

    async def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        self._decides.end_llm(run_id, response)
        await self._langchain("on_llm_end", response, run_id=run_id, **kwargs)

    async def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._decides.forget_llm(run_id)
        await self._langchain("on_llm_error", error, run_id=run_id, **kwargs)

    async def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        self._decides.start_node(run_id, inputs, tags, metadata, name, parent_run_id)
        await self._langchain(
            "on_chain_start",
            serialized,
            inputs,
            run_id=run_id,
            tags=tags,
            parent_run_id=parent_run_id,
            metadata=metadata,
            name=name,
            **kwargs,
        )

    async def on_chain_end(self, outputs: dict[str, Any], *, run_id: UUID, **kwargs: Any) -> None:
        # Tag first: the event carries the output.
        self._decides.end_node(run_id, outputs)
        await self._langchain("on_chain_end", outputs, run_id=run_id, **kwargs)

    async def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._decides.fail_node(run_id, error)
        await self._langchain("on_chain_error", error, run_id=run_id, **kwargs)

    async def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._decides.start_tool(
            run_id, metadata, tags, kwargs.get("tool_call_id"), kwargs.get("parent_run_id")
        )
        await self._langchain(
            "on_tool_start",
            serialized,
            input_str,
            run_id=run_id,
            tags=tags,
            metadata=metadata,
            **kwargs,
        )

    async def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._decides.end_tool(run_id, output)  # tag first: the event carries the output
        await self._langchain("on_tool_end", output, run_id=run_id, **kwargs)

    async def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._decides.forget_tool(run_id)
        await self._langchain("on_tool_error", error, run_id=run_id, **kwargs)
