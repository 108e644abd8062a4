"""Exceptions raised by lg_visibility."""

from __future__ import annotations

__all__ = ["VisibilityConfigError"]


class VisibilityConfigError(ValueError):
    """A policy, declaration or wrapped object is not valid; the message names it and the fix."""
