"""Chat adapters for an enforced graph: one event mapper, its encoders, and the FastAPI routes.

- `ChatStreamMapper` / `achat_events` turn the enforced v2 stream into chat events, apart
  from any web framework; `encode_event` writes one as byte-exact SSE.
- `chat_router` serves them over FastAPI (`pip install 'lg-visibility[server]'`), with
  thread ownership and history; `sqlite_checkpointer` is the embedded default store.

The chat side depends on the core (`lg_visibility`), never the other way round.
"""

from __future__ import annotations

from lg_visibility.chat._mapper import (
    ChatEvent,
    ChatEventType,
    ChatStreamMapper,
    achat_events,
    chat_events,
    encode_event,
    format_sse,
    source_name,
)
from lg_visibility.chat._router import (
    chat_router,
    header_user_id,
    history_item,
    sqlite_checkpointer,
)

__all__ = [
    "ChatEvent",
    "ChatEventType",
    "ChatStreamMapper",
    "achat_events",
    "chat_events",
    "chat_router",
    "encode_event",
    "format_sse",
    "header_user_id",
    "history_item",
    "source_name",
    "sqlite_checkpointer",
]
