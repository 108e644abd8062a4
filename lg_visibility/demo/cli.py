"""`lg-visibility demo`: what a chat UI receives from the incident graph, raw and enforced.

`lg-visibility serve`: the chat backend and UI of `lg_visibility.demo.app`, on the demo
graphs or on your own (`--graph package.module:attr`), over SQLite or Postgres (`--db`).
"""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["chat_view", "load_object", "main"]

_AUTH_OPTIONS = "--auth-secret-env VAR, --auth-public-key FILE or --trust-header NAME"


def _model_for(spec: str | None) -> Callable[[str], Any]:
    from lg_visibility.demo.graphs import fake_models

    if spec is None or spec == "fake":
        return fake_models
    provider, _, name = spec.partition(":")
    if provider != "openai" or not name:
        raise SystemExit(
            f"--model {spec!r}: use 'fake' or 'openai:<model name>' (with OPENAI_API_KEY and, "
            "for a compatible server, OPENAI_BASE_URL set)."
        )
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:  # pragma: no cover - depends on the install
        raise SystemExit(
            "--model openai:... needs langchain-openai: pip install 'lg-visibility[openai]'"
        ) from None

    def model_for(role: str) -> Any:
        return ChatOpenAI(model=name, base_url=os.environ.get("OPENAI_BASE_URL"))

    return model_for


def chat_view(events: Sequence[dict[str, Any]]) -> list[str]:
    """What a chat UI following seed 000's merge rule shows for a v2 stream.

    Tokens APPEND to a bubble by message id; a root `values` snapshot UPDATEs the bubbles of
    the AI and tool messages it holds; custom events are cards.
    """
    bubbles: dict[str, str] = {}
    order: list[str] = []

    def put(key: str, text: str, append: bool) -> None:
        if key not in bubbles:
            order.append(key)
            bubbles[key] = ""
        bubbles[key] = bubbles[key] + text if append else text

    for event in events:
        kind, data = event["type"], event["data"]
        if kind == "messages":
            message = data[0]
            text = message.text if hasattr(message, "text") else str(message.content)
            args = "".join(
                str(c.get("args") or "") for c in getattr(message, "tool_call_chunks", [])
            )
            is_chunk = type(message).__name__.endswith("Chunk")
            put(f"msg:{message.id}", text + args, append=is_chunk)
        elif kind == "custom":
            put(
                f"card:{len(order)}",
                f"[card] {data.get('text', data) if isinstance(data, dict) else data}",
                False,
            )
        elif kind == "values" and not event["ns"] and isinstance(data, dict):
            for message in data.get("messages", []):
                if message.type in ("ai", "tool"):
                    calls = " ".join(str(c.get("args")) for c in getattr(message, "tool_calls", []))
                    put(f"msg:{message.id}", (message.text + " " + calls).strip(), False)
    return [bubbles[key].strip() for key in order if bubbles[key].strip()]


def _columns(left: list[str], right: list[str], width: int) -> str:
    col = (width - 3) // 2
    lines = [f"{'RAW stream -> chat UI':<{col}} | ENFORCED stream -> chat UI", "-" * width]
    for i in range(max(len(left), len(right))):
        a = textwrap.wrap(left[i], col) if i < len(left) else []
        b = textwrap.wrap(right[i], col) if i < len(right) else []
        for j in range(max(len(a), len(b), 1)):
            lines.append(f"{(a[j] if j < len(a) else ''):<{col}} | {b[j] if j < len(b) else ''}")
        lines.append(f"{'':<{col}} |")
    return "\n".join(lines)


def demo(model: str | None, width: int) -> int:
    """Run the incident graph raw and enforced and print both chat views side by side."""
    from langchain_core.messages import HumanMessage

    from lg_visibility import with_visibility
    from lg_visibility.demo.graphs import (
        INCIDENT_INTERNAL_MARKERS,
        INCIDENT_POLICY,
        incident_builder,
    )

    model_for = _model_for(model)
    builder = incident_builder(model_for)
    raw: Any = builder.compile()
    enforced: Any = with_visibility(builder.compile(), INCIDENT_POLICY)
    question = {"messages": [HumanMessage("I want a refund for my order")]}
    kwargs: dict[str, Any] = {
        "stream_mode": ["messages", "custom", "values"],
        "subgraphs": True,
        "version": "v2",
    }
    raw_events = list(raw.stream(question, **kwargs))
    enforced_events = list(enforced.stream(question, **kwargs))
    print(_columns(chat_view(raw_events), chat_view(enforced_events), width))
    leaked = [m for m in INCIDENT_INTERNAL_MARKERS if any(m in b for b in chat_view(raw_events))]
    after = [
        m for m in INCIDENT_INTERNAL_MARKERS if any(m in b for b in chat_view(enforced_events))
    ]
    print(
        f"\nevents: raw {len(raw_events)}, enforced {len(enforced_events)}; internal markers "
        f"in the chat UI: raw {leaked or 'none'}, enforced {after or 'none'}"
    )
    print(f"policy: {INCIDENT_POLICY!r}")
    return 1 if after else 0


def load_object(spec: str, what: str) -> Any:
    """Import `package.module:attr` (attr may be dotted), with the working directory on
    the import path as uvicorn does; a bad spec is a SystemExit with one line."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"{what} {spec!r}: write it as package.module:attribute")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"{what} {spec!r}: cannot import {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise SystemExit(f"{what} {spec!r}: {module_name} has no attribute {attr!r}") from None
    return found


def _user_graph(graph_spec: str, policy_spec: str | None) -> Any:
    """The graph `serve --graph` serves: compiled, wrapped (by --policy if given)."""
    from lg_visibility import VisibilityPolicy, with_visibility

    graph = load_object(graph_spec, "--graph")
    if hasattr(graph, "compile") and not hasattr(graph, "astream"):
        graph = graph.compile()  # a StateGraph builder
    wrapped = hasattr(graph, "visibility_policy")
    if policy_spec is not None:
        if wrapped:
            raise SystemExit(f"--graph {graph_spec!r} is wrapped already; drop --policy.")
        policy = load_object(policy_spec, "--policy")
        if not isinstance(policy, VisibilityPolicy):
            raise SystemExit(
                f"--policy {policy_spec!r} is a {type(policy).__name__}, not a VisibilityPolicy"
            )
        graph = with_visibility(graph, policy)
    elif not wrapped:
        raise SystemExit(
            f"--graph {graph_spec!r} is not wrapped with with_visibility(); "
            "pass --policy package.module:attr naming its VisibilityPolicy."
        )
    return graph


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _identity(args: argparse.Namespace) -> Callable[..., Any] | None:
    """The user-id dependency the serve options ask for (None: the bare X-User-Id header)."""
    from lg_visibility.chat._auth import bearer_user_id, trusted_header_user_id

    if args.trust_header:
        return trusted_header_user_id(args.trust_header)
    if args.auth_secret_env:
        secret = os.environ.get(args.auth_secret_env)
        if not secret:
            raise SystemExit(f"--auth-secret-env {args.auth_secret_env}: that variable is not set")
        return bearer_user_id(secret=secret, audience=args.auth_audience, issuer=args.auth_issuer)
    if args.auth_public_key:
        try:
            key = Path(args.auth_public_key).read_text()
        except OSError as exc:
            raise SystemExit(f"--auth-public-key {args.auth_public_key}: {exc.strerror}") from None
        try:
            return bearer_user_id(
                public_key=key, audience=args.auth_audience, issuer=args.auth_issuer
            )
        except ValueError as exc:
            raise SystemExit(f"--auth-public-key {args.auth_public_key}: {exc}") from None
    return None


def _serve_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="the chat backend and UI, on the demo graphs or your own",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description=(
            "Serve the chat UI and API. Several serve processes on one postgresql:// --db "
            "behave as one service (shared thread index and busy locks)."
        ),
    )
    p.add_argument(
        "--graph",
        metavar="MODULE:ATTR",
        default=None,
        help="your compiled graph (compiled without a checkpointer), imported from "
        "the working directory like uvicorn; default: the demo graphs",
    )
    p.add_argument(
        "--policy",
        metavar="MODULE:ATTR",
        default=None,
        help="VisibilityPolicy to wrap --graph with, if it is not wrapped already",
    )
    p.add_argument(
        "--db",
        default="lg_visibility_chat.sqlite",
        help="SQLite file, or a postgresql://user:pass@host/db URL",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind; a non-loopback one needs an auth option",
    )
    p.add_argument("--port", type=int, default=8000, help="port to listen on")
    auth = p.add_argument_group(
        "identity (one of; without any, the client-set X-User-Id header, loopback only)"
    ).add_mutually_exclusive_group()
    auth.add_argument(
        "--auth-secret-env",
        metavar="VAR",
        default=None,
        help="bearer JWTs signed with HS256; the secret is read from env var VAR",
    )
    auth.add_argument(
        "--auth-public-key",
        metavar="FILE",
        default=None,
        help="bearer JWTs signed with RS256 or ES256; PEM public key file",
    )
    auth.add_argument(
        "--trust-header",
        metavar="NAME",
        default=None,
        help="user id from header NAME, set by an authenticating proxy in front",
    )
    p.add_argument("--auth-audience", default=None, help="required 'aud' claim of tokens")
    p.add_argument("--auth-issuer", default=None, help="required 'iss' claim of tokens")


def serve_command(args: argparse.Namespace) -> int:
    """`lg-visibility serve`: check the options, then run the app until interrupted."""
    user_id = _identity(args)
    if user_id is None and not _is_loopback(args.host):
        print(
            f"lg-visibility serve: refusing to bind {args.host} with the bare X-User-Id "
            f"identity (any client can claim any user); pass {_AUTH_OPTIONS}.",
            file=sys.stderr,
        )
        return 2
    graph = _user_graph(args.graph, args.policy) if args.graph else None
    if graph is None and args.policy:
        raise SystemExit("--policy needs --graph (the demo graphs have their own policy).")
    from lg_visibility.demo.app import serve

    try:
        serve(host=args.host, port=args.port, db_path=args.db, graph=graph, user_id=user_id)
    except ValueError as exc:  # e.g. a graph compiled with its own checkpointer
        raise SystemExit(f"lg-visibility serve: {exc}") from None
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `lg-visibility` command."""
    parser = argparse.ArgumentParser(prog="lg-visibility", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="raw vs enforced chat view of the incident graph")
    p_demo.add_argument(
        "--model", default="fake", help="'fake' (default) or 'openai:<model>' for a real model"
    )
    p_demo.add_argument("--width", type=int, default=min(shutil.get_terminal_size().columns, 160))
    _serve_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(args.model, max(args.width, 60))
    return serve_command(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
