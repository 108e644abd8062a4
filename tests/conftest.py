"""Markers by folder: `pytest -m "not integration"` is the quick inner loop.

`integration` marks the tests that start real servers or browsers (tests/integration,
tests/browser); the README's test command runs everything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent
_INTEGRATION = (_HERE / "integration", _HERE / "browser")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(folder in Path(item.path).parents for folder in _INTEGRATION):
            item.add_marker(pytest.mark.integration)
