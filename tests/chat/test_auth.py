"""Tests for lg_visibility.chat._auth: header, trusted-header and signed-token identities.

Each dependency guards one route of a tiny app, so what it accepts and refuses is tested
apart from the chat routes (tests/chat/test_router_auth.py runs them on every chat route).
Tokens are made with PyJWT and keys with `cryptography`, as a real issuer would.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from fastapi import Depends, FastAPI

from lg_visibility.chat._auth import bearer_user_id, header_user_id, trusted_header_user_id

SECRET = "s" * 40
OTHER_SECRET = "o" * 40


def rsa_pair() -> tuple[Any, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key, public_pem(key)


def ec_pair() -> tuple[Any, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    return key, public_pem(key)


def public_pem(key: Any) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def token(key: Any, algorithm: str = "HS256", *, ttl: float = 300, **claims: Any) -> str:
    body = {"sub": "alice", "exp": int(time.time() + ttl), **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm=algorithm)


async def who(dependency: Callable[..., Any], headers: dict[str, str]) -> httpx.Response:
    """GET /me on an app whose one route returns the dependency's user id."""
    app = FastAPI()

    @app.get("/me")
    async def me(user: str = Depends(dependency)) -> dict[str, str]:
        return {"user": user}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=10) as c:
        return await c.get("/me", headers=headers)


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


def code_of(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["detail"]["code"]


async def test_bearer_hs256_returns_the_sub_claim() -> None:
    """A valid HS256 token gives its `sub`."""
    response = await who(bearer_user_id(secret=SECRET), bearer(token(SECRET)))
    assert (response.status_code, response.json()) == (200, {"user": "alice"})


@pytest.mark.parametrize("pair", [rsa_pair, ec_pair], ids=["RS256", "ES256"])
async def test_bearer_public_key_verifies_its_algorithm(pair: Callable[[], Any]) -> None:
    """An RSA key accepts RS256 tokens and an EC key ES256 tokens, chosen from the key."""
    private, public = pair()
    algorithm = "RS256" if pair is rsa_pair else "ES256"
    response = await who(bearer_user_id(public_key=public), bearer(token(private, algorithm)))
    assert (response.status_code, response.json()) == (200, {"user": "alice"})


async def test_bearer_expired_token_is_401_token_expired() -> None:
    """A token past its `exp` is refused with code token_expired and a Bearer challenge."""
    response = await who(bearer_user_id(secret=SECRET), bearer(token(SECRET, ttl=-5)))
    assert code_of(response) == (401, "token_expired")
    assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'


@pytest.mark.parametrize(
    "value",
    [
        "not-a-jwt",
        token(OTHER_SECRET),  # signed with another secret
        token(SECRET, exp=None),  # no expiry
        token(SECRET, sub=None),  # no user
        token(SECRET)[:-3] + "abc",  # tampered signature
        jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, None, algorithm="none"),
    ],
    ids=["garbage", "other-secret", "no-exp", "no-sub", "tampered", "alg-none"],
)
async def test_bearer_invalid_token_is_401_invalid_token(value: str) -> None:
    """Garbage, a foreign signature, a missing claim and alg=none are all refused."""
    response = await who(bearer_user_id(secret=SECRET), bearer(value))
    assert code_of(response) == (401, "invalid_token")


async def test_bearer_rejects_hs256_signed_with_the_public_key() -> None:
    """The algorithm-confusion attack (HS256 keyed by the public PEM) is refused."""
    _, public = rsa_pair()

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    # Forged by hand: PyJWT itself refuses to HMAC-sign with a PEM key.
    head = b64(b'{"alg":"HS256","typ":"JWT"}') + "." + b64(b'{"sub":"mallory","exp":9999999999}')
    value = head + "." + b64(hmac.new(public.encode(), head.encode(), hashlib.sha256).digest())
    response = await who(bearer_user_id(public_key=public), bearer(value))
    assert code_of(response) == (401, "invalid_token")


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Basic YWxpY2U6eA=="}, {"X-User-Id": "alice"}],
    ids=["none", "basic", "forged-header"],
)
async def test_bearer_without_a_bearer_token_is_401(headers: dict[str, str]) -> None:
    """No token, another scheme, or a bare X-User-Id header is unauthenticated."""
    response = await who(bearer_user_id(secret=SECRET), headers)
    assert code_of(response) == (401, "unauthenticated")
    assert response.headers["www-authenticate"] == "Bearer"


async def test_bearer_checks_audience_and_issuer_when_set() -> None:
    """With audience and issuer configured, a token without or with other ones is refused."""
    dependency = bearer_user_id(secret=SECRET, audience="chat", issuer="https://id.example")
    good = token(SECRET, aud="chat", iss="https://id.example")
    statuses = [
        (await who(dependency, bearer(value))).status_code
        for value in (good, token(SECRET), token(SECRET, aud="other", iss="https://id.example"))
    ]
    assert statuses == [200, 401, 401]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({}, "exactly one"),
        ({"secret": SECRET, "public_key": "x"}, "exactly one"),
        ({"secret": "short"}, "32 bytes"),
        ({"secret": SECRET, "algorithms": ["RS256"]}, "HS"),
    ],
)
def test_bearer_validates_its_options_at_construction(options: dict[str, Any], match: str) -> None:
    """Inconsistent key options raise ValueError when the dependency is built."""
    with pytest.raises(ValueError, match=match):
        bearer_user_id(**options)


def test_bearer_refuses_hs_algorithms_with_a_public_key() -> None:
    """A public key with algorithms=['HS256'] is a ValueError (no algorithm confusion)."""
    _, public = rsa_pair()
    with pytest.raises(ValueError, match="RS"):
        bearer_user_id(public_key=public, algorithms=["HS256"])


async def test_trusted_header_returns_the_proxy_header() -> None:
    """trusted_header_user_id reads the named header and 401s without it."""
    dependency = trusted_header_user_id("X-Forwarded-User")
    ok = await who(dependency, {"X-Forwarded-User": "alice"})
    missing = await who(dependency, {"X-User-Id": "alice"})
    assert (ok.status_code, ok.json()) == (200, {"user": "alice"})
    assert code_of(missing) == (401, "unauthenticated")


async def test_header_user_id_takes_what_the_client_sends() -> None:
    """The demo identity: any client can name any user; an empty header is a 401."""
    assert (await who(header_user_id(), {"X-User-Id": "bob"})).json() == {"user": "bob"}
    assert code_of(await who(header_user_id(), {"X-User-Id": " "})) == (401, "unauthenticated")
