"""Test doubles shipped with the library: a scripted chat model that really streams.

`FakeChatModel` is a `BaseChatModel` that answers from a script and streams its answer
through LangChain's callback machinery exactly like a provider model does: text as
whitespace-preserving tokens, tool calls as `tool_call_chunks`, then a closing empty
chunk with `chunk_position="last"`. It supports `bind_tools`, so
`langchain.agents.create_agent(model, tools=..., response_format=...)` works with both
structured-output strategies:

- ProviderStrategy: construct the model with `profile={"structured_output": True}` and
  script a JSON string.
- ToolStrategy: leave the profile unset and script an `AIMessage` whose tool call names
  the response-format schema (for a Pydantic model, its class name).

`langchain_core.language_models.GenericFakeChatModel` cannot stand in here: in
langchain-core 1.8 its `bind_tools` raises `NotImplementedError` and it cannot stream
tool calls.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Self, TypeAlias

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolCall
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr, SkipValidation, field_validator, model_validator

__all__ = ["FakeChatModel", "FakeResponse", "Responder", "split_tokens"]

Responder: TypeAlias = Callable[[list[BaseMessage]], str | AIMessage]
"""A function from the call's input messages to the reply (text or an `AIMessage`)."""

FakeResponse: TypeAlias = str | AIMessage | Responder
"""One scripted reply: text content, a full `AIMessage`, or a `Responder`."""

# The first token carries any leading whitespace; every token carries its trailing
# whitespace, so "".join(tokens) == text.
_TOKEN_RE = re.compile(r"\s*\S+\s*|\s+")


def split_tokens(text: str) -> list[str]:
    """Split `text` into the tokens `FakeChatModel` streams.

    Tokens are whitespace-preserving: each is a word plus its trailing whitespace, and the
    first also carries any leading whitespace, so the tokens join back to `text`. An empty
    string has no tokens.
    """
    return _TOKEN_RE.findall(text)


class FakeChatModel(BaseChatModel):
    """A scripted chat model that streams through LangChain callbacks.

    Give exactly one of `responses` or `respond`:

    - `responses`: replies taken in call order. When the list is exhausted the model
      cycles back to the first reply, so a one-element list answers every call the same
      way. An element that is a callable is called with the input messages.
    - `respond`: a callable that computes every reply from the input messages.

    The call counter is shared by all threads and tasks using this instance (and by every
    binding made from it with `bind`/`bind_tools`), and advances under a lock.

    Streaming (`stream`, or `invoke` under a streaming callback handler such as
    LangGraph's `messages` stream mode) yields, in order: one chunk per text token (see
    `split_tokens`); for each tool call, a chunk with name, id, index and the first
    `tool_args_chunk_size` characters of the JSON arguments, then the rest of the
    arguments in pieces of that size; finally an empty chunk with `chunk_position="last"`
    and `response_metadata={"finish_reason": "stop" | "tool_calls"}`. Message ids are
    left unset so langchain-core stamps `lc_run--<run_id>`, as it does for real
    providers. A tool call scripted without an id gets `call_<call number>_<index>`.

    Args:
        responses: Scripted replies, cycled.
        respond: Reply function, alternative to `responses`.
        token_delay: Seconds to sleep (`time.sleep` / `asyncio.sleep`) before each
            streamed chunk; use it to test cancellation mid-stream.
        tool_args_chunk_size: Characters of tool-call arguments per streamed chunk.
        model_name: Reported as `ls_model_name` in callback metadata.
        profile: The model profile; `{"structured_output": True}` makes `create_agent`
            choose ProviderStrategy.

    Raises:
        ValueError: If both or neither of `responses`/`respond` are given, if
            `responses` is empty, or if an option is out of range.
    """

    # SkipValidation: pydantic's union validation would feed a callable to AIMessage's
    # validators, which crash with AttributeError; `_check_replies` validates instead.
    responses: SkipValidation[Sequence[FakeResponse] | None] = None
    respond: SkipValidation[Responder | None] = None
    token_delay: float = 0.0
    tool_args_chunk_size: int = 8
    model_name: str = "fake"

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _calls: int = PrivateAttr(default=0)

    @field_validator("responses", mode="before")
    @classmethod
    def _check_replies(cls, value: Any) -> Any:
        # Before pydantic's own union validation, whose error for e.g. an int comes from
        # deep inside AIMessage's validators and names neither the reply nor the fix.
        if value is None:
            return value
        if isinstance(value, str | AIMessage) or not isinstance(value, Sequence):
            msg = (
                f"FakeChatModel(responses=...) must be a list of replies, got "
                f"{type(value).__name__}; wrap a single reply in a list."
            )
            raise ValueError(msg)
        for reply in value:
            if not (isinstance(reply, str | AIMessage) or callable(reply)):
                msg = (
                    f"FakeChatModel reply {reply!r} has type {type(reply).__name__}; use a "
                    "str, an AIMessage, or a callable (messages) -> str | AIMessage."
                )
                raise ValueError(msg)
        return list(value)

    @model_validator(mode="after")
    def _check_script(self) -> Self:
        if (self.responses is None) == (self.respond is None):
            msg = (
                "FakeChatModel needs exactly one of `responses` (a list of replies) or "
                f"`respond` (a function of the messages); got responses={self.responses!r}, "
                f"respond={self.respond!r}."
            )
            raise ValueError(msg)
        if self.responses is not None and len(self.responses) == 0:
            msg = "FakeChatModel(responses=[]) has nothing to say; give at least one reply."
            raise ValueError(msg)
        if self.token_delay < 0:
            msg = f"token_delay must be >= 0 seconds, got {self.token_delay!r}."
            raise ValueError(msg)
        if self.tool_args_chunk_size < 1:
            msg = f"tool_args_chunk_size must be >= 1, got {self.tool_args_chunk_size!r}."
            raise ValueError(msg)
        return self

    @property
    def _llm_type(self) -> str:
        return "lg-visibility-fake"

    @property
    def call_count(self) -> int:
        """How many calls this model has answered so far."""
        with self._lock:
            return self._calls

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools (OpenAI format) and options; the fake records but ignores them.

        The script decides which tool calls are made; tools are converted only so that a
        malformed tool fails here, as it would with a real provider.
        """
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=formatted, **kwargs)

    # -- script -----------------------------------------------------------------------

    def _next_reply(self, messages: list[BaseMessage]) -> tuple[int, AIMessage]:
        with self._lock:
            number = self._calls
            self._calls += 1
        if self.respond is not None:
            reply: FakeResponse = self.respond
        else:
            assert self.responses is not None  # checked by the validator
            reply = self.responses[number % len(self.responses)]
        if not isinstance(reply, str | AIMessage):
            reply = reply(list(messages))
        if isinstance(reply, str):
            return number, AIMessage(content=reply)
        if isinstance(reply, AIMessage):
            return number, reply
        msg = (
            f"FakeChatModel responder returned {type(reply).__name__}; "
            "it must return a str or an AIMessage."
        )
        raise TypeError(msg)

    @staticmethod
    def _tool_calls(number: int, message: AIMessage) -> list[ToolCall]:
        return [
            ToolCall(
                name=call["name"],
                args=call["args"],
                id=call.get("id") or f"call_{number}_{index}",
                type="tool_call",
            )
            for index, call in enumerate(message.tool_calls)
        ]

    def _chunks(self, messages: list[BaseMessage]) -> Iterator[ChatGenerationChunk]:
        number, message = self._next_reply(messages)
        for token in split_tokens(message.text):
            yield ChatGenerationChunk(message=AIMessageChunk(content=token))
        size = self.tool_args_chunk_size
        tool_calls = self._tool_calls(number, message)
        for index, call in enumerate(tool_calls):
            args = json.dumps(call["args"])
            pieces = [args[i : i + size] for i in range(0, len(args), size)] or [""]
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    tool_call_chunks=[
                        tool_call_chunk(
                            name=call["name"], args=pieces[0], id=call["id"], index=index
                        )
                    ],
                )
            )
            for piece in pieces[1:]:
                yield ChatGenerationChunk(
                    message=AIMessageChunk(
                        content="",
                        tool_call_chunks=[
                            tool_call_chunk(name=None, args=piece, id=None, index=index)
                        ],
                    )
                )
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                chunk_position="last",
                response_metadata={"finish_reason": "tool_calls" if tool_calls else "stop"},
                usage_metadata=message.usage_metadata,
            )
        )

    # -- BaseChatModel ----------------------------------------------------------------

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        number, message = self._next_reply(messages)
        tool_calls = self._tool_calls(number, message)
        reply = AIMessage(
            content=message.content,
            tool_calls=tool_calls,
            response_metadata={"finish_reason": "tool_calls" if tool_calls else "stop"},
            usage_metadata=message.usage_metadata,
        )
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        # langchain-core 1.8 fires on_llm_new_token itself for stream()/invoke() and passes
        # no run_manager; it passes one only on the v2 event path, where providers such as
        # ChatOpenAI fire the callback themselves. Do the same so no path doubles tokens.
        for chunk in self._chunks(messages):
            if self.token_delay:
                time.sleep(self.token_delay)
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            if self.token_delay:
                await asyncio.sleep(self.token_delay)
            if run_manager is not None:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
