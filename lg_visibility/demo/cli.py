"""`lg-visibility demo`: what a chat UI receives from the support graph, raw and enforced.

`lg-visibility serve`: the chat backend and UI of `lg_visibility.demo.app`, on the demo
graphs or on your own (`--graph package.module:attr`), over SQLite or Postgres (`--db`).
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["chat_view", "load_object", "main"]

_AUTH_OPTIONS = "--auth-secret-env VAR, --auth-public-key FILE or --trust-header NAME"


def _model_for(spec: str | None) -> Callable[[str], Any]:
    from lg_visibility.demo.graphs import fake_models

    if spec is None or spec == "fake":
        return functools.partial(fake_models, marked=False)
    provider, _, name = spec.partition(":")
    if provider != "openai" or not name:
        raise SystemExit(
            f"--model {spec!r}: use 'fake' or 'openai:<model name>' (with OPENAI_API_KEY and, "
            "for a compatible server, OPENAI_BASE_URL set)."
        )
    if not os.environ.get("OPENAI_API_KEY"):
        raise SystemExit(
            f"--model {spec}: set OPENAI_API_KEY (and OPENAI_BASE_URL for a compatible server)."
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


def chat_view(parts: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """What a chat UI shows for a v2 stream, as `(producer, text)` lines in order.

    The stream goes through the chat event mapper (`ChatStreamMapper`) that feeds the
    SSE routes and the web UI, so the view is what those show: tokens append to their
    message, the confirming message replaces it, tool calls and results are one line
    each, custom events are cards and interrupts are questions.
    """
    from lg_visibility.chat._mapper import chat_events

    lines: dict[str, tuple[str, str]] = {}

    def put(key: str, source: str, text: str, *, append: bool = False) -> None:
        before = lines.get(key, (source, ""))[1] if append else ""
        lines[key] = (source, before + text)

    for n, event in enumerate(chat_events(parts, thread_id=None)):
        data = event.data
        if event.event == "token":
            put(f"msg:{data['id']}", data["source"], data["text"], append=True)
        elif event.event == "message":
            put(f"msg:{data['id']}", data["source"], data["content"])
            for call in data["tool_calls"]:
                put(f"tool:{call['id']}", data["source"], f"[tool] {call['name']}({call['args']})")
        elif event.event == "tool_result":
            put(
                f"result:{data['tool_call_id']}", data["source"], f"[tool result] {data['content']}"
            )
        elif event.event == "custom":
            card = data["data"]
            text = card.get("text", card) if isinstance(card, Mapping) else card
            put(f"card:{n}", data["source"], f"[card] {text}")
        elif event.event == "interrupt":
            value = data["value"]
            question = (
                value.get("question") or value.get("summary") or value
                if isinstance(value, Mapping)
                else value
            )
            put(f"ask:{data['id']}", data["source"], f"[question] {question}")
    return [(source, " ".join(text.split())) for source, text in lines.values() if text.strip()]


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


EXPLAIN = (
    "Left: what a chat UI shows when it reads the support graph's raw stream (with "
    "subgraphs=True); right: the same run through with_visibility; each line starts with "
    "the node or agent that produced it."
)


def demo(model: str | None, width: int) -> int:
    """Run the support graph raw and enforced and print both chat views side by side."""
    from langchain_core.messages import HumanMessage

    from lg_visibility import with_visibility
    from lg_visibility.demo.graphs import INCIDENT_POLICY, incident_builder

    model_for = _model_for(model)
    builder = incident_builder(model_for, marked=False)
    raw: Any = builder.compile()
    enforced: Any = with_visibility(builder.compile(), INCIDENT_POLICY)
    question = {"messages": [HumanMessage("I want a refund for my order")]}
    kwargs: dict[str, Any] = {
        "stream_mode": ["messages", "custom", "values"],
        "subgraphs": True,
        "version": "v2",
    }
    raw_view = chat_view(raw.stream(question, **kwargs))
    enforced_view = chat_view(enforced.stream(question, **kwargs))
    print(textwrap.fill(EXPLAIN, width))
    print()
    print(
        _columns(
            [f"{source}: {text}" for source, text in raw_view],
            [f"{source}: {text}" for source, text in enforced_view],
            width,
        )
    )
    only_raw = [line for line in raw_view if line not in enforced_view]
    print(
        f"\n{len(only_raw)} of the raw view's {len(raw_view)} lines are internal output that "
        f"with_visibility kept from the user; policy: {INCIDENT_POLICY!r}"
    )
    return 0


def explain(graph_spec: str, policy_spec: str | None) -> int:
    """Print the graph's node tree with each decision; exit 2 with one line on bad input."""
    from lg_visibility._explain import explain_lines, load_object
    from lg_visibility.errors import VisibilityConfigError

    try:
        graph = load_object(graph_spec, what="--graph")
        policy = load_object(policy_spec, what="--policy") if policy_spec else None
        lines = explain_lines(graph, policy)
    except (VisibilityConfigError, TypeError) as exc:
        print(f"lg-visibility explain: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.command == "explain":
        return explain(args.graph, args.policy)
    if args.command == "demo":
        code = demo(args.model, max(args.width, 60))
        sys.stdout.flush()  # a closed pipe fails here, inside main's handler
        return code
    return serve_command(args)


def load_object(spec: str, what: str) -> Any:
    """Import `package.module:attr` (attr may be dotted), with the working directory on
    the import path as uvicorn does; a bad spec is a SystemExit with one line."""
    from lg_visibility._explain import load_object as load
    from lg_visibility.errors import VisibilityConfigError

    try:
        return load(spec, what=what)
    except VisibilityConfigError as exc:
        raise SystemExit(str(exc)) from None


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
            "Serve the chat UI at /, our SSE and the AI SDK routes at /api/chat, and AG-UI "
            "at /api/agui. Several serve processes on one postgresql:// --db "
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
    defaults = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(
        prog="lg-visibility", description=__doc__, formatter_class=defaults
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser(
        "demo", help="raw vs enforced chat view of the support graph", formatter_class=defaults
    )
    p_demo.add_argument(
        "--model", default="fake", help="'fake' (scripted, no key) or 'openai:<model>'"
    )
    p_demo.add_argument(
        "--width",
        type=int,
        default=min(shutil.get_terminal_size().columns, 160),
        help="output width in columns",
    )
    _serve_parser(sub)
    p_explain = sub.add_parser(
        "explain",
        help="each node path of a graph with its decision and the rule that made it",
        formatter_class=defaults,
    )
    p_explain.add_argument("--graph", required=True, help="package.module:attr of the graph")
    p_explain.add_argument(
        "--policy", help="package.module:attr of a VisibilityPolicy (default: the graph's own)"
    )
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("lg-visibility: interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`lg-visibility demo | head`): stop writing, quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        print("lg-visibility: output closed early (broken pipe).", file=sys.stderr)
        return 141
    except Exception as exc:
        if type(exc).__module__.split(".")[0] not in ("openai", "httpx", "httpcore"):
            raise
        first = (str(exc).splitlines() or [""])[0][:200]
        print(
            f"lg-visibility: the model call failed: {type(exc).__name__}: {first}", file=sys.stderr
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
