"""`lg-visibility explain`: the node tree of a graph with each decision and its rule."""

from __future__ import annotations

import pytest

from lg_visibility import VisibilityPolicy
from lg_visibility._explain import explain_lines
from lg_visibility.demo.cli import main
from tests._support.explain_app import raw, wrapped

INCIDENT_TREE = [
    "(root graph)           root snapshots are always delivered, redacted",
    "  input_parser_node    user_visible (default)",
    "  router_subgraph/     internal (pattern 'router_subgraph')",
    "    route              internal (pattern 'router_subgraph')",
    "  knowledge_subgraph/  internal (pattern 'knowledge_subgraph')",
    "    knowledge_agent/   internal (pattern 'knowledge_subgraph')",
    "      model            internal (pattern 'knowledge_subgraph')",
    "      tools            internal (pattern 'knowledge_subgraph')",
    "    expand_queries     internal (pattern 'knowledge_subgraph')",
    "    answer             user_visible (pattern 'knowledge_subgraph/answer')",
    "  insight_subgraph/    internal (pattern 'insight_subgraph')",
    "    make_cards         internal (pattern 'insight_subgraph')",
    "    static_card        internal (pattern 'insight_subgraph')",
    "  response_node        user_visible (default)",
]


def test_explain_lists_every_static_path_with_its_rule() -> None:
    """The wrapped incident graph's tree, in graph order, each line naming its rule."""
    assert explain_lines(wrapped)[:-1] == INCIDENT_TREE


def test_explain_applies_agent_rules_and_declarations() -> None:
    """An agent rule reaches the named create_agent's node and every node inside it."""
    policy = VisibilityPolicy(agents={"knowledge_agent": "internal"})
    lines = explain_lines(raw, policy)
    agent_lines = [line.split()[0:2] + line.split()[2:] for line in lines if "agent" in line]
    assert agent_lines == [
        ["knowledge_agent/", "internal", "(agent", "'knowledge_agent')"],
        ["model", "internal", "(agent", "'knowledge_agent')"],
        ["tools", "internal", "(agent", "'knowledge_agent')"],
    ]


def test_explain_cli_prints_the_tree(capsys: pytest.CaptureFixture[str]) -> None:
    """The command names a graph by package.module:attr and prints the same tree."""
    assert main(["explain", "--graph", "tests._support.explain_app:wrapped"]) == 0
    assert capsys.readouterr().out.splitlines()[:-1] == INCIDENT_TREE


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--graph", "tests._support.explain_app:raw"],
            "lg-visibility explain: this graph is not wrapped with with_visibility: pass "
            "--policy package.module:attr naming a VisibilityPolicy.",
        ),
        (
            ["--graph", "tests._support.explain_app"],
            "lg-visibility explain: --graph 'tests._support.explain_app': write "
            "package.module:attribute, e.g. myapp.graph:graph.",
        ),
        (
            ["--graph", "tests._support.explain_app:nope"],
            "lg-visibility explain: --graph 'tests._support.explain_app:nope': "
            "'tests._support.explain_app' has no 'nope'.",
        ),
        (
            [
                "--graph",
                "tests._support.explain_app:raw",
                "--policy",
                "tests._support.explain_app:not_a_policy",
            ],
            "lg-visibility explain: --policy must name a VisibilityPolicy, got dict.",
        ),
    ],
)
def test_explain_cli_bad_input_gets_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input exits 2 with one line naming the value and the fix."""
    assert main(["explain", *argv]) == 2
    assert capsys.readouterr().err.splitlines() == [message]


def test_explain_cli_reports_a_typo_in_the_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """A typo'd pattern gets the same error as with_visibility gives."""
    argv = [
        "explain",
        "--graph",
        "tests._support.explain_app:raw",
        "--policy",
        "tests._support.explain_app:typo",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "lg-visibility explain: VisibilityPolicy(internal=[...]): pattern "
        "'router_subgrah': segment 1 'router_subgrah' names no node"
    )
