"""`lg-visibility demo`: what a chat UI receives from the support graph, raw and enforced.

`lg-visibility serve`: the chat backend and UI of `lg_visibility.demo.app` on the demo graphs.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["chat_view", "main"]


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
    from lg_visibility.demo.app import serve

    serve(host=args.host, port=args.port, db_path=args.db)
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
    p_serve = sub.add_parser("serve", help="the chat backend and UI on the demo graphs")
    p_serve.add_argument("--host", default="127.0.0.1")
    p_serve.add_argument("--port", type=int, default=8000)
    p_serve.add_argument("--db", default="lg_visibility_chat.sqlite", help="SQLite checkpoint file")
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
