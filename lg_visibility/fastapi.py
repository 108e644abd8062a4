"""Deprecated: import from `lg_visibility.chat`. Kept importable for the 0.2 release."""

from __future__ import annotations

import warnings

from lg_visibility.chat import chat_router, header_user_id, history_item, sqlite_checkpointer

__all__ = ["chat_router", "header_user_id", "history_item", "sqlite_checkpointer"]

warnings.warn(
    "lg_visibility.fastapi is deprecated; import chat_router from lg_visibility.chat.",
    DeprecationWarning,
    stacklevel=2,
)
