"""History labels a stored message by the producer it carries when no notes name one."""

from __future__ import annotations

from langchain_core.messages import AIMessage

from lg_visibility.chat._history import history_item


def test_history_item_source_comes_from_provenance_agent_then_node() -> None:
    """Without notes, an assistant item's source is its agent, else its node, else None."""
    agent = AIMessage(
        "a", id="1", response_metadata={"provenance": {"path": "k/model", "agent": "kn"}}
    )
    node = AIMessage("b", id="2", response_metadata={"provenance": {"path": "k/answer"}})
    bare = AIMessage("c", id="3")
    assert [history_item(m)["source"] for m in (agent, node, bare)] == ["kn", "answer", None]


def test_history_item_source_prefers_the_live_streams_name() -> None:
    """The notes' source, named by the live stream, wins over the stored provenance."""
    message = AIMessage("a", id="1", response_metadata={"provenance": {"path": "k/answer"}})
    assert history_item(message, source="support")["source"] == "support"
