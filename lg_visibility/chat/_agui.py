"""AG-UI (CopilotKit) for an enforced graph: `ag_ui_langgraph.LangGraphAgent` behind our rules.

`agui_router(graph)` returns an `APIRouter` with `POST {path}` (a `RunAgentInput` in, AG-UI
events out as SSE) and `GET {path}/health`, the two routes ag-ui's own
`add_langgraph_fastapi_endpoint` registers, with the same request handling: a clone of the
agent per request, `ag_ui.encoder.EventEncoder` for the bytes. What it adds:

- the graph must be wrapped (`with_visibility`): LangGraphAgent reads `astream_events` and
  `aget_state`, and only the wrapped graph filters both (a raw graph is refused);
- `emit_raw_events=False` by default, so no event carries a copy of LangGraph's raw event;
- thread ownership, identity and the busy rule of the chat routes
  (`lg_visibility.chat._router`): the `user_id` dependency (401), another user's
  `threadId` is 404, the first run on a `threadId` claims it, and a second run while one
  answers is 409, in any process sharing the thread store. The lock is held until the
  response ends; a client that leaves cancels the run, as on our SSE route;
- resume values (`resume: [{interruptId, status, payload}]`, or the deprecated
  `forwardedProps.command.resume`) are checked against the interrupt's
  `response_schema` before the graph runs: a bad one is a 422 naming the field, an id
  already answered a 409; with several interrupts pending, `resume[]` goes to LangGraph as
  its map from interrupt id to answer (LangGraphAgent's one value fails such a run);
- `RUN_ERROR` carries a fixed message, as our SSE route's `error` event does, never the
  exception's text that LangGraphAgent puts there (it may quote internal output, e.g. an
  internal node's `OutputParserException`);
- sse-starlette's transport (keep-alive pings, send timeout), as the chat routes;
- the producer of each message: LangGraphAgent drops a message's `response_metadata`, so
  after each `MESSAGES_SNAPSHOT` a `CUSTOM` event named `lg_visibility.provenance` maps
  the snapshot's message ids to the `provenance` their stored messages carry
  (`{"value": {"<message id>": {"path": ..., "agent"?: ...}}}`, read once from the
  enforced `aget_state`; messages without one are left out, and no event is sent when
  none has one).

Needs `ag-ui-langgraph` (in the `server` extra).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from lg_visibility.chat._auth import header_user_id
from lg_visibility.chat._mapper import ERROR_TEXT, provenance
from lg_visibility.chat._router import (
    Durability,
    _check_schema,
    _error,
    _require_fastapi,
    _route_class,
    check_durability,
    claim_thread,
    default_thread_store,
    find_thread,
    is_interrupt_id,
    stale_answer,
    thread_title,
)
from lg_visibility.chat._threads import OWNER_KEY, TITLE_KEY, ThreadStore
from lg_visibility.chat._transport import DEFAULT_PING_SECONDS, DEFAULT_SEND_TIMEOUT, sse_response

if TYPE_CHECKING:
    from fastapi import APIRouter

__all__ = ["AGUI_PROVENANCE_EVENT", "agui_router"]

_TERMINAL = frozenset({"RUN_FINISHED", "RUN_ERROR"})  # EventType values (a str enum)
AGUI_PROVENANCE_EVENT = "lg_visibility.provenance"
"""Name of the CUSTOM event that gives the producers of a MESSAGES_SNAPSHOT's messages."""


def _require_agui() -> Any:
    try:
        import ag_ui_langgraph
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        msg = (
            "agui_router() needs ag-ui-langgraph; install the server extra: "
            "pip install 'lg-visibility[server]'."
        )
        raise ImportError(msg) from exc
    return ag_ui_langgraph


def _first_user_text(messages: Any) -> str:
    """The text of the run's last user message (a string content, or its text parts)."""
    for message in reversed(list(messages or [])):
        if getattr(message, "role", None) != "user":
            continue
        content = getattr(message, "content", "")
        if isinstance(content, str):
            return content
        return "".join(str(getattr(part, "text", "") or "") for part in content or [])
    return ""


def _check_resume(input_data: Any, pending: list[Any]) -> None:
    """409 for an answer to a question already answered; 422 naming the field when a resume
    value names no pending interrupt or does not fit its interrupt's schema."""
    by_id = {interrupt.id: interrupt for interrupt in pending}
    entries = list(input_data.resume or [])
    answered: set[str] = set()
    for index, entry in enumerate(entries):
        if entry.interrupt_id in answered:
            raise _error(
                422,
                "invalid_resume",
                f"resume[{index}].interruptId {entry.interrupt_id!r} is answered twice.",
                f"resume[{index}].interruptId",
            )
        answered.add(entry.interrupt_id)
        interrupt = by_id.get(entry.interrupt_id)
        if interrupt is None and is_interrupt_id(entry.interrupt_id):
            # LangGraphAgent would answer what is pending with it (a cancelled entry with
            # its sentinel): a retry is never the answer to the next question.
            raise stale_answer(entry.interrupt_id, by_id)
        if interrupt is None and len(pending) == 1 and len(entries) == 1:
            interrupt = pending[0]  # LangGraphAgent answers the one question with it
        if interrupt is None:
            raise _error(
                422,
                "invalid_resume",
                f"resume[{index}].interruptId {entry.interrupt_id!r} is not pending; "
                f"pending ids: {sorted(by_id)}.",
                f"resume[{index}].interruptId",
            )
        if entry.status == "resolved":
            _check_schema(interrupt, entry.payload, f"resume[{index}].payload")
        else:
            _check_cancel(interrupt, entry.interrupt_id, f"resume[{index}].status")
    if entries:
        return
    command = (input_data.forwarded_props or {}).get("command")
    if not isinstance(command, Mapping) or command.get("resume") is None:
        return
    value = command["resume"]
    if isinstance(value, str):  # LangGraphAgent reads a string as JSON where it parses
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    field = "forwardedProps.command.resume"
    if isinstance(value, dict) and value and all(map(is_interrupt_id, value)):
        # A map of ids, which LangGraph reads as one answer per interrupt.
        stale = [key for key in value if key not in by_id]
        if stale:
            raise stale_answer(stale[0], by_id)
        for interrupt_id, answer in value.items():
            _check_schema(by_id[interrupt_id], answer, f"{field}.{interrupt_id}")
    elif len(pending) == 1:
        _check_schema(pending[0], value, field)
    elif len(pending) > 1:
        raise _error(
            422,
            "invalid_resume",
            f"{len(pending)} interrupts are pending; send resume[] with an entry per "
            f"interrupt id, among {sorted(by_id)}.",
            field,
        )


def _check_cancel(interrupt: Any, interrupt_id: str, field: str) -> None:
    """422 when the interrupt's `response_schema` refuses the value LangGraphAgent answers a
    cancelled entry with: it is checked as every resume value is (and LangGraph fails the
    run on it where the schema came from a Python type; a dict schema it does not check)."""
    from ag_ui_langgraph.interrupts import DEFAULT_RESUME_SENTINEL_CANCELLED

    cancel = {DEFAULT_RESUME_SENTINEL_CANCELLED: True, "interrupt_id": interrupt_id}
    try:
        _check_schema(interrupt, cancel, field)
    except Exception:
        raise _error(
            422,
            "invalid_resume",
            f"{field}: interrupt {interrupt.id!r} takes an answer that fits its "
            "response_schema, so it cannot be cancelled; send status 'resolved' with a "
            "payload.",
            field,
        ) from None


async def _provenance_event(graph: Any, thread_id: str, snapshot: Any) -> Any:
    """The CUSTOM event naming the producers of `snapshot`'s messages; None if none has one.

    AG-UI ids are LangGraph's, except where LangGraphAgent made one unique by a
    `::<lane>` suffix; the stored message is found by the id before it.
    """
    from ag_ui.core import CustomEvent, EventType

    state = await graph.aget_state({"configurable": {"thread_id": thread_id}})
    values = state.values if isinstance(state.values, Mapping) else {}
    stored = {}
    for message in values.get("messages") or ():
        found = provenance(message)
        if found is not None and getattr(message, "id", None) is not None:
            stored[message.id] = found
    producers = {}
    for message in snapshot.messages:
        found = stored.get(message.id) or stored.get(message.id.split("::", 1)[0])
        if found is not None:
            producers[message.id] = found
    if not producers:
        return None
    return CustomEvent(type=EventType.CUSTOM, name=AGUI_PROVENANCE_EVENT, value=producers)


def _agent_class(base: Any, durability: Durability) -> Any:
    """`LangGraphAgent` whose runs pass `durability` to the graph's `astream_events`
    (which hands it to `astream`); `clone()` keeps the subclass."""

    class Agent(base):  # type: ignore[misc]
        def get_stream_kwargs(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            found: dict[str, Any] = super().get_stream_kwargs(*args, **kwargs)
            found["durability"] = durability
            return found

        def _build_command_from_agui_resume(
            self, entries: list[Any], *, open_interrupts: list[Any] | None = None
        ) -> Any:
            # LangGraphAgent answers several entries with one value (its own map), which
            # LangGraph refuses while several interrupts are pending, as it refuses one
            # plain value then. Its map from interrupt id to answer resumes each one named,
            # with the value LangGraphAgent gives that entry alone; the rest ask again.
            build = super()._build_command_from_agui_resume
            if len(entries) == 1 and len(open_interrupts or ()) <= 1:
                return build(entries, open_interrupts=open_interrupts)
            answers = {entry.interrupt_id: build([entry]).resume for entry in entries}
            return Command(resume=answers)

    return Agent


def agui_router(
    graph: Any,
    *,
    path: str = "/api/agui",
    user_id: Callable[..., Any] | None = None,
    thread_store: ThreadStore | None = None,
    name: str = "assistant",
    emit_raw_events: bool = False,
    emit_interrupt_outcome: bool = False,
    durability: Durability = "sync",
    ping: float = DEFAULT_PING_SECONDS,
    send_timeout: float | None = DEFAULT_SEND_TIMEOUT,
) -> APIRouter:
    """Serve AG-UI at `POST {path}` for a visibility-wrapped graph with a checkpointer.

    Args:
        graph: `with_visibility(builder.compile(checkpointer=...), policy)`.
        path: The agent's route; `GET {path}/health` is added beside it, as ag-ui does.
        user_id: A FastAPI dependency returning the caller's user id; defaults to
            `header_user_id("X-User-Id")` (demo only; see `bearer_user_id`).
        thread_store: Owners and busy locks; pass the same store as to `chat_router`
            (`open_storage(db).threads`). Default: the checkpointer's
            `CheckpointThreadStore`, shared with a `chat_router` on the same graph.
        name: The agent's name (`GET {path}/health` shows it).
        emit_raw_events: LangGraphAgent's option; True re-sends LangGraph's events as RAW
            (they come from the enforced `astream_events`, so they are filtered too).
        emit_interrupt_outcome: LangGraphAgent's option; True puts the pending interrupts,
            with the ids `resume: [{interruptId, ...}]` answers, in RUN_FINISHED.
        durability: LangGraph's `durability` for every run, as in `chat_router` ("sync":
            each step is in the checkpoint before the next starts).
        ping: Seconds between keep-alive comments on a quiet stream (0: none).
        send_timeout: Seconds one send may block before the response ends.

    Raises:
        ValueError: If the graph is not wrapped or has no checkpointer.
        ImportError: If FastAPI, sse-starlette or ag-ui-langgraph is missing.
    """
    fastapi = _require_fastapi()
    agui = _require_agui()
    from ag_ui.core import RunAgentInput
    from ag_ui.encoder import EventEncoder

    if getattr(graph, "visibility_policy", None) is None:
        msg = (
            f"agui_router() needs a visibility-wrapped graph, got a {type(graph).__name__}; "
            "pass with_visibility(graph, policy): LangGraphAgent reads astream_events and "
            "aget_state, which only the wrapped graph filters."
        )
        raise ValueError(msg)
    checkpointer = getattr(graph, "checkpointer", None)
    if checkpointer is None or isinstance(checkpointer, bool):
        msg = (
            f"agui_router() needs a graph compiled with a checkpointer, got checkpointer="
            f"{checkpointer!r}; AG-UI threads live in it (sqlite_checkpointer, open_storage)."
        )
        raise ValueError(msg)
    if ping < 0:
        msg = f"ping must be >= 0 seconds (0 disables pings), got {ping!r}."
        raise ValueError(msg)
    if not path.startswith("/"):
        msg = f"path must start with '/', got {path!r}."
        raise ValueError(msg)

    check_durability(durability)
    store = thread_store if thread_store is not None else default_thread_store(checkpointer)
    agent = _agent_class(agui.LangGraphAgent, durability)(
        name=name,
        graph=graph,
        emit_raw_events=emit_raw_events,
        emit_interrupt_outcome=emit_interrupt_outcome,
    )
    user = fastapi.Depends(user_id or header_user_id())
    router: APIRouter = fastapi.APIRouter(route_class=_route_class())

    async def run_agent(input_data: Any, request: Any, who: Any = user) -> Any:
        thread_id = input_data.thread_id
        found = await find_thread(store, thread_id, who)
        check = None
        if input_data.resume or (input_data.forwarded_props or {}).get("command"):

            async def check() -> None:  # under the thread's lock: see `claim_thread`
                state = await graph.aget_state({"configurable": {"thread_id": thread_id}})
                _check_resume(input_data, list(state.interrupts))

        title = (
            found.title
            if found is not None
            else thread_title(_first_user_text(input_data.messages))
        )
        lock = await claim_thread(store, thread_id, who, title, check=check)
        encoder = EventEncoder(accept=request.headers.get("accept"))
        run = agent.clone()  # per request, as add_langgraph_fastapi_endpoint does
        config = dict(run.config or {})
        # Run metadata lands in every checkpoint: the owner for CheckpointThreadStore.
        config["metadata"] = {**config.get("metadata", {}), OWNER_KEY: who, TITLE_KEY: title}
        run.config = config

        async def frames() -> AsyncIterator[bytes]:
            async for event in run.run(input_data):
                if event.type in _TERMINAL:
                    # The graph is done; free the thread before the client hears it.
                    await lock.arelease()
                    if event.type == "RUN_ERROR":
                        event = event.model_copy(update={"message": ERROR_TEXT})
                yield encoder.encode(event).encode("utf-8")
                if event.type == "MESSAGES_SNAPSHOT":
                    producers = await _provenance_event(graph, thread_id, event)
                    if producers is not None:
                        yield encoder.encode(producers).encode("utf-8")
            await lock.arelease()

        async def release() -> None:  # a client that left, an error: idempotent
            await lock.arelease()

        try:
            return sse_response(
                frames(),
                headers={"X-Thread-Id": thread_id},
                on_close=release,
                ping=ping,
                send_timeout=send_timeout,
            )
        except BaseException:
            lock.release()
            raise

    # FastAPI reads the body model and the request from the annotations; with postponed
    # annotations the local names would not resolve, so they are set as objects.
    run_agent.__annotations__ = {
        "input_data": RunAgentInput,
        "request": fastapi.Request,
        "who": str,
        "return": Any,
    }

    async def health() -> dict[str, Any]:
        return {"status": "ok", "agent": {"name": name}}

    router.add_api_route(path, run_agent, methods=["POST"], response_model=None)
    router.add_api_route(f"{path.rstrip('/')}/health", health, methods=["GET"])
    return router
