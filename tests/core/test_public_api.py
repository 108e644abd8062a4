"""The public API: a complete, sorted top-level `__all__`, and an `__all__` in every module."""

from __future__ import annotations
import __future__

import ast
import importlib
import pkgutil
import types
from pathlib import Path

import pytest

import lg_visibility

MODULES = sorted(m.name for m in pkgutil.iter_modules(lg_visibility.__path__))


def test_public_api_all_is_sorted() -> None:
    """The top-level `__all__` is sorted and has no duplicates."""
    assert lg_visibility.__all__ == sorted(set(lg_visibility.__all__))


def test_public_api_all_names_are_importable() -> None:
    """Every name in the top-level `__all__` is importable from the package."""
    namespace: dict[str, object] = {}
    exec("from lg_visibility import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(lg_visibility.__all__)


def test_public_api_all_is_complete() -> None:
    """Every public object the package defines or imports is listed in `__all__`."""
    public = {
        name
        for name, value in vars(lg_visibility).items()
        if not name.startswith("_")
        and not isinstance(value, (types.ModuleType, __future__._Feature))
    }
    assert sorted(public | {"__version__"}) == lg_visibility.__all__


def test_public_api_exports_the_core_names() -> None:
    """The names the README documents are exported (a removal must be deliberate)."""
    assert {
        "INTERNAL",
        "USER_VISIBLE",
        "Visibility",
        "VisibilityConfigError",
        "VisibilityHandler",
        "VisibilityPolicy",
        "__version__",
        "compile_with_visibility",
        "visibility_of",
        "with_visibility",
    } <= set(lg_visibility.__all__)


PUBLIC_ALL = {
    "chat": {
        "AGUI_PROVENANCE_EVENT",
        "ChatEvent",
        "ChatStorage",
        "ChatEventType",
        "ChatStreamMapper",
        "UIStreamEncoder",
        "ThreadStore",
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
    },
    "errors": {"VisibilityConfigError", "VisibilityError"},
    "fastapi": {"chat_router", "header_user_id", "history_item", "sqlite_checkpointer"},
    "policy": {"INTERNAL", "USER_VISIBLE", "Visibility", "VisibilityDecision", "VisibilityPolicy"},
    "subagent": {"Instruction", "SubagentNode", "add_subagent", "as_subagent"},
    "testing": {"FakeChatModel", "FakeResponse", "Responder", "split_tokens"},
}
"""Each public module and exactly the names it exports; everything else is private."""

APPLICATION = {"demo"}
"""Packages that are an application (the CLI's demo), not an importable API."""


@pytest.mark.parametrize("name", sorted(PUBLIC_ALL))
def test_public_api_module_all_is_exactly_its_public_names(name: str) -> None:
    """A public module's `__all__` lists its public names only, each one importable."""
    module = importlib.import_module(f"lg_visibility.{name}")
    assert set(module.__all__) == PUBLIC_ALL[name]
    assert [n for n in module.__all__ if not hasattr(module, n)] == []


def test_public_api_every_other_module_is_private() -> None:
    """Every module of the package is public, the demo application, or named `_private`."""
    assert [
        m for m in MODULES if m not in PUBLIC_ALL and m not in APPLICATION and not m.startswith("_")
    ] == []


def test_public_api_module_list_is_the_package() -> None:
    """The modules checked above are the package's own (the list is not silently empty)."""
    assert set(PUBLIC_ALL) | APPLICATION <= set(MODULES)
    assert {"_compat", "_handlers", "_output_filter", "_provenance", "_wrap"} <= set(MODULES)


_CORE = [
    p
    for p in (Path(lg_visibility.__file__).parent).glob("*.py")
    if (p.name.startswith("_") and p.name != "__init__.py") or p.name in ("policy.py", "errors.py")
]
_OUTER = (
    "lg_visibility.chat",
    "lg_visibility.demo",
    "lg_visibility.subagent",
    "lg_visibility.testing",
)


@pytest.mark.parametrize("module", _CORE, ids=lambda p: p.name)
def test_the_core_imports_neither_the_adapters_nor_subagent_nor_testing(module: Path) -> None:
    """ARCHITECTURE: dependencies point inward only; the core (`_*.py`, `policy`, `errors`)
    imports neither `chat`, `demo`, `subagent` nor `testing`."""
    imported: list[str] = []
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            imported += [a.name for a in node.names]
    assert [m for m in imported if m.startswith(_OUTER)] == []
    assert len(_CORE) >= 10  # the glob found the core
