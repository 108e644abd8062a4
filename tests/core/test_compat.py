"""_compat: the langgraph version guard and the per-run handler swap that patches nothing."""

from __future__ import annotations

import langgraph.pregel._messages
import langgraph.pregel.main
import pytest
from langgraph.pregel import Pregel

from lg_visibility import _compat
from lg_visibility._compat import check_version, is_task_config, pregel_stream_with

RANGE = "lg_visibility supports langgraph >=1.2.24,<1.3 but langgraph {} is installed."


@pytest.mark.parametrize("found", ["1.3.0", "1.2.0", "1.2.23", "2.0.0", "0.6.11", "1.2"])
def test_check_version_rejects_an_unsupported_langgraph(found: str) -> None:
    """A langgraph outside >=1.2.24,<1.3 raises ImportError naming the range and the fix."""
    with pytest.raises(ImportError) as info:
        check_version(found)
    message = str(info.value)
    assert message.startswith(RANGE.format(found))
    assert "pip install 'langgraph>=1.2.24,<1.3'" in message


@pytest.mark.parametrize("found", ["1.2.3rc1", "1.2.2a5", "1.2.23.post1"])
def test_check_version_rejects_a_pre_or_post_release_of_an_unsupported_version(found: str) -> None:
    """A suffix does not lift an old patch release into the range ("3rc1" is 3, not 31)."""
    with pytest.raises(ImportError, match=r">=1\.2\.24,<1\.3"):
        check_version(found)


@pytest.mark.parametrize("found", ["1.2.24", "1.2.25", "1.2.99", "1.2.30.post1"])
def test_check_version_accepts_a_supported_langgraph(found: str) -> None:
    """Versions in the range pass silently."""
    assert check_version(found) is None


def test_check_version_defaults_to_the_installed_langgraph() -> None:
    """Without an argument the installed langgraph is checked, and it is supported here."""
    assert _compat.LANGGRAPH_VERSION == "1.2.24"
    assert check_version() is None


def test_compat_leaves_langgraph_module_globals_alone() -> None:
    """LangGraph's `StreamMessagesHandler` globals are still its own classes after import."""
    assert langgraph.pregel.main.StreamMessagesHandler is (
        langgraph.pregel._messages.StreamMessagesHandler
    )
    assert langgraph.pregel.main.StreamMessagesHandlerV2 is (
        langgraph.pregel._messages.StreamMessagesHandlerV2
    )


def test_pregel_stream_with_returns_a_copy_and_leaves_pregel_stream_as_is() -> None:
    """The per-run stream function is a copy with its own globals; `Pregel.stream` is untouched."""
    original = Pregel.stream
    fn = pregel_stream_with(lambda *a, **k: None, lambda *a, **k: None)
    assert fn is not original
    assert fn.__code__ is original.__code__
    assert Pregel.stream is original
    assert original.__globals__ is vars(langgraph.pregel.main)
    assert fn.__globals__ is not original.__globals__
    assert original.__globals__["StreamMessagesHandler"] is (
        langgraph.pregel._messages.StreamMessagesHandler
    )


def test_handler_slot_builds_ours_and_answers_isinstance_as_the_original() -> None:
    """In the copy, the handler name builds our handler but `isinstance` checks still see
    LangGraph's class, so inherited handlers are recognised as before."""
    built: list[tuple] = []
    fn = pregel_stream_with(lambda *a, **k: built.append((a, k)) or "ours", lambda *a, **k: None)
    slot = fn.__globals__["StreamMessagesHandler"]
    original = langgraph.pregel._messages.StreamMessagesHandler
    assert slot("stream", True, parent_ns=("a",)) == "ours"
    assert built == [(("stream", True), {"parent_ns": ("a",)})]
    handler = original(lambda _: None, True)
    assert isinstance(handler, slot)
    assert not isinstance(object(), slot)
    assert issubclass(original, slot)
    assert not issubclass(int, slot)


def test_is_task_config_tells_a_node_run_from_a_top_level_run() -> None:
    """A config carrying a task id is that of a graph running as a node of another graph."""
    assert is_task_config({"configurable": {_compat.CONFIG_KEY_TASK_ID: "t"}}) is True
    assert is_task_config({"configurable": {"thread_id": "1"}}) is False
    assert is_task_config({}) is False
