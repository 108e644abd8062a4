"""Markers by file: `pytest -m "not integration"` is the quick inner loop (about 20 s).

- `integration`: tests that start real servers, browsers, node or subprocesses
  (tests/integration, tests/browser, and the files in `_REAL_PROCESSES`);
- `slow`: the big oracle matrices and the random-graph property test (`_SLOW`). They are
  part of the full run, so they carry `integration` too; `-m slow` selects them alone.

The README's test command runs everything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent
_INTEGRATION_DIRS = (_HERE / "integration", _HERE / "browser")
_REAL_PROCESSES = frozenset(
    {
        "chat/test_aisdk.py",  # the AI SDK's own parser, in node
        "chat/test_agui_router.py",  # uvicorn on 127.0.0.1
        "core/test_fail_closed.py",  # wrappers installed in subprocesses
        "demo/test_app_and_cli.py",  # the CLI in subprocesses
    }
)
_SLOW = frozenset(
    {
        "core/test_oracle.py",
        "core/test_events.py",
        "core/test_random_graphs.py",
        "core/test_stream_defects.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(item.path)
        relative = path.relative_to(_HERE).as_posix() if _HERE in path.parents else ""
        if relative in _SLOW:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.integration)
        elif relative in _REAL_PROCESSES or any(d in path.parents for d in _INTEGRATION_DIRS):
            item.add_marker(pytest.mark.integration)
