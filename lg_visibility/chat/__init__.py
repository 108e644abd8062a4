"""Chat adapters for an enforced graph: one event mapper, its encoders, and the FastAPI routes.

- `ChatStreamMapper` / `achat_events` turn the enforced v2 stream into chat events, apart
  from any web framework; `encode_event` writes one as byte-exact SSE.
- `chat_router` serves them over FastAPI (`pip install 'lg-visibility[server]'`), with
  thread ownership and history; `sqlite_checkpointer` is the embedded default store, and
  `open_storage(db)` builds a checkpointer and a `ThreadStore` (thread index and busy locks
  shared across processes) from a SQLite path or a `postgresql://` URL.
- `bearer_user_id` (signed JWTs) and `trusted_header_user_id` (an authenticating proxy)
  are identities for `chat_router(..., user_id=...)`; `header_user_id` is for demos.

The chat side depends on the core (`lg_visibility`), never the other way round.
"""

from __future__ import annotations

from lg_visibility.chat._auth import bearer_user_id, trusted_header_user_id
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
from lg_visibility.chat._threads import ChatStorage, ThreadStore, open_storage

__all__ = [
    "ChatEvent",
    "ChatEventType",
    "ChatStorage",
    "ChatStreamMapper",
    "ThreadStore",
    "achat_events",
    "bearer_user_id",
    "chat_events",
    "chat_router",
    "encode_event",
    "format_sse",
    "header_user_id",
    "history_item",
    "open_storage",
    "source_name",
    "sqlite_checkpointer",
    "trusted_header_user_id",
]
