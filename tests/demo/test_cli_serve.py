"""Tests for `lg-visibility serve` option handling: identity, --graph/--policy, refusals.

The server itself is replaced by a recorder; tests/integration/test_postgres_workers.py
runs real `serve` processes.
"""

from __future__ import annotations

from typing import Any

import pytest

from lg_visibility.demo import app as demo_app
from lg_visibility.demo.cli import load_object, main

GRAPH = [
    "--graph",
    "tests.integration.pg_graph:graph",
    "--policy",
    "tests.integration.pg_graph:policy",
]


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments each `serve(...)` call got, instead of running a server."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(demo_app, "serve", lambda **kw: calls.append(kw))
    return calls


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::", "example.com"])
def test_serve_refuses_a_public_host_with_the_bare_header(
    host: str, served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    """A non-loopback host without an auth option exits 2 with one line naming the options."""
    assert main(["serve", "--host", host]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--auth-secret-env VAR, --auth-public-key FILE or --trust-header NAME" in err
    assert served == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_serve_allows_loopback_with_the_bare_header(
    host: str, served: list[dict[str, Any]]
) -> None:
    """On a loopback host the demo identity is allowed (user_id None = X-User-Id)."""
    assert main(["serve", "--host", host]) == 0
    assert [(c["host"], c["user_id"], c["graph"]) for c in served] == [(host, None, None)]


def test_serve_public_host_with_trust_header_passes_a_dependency(
    served: list[dict[str, Any]],
) -> None:
    """--trust-header makes a public host acceptable and passes a user-id dependency."""
    assert main(["serve", "--host", "0.0.0.0", "--trust-header", "X-Forwarded-User"]) == 0
    assert len(served) == 1 and callable(served[0]["user_id"])


def test_serve_auth_secret_env_must_be_set(
    served: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--auth-secret-env names a variable; unset it is one line, set it serves."""
    monkeypatch.delenv("LGV_TEST_SECRET", raising=False)
    with pytest.raises(SystemExit, match="LGV_TEST_SECRET: that variable is not set"):
        main(["serve", "--auth-secret-env", "LGV_TEST_SECRET"])
    monkeypatch.setenv("LGV_TEST_SECRET", "k" * 32)
    assert main(["serve", "--host", "0.0.0.0", "--auth-secret-env", "LGV_TEST_SECRET"]) == 0
    assert len(served) == 1


def test_serve_graph_with_policy_is_wrapped(served: list[dict[str, Any]]) -> None:
    """--graph plus --policy serves the graph wrapped with that policy."""
    from tests.integration.pg_graph import policy

    assert main(["serve", *GRAPH, "--db", "x.sqlite"]) == 0
    assert served[0]["graph"].visibility_policy is policy
    assert served[0]["db_path"] == "x.sqlite"


def test_serve_unwrapped_graph_without_policy_is_refused(served: list[dict[str, Any]]) -> None:
    """An unwrapped --graph without --policy is refused rather than served unfiltered."""
    with pytest.raises(SystemExit, match="not wrapped with with_visibility"):
        main(["serve", "--graph", "tests.integration.pg_graph:graph"])
    assert served == []


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("nocolon", "package.module:attribute"),
        ("no_such_module_x:graph", "cannot import"),
        ("tests.integration.pg_graph:nothing", "has no .nothing."),
    ],
)
def test_load_object_bad_spec_is_one_line(spec: str, match: str) -> None:
    """A bad MODULE:ATTR is a SystemExit naming the problem."""
    with pytest.raises(SystemExit, match=match):
        load_object(spec, "--graph")


def test_attach_checkpointer_refuses_a_graph_with_its_own() -> None:
    """A graph compiled with a checkpointer is refused with the fix in the message."""
    from langgraph.checkpoint.memory import InMemorySaver

    from tests.integration.pg_graph import builder

    with pytest.raises(ValueError, match="compile it without one"):
        demo_app.attach_checkpointer(builder.compile(checkpointer=InMemorySaver()), InMemorySaver())
