"""VisibilityPolicy: path patterns, precedence, agent and tag rules, construction errors."""

from __future__ import annotations

import pickle

import pytest

from lg_visibility import INTERNAL, USER_VISIBLE, VisibilityConfigError, VisibilityPolicy

# -- patterns ----------------------------------------------------------------------------


def test_policy_star_matches_exactly_one_segment() -> None:
    """`a/*` covers every child of `a` and what lies beneath, but not `a` itself."""
    policy = VisibilityPolicy(internal=["a/*"])
    paths = ["a", "a/b", "a/b/c", "b", "b/a"]
    assert [policy.for_path(p) for p in paths] == [
        "user_visible",
        "internal",
        "internal",
        "user_visible",
        "user_visible",
    ]


def test_policy_double_star_matches_zero_or_more_segments() -> None:
    """`a/**/z` matches `z` directly under `a` and at any depth beneath it."""
    policy = VisibilityPolicy(internal=["a/**/z"])
    paths = ["a/z", "a/b/z", "a/b/c/z", "a/z/y", "a/b", "a", "z"]
    assert [policy.for_path(p) for p in paths] == [
        "internal",
        "internal",
        "internal",
        "internal",
        "user_visible",
        "user_visible",
        "user_visible",
    ]


def test_policy_leading_double_star_matches_a_name_at_any_depth() -> None:
    """`**/model` matches a `model` node at the root and inside any subgraph."""
    policy = VisibilityPolicy(internal=["**/model"])
    paths = ["model", "a/model", "a/b/model", "a/b/tools", "models"]
    assert [policy.for_path(p) for p in paths] == [
        "internal",
        "internal",
        "internal",
        "user_visible",
        "user_visible",
    ]


def test_policy_pattern_covers_everything_beneath_it() -> None:
    """A literal pattern covers its node and every path below it, and no sibling prefix."""
    policy = VisibilityPolicy(internal=["router"])
    paths = ["router", "router/route", "router/route/model", "router_subgraph", "x/router"]
    assert [policy.for_path(p) for p in paths] == [
        "internal",
        "internal",
        "internal",
        "user_visible",
        "user_visible",
    ]


def test_policy_longest_matched_prefix_wins() -> None:
    """A visible child pattern inside an internal subtree wins for that child's subtree only."""
    policy = VisibilityPolicy(internal=["kb"], user_visible=["kb/answer"])
    paths = ["kb", "kb/extract", "kb/answer", "kb/answer/model"]
    assert [policy.for_path(p) for p in paths] == [
        "internal",
        "internal",
        "user_visible",
        "user_visible",
    ]


def test_policy_longest_matched_prefix_wins_over_a_shorter_literal() -> None:
    """A longer wildcard match beats a shorter literal one: `a/*/c` over `a`."""
    policy = VisibilityPolicy(user_visible=["a"], internal=["a/*/c"])
    assert [policy.for_path(p) for p in ["a/b", "a/b/c", "a/b/c/d"]] == [
        "user_visible",
        "internal",
        "internal",
    ]


def test_policy_trailing_double_star_is_no_more_specific_than_its_prefix() -> None:
    """`a/**` covers what `a` covers, so `a/secret` still governs everything beneath it."""
    policy = VisibilityPolicy(user_visible=["a/**"], internal=["a/secret"])
    paths = ["a", "a/open", "a/open/model", "a/secret", "a/secret/model", "a/secret/x/y"]
    assert [policy.for_path(p) for p in paths] == [
        "user_visible",
        "user_visible",
        "user_visible",
        "internal",
        "internal",
        "internal",
    ]


def test_policy_equal_length_more_literal_segments_win() -> None:
    """At equal matched length the pattern with more literal segments wins, either way round."""
    visible_literal = VisibilityPolicy(internal=["a/*"], user_visible=["a/b"])
    internal_literal = VisibilityPolicy(internal=["a/b"], user_visible=["a/*"])
    assert [visible_literal.for_path("a/b"), visible_literal.for_path("a/c")] == [
        "user_visible",
        "internal",
    ]
    assert [internal_literal.for_path("a/b"), internal_literal.for_path("a/c")] == [
        "internal",
        "user_visible",
    ]


def test_policy_remaining_tie_goes_to_internal() -> None:
    """Equal length and equal literal count: internal wins, whichever list it is in."""
    first = VisibilityPolicy(internal=["*/b"], user_visible=["a/*"])
    second = VisibilityPolicy(internal=["a/*"], user_visible=["*/b"])
    assert [first.for_path("a/b"), second.for_path("a/b")] == ["internal", "internal"]


def test_policy_default_applies_to_unmatched_paths() -> None:
    """Without `default=` an unmatched path is user-visible; `default="internal"` fails closed."""
    open_policy = VisibilityPolicy(internal=["x"])
    closed_policy = VisibilityPolicy(default="internal", user_visible=["respond"])
    assert [open_policy.for_path(p) for p in ["", "y", "y/z"]] == ["user_visible"] * 3
    assert [closed_policy.for_path(p) for p in ["", "y", "y/z", "respond", "respond/m"]] == [
        "internal",
        "internal",
        "internal",
        "user_visible",
        "user_visible",
    ]


def test_policy_for_path_is_stable_across_repeated_calls() -> None:
    """A cached decision is the same as the first one, for every path asked twice."""
    policy = VisibilityPolicy(internal=["a"], user_visible=["a/b"])
    paths = ["a", "a/b", "a/b/c", "z"] * 2
    assert [policy.for_path(p) for p in paths] == [
        "internal",
        "user_visible",
        "user_visible",
        "user_visible",
    ] * 2


# -- agent and tag rules -------------------------------------------------------------------


def test_policy_agent_rule_beats_path_patterns() -> None:
    """A run inside `create_agent(name=...)` gets the agent rule, whatever its path."""
    policy = VisibilityPolicy(user_visible=["respond"], agents={"researcher": "internal"})
    assert [
        policy.decide("respond/model", agent="researcher"),
        policy.decide("respond/model", agent="writer"),
        policy.decide("respond/model"),
    ] == ["internal", "user_visible", "user_visible"]


def test_policy_tag_rule_beats_agent_rule_and_patterns() -> None:
    """A run tag with a rule decides before the agent rule and the path patterns."""
    policy = VisibilityPolicy(
        internal=["kb"], agents={"researcher": "internal"}, tags={"show_me": "user_visible"}
    )
    assert [
        policy.decide("kb/expand", tags=["other", "show_me"]),
        policy.decide("kb/expand", tags=["show_me"], agent="researcher"),
        policy.decide("kb/expand", tags=["other"]),
    ] == ["user_visible", "user_visible", "internal"]


def test_policy_disagreeing_tags_decide_internal_in_either_order() -> None:
    """Where a run's ruled tags disagree, internal wins, whichever comes first.

    LangChain does not keep the order of a run's tags (merging configs sorts them), so the
    order cannot tell the run's own tag from one it inherited."""
    policy = VisibilityPolicy(tags={"secret": "internal", "public": "user_visible"})
    assert [
        policy.decide("x", tags=["secret", "public"]),
        policy.decide("x", tags=["public", "secret"]),
        policy.decide("x", tags=["other", "public"]),
        policy.explain("x", tags=["public", "other", "secret"]).detail,
    ] == ["internal", "internal", "user_visible", "secret"]


# -- values ---------------------------------------------------------------------------------


def test_policy_decisions_are_plain_comparable_strings() -> None:
    """Decisions compare, hash and pickle as the plain strings, and `tag + tag` is the tag."""
    decision = VisibilityPolicy(internal=["a"]).for_path("a")
    assert decision == "internal"
    assert decision is INTERNAL
    assert {decision: 1} == {"internal": 1}
    assert USER_VISIBLE + USER_VISIBLE == "user_visible"
    restored = pickle.loads(pickle.dumps(decision))
    assert (type(restored), restored) == (str, "internal")


def test_policy_normalises_lists_and_accepts_any_iterable() -> None:
    """Patterns given as a tuple or generator are stored as tuples; equal policies are equal."""
    a = VisibilityPolicy(internal=("x", "y"), user_visible=(p for p in ["x/z"]))
    b = VisibilityPolicy(internal=["x", "y"], user_visible=["x/z"])
    assert (a.internal, a.user_visible) == (("x", "y"), ("x/z",))
    assert a == b
    assert hash(a) == hash(b)


def test_policy_equal_rules_hash_alike_whatever_their_order() -> None:
    """Policies equal but for the order of their `agents`/`tags` rules hash alike."""
    a = VisibilityPolicy(agents={"x": "internal", "y": "user_visible"}, tags={"t": "internal"})
    b = VisibilityPolicy(agents={"y": "user_visible", "x": "internal"}, tags={"t": "internal"})
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1


# -- construction errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"default": "hidden"}, "default: unknown visibility 'hidden'; use one of"),
        ({"agents": {"bot": "secret"}}, "agents['bot']: unknown visibility 'secret'"),
        ({"tags": {"t": True}}, "tags['t']: unknown visibility True"),
    ],
    ids=["default", "agents", "tags"],
)
def test_policy_rejects_an_unknown_visibility_value(kwargs: dict, message: str) -> None:
    """An unknown visibility value raises at construction, naming the value and the choices."""
    with pytest.raises(VisibilityConfigError) as info:
        VisibilityPolicy(**kwargs)
    assert message in str(info.value)
    assert "'user_visible', 'internal'" in str(info.value)


@pytest.mark.parametrize(
    ("pattern", "fix"),
    [
        ("a//b", "no empty segment"),
        ("", "no empty segment"),
        ("/a", "no empty segment"),
        ("a/", "no empty segment"),
        ("a*", "must stand alone as a whole segment"),
        ("a/b**", "must stand alone as a whole segment"),
        ("x:taskid", "task ids are stripped"),
        ("a|b", "task ids are stripped"),
        (" a", "surrounding spaces"),
    ],
)
def test_policy_rejects_a_malformed_pattern(pattern: str, fix: str) -> None:
    """A malformed pattern raises at construction, naming the pattern and the fix."""
    with pytest.raises(VisibilityConfigError) as info:
        VisibilityPolicy(internal=[pattern])
    assert f"internal: malformed pattern {pattern!r}" in str(info.value)
    assert fix in str(info.value)


@pytest.mark.parametrize("option", ["internal", "user_visible"])
def test_policy_rejects_a_bare_string_instead_of_a_list(option: str) -> None:
    """A single str (a classic mistake: iterated per character) raises and shows the list form."""
    with pytest.raises(VisibilityConfigError) as info:
        VisibilityPolicy(**{option: "router"})
    assert str(info.value) == (
        f"{option} must be a list of patterns, got the str 'router'; write {option}=['router']."
    )


def test_policy_rejects_a_non_string_pattern() -> None:
    """A pattern that is not a str raises, naming its type."""
    with pytest.raises(
        VisibilityConfigError, match=r"user_visible: a pattern must be a str.*int 3"
    ):
        VisibilityPolicy(user_visible=[3])  # type: ignore[list-item]


def test_policy_rejects_the_same_pattern_in_both_lists() -> None:
    """A pattern listed both as internal and as user_visible raises, naming it."""
    with pytest.raises(VisibilityConfigError) as info:
        VisibilityPolicy(internal=["a", "kb"], user_visible=["kb", "b"])
    assert str(info.value) == (
        "pattern 'kb' is listed both as internal and as user_visible; keep it in one list."
    )


def test_policy_rejects_a_non_bool_filter_custom() -> None:
    """`filter_custom` must be a bool, not a truthy value."""
    with pytest.raises(
        VisibilityConfigError, match="filter_custom must be True or False, got 'yes'"
    ):
        VisibilityPolicy(filter_custom="yes")  # type: ignore[arg-type]


def test_policy_rejects_rules_that_are_not_a_mapping() -> None:
    """`agents=` must map names to visibilities, not list them."""
    with pytest.raises(VisibilityConfigError, match=r"agents must map names to .* got list"):
        VisibilityPolicy(agents=["bot"])  # type: ignore[arg-type]


def test_policy_rejects_an_empty_rule_name() -> None:
    """A rule keyed by an empty name raises, naming the option."""
    with pytest.raises(VisibilityConfigError, match=r"tags: keys must be non-empty str, got ''"):
        VisibilityPolicy(tags={"": "internal"})


def test_decide_run_remembers_exactly_what_the_rule_chain_reads() -> None:
    """The per-policy memo of `decide_run` answers as the chain does: a tag the policy has
    a rule for, a declaration or an agent name changes the answer, a tag it has no rule for
    does not; a value the chain refuses is refused every time; the memo stays bounded."""
    from lg_visibility import _rules
    from lg_visibility._rules import decide, decide_run

    policy = VisibilityPolicy(
        internal=["planner"], tags={"kn_internal": "internal"}, agents={"helper": "internal"}
    )
    cases = [
        ("answer", {}, ["seq:step:1"]),
        ("answer", {}, ["kn_internal"]),
        ("answer", {"visibility": "internal"}, None),
        ("answer", {"lc_agent_name": "helper"}, None),
        ("planner", {"visibility": "user_visible"}, None),
        ("planner", {_rules.NODE_DECLARATION_KEY: "user_visible"}, None),
        ("planner", {}, ["other", "kn_internal"]),
    ]
    for _ in range(2):  # the second time from the memo
        for path, metadata, tags in cases:
            agent = metadata.get("lc_agent_name")
            expected = decide(
                policy,
                path,
                declared=metadata.get("visibility"),
                node_declared=_rules.node_declaration(metadata, path),
                tags=tags,
                agent=agent,
            ).visibility
            assert decide_run(policy, path, metadata, tags) == expected, (path, metadata, tags)
    for _ in range(2):
        with pytest.raises(VisibilityConfigError):
            decide_run(policy, "answer", {"visibility": "secret"}, None)
        with pytest.raises(VisibilityConfigError):
            decide_run(policy, "answer", {"visibility": ["internal"]}, None)  # unhashable
    for i in range(_rules._RUNS_MEMO_MAX + 10):
        decide_run(policy, f"node{i}", {}, None)
    assert len(policy._runs) <= _rules._RUNS_MEMO_MAX


def test_a_policys_rules_cannot_be_changed_after_it_is_made() -> None:
    """Its answers are remembered (`decide_run`, the pattern memo): its tag and agent rules
    are read-only, so a remembered answer never disagrees with a fresh one."""
    import copy
    import dataclasses

    policy = VisibilityPolicy(tags={"kn_internal": "internal"}, agents={"helper": "internal"})
    with pytest.raises(TypeError):
        policy.tags["kn_internal"] = "user_visible"  # type: ignore[index]
    with pytest.raises(TypeError):
        policy.agents["helper"] = "user_visible"  # type: ignore[index]
    for clone in (pickle.loads(pickle.dumps(policy)), copy.deepcopy(policy)):
        assert clone == policy and clone.tags == {"kn_internal": "internal"}
    changed = dataclasses.replace(policy, tags={"kn_internal": "user_visible"})
    assert changed.decide("answer", tags=["kn_internal"]) == USER_VISIBLE
    # still a dict to everything that reads one
    import json

    assert json.dumps(policy.tags) == '{"kn_internal": "internal"}'
    assert dataclasses.asdict(policy)["agents"] == {"helper": "internal"}
    assert "tags={'kn_internal': 'internal'}" in repr(policy)
