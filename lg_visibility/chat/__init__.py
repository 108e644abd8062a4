"""Chat adapters for an enforced graph: one event mapper, its encoders, and the FastAPI routes.

- `ChatStreamMapper` / `achat_events` turn the enforced v2 stream into chat events, apart
  from any web framework (`_mapper`; for a resumed run, pass
  `known=known_message_ids(graph.raw_state.get_state(config, subgraphs=True))`);
  `encode_event` writes one as byte-exact SSE (`_sse`); `UIStreamEncoder` turns them into
  Vercel AI SDK UI message stream parts (`_aisdk`).
- `history_item` shapes a stored message like the live `message` event (`_history`).
- `chat_router` serves our SSE schema and the AI SDK routes over FastAPI on sse-starlette
  (`pip install 'lg-visibility[server]'`), with thread ownership and history;
  `sqlite_checkpointer` is the embedded default store, and `open_storage(db)` builds a
  checkpointer and a `ThreadStore` (thread index and busy locks shared across processes)
  from a SQLite path or a `postgresql://` URL (`_threads`).
- `agui_router` serves AG-UI (CopilotKit) with `ag_ui_langgraph.LangGraphAgent` over the
  wrapped graph, with the chat routes' identity, ownership and busy rule, and a CUSTOM
  event (`AGUI_PROVENANCE_EVENT`) naming the producers of each MESSAGES_SNAPSHOT (`_agui`).
- `bearer_user_id` (signed JWTs) and `trusted_header_user_id` (an authenticating proxy)
  are identities for `chat_router(..., user_id=...)`; `header_user_id` is for demos (`_auth`).

The chat side depends on the core (`lg_visibility`), never the other way round.
"""

from __future__ import annotations

from lg_visibility.chat._agui import AGUI_PROVENANCE_EVENT, agui_router
from lg_visibility.chat._aisdk import UIStreamEncoder
from lg_visibility.chat._auth import bearer_user_id, header_user_id, trusted_header_user_id
from lg_visibility.chat._history import history_item, is_user_visible
from lg_visibility.chat._mapper import (
    ChatEvent,
    ChatEventType,
    ChatStreamMapper,
    achat_events,
    chat_events,
    known_message_ids,
    source_name,
)
from lg_visibility.chat._router import chat_router, sqlite_checkpointer
from lg_visibility.chat._sse import encode_event, encode_part, format_sse
from lg_visibility.chat._threads import ChatStorage, ThreadStore, open_storage

__all__ = [
    "AGUI_PROVENANCE_EVENT",
    "ChatEvent",
    "ChatEventType",
    "ChatStorage",
    "ChatStreamMapper",
    "ThreadStore",
    "UIStreamEncoder",
    "achat_events",
    "agui_router",
    "bearer_user_id",
    "chat_events",
    "chat_router",
    "encode_event",
    "encode_part",
    "format_sse",
    "header_user_id",
    "history_item",
    "is_user_visible",
    "known_message_ids",
    "open_storage",
    "source_name",
    "sqlite_checkpointer",
    "trusted_header_user_id",
]
