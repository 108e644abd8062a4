"""Who is calling: FastAPI dependencies that return the caller's user id.

`chat_router(graph, user_id=...)` takes any dependency returning a string. Three are here:

- `header_user_id("X-User-Id")`: the id the client sends in a header. Anyone can send
  anyone's id, so this is for a demo on 127.0.0.1 only (`lg-visibility serve` refuses a
  non-loopback host with it).
- `bearer_user_id(secret=... | public_key=...)`: a signed JWT in `Authorization: Bearer`,
  checked with PyJWT: signature (HS256 with a shared secret, or RS256/ES256 with a public
  key), expiry (`exp` is required), and `aud`/`iss` when configured; the user id is the
  `sub` claim (or `claim=`).
- `trusted_header_user_id("X-Forwarded-User")`: the id an authenticating proxy in front
  of the app sets (oauth2-proxy, an ingress with forward auth). Only safe when clients
  cannot reach the app except through that proxy, which must overwrite the header.

Every failure is a 401 `{"detail": {"code", "message"}}` (with `WWW-Authenticate: Bearer`
for tokens), and no failure says which user a token named.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = ["bearer_user_id", "header_user_id", "trusted_header_user_id"]

_MAX_USER_ID = 256


def _fastapi() -> Any:
    try:
        import fastapi
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        msg = (
            "lg_visibility.chat needs FastAPI; install the server extra: "
            "pip install 'lg-visibility[server]'."
        )
        raise ImportError(msg) from exc
    return fastapi


def _unauthorized(code: str, message: str, challenge: str | None) -> Exception:
    exc: Exception = _fastapi().HTTPException(
        status_code=401,
        detail={"code": code, "message": message},
        headers={"WWW-Authenticate": challenge} if challenge else None,
    )
    return exc


def _checked(value: Any, what: str, challenge: str | None) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > _MAX_USER_ID:
        raise _unauthorized("unauthenticated", f"{what} carries no usable user id.", challenge)
    return value.strip()


def header_user_id(header: str = "X-User-Id") -> Callable[..., Awaitable[str]]:
    """The user id from a request header the client sets itself: demo use only.

    A missing, empty or over-long header is a 401. Anyone can claim any user this way; in
    production pass `bearer_user_id(...)`, `trusted_header_user_id(...)` behind a proxy,
    or your own dependency to `chat_router(..., user_id=...)`.
    """
    fastapi = _fastapi()

    async def user_id(value: str | None = fastapi.Header(None, alias=header)) -> str:
        value = (value or "").strip()
        if not value or len(value) > _MAX_USER_ID:
            raise _unauthorized(
                "unauthenticated", f"Send the user id in the {header} header.", None
            )
        return value

    return user_id


def trusted_header_user_id(header: str) -> Callable[..., Awaitable[str]]:
    """The user id from a header set by an authenticating proxy in front of the app.

    Use it only when every request reaches the app through that proxy and the proxy
    replaces (never forwards) the client's own value of `header`; otherwise it is as
    forgeable as `header_user_id`. A missing header is a 401.
    """
    if not header or not header.strip():
        raise ValueError("trusted_header_user_id() needs a header name, got an empty one.")
    fastapi = _fastapi()

    async def user_id(value: str | None = fastapi.Header(None, alias=header)) -> str:
        if value is None or not value.strip():
            raise _unauthorized(
                "unauthenticated", f"The {header} header set by the proxy is missing.", None
            )
        return _checked(value, f"The {header} header", None)

    return user_id


def _algorithms_for(key: Any) -> list[str]:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    loaded = load_pem_public_key(key.encode() if isinstance(key, str) else key)
    if isinstance(loaded, rsa.RSAPublicKey):
        return ["RS256"]
    if isinstance(loaded, ec.EllipticCurvePublicKey):
        return ["ES256"]
    msg = f"public_key must be an RSA or EC public key in PEM, got a {type(loaded).__name__}."
    raise ValueError(msg)


def bearer_user_id(
    *,
    secret: str | bytes | None = None,
    public_key: str | bytes | None = None,
    algorithms: Sequence[str] | None = None,
    audience: str | None = None,
    issuer: str | None = None,
    claim: str = "sub",
    leeway: float = 0.0,
) -> Callable[..., Awaitable[str]]:
    """The user id from a signed JWT in `Authorization: Bearer <token>` (PyJWT).

    Args:
        secret: Shared secret for HS256 (at least 32 bytes).
        public_key: PEM public key for RS256 (RSA) or ES256 (EC P-256); give exactly one
            of `secret` and `public_key`.
        algorithms: Accepted algorithms; defaults to the one that fits the key. The
            token's own header never chooses (no `none`, no HS256 with a public key).
        audience: Required `aud`, if set. issuer: Required `iss`, if set.
        claim: The claim holding the user id.
        leeway: Seconds of clock skew allowed on `exp`/`nbf`/`iat`.

    Raises:
        ValueError: If the key options are inconsistent; at construction, not per request.
    """
    import jwt

    if (secret is None) == (public_key is None):
        raise ValueError("bearer_user_id() takes exactly one of secret= or public_key=.")
    if secret is not None:
        if len(secret.encode() if isinstance(secret, str) else secret) < 32:
            raise ValueError("bearer_user_id(secret=...) needs at least 32 bytes of secret.")
        key: Any = secret
        allowed = list(algorithms or ["HS256"])
        if any(not a.startswith("HS") for a in allowed):
            raise ValueError(f"a secret signs HS* tokens only, got algorithms={allowed!r}.")
    else:
        key = public_key
        allowed = list(algorithms or _algorithms_for(public_key))
        if any(a.startswith("HS") or a.lower() == "none" for a in allowed):
            raise ValueError(f"a public key verifies RS*/ES*/PS* only, got {allowed!r}.")
    fastapi = _fastapi()
    from fastapi.security import HTTPBearer

    # auto_error=False: a missing header gets our JSON 401, not FastAPI's 403/401 shape.
    bearer = fastapi.Depends(HTTPBearer(auto_error=False))
    challenge = 'Bearer error="invalid_token"'
    required = ["exp", claim, *(["aud"] if audience else []), *(["iss"] if issuer else [])]

    async def user_id(
        credentials: Any = bearer,  # HTTPAuthorizationCredentials | None
    ) -> str:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise _unauthorized("unauthenticated", "Send a bearer token.", "Bearer")
        try:
            claims = jwt.decode(
                credentials.credentials,
                key,
                algorithms=allowed,
                audience=audience,
                issuer=issuer,
                leeway=leeway,
                options={"require": required},
            )
        except jwt.ExpiredSignatureError:
            raise _unauthorized("token_expired", "The token has expired.", challenge) from None
        except jwt.PyJWTError:
            raise _unauthorized("invalid_token", "The token is not valid.", challenge) from None
        return _checked(claims.get(claim), "The token", challenge)

    return user_id
