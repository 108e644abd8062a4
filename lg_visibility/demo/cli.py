"""`lg-visibility demo`: what a chat UI receives from the incident graph, raw and enforced.

`lg-visibility serve`: the chat backend and UI of `lg_visibility.demo.app` on the demo graphs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["chat_view", "main"]


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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `lg-visibility` command."""
    parser = argparse.ArgumentParser(prog="lg-visibility", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="raw vs enforced chat view of the incident graph")
    p_demo.add_argument(
        "--model", default="fake", help="'fake' (default) or 'openai:<model>' for a real model"
    )
    p_demo.add_argument("--width", type=int, default=min(shutil.get_terminal_size().columns, 160))
    p_serve = sub.add_parser("serve", help="the chat backend and UI on the demo graphs")
    p_serve.add_argument("--host", default="127.0.0.1")
    p_serve.add_argument("--port", type=int, default=8000)
    p_serve.add_argument("--db", default="lg_visibility_chat.sqlite", help="SQLite checkpoint file")
    p_explain = sub.add_parser(
        "explain", help="each node path of a graph with its decision and the rule that made it"
    )
    p_explain.add_argument("--graph", required=True, help="package.module:attr of the graph")
    p_explain.add_argument(
        "--policy", help="package.module:attr of a VisibilityPolicy (default: the graph's own)"
    )
    args = parser.parse_args(argv)
    if args.command == "explain":
        return explain(args.graph, args.policy)
    if args.command == "demo":
        return demo(args.model, max(args.width, 60))
    from lg_visibility.demo.app import serve

    serve(host=args.host, port=args.port, db_path=args.db)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
