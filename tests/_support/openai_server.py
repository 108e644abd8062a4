"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests.

It lets the real `langchain_openai.ChatOpenAI` client (and the `openai` SDK under it) run
against a local server that a test starts and stops::

    scripts = {
        "router": lambda request: Reply("incident"),
        "knowledge": tool_then(Reply(tool_calls=[("search", {"q": "disk"})]), Reply("found")),
        "response": Reply.structured({"answer": "restart the pod"}),
    }
    with OpenAIStubServer(scripts) as server:
        model = ChatOpenAI(model="router", base_url=server.base_url, api_key="test")
        ...
    assert server.requests_for("router")[0]["messages"][-1]["content"] == "..."

The request's `model` field picks the script, so one server can play every role of a graph
(`ChatOpenAI(model=role, ...)`). `responder_script` replays a LangChain-level responder,
such as `lg_visibility.demo.graphs.fake_reply`, over HTTP.

Only `POST /v1/chat/completions` (streaming and not) and `GET /v1/models` are served, by a
stdlib `ThreadingHTTPServer`. Every response is sent with `Connection: close`:
`langchain_openai` caches its httpx client process-wide, and a kept-alive connection would
otherwise hold a handler thread open past the end of the test. Encoding (`completion`,
`completion_chunks`, `encode_sse`) is pure and kept apart from the HTTP transport.
"""

from __future__ import annotations

import http.client
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from langchain_core.messages import AIMessage, BaseMessage, convert_to_messages

from lg_visibility.testing import split_tokens

__all__ = [
    "CREATED",
    "OpenAIStubServer",
    "Reply",
    "Script",
    "ScriptError",
    "completion",
    "completion_chunks",
    "encode_sse",
    "has_tool_result",
    "responder_script",
    "tool_results",
    "tool_then",
]

CREATED = 1_700_000_000
"""The fixed `created` timestamp of every response, so payloads are reproducible."""

_SYSTEM_FINGERPRINT = "fp_stub"


@dataclass(frozen=True)
class Reply:
    """What the assistant answers to one request.

    Args:
        content: The assistant text; `None` for a tool-call-only answer. For a request
            with a `json_schema` `response_format` this must be JSON text (see
            `Reply.structured`).
        tool_calls: `(name, args)` pairs, streamed after the content in this order.
        tool_call_ids: One id per tool call; by default the server numbers them
            `call_<n>_<index>`, `n` being the response's number (as in `chatcmpl-<n>`).

    Raises:
        ValueError: if neither content nor tool calls are given, a tool call is not a
            `(str, dict)` pair with JSON-serialisable args, or the ids do not match the
            tool calls one to one.
    """

    content: str | None = None
    tool_calls: Sequence[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    tool_call_ids: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.content is None and not self.tool_calls:
            msg = "Reply() needs content or tool_calls; use Reply('') for an empty answer."
            raise ValueError(msg)
        if self.content is not None and not isinstance(self.content, str):
            msg = f"Reply.content must be str or None, got {type(self.content).__name__}."
            raise ValueError(msg)
        for call in self.tool_calls:
            if not (
                isinstance(call, tuple)
                and len(call) == 2
                and isinstance(call[0], str)
                and isinstance(call[1], Mapping)
            ):
                msg = f"Reply.tool_calls entries must be (name, args_dict) tuples, got {call!r}."
                raise ValueError(msg)
            try:
                json.dumps(call[1])
            except TypeError as e:
                msg = f"Args of tool call {call[0]!r} are not JSON-serialisable: {e}."
                raise ValueError(msg) from None
        if self.tool_call_ids is not None and len(self.tool_call_ids) != len(self.tool_calls):
            msg = (
                f"Reply has {len(self.tool_calls)} tool call(s) but "
                f"{len(self.tool_call_ids)} tool_call_ids; give one id per call or none."
            )
            raise ValueError(msg)

    @classmethod
    def structured(cls, value: Mapping[str, Any] | Any) -> Reply:
        """A reply whose content is the JSON text of a dict or a pydantic model instance."""
        if hasattr(value, "model_dump_json"):
            return cls(value.model_dump_json())
        return cls(json.dumps(value))

    @classmethod
    def from_message(cls, message: AIMessage | str) -> Reply:
        """The reply that streams as `message`: its text, tool calls and tool-call ids.

        Text that is empty next to tool calls becomes `content=None`, as OpenAI sends it.
        Ids are kept only if every tool call has one.
        """
        if isinstance(message, str):
            return cls(message)
        calls = message.tool_calls
        text = message.text
        ids = [call.get("id") for call in calls]
        return cls(
            content=None if calls and not text else text,
            tool_calls=[(call["name"], call["args"]) for call in calls],
            tool_call_ids=[i for i in ids if i] if calls and all(ids) else None,
        )

    def ids(self, number: int) -> list[str]:
        """The tool-call ids this reply streams as response number `number`."""
        if self.tool_call_ids is not None:
            return list(self.tool_call_ids)
        return [f"call_{number}_{index}" for index in range(len(self.tool_calls))]


Script = Callable[[dict[str, Any]], Reply]
"""Maps a request body (the parsed JSON the client sent) to the reply for it."""


class ScriptError(RuntimeError):
    """A script raised or returned something other than a `Reply`; raised on server exit."""


def tool_results(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The `role: "tool"` messages of a request, in order."""
    return [m for m in request.get("messages", []) if m.get("role") == "tool"]


def has_tool_result(request: Mapping[str, Any]) -> bool:
    """Whether the request carries at least one tool result message."""
    return bool(tool_results(request))


def tool_then(first: Reply, then: Reply | Script) -> Script:
    """A script that answers `first` (usually a tool call) until a tool result is sent back.

    Once the request contains any `role: "tool"` message, it answers `then` (a reply, or a
    script called with the request). Foot-gun: a model that is shown another agent's tool
    results in its history goes straight to `then`; write a plain script for that case.
    """

    def script(request: dict[str, Any]) -> Reply:
        if not has_tool_result(request):
            return first
        return then if isinstance(then, Reply) else then(request)

    return script


def responder_script(respond: Callable[[list[BaseMessage]], str | AIMessage]) -> Script:
    """A script that plays a LangChain-level responder over HTTP.

    `respond` gets the request's messages converted back to LangChain messages
    (`SystemMessage`, `HumanMessage`, `AIMessage` with `tool_calls`, `ToolMessage`) and
    returns text or an `AIMessage`, like a `lg_visibility.testing.Responder`; e.g.
    `responder_script(functools.partial(examples.fake_reply, role))` serves the same
    replies, tool-call ids included, as `examples.fake_models(role)`.
    """

    def script(request: dict[str, Any]) -> Reply:
        return Reply.from_message(respond(convert_to_messages(request.get("messages", []))))

    return script


def _fragments(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _usage(request: Mapping[str, Any], reply: Reply, arg_fragment_size: int) -> dict[str, int]:
    # Fake but deterministic: a prompt token per word sent, a completion token per delta.
    prompt = 0
    for message in request.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            prompt += len(content.split())
        elif isinstance(content, list):
            prompt += sum(len(str(p.get("text", "")).split()) for p in content)
    completion_tokens = len(split_tokens(reply.content or "")) + sum(
        len(_fragments(json.dumps(args), arg_fragment_size)) for _, args in reply.tool_calls
    )
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    }


def completion(
    reply: Reply,
    *,
    request: Mapping[str, Any],
    number: int,
    arg_fragment_size: int = 5,
) -> dict[str, Any]:
    """The non-streaming `chat.completion` body for a reply (id `chatcmpl-<number>`)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for call_id, (name, args) in zip(reply.ids(number), reply.tool_calls, strict=True)
        ]
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": CREATED,
        "model": request["model"],
        "system_fingerprint": _SYSTEM_FINGERPRINT,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
            }
        ],
        "usage": _usage(request, reply, arg_fragment_size),
    }


def completion_chunks(
    reply: Reply,
    *,
    request: Mapping[str, Any],
    number: int,
    arg_fragment_size: int = 5,
) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` objects streamed for a reply, in order.

    A role chunk; one chunk per token of the content, split by
    `lg_visibility.testing.split_tokens` (the tokens `FakeChatModel` streams); per tool call
    a chunk with its index, id, type, name and empty arguments, then argument fragments of
    `arg_fragment_size` characters; a chunk with the `finish_reason`; and, when the request
    asked for `stream_options.include_usage`, a usage chunk with no choices. All share the
    id `chatcmpl-<number>`, as OpenAI's chunks do.
    """
    include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
    base: dict[str, Any] = {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": request["model"],
        "system_fingerprint": _SYSTEM_FINGERPRINT,
    }
    if include_usage:
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**base, "choices": [choice]}

    role_content = "" if reply.content is not None else None
    chunks = [chunk({"role": "assistant", "content": role_content, "refusal": None})]
    chunks.extend(chunk({"content": word}) for word in split_tokens(reply.content or ""))
    ids = reply.ids(number)
    for i, (name, args) in enumerate(reply.tool_calls):
        head = {
            "index": i,
            "id": ids[i],
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        chunks.append(chunk({"tool_calls": [head]}))
        chunks.extend(
            chunk({"tool_calls": [{"index": i, "function": {"arguments": fragment}}]})
            for fragment in _fragments(json.dumps(args), arg_fragment_size)
        )
    chunks.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": _usage(request, reply, arg_fragment_size)})
    return chunks


def encode_sse(data: Mapping[str, Any] | str) -> bytes:
    """One server-sent event: `data: <json>\\n\\n`, or the literal string (for `[DONE]`)."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


def _error(message: str, type_: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class _HTTPServer(ThreadingHTTPServer):
    # Handler threads are joined by server_close(), so exiting the stub leaves none behind.
    daemon_threads = False
    block_on_close = True

    def __init__(self, stub: OpenAIStubServer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.stub = stub

    def shutdown_request(self, request: socket.socket) -> None:  # type: ignore[override]
        # Let the client close first (it does on `Connection: close`), so TIME_WAIT lands on
        # the client's ephemeral port and this port can be bound again at once, even
        # without SO_REUSEADDR. A client that keeps the socket open is cut off after 2 s.
        try:
            request.settimeout(2.0)
            while request.recv(65536):
                pass
        except OSError:
            pass
        super().shutdown_request(request)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"
    timeout = 10  # an idle or stalled client cannot hold a handler thread forever

    def log_message(self, format: str, *args: Any) -> None:  # silence per-request logging
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            models = [
                {"id": m, "object": "model", "created": CREATED, "owned_by": "stub"}
                for m in self.server.stub.models
            ]
            self._send_json(200, {"object": "list", "data": models})
        else:
            self._send_json(
                404, _error(f"No route GET {self.path}.", "invalid_request_error", None)
            )

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_json(
                404, _error(f"No route POST {self.path}.", "invalid_request_error", None)
            )
            return
        try:
            request = json.loads(raw)
        except ValueError as e:
            self._send_json(400, _error(f"Body is not JSON: {e}.", "invalid_request_error", None))
            return
        if not isinstance(request, dict) or not isinstance(request.get("model"), str):
            self._send_json(
                400,
                _error(
                    "Body must be an object with a 'model' string.",
                    "invalid_request_error",
                    None,
                    "model",
                ),
            )
            return
        status, body = self.server.stub._answer(request)
        if status != 200 or not request.get("stream"):
            self._send_json(status, body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        delay = self.server.stub.chunk_delay
        try:
            for chunk in body:
                self._write_chunk(encode_sse(chunk))
                if delay:
                    time.sleep(delay)
            self._write_chunk(encode_sse("[DONE]"))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading (cancelled stream); nothing left to do

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _send_json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)


class OpenAIStubServer:
    """An OpenAI-compatible chat-completions server on 127.0.0.1, scripted per model name.

    Use it as a context manager (or call `start()`/`stop()` from a fixture). It binds a
    free port, serves from a background thread and, on exit, stops, joins every thread and
    closes the port.

    Args:
        scripts: model name -> script (request JSON -> `Reply`) or a fixed `Reply`. A
            request for any other model gets an OpenAI-style 404 `model_not_found`.
        chunk_delay: seconds to sleep after each streamed chunk (default none).
        arg_fragment_size: characters per streamed tool-call argument fragment.
        startup_timeout: seconds to wait for the server to answer before giving up.

    Attributes:
        requests: every chat-completions request body received, in arrival order.
        errors: exceptions from scripts. If any occurred, leaving the `with` block raises
            `ScriptError` (unless the block is already raising), because the client only
            sees an HTTP 500 that it may retry or a graph may swallow.

    Raises:
        TypeError: if a script is neither callable nor a `Reply`.
        ValueError: if `arg_fragment_size` < 1 or `chunk_delay` < 0.
    """

    def __init__(
        self,
        scripts: Mapping[str, Script | Reply],
        *,
        chunk_delay: float = 0.0,
        arg_fragment_size: int = 5,
        startup_timeout: float = 5.0,
    ) -> None:
        for name, script in scripts.items():
            if not isinstance(name, str):
                msg = f"Script keys are model names (str), got {name!r}."
                raise TypeError(msg)
            if not (isinstance(script, Reply) or callable(script)):
                msg = (
                    f"Script for model {name!r} must be a Reply or a callable "
                    f"request -> Reply, got {type(script).__name__}."
                )
                raise TypeError(msg)
        if arg_fragment_size < 1:
            msg = f"arg_fragment_size must be >= 1, got {arg_fragment_size}."
            raise ValueError(msg)
        if chunk_delay < 0:
            msg = f"chunk_delay must be >= 0, got {chunk_delay}."
            raise ValueError(msg)
        self._scripts = dict(scripts)
        self.chunk_delay = chunk_delay
        self.arg_fragment_size = arg_fragment_size
        self.startup_timeout = startup_timeout
        self.requests: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._http: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    @property
    def models(self) -> list[str]:
        """The scripted model names."""
        return list(self._scripts)

    @property
    def port(self) -> int:
        """The bound port; only while started."""
        if self._http is None:
            msg = "OpenAIStubServer is not running; use it as a context manager or start()."
            raise RuntimeError(msg)
        return int(self._http.server_address[1])

    @property
    def base_url(self) -> str:
        """The `base_url` to give `ChatOpenAI` or `openai.OpenAI`, ending in `/v1`."""
        return f"http://127.0.0.1:{self.port}/v1"

    def requests_for(self, model: str) -> list[dict[str, Any]]:
        """The request bodies received for one model name, in arrival order."""
        with self._lock:
            return [r for r in self.requests if r.get("model") == model]

    def start(self) -> Self:
        """Bind a free port, serve in a background thread and wait until it answers."""
        if self._http is not None or self._stopped:
            msg = "OpenAIStubServer can be started once; create a new one per test."
            raise RuntimeError(msg)
        self._http = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"openai-stub-{self.port}",
            daemon=True,
        )
        self._thread.start()
        self._wait_until_answering()
        return self

    def stop(self) -> None:
        """Stop serving, join the serving and handler threads and release the port."""
        if self._http is None or self._stopped:
            return
        self._stopped = True
        self._http.shutdown()
        self._http.server_close()
        assert self._thread is not None
        self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        if exc_type is None and self.errors:
            msg = f"{len(self.errors)} script error(s); first: {self.errors[0]!r}"
            raise ScriptError(msg) from self.errors[0]

    def _wait_until_answering(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                try:
                    conn.request("GET", "/v1/models")
                    if conn.getresponse().status == 200:
                        return
                finally:
                    conn.close()
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                msg = f"OpenAIStubServer did not answer within {self.startup_timeout}s."
                raise RuntimeError(msg)
            time.sleep(0.01)

    def _answer(self, request: dict[str, Any]) -> tuple[int, Any]:
        """(status, body); for a 200 streaming request the body is the list of chunks."""
        with self._lock:
            self.requests.append(request)
            number = next(self._numbers)
        model = request["model"]
        script = self._scripts.get(model)
        if script is None:
            message = (
                f"The model `{model}` does not exist or you do not have access to it. "
                f"(stub scripts: {sorted(self._scripts)})"
            )
            return 404, _error(message, "invalid_request_error", "model_not_found")
        try:
            reply = script if isinstance(script, Reply) else script(request)
            if not isinstance(reply, Reply):
                msg = f"Script for model {model!r} returned {reply!r}; return a Reply."
                raise TypeError(msg)
            if _wants_json(request) and reply.content is not None:
                try:
                    json.loads(reply.content)
                except ValueError:
                    msg = (
                        f"Request for model {model!r} has a json_schema response_format "
                        f"but the reply content is not JSON: {reply.content!r}; "
                        "use Reply.structured(...)."
                    )
                    raise ValueError(msg) from None
        except Exception as e:
            with self._lock:
                self.errors.append(e)
            return 500, _error(f"Stub script failed: {e!r}", "server_error", None)
        size = self.arg_fragment_size
        if request.get("stream"):
            return 200, completion_chunks(
                reply, request=request, number=number, arg_fragment_size=size
            )
        return 200, completion(reply, request=request, number=number, arg_fragment_size=size)


def _wants_json(request: Mapping[str, Any]) -> bool:
    response_format = request.get("response_format")
    return isinstance(response_format, dict) and response_format.get("type") == "json_schema"
