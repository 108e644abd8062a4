"""Every chat route refuses a forged header, a bad or expired token, and another user's token.

The router is guarded by `bearer_user_id(secret=...)`; alice owns one thread. The route
table below must list every route the router serves (checked), so a new route cannot ship
without its identity cases. The AI SDK routes (`/api/chat/ui`) are in the table; AG-UI's
are in tests/chat/test_agui.py.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import jwt
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from langgraph.checkpoint.memory import InMemorySaver

from lg_visibility.chat import bearer_user_id, chat_router
from tests.chat.test_router import build_graph

SECRET = "a-test-secret-of-at-least-32-bytes!"
TIMEOUT = 10


def token(sub: str, *, key: str = SECRET, ttl: float = 300) -> dict[str, str]:
    value = jwt.encode({"sub": sub, "exp": int(time.time() + ttl)}, key, algorithm="HS256")
    return {"Authorization": f"Bearer {value}"}


ALICE = token("alice")
BOB = token("bob")
ROUTES: dict[tuple[str, str], Any] = {
    ("POST", "/api/chat/stream"): lambda tid: {"message": "hi", "thread_id": tid},
    ("POST", "/api/chat/{thread_id}/resume"): lambda tid: {"resume": "x"},
    ("GET", "/api/chat/{thread_id}/messages"): None,
    ("GET", "/api/chat/threads"): None,
    ("DELETE", "/api/chat/{thread_id}"): None,
    ("POST", "/api/chat/ui"): lambda tid: {
        "id": tid,
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
        "trigger": "submit-message",
    },
    ("GET", "/api/chat/ui/{chat_id}/stream"): None,
}
BAD_CREDENTIALS = {  # name -> (headers, error code)
    "none": ({}, "unauthenticated"),
    "forged-header": ({"X-User-Id": "alice"}, "unauthenticated"),
    "garbage-token": ({"Authorization": "Bearer not.a.jwt"}, "invalid_token"),
    "expired-token": (token("alice", ttl=-10), "token_expired"),
    "other-secret": (token("alice", key="x" * 40), "invalid_token"),
}


@pytest.fixture
async def client() -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A client of the guarded router, and the id of a thread alice owns."""
    app = FastAPI()
    app.include_router(
        chat_router(build_graph(InMemorySaver()), user_id=bearer_user_id(secret=SECRET))
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=TIMEOUT) as c:
        made = await c.post("/api/chat/stream", json={"message": "hello"}, headers=ALICE)
        assert made.status_code == 200, made.text
        yield c, made.headers["x-thread-id"]


async def call(
    c: httpx.AsyncClient, route: tuple[str, str], tid: str, headers: Any
) -> httpx.Response:
    method, path = route
    body = ROUTES[route]
    kwargs: dict[str, Any] = {"headers": headers}
    if body is not None:
        kwargs["json"] = body(tid)
    url = path.replace("{thread_id}", tid).replace("{chat_id}", tid)
    return await c.request(method, url, **kwargs)


async def history(c: httpx.AsyncClient, tid: str) -> Any:
    return (await c.get(f"/api/chat/{tid}/messages", headers=ALICE)).json()


def test_router_auth_table_lists_every_route() -> None:
    """The cases below cover exactly the routes chat_router serves."""
    router = chat_router(build_graph(InMemorySaver()))
    served = {(m, r.path) for r in router.routes if isinstance(r, APIRoute) for m in r.methods}
    assert served == set(ROUTES)


@pytest.mark.parametrize("route", list(ROUTES), ids=lambda r: f"{r[0]} {r[1]}")
@pytest.mark.parametrize("credentials", list(BAD_CREDENTIALS))
async def test_router_auth_bad_credentials_are_401_and_change_nothing(
    client: tuple[httpx.AsyncClient, str], route: tuple[str, str], credentials: str
) -> None:
    """No token, a forged X-User-Id, garbage, an expired or foreign-signed token: 401."""
    c, tid = client
    before = await history(c, tid)
    headers, code = BAD_CREDENTIALS[credentials]
    response = await call(c, route, tid, headers)
    assert (response.status_code, response.json()["detail"]["code"]) == (401, code)
    assert await history(c, tid) == before


@pytest.mark.parametrize(
    ("route", "status"),
    [
        (("POST", "/api/chat/stream"), 404),
        (("POST", "/api/chat/{thread_id}/resume"), 404),
        (("GET", "/api/chat/{thread_id}/messages"), 404),
        (("GET", "/api/chat/threads"), 200),
        (("DELETE", "/api/chat/{thread_id}"), 404),
        (("POST", "/api/chat/ui"), 404),
        (("GET", "/api/chat/ui/{chat_id}/stream"), 404),
    ],
    ids=lambda v: f"{v[0]} {v[1]}" if isinstance(v, tuple) else str(v),
)
async def test_router_auth_another_users_token_sees_nothing(
    client: tuple[httpx.AsyncClient, str], route: tuple[str, str], status: int
) -> None:
    """Bob's valid token gets 404 on alice's thread and an empty thread list."""
    c, tid = client
    before = await history(c, tid)
    response = await call(c, route, tid, BOB)
    assert response.status_code == status, response.text
    if status == 200:
        assert response.json() == {"threads": []}
    else:
        assert response.json()["detail"]["code"] == "thread_not_found"
    assert await history(c, tid) == before


@pytest.mark.parametrize(
    ("route", "status"),
    [
        (("POST", "/api/chat/stream"), 200),
        (("POST", "/api/chat/{thread_id}/resume"), 409),  # nothing to resume: past auth
        (("GET", "/api/chat/{thread_id}/messages"), 200),
        (("GET", "/api/chat/threads"), 200),
        (("DELETE", "/api/chat/{thread_id}"), 204),
        (("POST", "/api/chat/ui"), 200),
        (("GET", "/api/chat/ui/{chat_id}/stream"), 204),  # no run active: past auth
    ],
    ids=lambda v: f"{v[0]} {v[1]}" if isinstance(v, tuple) else str(v),
)
async def test_router_auth_owner_token_is_accepted(
    client: tuple[httpx.AsyncClient, str], route: tuple[str, str], status: int
) -> None:
    """Control: alice's own valid token passes identity and ownership on every route."""
    c, tid = client
    response = await call(c, route, tid, ALICE)
    assert response.status_code == status, response.text
