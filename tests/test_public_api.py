"""The public API: a complete, sorted top-level `__all__`, and an `__all__` in every module."""

from __future__ import annotations
import __future__

import importlib
import pkgutil
import types

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


@pytest.mark.parametrize("name", MODULES)
def test_public_api_every_module_has_all(name: str) -> None:
    """Each module declares `__all__`, and every name in it exists."""
    module = importlib.import_module(f"lg_visibility.{name}")
    assert isinstance(module.__all__, list)
    assert [n for n in module.__all__ if not hasattr(module, n)] == []


def test_public_api_module_list_is_the_package() -> None:
    """The modules checked above are the package's own (the list is not silently empty)."""
    assert {
        "_compat",
        "errors",
        "graph",
        "handler",
        "policy",
        "provenance",
        "stream",
        "testing",
    } <= set(MODULES)
