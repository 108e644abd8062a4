"""Assemble an AI SDK v5 UI message stream with the `ai` npm package's own code, in node.

`parse_ui_message_stream(body)` pipes an SSE body into tests/chat/aisdk/parse_ui_stream.mjs,
which validates each part with `uiMessageChunkSchema` and assembles them with
`readUIMessageStream`, the pipeline `useChat`'s `DefaultChatTransport` runs, and returns
the final `UIMessage` as a dict. `ensure_aisdk()` installs the pinned `ai` package with
`npm ci` on first use; without node/npm it fails with one line saying how to get them,
unless `LGV_SKIP_AISDK=1` opts out explicitly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

AISDK_DIR = Path(__file__).resolve().parent.parent / "chat" / "aisdk"
SCRIPT = AISDK_DIR / "parse_ui_stream.mjs"
OPT_OUT = "LGV_SKIP_AISDK"


class UIStreamError(AssertionError):
    """The `ai` package rejected the stream (bad part, bad JSON, bad ordering)."""


def ensure_aisdk() -> str:
    """The node binary, with the `ai` package installed in AISDK_DIR (`npm ci` once)."""
    if os.environ.get(OPT_OUT):
        pytest.skip(f"AI SDK parser tests opted out with {OPT_OUT}=1")
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        from tests._support.system import install_debian_packages

        if install_debian_packages(*(["nodejs"] if node is None else []), "npm") is None:
            node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(
            f"node and npm are needed for the AI SDK tests: apt-get install -y nodejs npm "
            f"(or set {OPT_OUT}=1 to opt out)",
            pytrace=False,
        )
    if not (AISDK_DIR / "node_modules" / "ai").is_dir():
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=AISDK_DIR,
            capture_output=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(
                f"npm ci in {AISDK_DIR} failed: {done.stderr.decode(errors='replace')[-300:]}",
                pytrace=False,
            )
    return node


def parse_ui_message_stream(body: bytes, *, timeout: float = 30.0) -> dict[str, Any]:
    """The `UIMessage` the AI SDK assembles from `body`; UIStreamError if it rejects it."""
    node = ensure_aisdk()
    done = subprocess.run(
        [node, str(SCRIPT)],
        input=body,
        capture_output=True,
        timeout=timeout,
        cwd=AISDK_DIR,
        check=False,
    )
    if done.returncode != 0:
        raise UIStreamError(done.stderr.decode("utf-8", "replace").strip() or done.returncode)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def sse(*parts: dict[str, Any], done: bool = True) -> bytes:
    """Encode parts as a UI message stream body."""
    out = "".join(f"data: {json.dumps(p)}\n\n" for p in parts)
    return (out + ("data: [DONE]\n\n" if done else "")).encode()
