"""The handler-side filter chain of seed 000, reimplemented faithfully for comparison.

This is the downstream approach lg_visibility replaces: stream everything
(`subgraphs=True`, modes messages/custom/values) and guess, per event, in the consumer.
The eight steps, in the seed's order (section 4.1 of seed 000):

1. message id starts with the internal prefix ("internal-marker")  -> drop the id
2. `thread_id` in the metadata starts with "query-rewrite-"         -> drop the id
3. not an AIMessage / AIMessageChunk / ToolMessage                  -> skip
4. (chunks) the namespace names a registered custom-only subgraph   -> drop the id
5. (chunks) the message head starts with '{"scenarios":'            -> drop the id
6. (chunks, response nodes) a compaction marker in the text         -> drop the id
7. (chunks, subgraph nodes that are not response nodes) the chunk
   text starts with "{"                                             -> drop the id
8. otherwise emit: a chunk as APPEND, a whole AIMessage as UPDATE, a ToolMessage as a
   tool result.

"Drop the id" adds it to a suppressed set, so later chunks of that message are cut by
one set lookup. Step 5 needs the head of the message, which real tokenisation splits over
several chunks (`{"`, `sce`, `narios":`), so the chunks of a message are held back while
its head is still a prefix of '{"scenarios":' and released once it is decided (this is how
the perf-baseline harness implemented it). Step 6 carries the tail of the previous chunk,
so a marker split over two chunks is still found.

The values handler (seed 000 section 5.2): for every `values` snapshot, walk
`state["messages"]` and re-emit, once, the AI messages whose id was already emitted by the
messages handler (`visible_ai_message_ids` / `emitted_values_ai_message_ids`), and the
ToolMessages whose tool call was emitted. Custom events pass straight through (section
1.3: "the cleanest channel"). Interrupts found in `values` parts are forwarded once each
(the seed does not describe interrupts; forwarding them is the natural minimum).

Emit means calling `emit(item)` with a tuple `(kind, ns, payload, metadata)`, kind in
"append", "update", "tool_result", "custom", "interrupt". No serialisation happens here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage

__all__ = [
    "COMPACTION_MARKERS",
    "INTERNAL_MSG_PREFIX",
    "QUERY_REWRITE_THREAD_PREFIX",
    "SCENARIOS_PREFIX",
    "ChainConfig",
    "HandlerSideChain",
    "text_content",
]

INTERNAL_MSG_PREFIX = "internal-marker"
QUERY_REWRITE_THREAD_PREFIX = "query-rewrite-"
SCENARIOS_PREFIX = '{"scenarios":'
COMPACTION_MARKERS = ("COMPILATION_MARKER", "## SUMMARY")

Emitted = tuple[str, tuple[str, ...], Any, Mapping[str, Any] | None]


def text_content(content: Any) -> str:
    """Seed 000's `text_content`: a str as is, text blocks joined, None as ''."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            item["text"]
            for item in content
            if isinstance(item, dict) and item.get("type") == "text"
        )
    return ""


@dataclass(frozen=True)
class ChainConfig:
    """What the chain was told about the graph (its hand-maintained registries).

    Args:
        custom_only_subgraphs: step 4; subgraphs known to publish only through `custom`
            (the seed's editor_subgraph), matched as substrings of the checkpoint ns.
        response_nodes: step 6 applies to their chunks; step 7 exempts them.
    """

    custom_only_subgraphs: frozenset[str] = frozenset({"editor_subgraph"})
    response_nodes: frozenset[str] = frozenset({"respond", "response_node"})
    internal_msg_prefix: str = INTERNAL_MSG_PREFIX
    thread_id_prefix: str = QUERY_REWRITE_THREAD_PREFIX
    scenarios_prefix: str = SCENARIOS_PREFIX
    markers: tuple[str, ...] = field(default=COMPACTION_MARKERS)

    def with_subgraphs(self, names: Iterable[str]) -> ChainConfig:
        """A copy whose step 4 also lists `names`."""
        return ChainConfig(
            custom_only_subgraphs=self.custom_only_subgraphs | frozenset(names),
            response_nodes=self.response_nodes,
            internal_msg_prefix=self.internal_msg_prefix,
            thread_id_prefix=self.thread_id_prefix,
            scenarios_prefix=self.scenarios_prefix,
            markers=self.markers,
        )


class HandlerSideChain:
    """One run's handler-side filter state; feed it every v2 stream part in order."""

    __slots__ = (
        "_buffered",
        "_cfg",
        "_emit",
        "_emitted_interrupts",
        "_emitted_tools",
        "_emitted_values",
        "_heads",
        "_open",
        "_suppressed",
        "_tails",
        "_visible",
        "_visible_tool_calls",
    )

    def __init__(self, config: ChainConfig, emit: Callable[[Emitted], Any]) -> None:
        self._cfg = config
        self._emit = emit
        self._suppressed: set[str | None] = set()
        self._visible: set[str | None] = set()  # visible_ai_message_ids
        self._visible_tool_calls: set[str] = set()  # visible_tool_call_ids
        self._emitted_values: set[str | None] = set()  # emitted_values_ai_message_ids
        self._emitted_tools: set[str | None] = set()  # emitted_values_tool_message_ids
        self._emitted_interrupts: set[str] = set()
        self._open: set[str | None] = set()  # ids whose head is decided (not step 5)
        self._heads: dict[str | None, str] = {}  # ids whose head is still ambiguous
        self._buffered: dict[str | None, list[Any]] = {}
        self._tails: dict[str | None, str] = {}  # step 6 carry-over per id

    def feed(self, part: Mapping[str, Any]) -> None:
        """Process one v2 stream part (`{"type", "ns", "data", ...}`)."""
        kind = part["type"]
        if kind == "messages":
            message, metadata = part["data"]
            self._on_message(part["ns"], message, metadata)
        elif kind == "values":
            self._on_values(part)
        elif kind == "custom":
            self._emit(("custom", part["ns"], part["data"], None))

    # -- messages ------------------------------------------------------------------------

    def _on_message(self, ns: tuple[str, ...], message: Any, metadata: dict[str, Any]) -> None:
        mid = message.id
        if mid in self._suppressed:
            return
        cfg = self._cfg
        if mid is not None and mid.startswith(cfg.internal_msg_prefix):  # 1
            self._suppressed.add(mid)
            return
        thread_id = metadata.get("thread_id")
        if thread_id and str(thread_id).startswith(cfg.thread_id_prefix):  # 2
            self._suppressed.add(mid)
            return
        if isinstance(message, AIMessageChunk):
            self._on_chunk(ns, message, metadata, mid)
        elif isinstance(message, AIMessage):  # 8, UPDATE
            self._mark_visible(mid, message)
            self._emit(("update", ns, message, metadata))
        elif isinstance(message, ToolMessage):  # 8, tool result
            self._emit(("tool_result", ns, message, metadata))
        # 3: any other type (HumanMessage, SystemMessage, ...) is skipped

    def _on_chunk(
        self, ns: tuple[str, ...], chunk: AIMessageChunk, metadata: dict[str, Any], mid: Any
    ) -> None:
        cfg = self._cfg
        checkpoint_ns = metadata.get("langgraph_checkpoint_ns", "")
        for name in cfg.custom_only_subgraphs:  # 4
            if name in checkpoint_ns:
                self._suppressed.add(mid)
                return
        content = chunk.content
        text = content if isinstance(content, str) else text_content(content)
        if mid not in self._open:
            # 5, on the head of the message: hold chunks back while it is ambiguous.
            prefix = cfg.scenarios_prefix
            head = self._heads.pop(mid, "") + text
            if head and len(head) < len(prefix) and prefix.startswith(head):
                if chunk.chunk_position != "last":
                    self._heads[mid] = head
                    self._buffered.setdefault(mid, []).append(chunk)
                    return
            held = self._buffered.pop(mid, None)
            if head.startswith(prefix):
                self._suppressed.add(mid)
                return
            if head:
                self._open.add(mid)
            if held:
                held.append(chunk)
                for piece in held:
                    if not self._chunk_rules(ns, piece, metadata, mid):
                        return
                return
        self._chunk_rules(ns, chunk, metadata, mid, text)

    def _chunk_rules(
        self,
        ns: tuple[str, ...],
        chunk: AIMessageChunk,
        metadata: dict[str, Any],
        mid: Any,
        text: str | None = None,
    ) -> bool:
        """Steps 6 and 7 on one chunk, then emit it; False when the id got suppressed."""
        if text is None:
            content = chunk.content
            text = content if isinstance(content, str) else text_content(content)
        cfg = self._cfg
        if metadata.get("langgraph_node") in cfg.response_nodes:  # 6
            probe = self._tails.get(mid, "") + text
            for marker in cfg.markers:
                if marker in probe:
                    self._suppressed.add(mid)
                    return False
            self._tails[mid] = probe[-24:]  # longer than any marker
        elif ns and text.startswith("{"):  # 7
            self._suppressed.add(mid)
            return False
        self._mark_visible(mid, chunk)
        self._emit(("append", ns, chunk, metadata))
        return True

    def _mark_visible(self, mid: Any, message: AIMessage) -> None:
        self._visible.add(mid)
        if isinstance(message, AIMessageChunk):
            pieces = message.tool_call_chunks
            if pieces:
                for piece in pieces:
                    if piece.get("id"):
                        self._visible_tool_calls.add(piece["id"])
        elif message.tool_calls:
            for call in message.tool_calls:
                if call.get("id"):
                    self._visible_tool_calls.add(call["id"])

    # -- values --------------------------------------------------------------------------

    def _on_values(self, part: Mapping[str, Any]) -> None:
        ns = part["ns"]
        for interrupt in part.get("interrupts") or ():
            if interrupt.id not in self._emitted_interrupts:
                self._emitted_interrupts.add(interrupt.id)
                self._emit(("interrupt", ns, interrupt, None))
        data = part["data"]
        messages = data.get("messages") if isinstance(data, dict) else None
        if not messages:
            return
        visible = self._visible
        emitted = self._emitted_values
        tool_calls = self._visible_tool_calls
        for message in messages:
            mid = message.id
            if mid in visible:
                if mid not in emitted and isinstance(message, AIMessage):
                    emitted.add(mid)
                    self._emit(("update", ns, message, None))
            elif (
                tool_calls
                and isinstance(message, ToolMessage)
                and message.tool_call_id in tool_calls
                and mid not in self._emitted_tools
            ):
                self._emitted_tools.add(mid)
                self._emit(("tool_result", ns, message, None))
