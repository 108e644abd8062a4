"""The chat shows what a visible node writes as a dict or a `(role, content)` pair.

LangGraph's `messages` mode streams only message objects, so such a message reaches the chat
through the root snapshot, and the history through the tag it carries. Ground truth: the
markers in what each node writes, and the raw graph's state holding all of them.
"""

from __future__ import annotations

from typing import Annotated, Any

import httpx
import pytest
from fastapi import FastAPI
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility.chat import chat_router
from lg_visibility.testing import FakeChatModel
from tests.chat.test_router import ALICE, TIMEOUT, parse_sse

pytestmark = pytest.mark.timeout(TIMEOUT)

FORMS: dict[str, Any] = {
    "pair": lambda text: ("ai", text),
    "dict": lambda text: {"role": "assistant", "content": text},
}


def _graph(form: str) -> Any:
    """`think` (internal) then `answer` (visible), each writing one message in `form`."""
    make = FORMS[form]
    builder = StateGraph(MessagesState)
    builder.add_node("think", lambda s: {"messages": [make("SECRET thought")]})
    builder.add_node("answer", lambda s: {"messages": [make("VISIBLE answer")]})
    builder.add_edge(START, "think")
    builder.add_edge("think", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=InMemorySaver())


async def _chat(
    graph: Any, *resumes: Any, before_resume: Any = None
) -> tuple[list[tuple[str, dict[str, Any]]], list[dict[str, Any]], str]:
    """One message ("hi") to `graph` over the chat router, then each of `resumes`
    (`before_resume()` first, if given): every run's events in order, the thread's
    history, and the text of all the responses."""
    app = FastAPI()
    app.include_router(chat_router(graph))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.post("/api/chat/stream", json={"message": "hi"}, headers=ALICE)
        responses = [response]
        thread_id = response.headers["x-thread-id"]
        for value in resumes:
            if before_resume is not None:
                before_resume()
            url = f"/api/chat/{thread_id}/resume"
            responses.append(await client.post(url, json={"resume": value}, headers=ALICE))
        history = await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)
    events = [event for r in responses for event in parse_sse(r.content)]
    text = "".join(r.text for r in responses) + history.text
    return events, history.json()["messages"], text


@pytest.mark.parametrize("form", list(FORMS))
async def test_a_visible_nodes_written_message_shows_live_and_in_the_history(form: str) -> None:
    raw = _graph(form)
    raw_state = raw.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "r"}})
    assert [m.content for m in raw_state["messages"]] == ["hi", "SECRET thought", "VISIBLE answer"]

    graph = with_visibility(_graph(form), VisibilityPolicy(internal=["think"]))
    events, history, text = await _chat(graph)
    assert "SECRET" not in text
    live = [(d["source"], d["content"]) for e, d in events if e == "message"]
    assert live == [("answer", "VISIBLE answer")]
    shown = [(m["role"], m.get("source"), m["content"]) for m in history]
    assert shown == [("user", None, "hi"), ("assistant", "answer", "VISIBLE answer")]


def _beside_an_interrupt(sibling: Any) -> Any:
    """`sibling` and `ask`, which interrupts, in one step, enforced with everything visible."""
    builder = StateGraph(MessagesState)
    builder.add_node("ask", lambda s: {"messages": [AIMessage(f"VISIBLE got {interrupt('?')}")]})
    builder.add_node("sibling", sibling)
    builder.add_edge(START, "ask")
    builder.add_edge(START, "sibling")
    return with_visibility(builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy())


@pytest.mark.parametrize("form", ["object", "pair", "dict with an id"])
async def test_a_resumed_run_sends_what_the_interrupted_step_wrote_once(form: str) -> None:
    """`ask` interrupts while its sibling writes a message in the same step: LangGraph adds
    the sibling's write to the state only during the resumed run. Streamed in the first run
    (an object), it is not sent again; never shown (a pair, which is not streamed), it is
    sent on resume. Either way once, with its one tool card."""
    call = {"id": "call_sib", "name": "lookup", "args": {"q": 1}}

    def sibling(state: MessagesState) -> dict[str, Any]:
        if form == "object":
            return {"messages": [AIMessage("VISIBLE sibling", tool_calls=[call])]}
        if form == "pair":
            return {"messages": [("ai", "VISIBLE sibling")]}
        return {"messages": [{"role": "assistant", "content": "VISIBLE sibling", "id": "sib-1"}]}

    events, history, _ = await _chat(_beside_an_interrupt(sibling), "123")
    shown = sorted(d["content"] for e, d in events if e == "message")
    assert shown == ["VISIBLE got 123", "VISIBLE sibling"]
    cards = [d["tool_call_id"] for e, d in events if e == "tool_start"]
    assert cards == (["call_sib"] if form == "object" else [])
    kept = sorted(m["content"] for m in history if m["role"] == "assistant")
    assert kept == shown


def _edit_beside_an_interrupt() -> StateGraph[Any]:
    """`answer` writes `m1`; then `ask` interrupts while `edit` rewrites `m1` by its id."""
    builder = StateGraph(MessagesState)
    builder.add_node("answer", lambda s: {"messages": [AIMessage("VISIBLE v1", id="m1")]})
    builder.add_node("ask", lambda s: {"messages": [AIMessage(f"VISIBLE got {interrupt('?')}")]})
    edit = {"role": "assistant", "content": "VISIBLE v2", "id": "m1"}
    builder.add_node("edit", lambda s: {"messages": [edit]})
    builder.add_edge(START, "answer")
    builder.add_edge("answer", "ask")
    builder.add_edge("answer", "edit")
    return builder


@pytest.mark.parametrize("where", ["root", "subgraph"])
async def test_an_edit_by_id_beside_an_interrupt_is_not_sent_again_on_resume(where: str) -> None:
    """The resumed run applies the edit of a message the interrupted run sent: its id is
    not sent again (an edit is not sent live, as anywhere else); the history holds it."""
    if where == "root":
        compiled = _edit_beside_an_interrupt().compile(checkpointer=InMemorySaver())
    else:
        root = StateGraph(MessagesState)
        root.add_node("sub", _edit_beside_an_interrupt().compile())
        root.add_edge(START, "sub")
        compiled = root.compile(checkpointer=InMemorySaver())
    events, history, _ = await _chat(with_visibility(compiled, VisibilityPolicy()), "123")
    sent = [(d["id"], d["content"]) for e, d in events if e == "message"]
    assert [c for i, c in sent if i == "m1"] == ["VISIBLE v1"]
    assert sorted(c for _, c in sent) == ["VISIBLE got 123", "VISIBLE v1"]
    kept = sorted(m["content"] for m in history if m["role"] == "assistant")
    assert kept == ["VISIBLE got 123", "VISIBLE v2"]


async def test_a_streamed_answer_stored_as_a_dict_beside_an_interrupt_is_sent_once() -> None:
    """`sibling` streams a model's answer, then stores it as a dict under the model's id,
    while `ask` interrupts: the answer was sent (streamed), and the resumed run, which
    applies the dict, does not send it again."""

    def sibling(state: MessagesState) -> dict[str, Any]:
        answer = FakeChatModel(responses=["VISIBLE streamed"]).invoke(state["messages"])
        return {"messages": [{"role": "assistant", "content": answer.content, "id": answer.id}]}

    events, history, _ = await _chat(_beside_an_interrupt(sibling), "123")
    shown = [d["content"] for e, d in events if e == "message"]
    assert sorted(shown) == ["VISIBLE got 123", "VISIBLE streamed"]
    kept = sorted(m["content"] for m in history if m["role"] == "assistant")
    assert kept == ["VISIBLE got 123", "VISIBLE streamed"]


@pytest.mark.parametrize("case", ["handed back", "written", "streamed", "result sent"])
async def test_a_tool_call_and_result_beside_an_interrupt_are_sent_once(case: str) -> None:
    """`sibling` runs while `ask` interrupts and leaves a tool call and its result in the
    state, the result as a dict under its own id: both handed back as dicts after a graph
    it ran sent them live ("handed back", as a graph that serialises its output does);
    both written as dicts, never sent ("written"); the call sent live by that graph, its
    card open ("streamed"); the result sent live by that graph, the call handed back as a
    dict, never sent ("result sent"). Across both runs each is sent once, and the card
    closes."""
    tool_call = {"id": "call-1", "name": "lookup", "args": {"q": 1}}
    asked = AIMessage("VISIBLE call", tool_calls=[tool_call], id="ai-1")
    answered = ToolMessage("VISIBLE result", tool_call_id="call-1", id="tm-1", name="lookup")
    made = {"handed back": [asked, answered], "result sent": [answered]}.get(case, [asked])
    inner = StateGraph(MessagesState)
    inner.add_node("work", lambda s: {"messages": made})
    inner.add_edge(START, "work")
    helper = inner.compile()

    def sibling(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        if case == "written":
            return {"messages": [asked.model_dump(), answered.model_dump()]}
        sent = helper.invoke({"messages": []}, config)["messages"]
        if case == "handed back":
            return {"messages": [m.model_dump() for m in sent]}
        if case == "result sent":
            return {"messages": [asked.model_dump(), answered.model_dump()]}
        return {"messages": [*sent, answered.model_dump()]}

    events, history, _ = await _chat(_beside_an_interrupt(sibling), "123")
    assert sorted(d["content"] for e, d in events if e == "message") == [
        "VISIBLE call",
        "VISIBLE got 123",
    ]
    assert [d["content"] for e, d in events if e == "tool_result"] == ["VISIBLE result"]
    kept = sorted(m["content"] for m in history if m["role"] in ("assistant", "tool"))
    assert kept == ["VISIBLE call", "VISIBLE got 123", "VISIBLE result"]


@pytest.mark.parametrize("form", ["object", "dict"])
async def test_a_subgraphs_messages_are_not_sent_again_when_it_ends_in_a_resumed_run(
    form: str,
) -> None:
    """A subgraph's `s1` writes a message, then its `s2` interrupts: the subgraph hands its
    messages to the root state only when it ends, in the resumed run. The first run sends
    `s1`'s message (streamed, an object; whole from the subgraph's snapshot, a dict), and
    the resumed run does not send it again; the history shows every message once."""

    def s1(state: MessagesState) -> dict[str, Any]:
        return {
            "messages": [
                AIMessage("VISIBLE s1") if form == "object" else FORMS["dict"]("VISIBLE s1")
            ]
        }

    sub = StateGraph(MessagesState)
    sub.add_node("s1", s1)
    sub.add_node("s2", lambda s: {"messages": [AIMessage(f"VISIBLE s2 {interrupt('?')}")]})
    sub.add_edge(START, "s1")
    sub.add_edge("s1", "s2")
    builder = StateGraph(MessagesState)
    builder.add_node("sub", sub.compile())
    builder.add_edge(START, "sub")
    graph = with_visibility(builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy())
    events, history, _ = await _chat(graph, "1")
    live = [
        d["content"] if e == "message" else d["value"]
        for e, d in events
        if e in ("message", "interrupt")
    ]
    assert live == ["VISIBLE s1", "?", "VISIBLE s2 1"]
    kept = [m["content"] for m in history if m["role"] == "assistant"]
    assert kept == ["VISIBLE s1", "VISIBLE s2 1"]


@tool
def transfer_to_bob(tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
    """Hand off to bob."""
    said = ToolMessage("VISIBLE transferred", tool_call_id=tool_call_id)
    return Command(graph=Command.PARENT, goto="bob", update={"messages": [said]})


HANDOFF = {"id": "h1", "name": "transfer_to_bob", "args": {}}


async def test_a_handoff_to_the_parent_shows_live_and_closes_its_tool_card() -> None:
    """Swarm-style: agent `alice` (a subgraph) calls a tool that hands off to `bob` with
    `Command(graph=Command.PARENT, update=...)`. LangGraph's `messages` mode never carries
    that update: the tool's message comes from the root state, and its card closes."""
    model = FakeChatModel(responses=[AIMessage("VISIBLE transferring", tool_calls=[HANDOFF])])
    builder = StateGraph(MessagesState)
    alice = create_agent(model, tools=[transfer_to_bob], name="alice")
    builder.add_node("alice", alice, destinations=("bob",))
    builder.add_node("bob", lambda s: {"messages": [AIMessage("VISIBLE bob here")]})
    builder.add_edge(START, "alice")
    builder.add_edge("bob", END)
    graph = with_visibility(builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy())
    events, _, _ = await _chat(graph)
    assert [d["content"] for e, d in events if e == "message"] == [
        "VISIBLE transferring",
        "VISIBLE bob here",
    ]
    assert [(e, d["tool_call_id"]) for e, d in events if e.startswith("tool_")] == [
        ("tool_start", "h1"),
        ("tool_args", "h1"),
        ("tool_result", "h1"),
        ("tool_end", "h1"),
    ]
    (result,) = [d for e, d in events if e == "tool_result"]
    assert result["content"] == "VISIBLE transferred"


@pytest.mark.parametrize("bob_asks", [False, True])
async def test_a_handoff_inside_a_subgraph_shows_when_it_happens(bob_asks: bool) -> None:
    """The same handoff inside a subgraph `team`: its message reaches the root only when
    `team` ends, after bob's answer, or (bob asking the human first) in the resumed run,
    which knows it from the thread. It comes from `team`'s snapshot instead: before bob
    speaks or asks, once, and the card closes."""

    def bob(state: MessagesState) -> dict[str, Any]:
        answer = interrupt("?") if bob_asks else "-"
        return {"messages": [AIMessage(f"VISIBLE bob got {answer}")]}

    model = FakeChatModel(responses=[AIMessage("VISIBLE transferring", tool_calls=[HANDOFF])])
    team = StateGraph(MessagesState)
    team.add_node("alice", create_agent(model, tools=[transfer_to_bob]), destinations=("bob",))
    team.add_node("bob", bob)
    team.add_edge(START, "alice")
    team.add_edge("bob", END)
    builder = StateGraph(MessagesState)
    builder.add_node("team", team.compile())
    builder.add_edge(START, "team")
    graph = with_visibility(builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy())
    events, history, _ = await _chat(graph, *(["yes"] if bob_asks else []))
    shown = [
        (e, d.get("content", d.get("value")))
        for e, d in events
        if e in ("message", "tool_result", "interrupt")
    ]
    assert shown == [
        ("message", "VISIBLE transferring"),
        ("tool_result", "VISIBLE transferred"),
        *([("interrupt", "?")] if bob_asks else []),
        ("message", f"VISIBLE bob got {'yes' if bob_asks else '-'}"),
    ]
    assert [m["content"] for m in history if m["role"] == "tool"] == ["VISIBLE transferred"]


async def test_a_parallel_subgraphs_messages_show_while_its_sibling_waits() -> None:
    """Subgraphs `A` (asks the human) and `B` (writes two dicts) run in one step. `A`'s
    interrupt stops reading the root's and `A`'s snapshots, not `B`'s: `B`'s messages show
    in the first run, and the resumed run does not send them again."""
    a = StateGraph(MessagesState)
    a.add_node("ask", lambda s: {"messages": [AIMessage(f"VISIBLE A got {interrupt('?')}")]})
    a.add_edge(START, "ask")
    b = StateGraph(MessagesState)
    b.add_node("b1", lambda s: {"messages": [FORMS["dict"]("VISIBLE B1")]})
    b.add_node("b2", lambda s: {"messages": [FORMS["pair"]("VISIBLE B2")]})
    b.add_edge(START, "b1")
    b.add_edge("b1", "b2")
    builder = StateGraph(MessagesState)
    builder.add_node("A", a.compile())
    builder.add_node("B", b.compile())
    builder.add_edge(START, "A")
    builder.add_edge(START, "B")
    graph = with_visibility(builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy())
    events, history, _ = await _chat(graph, "yes")
    shown = [d.get("content", d.get("value")) for e, d in events if e in ("message", "interrupt")]
    assert sorted(shown[:3]) == ["?", "VISIBLE B1", "VISIBLE B2"]  # (a parallel step)
    assert shown[3:] == ["VISIBLE A got yes"]
    kept = sorted(m["content"] for m in history if m["role"] == "assistant")
    assert kept == ["VISIBLE A got yes", "VISIBLE B1", "VISIBLE B2"]


async def test_a_resume_whose_state_read_fails_still_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The resumed run's known ids come from a state read; if that read fails, the run goes
    on (logged) and ends with its `done`, at worst sending again what the thread held."""
    from lg_visibility._state import RawStateReads

    async def failing(self: Any, config: Any, *, subgraphs: bool = False) -> Any:
        raise RuntimeError("state read failed")

    builder = StateGraph(MessagesState)
    builder.add_node("ask", lambda s: {"messages": [AIMessage(f"VISIBLE got {interrupt('?')}")]})
    builder.add_edge(START, "ask")
    graph = with_visibility(builder.compile(checkpointer=InMemorySaver()), VisibilityPolicy())

    def fail_reads() -> None:
        monkeypatch.setattr(RawStateReads, "aget_state", failing)

    events, _, _ = await _chat(graph, "1", before_resume=fail_reads)
    resumed = events[[e for e, _ in events].index("done") + 1 :]
    assert [e for e, _ in resumed][-1] == "done"
    assert [d["content"] for e, d in resumed if e == "message"] == ["VISIBLE got 1"]


async def test_the_history_is_read_when_the_notes_cannot_be(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The notes only label the history: if they cannot be read, it is still served, each
    message labelled by the producer it carries."""
    from lg_visibility.chat._history import NotesBook

    async def failing(self: Any, thread_id: str) -> Any:
        raise RuntimeError("notes read failed")

    graph = with_visibility(_graph("dict"), VisibilityPolicy(internal=["think"]))
    app = FastAPI()
    app.include_router(chat_router(graph))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.post("/api/chat/stream", json={"message": "hi"}, headers=ALICE)
        thread_id = response.headers["x-thread-id"]
        monkeypatch.setattr(NotesBook, "load", failing)
        history = await client.get(f"/api/chat/{thread_id}/messages", headers=ALICE)
    assert history.status_code == 200
    shown = [(m["role"], m.get("source"), m["content"]) for m in history.json()["messages"]]
    assert shown == [("user", None, "hi"), ("assistant", "answer", "VISIBLE answer")]


async def test_a_tool_call_id_a_later_turn_reuses_beside_an_interrupt_is_answered() -> None:
    """Each turn, `sibling` writes a call and its result as dicts beside `ask`, which
    interrupts; the call's id is `call-1` both times (models reuse such ids). Each turn's
    resume sends its result: a result sent in an earlier turn does not count."""
    turn = iter(["1", "2"])

    def sibling(state: MessagesState) -> dict[str, Any]:
        n = next(turn)
        call = {"id": "call-1", "name": "lookup", "args": {}}
        return {
            "messages": [
                {
                    "role": "assistant",
                    "content": f"VISIBLE call {n}",
                    "id": f"ai-{n}",
                    "tool_calls": [call],
                },
                {
                    "role": "tool",
                    "content": f"VISIBLE result {n}",
                    "tool_call_id": "call-1",
                    "id": f"tm-{n}",
                },
            ]
        }

    app = FastAPI()
    app.include_router(chat_router(_beside_an_interrupt(sibling)))
    transport = httpx.ASGITransport(app=app)
    responses = []
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        first = await client.post("/api/chat/stream", json={"message": "hi"}, headers=ALICE)
        thread_id = first.headers["x-thread-id"]
        resume = f"/api/chat/{thread_id}/resume"
        responses.append(await client.post(resume, json={"resume": "a"}, headers=ALICE))
        again = {"message": "again", "thread_id": thread_id}
        await client.post("/api/chat/stream", json=again, headers=ALICE)
        responses.append(await client.post(resume, json={"resume": "b"}, headers=ALICE))
    results = [
        [d["content"] for e, d in parse_sse(r.content) if e == "tool_result"] for r in responses
    ]
    assert results == [["VISIBLE result 1"], ["VISIBLE result 2"]]
