"""A minimal, fast streaming chat model for timing runs.

A benchmark must not pay for a test double's features: this model has no script, no
tool calls, no lock and no delay option beyond one `await asyncio.sleep(0)` per token for
the network-fed case. Its tokens are computed once per (kind, count) and cached, so the
per-token cost is only what every provider integration pays: one `AIMessageChunk` and one
`ChatGenerationChunk` per token, then langchain-core's own streaming bookkeeping.

Under LangGraph's `messages` stream mode a `_StreamingCallbackHandler` is attached, so
`model.ainvoke(...)` inside a node goes through `_astream` and langchain-core fires
`on_llm_new_token` per chunk (langchain-core 1.8.3, `_agenerate_with_cache`). That is the
production path, and it is the one measured.

For correctness cases use `lg_visibility.testing.FakeChatModel` instead (tool calls,
structured output, scripts).
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, ClassVar

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

__all__ = ["INTERNAL_MARKER", "FastStreamingChat", "json_tokens", "prose_tokens"]

INTERNAL_MARKER = "INTJSON"
"""Appears in every internal JSON stream; parsed fields written to state never carry it."""

_WORDS = (
    "the",
    "report",
    "shows",
    "that",
    "your",
    "invoice",
    "was",
    "paid",
    "on",
    "time",
    "and",
    "no",
    "further",
    "action",
    "is",
    "needed",
    "for",
    "this",
    "month",
    "we",
    "also",
    "checked",
    "the",
    "second",
    "account",
    "which",
    "looks",
    "fine",
    "today",
)


@functools.cache
def prose_tokens(n: int, *, seed: int = 1) -> tuple[str, ...]:
    """`n` user-visible prose tokens (a word and its trailing space each)."""
    rng = random.Random(seed)
    return tuple(rng.choice(_WORDS) + " " for _ in range(n))


@functools.cache
def json_tokens(n: int, prefix: str, *, seed: int = 2) -> tuple[str, ...]:
    """`n` internal JSON-ish tokens of 2-6 characters, starting with `prefix`.

    The text looks like a structured-output response (`{"<key>": [{...}, ...`) and carries
    `INTERNAL_MARKER` within its first tokens, so a leak of any sizeable part is visible.
    Cutting into 2-6 characters mimics real tokenisation: a prefix check on the first
    chunk alone cannot see `{"scenarios":`.
    """
    rng = random.Random(seed)
    items = []
    i = 0
    body = prefix + ' [{"note": "' + INTERNAL_MARKER + '", '
    while len(body) < 7 * n + 64:
        items.append(json.dumps({"id": i, "name": " ".join(rng.sample(_WORDS, 3)), "score": i % 7}))
        body += items[-1] + ", "
        i += 1
    tokens: list[str] = []
    pos = 0
    while len(tokens) < n:
        size = rng.randint(2, 6)
        tokens.append(body[pos : pos + size])
        pos += size
    return tuple(tokens)


class FastStreamingChat(BaseChatModel):
    """Streams precomputed tokens, then a closing chunk with `chunk_position="last"`.

    Args:
        tokens: the tokens, in order (`prose_tokens`/`json_tokens`).
        network: `await asyncio.sleep(0)` before each token, as a network-fed stream
            does, so the event loop (and the consumer) runs between tokens.
    """

    tokens: tuple[str, ...]
    network: bool = False
    before_last: ClassVar[Callable[[], None] | None] = None
    """Probe hook (memory attribution): called once per call, before the closing chunk,
    when every chunk of the call is alive. None in timing runs."""

    @property
    def _llm_type(self) -> str:
        return "bench-fast-fake"

    def _final_chunk(self) -> ChatGenerationChunk:
        n = len(self.tokens)
        return ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                chunk_position="last",
                response_metadata={"finish_reason": "stop"},
                usage_metadata={"input_tokens": 8, "output_tokens": n, "total_tokens": n + 8},
            )
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = AIMessage(content="".join(self.tokens))
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for token in self.tokens:
            yield ChatGenerationChunk(message=AIMessageChunk(content=token))
        yield self._final_chunk()

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        # langchain-core fires on_llm_new_token for each yielded chunk (run_manager is
        # None on this path in 1.8.3), so the model must not fire it too.
        if self.network:
            for token in self.tokens:
                await asyncio.sleep(0)
                yield ChatGenerationChunk(message=AIMessageChunk(content=token))
        else:
            for token in self.tokens:
                yield ChatGenerationChunk(message=AIMessageChunk(content=token))
        hook = FastStreamingChat.before_last
        if hook is not None:
            hook()
        yield self._final_chunk()
