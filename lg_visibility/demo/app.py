"""The demo chat app behind `lg-visibility serve`: the two seed graphs, SQLite, a static UI.

`create_app()` builds a FastAPI app serving the single-page chat UI at `/` (static HTML
and JS from `lg_visibility/static`, no build step), `chat_router` at `/api/chat` (our SSE
and the AI SDK routes) and `agui_router` at `/api/agui` (AG-UI / CopilotKit).
The demo graph routes each new message to one of the seed graphs, each wrapped by the
visibility policy `DEMO_POLICY`::

    START -> status    (an agent with one visible tool: shows a tool card) -> END
          -> order     (the order flow, seed 003: two interrupts)         -> END
          -> incident  (the incident graph, seed 000: leaks on purpose)   -> END

A message asking for a status ("status", "track", "where is order") goes to the status
agent, one mentioning an order ("order", "buy", "purchase") to the order flow, any other
to the incident graph. All run on scripted fake models (`lg_visibility.demo.graphs`), so
the demo needs no API key.

Storage comes from one `db` value (`lg_visibility.chat._threads.open_storage`): a SQLite
file by default, or a `postgresql://` URL, on which several app processes behave as one
service (shared thread index and busy locks). Needs the `server` extra.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from lg_visibility import VisibilityPolicy, with_visibility
from lg_visibility.chat._agui import agui_router
from lg_visibility.chat._router import chat_router, default_thread_store, error_detail
from lg_visibility.chat._threads import ChatStorage, open_storage
from lg_visibility.demo.graphs import (
    INCIDENT_POLICY,
    ORDER_POLICY,
    KnowledgeQuery,
    ModelFor,
    Route,
    fake_models,
    incident_builder,
    order_builder,
)
from lg_visibility.testing import FakeChatModel

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = [
    "DEMO_POLICY",
    "DEMO_TYPES",
    "STATIC_DIR",
    "DemoState",
    "attach_checkpointer",
    "create_app",
    "demo_builder",
    "order_status",
    "serve",
    "status_model",
]

STATIC_DIR = Path(__file__).parent / "static"
"""The chat UI: index.html, app.js, style.css."""

DEMO_POLICY = VisibilityPolicy(
    internal=[f"**/{p}" for p in (*ORDER_POLICY.internal, *INCIDENT_POLICY.internal)],
    user_visible=[f"**/{p}" for p in (*ORDER_POLICY.user_visible, *INCIDENT_POLICY.user_visible)],
    agents={**ORDER_POLICY.agents, **INCIDENT_POLICY.agents},
    tags={**ORDER_POLICY.tags, **INCIDENT_POLICY.tags},
    internal_keys=[*ORDER_POLICY.internal_keys, *INCIDENT_POLICY.internal_keys],
    user_visible_keys=[*ORDER_POLICY.user_visible_keys, *INCIDENT_POLICY.user_visible_keys],
    default="user_visible",
)
"""What the demo shows: `ORDER_POLICY` and `INCIDENT_POLICY` with every pattern under
`**/`, so the same rules hold for each seed graph nested under the demo's router, and
their state keys declared (each seed graph on its own takes its own policy: a key must be
one of the graph's)."""

DEMO_TYPES: tuple[type, ...] = (Route, KnowledgeQuery)
"""The demo's own types in checkpoints (agents' structured responses), registered with
the checkpoint serializer so LangGraph neither warns about them nor, later, blocks them."""

_ORDER_WORDS = re.compile(r"\b(order|orders|buy|purchase)\b", re.IGNORECASE)
_STATUS_WORDS = re.compile(r"\b(status|track|tracking)\b", re.IGNORECASE)


class DemoState(TypedDict):
    """The demo root state: only the shared conversation."""

    messages: Annotated[list[AnyMessage], add_messages]


def _pick(state: DemoState) -> str:
    human = [m for m in state["messages"] if m.type == "human"]
    text = human[-1].text if human else ""
    if _STATUS_WORDS.search(text):
        return "status"
    return "order" if _ORDER_WORDS.search(text) else "incident"


@tool
def order_status(order_ref: str) -> str:
    """Look up where an order is."""
    return f"Order {order_ref}: packed, leaves the warehouse tomorrow."


def _status_reply(messages: list[BaseMessage]) -> AIMessage:
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            return AIMessage(content=f"Good news: {message.text}")
        if message.type == "human":
            break
    return AIMessage(
        content="Let me check that order.",
        tool_calls=[{"name": "order_status", "args": {"order_ref": "PO-1001"}, "id": None}],
    )


def status_model(*, token_delay: float = 0.0) -> FakeChatModel:
    """The status agent's scripted model: one visible tool call, then the answer."""
    return FakeChatModel(respond=_status_reply, model_name="status", token_delay=token_delay)


def demo_builder(
    model_for: ModelFor = fake_models, *, token_delay: float = 0.0, marked: bool = True
) -> StateGraph[DemoState]:
    """The uncompiled demo graph: status agent, order flow or incident graph, per message.

    `marked` is passed to the seed graphs' builders: the tests' oracle wants the
    markers; the served demo (`create_app`) runs without them.
    """
    builder = StateGraph(DemoState)
    status = create_agent(
        status_model(token_delay=token_delay), tools=[order_status], name="status_agent"
    )
    builder.add_node("status", status)
    builder.add_node("order", order_builder(model_for, marked=marked).compile())
    builder.add_node("incident", incident_builder(model_for, marked=marked).compile())
    builder.add_conditional_edges(START, _pick, ["status", "order", "incident"])
    return builder


def attach_checkpointer(graph: Any, checkpointer: Any) -> Any:
    """A shallow copy of a compiled graph (wrapped or not) that uses `checkpointer`.

    Raises:
        ValueError: If the graph was compiled with a checkpointer of its own.
    """
    own = getattr(graph, "checkpointer", None)
    if own is not None and own is not False:
        msg = (
            f"the graph was compiled with checkpointer={own!r}; compile it without one "
            "(builder.compile()) and the server attaches the one built from --db."
        )
        raise ValueError(msg)
    attached = copy.copy(graph)
    attached.checkpointer = checkpointer
    return attached


def create_app(
    *,
    db_path: str | Path = "lg_visibility_chat.sqlite",
    graph: Any = None,
    token_delay: float = 0.0,
    max_message_chars: int = 4000,
    user_id: Callable[..., Any] | None = None,
    marked: bool = False,
) -> FastAPI:
    """Build the demo app; call it with the serving event loop running (see `serve`).

    With uvicorn's CLI use factory mode, which calls it inside the loop:
    `uvicorn --factory lg_visibility.demo.app:create_app`.

    Args:
        db_path: Where checkpoints and the thread index live: a SQLite file (history
            survives restarts) or a `postgresql://` URL (several processes, one service).
        graph: A compiled, visibility-wrapped graph to serve instead of the demo. Compiled
            without a checkpointer, it gets one from `db_path`; compiled with one, that
            one is used as is (and threads are listed from checkpoint metadata).
        token_delay: Seconds between the fake models' tokens, to watch them stream.
        max_message_chars: Longest accepted user message.
        user_id: FastAPI dependency giving the user id (default: the X-User-Id header,
            which the UI sends; see `lg_visibility.chat._auth` for real identities).
        marked: Run the seed graphs with their test markers (the tests' oracle); the
            demo shows plain text.
    """
    from fastapi import FastAPI
    from fastapi.responses import FileResponse, JSONResponse
    from fastapi.staticfiles import StaticFiles
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from starlette.exceptions import HTTPException as StarletteHTTPException

    storage: ChatStorage | None = None
    own = getattr(graph, "checkpointer", None)
    if graph is None:
        # The demo's own state types, registered so no checkpoint read warns about them.
        storage = open_storage(
            db_path, serde=JsonPlusSerializer(allowed_msgpack_modules=DEMO_TYPES)
        )
        models = functools.partial(fake_models, token_delay=token_delay, marked=marked)
        builder = demo_builder(models, token_delay=token_delay, marked=marked)
        graph = with_visibility(builder.compile(checkpointer=storage.checkpointer), DEMO_POLICY)
    elif own is None or own is False:
        storage = open_storage(db_path)
        graph = attach_checkpointer(graph, storage.checkpointer)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if storage is not None:
            await storage.setup()
        try:
            yield
        finally:
            if storage is not None:
                # aiosqlite runs a non-daemon thread; an open connection blocks exit.
                await storage.aclose()

    app = FastAPI(title="lg-visibility chat", lifespan=lifespan)
    router_threads = (
        storage.threads if storage is not None else default_thread_store(graph.checkpointer)
    )
    router = chat_router(
        graph,
        max_message_chars=max_message_chars,
        user_id=user_id,
        stream_mode=("messages", "values", "custom"),  # custom: the incident's cards
        thread_store=router_threads,
    )
    app.include_router(router)
    if getattr(graph, "visibility_policy", None) is not None:
        # AG-UI (CopilotKit) on the same graph, identity, owners and busy locks. It needs
        # a wrapped graph; only the tests' leak controls serve an unwrapped one.
        app.include_router(agui_router(graph, user_id=user_id, thread_store=router_threads))
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> FileResponse:
        return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")

    # Every 4xx in one shape, those Starlette raises itself (404 route, 405) included.
    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Any, exc: StarletteHTTPException) -> JSONResponse:
        detail: Any = exc.detail
        if not (isinstance(detail, dict) and "code" in detail):
            code = HTTPStatus(exc.status_code).phrase.lower().replace(" ", "_")
            detail = error_detail(code, str(detail))
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=exc.headers)

    app.state.graph = graph
    return app


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    db_path: str | Path = "lg_visibility_chat.sqlite",
    *,
    graph: Any = None,
    user_id: Callable[..., Any] | None = None,
    token_delay: float = 0.02,
    marked: bool = False,
) -> None:
    """Run the app with uvicorn until interrupted (what `lg-visibility serve` does)."""
    import asyncio

    import uvicorn

    async def main() -> None:
        # Built inside the serving loop: the savers bind to the running loop.
        app = create_app(
            db_path=db_path, graph=graph, user_id=user_id, token_delay=token_delay, marked=marked
        )
        await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info")).serve()

    asyncio.run(main())
