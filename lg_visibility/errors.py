"""Exceptions raised by lg_visibility."""

from __future__ import annotations

__all__ = ["VisibilityConfigError", "VisibilityError"]


class VisibilityConfigError(ValueError):
    """A policy, declaration or wrapped object is not valid; the message names it and the fix."""


class VisibilityError(RuntimeError):
    """A run could not be enforced, so it stopped rather than let any output through."""
