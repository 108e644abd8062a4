"""The local OpenAI-compatible server (`tests/_support/openai_server.py`) under the real clients.

`langchain_openai.ChatOpenAI` (and the `openai` SDK under it) talks to an
`OpenAIStubServer` on 127.0.0.1 over HTTP: token streaming through callbacks, tool-call
deltas, `json_schema` structured output, `create_agent(response_format=...)`, errors and
shutdown. Every client has a 5 s HTTP timeout and no retries, so a hang or a server error
fails fast instead of being retried.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from tests._support.openai_server import (
    OpenAIStubServer,
    Reply,
    ScriptError,
    responder_script,
    tool_then,
)

pytestmark = pytest.mark.timeout(30)

TIMEOUT = 5.0  # seconds; bounds every HTTP request and every async stream


class Incident(BaseModel):
    severity: str
    summary: str


def _lookup_responder(messages: list[BaseMessage]) -> AIMessage:
    if isinstance(messages[-1], ToolMessage):
        return AIMessage(content=f"Order is {messages[-1].text}.")
    call = {"name": "lookup_order", "args": {"ref": "PO-1"}, "id": "call_lookup_1"}
    return AIMessage(content="", tool_calls=[call])


SCRIPTS = {
    "greeter": Reply("Hello from the stub!"),
    "short": Reply("Hi there"),
    "weather": tool_then(
        Reply(tool_calls=[("get_weather", {"city": "Paris"})]), Reply("Sunny in Paris.")
    ),
    "triage": lambda request: Reply.structured({"severity": "high", "summary": "disk full"}),
    "triage_tool": Reply(tool_calls=[("Incident", {"severity": "low", "summary": "tool"})]),
    "lookup": responder_script(_lookup_responder),
    "broken": lambda request: "not a Reply",
    "not_json": Reply("plain text"),
}


class TokenRecorder(BaseCallbackHandler):
    """Records every `on_llm_new_token` token."""

    def __init__(self) -> None:
        self.tokens: list[str] = []

    def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
        self.tokens.append(token)


@pytest.fixture
def server() -> Iterator[OpenAIStubServer]:
    with OpenAIStubServer(SCRIPTS) as stub:
        yield stub


def chat(server: OpenAIStubServer, model: str, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model=model,
        base_url=server.base_url,
        api_key="test",
        timeout=TIMEOUT,
        max_retries=0,
        **kwargs,
    )


def merge(chunks: list[AIMessageChunk]) -> AIMessageChunk:
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    return total


# -- streaming text ---------------------------------------------------------------------


def test_stream_emits_word_tokens_through_callbacks(server: OpenAIStubServer) -> None:
    """ChatOpenAI.stream reports each word delta, framed by the empty role/finish/last tokens."""
    recorder = TokenRecorder()
    list(chat(server, "greeter").stream("hi", config={"callbacks": [recorder]}))
    assert recorder.tokens == ["", "Hello ", "from ", "the ", "stub!", "", ""]


async def test_astream_emits_word_tokens_through_callbacks(server: OpenAIStubServer) -> None:
    """ChatOpenAI.astream reports each word delta, framed by the empty role/finish/last tokens."""
    recorder = TokenRecorder()
    async with asyncio.timeout(TIMEOUT):
        async for _ in chat(server, "greeter").astream("hi", config={"callbacks": [recorder]}):
            pass
    assert recorder.tokens == ["", "Hello ", "from ", "the ", "stub!", "", ""]


def test_stream_chunks_share_one_langchain_run_id(server: OpenAIStubServer) -> None:
    """Streamed chunks carry LangChain's `lc_run--` id, not the server's `chatcmpl-` id."""
    chunks = list(chat(server, "greeter").stream("hi"))
    ids = {chunk.id for chunk in chunks}
    assert len(ids) == 1
    assert next(iter(ids)).startswith("lc_run--")
    assert [chunk.response_metadata.get("id") for chunk in chunks] == [None] * 7


def test_stream_usage_arrives_when_requested(server: OpenAIStubServer) -> None:
    """With stream_usage=True the request asks for usage and the merged chunk carries it."""
    message = merge(list(chat(server, "greeter", stream_usage=True).stream("hi there")))
    assert server.requests[0]["stream_options"] == {"include_usage": True}
    assert message.usage_metadata is not None
    assert (
        message.usage_metadata["input_tokens"],
        message.usage_metadata["output_tokens"],
        message.usage_metadata["total_tokens"],
    ) == (2, 4, 6)


def test_invoke_returns_content_and_completion_id(server: OpenAIStubServer) -> None:
    """A non-streaming call returns the content with the response's `chatcmpl-1` id."""
    message = chat(server, "greeter").invoke("hi")
    assert (message.content, message.response_metadata["id"]) == (
        "Hello from the stub!",
        "chatcmpl-1",
    )


# -- tool calls -------------------------------------------------------------------------


def test_stream_tool_call_deltas_become_tool_call_chunks(server: OpenAIStubServer) -> None:
    """The tool-call head and each argument fragment arrive as one tool_call_chunk each."""
    chunks = list(chat(server, "weather").stream("weather?"))
    assert [c for chunk in chunks for c in chunk.tool_call_chunks] == [
        {"name": "get_weather", "args": "", "id": "call_1_0", "index": 0,
         "type": "tool_call_chunk"},
        {"name": None, "args": '{"cit', "id": None, "index": 0, "type": "tool_call_chunk"},
        {"name": None, "args": 'y": "', "id": None, "index": 0, "type": "tool_call_chunk"},
        {"name": None, "args": "Paris", "id": None, "index": 0, "type": "tool_call_chunk"},
        {"name": None, "args": '"}', "id": None, "index": 0, "type": "tool_call_chunk"},
    ]  # fmt: skip


def test_stream_tool_call_merges_to_exact_tool_calls(server: OpenAIStubServer) -> None:
    """The merged streamed message has the scripted tool call and finish reason."""
    message = merge(list(chat(server, "weather").stream("weather?")))
    assert message.tool_calls == [
        {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1_0", "type": "tool_call"}
    ]
    assert message.response_metadata["finish_reason"] == "tool_calls"


async def test_astream_tool_call_merges_to_exact_tool_calls(server: OpenAIStubServer) -> None:
    """The merged async-streamed message has the scripted tool call."""
    async with asyncio.timeout(TIMEOUT):
        chunks = [chunk async for chunk in chat(server, "weather").astream("weather?")]
    assert merge(chunks).tool_calls == [
        {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1_0", "type": "tool_call"}
    ]


def test_tool_then_answers_text_once_a_tool_result_is_sent(server: OpenAIStubServer) -> None:
    """A tool_then script answers its final text to a request carrying the tool result."""
    model = chat(server, "weather")
    first = model.invoke("weather?")
    second = model.invoke(
        ["weather?", first, ToolMessage("sunny", tool_call_id=first.tool_calls[0]["id"])]
    )
    assert (first.tool_calls[0]["name"], second.content) == ("get_weather", "Sunny in Paris.")
    assert server.requests[1]["messages"][-1] == {
        "content": "sunny",
        "role": "tool",
        "tool_call_id": "call_1_0",
    }


def test_responder_script_keeps_the_responders_tool_call_ids(server: OpenAIStubServer) -> None:
    """A responder_script serves the responder's own tool-call id, then its final answer."""
    model = chat(server, "lookup")
    first = merge(list(model.stream("order?")))
    second = model.invoke(["order?", first, ToolMessage("shipped", tool_call_id="call_lookup_1")])
    assert first.tool_calls == [
        {"name": "lookup_order", "args": {"ref": "PO-1"}, "id": "call_lookup_1",
         "type": "tool_call"}
    ]  # fmt: skip
    assert second.content == "Order is shipped."


# -- structured output ------------------------------------------------------------------


def test_structured_output_json_schema_invoke_parses(server: OpenAIStubServer) -> None:
    """with_structured_output(method="json_schema").invoke returns the parsed model."""
    structured = chat(server, "triage").with_structured_output(Incident, method="json_schema")
    assert structured.invoke("disk?") == Incident(severity="high", summary="disk full")


def test_structured_output_json_schema_sends_response_format(server: OpenAIStubServer) -> None:
    """with_structured_output(method="json_schema") sends a strict json_schema response_format."""
    chat(server, "triage").with_structured_output(Incident, method="json_schema").invoke("disk?")
    response_format = server.requests[0]["response_format"]
    assert (
        response_format["type"],
        response_format["json_schema"]["name"],
        response_format["json_schema"]["strict"],
    ) == ("json_schema", "Incident", True)


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic warns dumping `parsed` events
def test_structured_output_json_schema_stream_parses(server: OpenAIStubServer) -> None:
    """with_structured_output(method="json_schema").stream yields the parsed model once."""
    structured = chat(server, "triage").with_structured_output(Incident, method="json_schema")
    assert list(structured.stream("disk?")) == [Incident(severity="high", summary="disk full")]


async def test_structured_output_json_schema_ainvoke_parses(server: OpenAIStubServer) -> None:
    """with_structured_output(method="json_schema").ainvoke returns the parsed model."""
    structured = chat(server, "triage").with_structured_output(Incident, method="json_schema")
    async with asyncio.timeout(TIMEOUT):
        result = await structured.ainvoke("disk?")
    assert result == Incident(severity="high", summary="disk full")


def test_create_agent_provider_strategy_parses_json(server: OpenAIStubServer) -> None:
    """create_agent on a structured-output profile uses json_schema and parses the reply."""
    model = chat(server, "triage", profile={"structured_output": True})
    result = create_agent(model, tools=[], response_format=Incident).invoke(
        {"messages": [("user", "disk?")]}
    )
    assert result["structured_response"] == Incident(severity="high", summary="disk full")
    assert server.requests[0]["response_format"]["type"] == "json_schema"
    assert "tool_choice" not in server.requests[0]


def test_create_agent_provider_strategy_streams_json_tokens(server: OpenAIStubServer) -> None:
    """A ProviderStrategy agent streams the JSON word by word, then four empty chunks.

    The empty chunks after the words are the finish chunk, the SDK's `content.done`
    event, the final completion (which carries `parsed`) and langchain-core's last chunk.
    """
    model = chat(server, "triage", profile={"structured_output": True})
    agent = create_agent(model, tools=[], response_format=Incident)
    tokens = [
        message.content
        for message, _ in agent.stream({"messages": [("user", "disk?")]}, stream_mode="messages")
        if isinstance(message, AIMessageChunk)
    ]
    words = ['{"severity": ', '"high", ', '"summary": ', '"disk ', 'full"}']
    assert tokens == ["", *words, "", "", "", ""]


async def test_create_agent_provider_strategy_astream_final_state(
    server: OpenAIStubServer,
) -> None:
    """The last values of an async-streamed ProviderStrategy agent hold the parsed model."""
    model = chat(server, "triage", profile={"structured_output": True})
    agent = create_agent(model, tools=[], response_format=Incident)
    async with asyncio.timeout(TIMEOUT):
        states = [
            state
            async for state in agent.astream(
                {"messages": [("user", "disk?")]}, stream_mode="values"
            )
        ]
    assert states[-1]["structured_response"] == Incident(severity="high", summary="disk full")


def test_create_agent_without_profile_falls_back_to_tool_strategy(
    server: OpenAIStubServer,
) -> None:
    """A role-named ChatOpenAI has no profile, so create_agent forces an `Incident` tool call."""
    model = chat(server, "triage_tool")
    assert model.profile is None
    result = create_agent(model, tools=[], response_format=Incident).invoke(
        {"messages": [("user", "disk?")]}
    )
    request = server.requests[0]
    assert result["structured_response"] == Incident(severity="low", summary="tool")
    assert (request["tool_choice"], [t["function"]["name"] for t in request["tools"]]) == (
        "required",
        ["Incident"],
    )
    assert "response_format" not in request


# -- wire format ------------------------------------------------------------------------

_HEAD = (
    '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,'
    '"model":"short","system_fingerprint":"fp_stub","choices":[{"index":0,"delta":'
)


def test_sse_stream_is_byte_exact(server: OpenAIStubServer) -> None:
    """A streamed reply is role, word and finish chunks under one id, then `[DONE]`."""
    body = {"model": "short", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream(
        "POST", f"{server.base_url}/chat/completions", json=body, timeout=TIMEOUT
    ) as response:
        raw = response.read()
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert (
        raw
        == (
            f'data: {_HEAD}{{"role":"assistant","content":"","refusal":null}},'
            '"logprobs":null,"finish_reason":null}]}\n\n'
            f'data: {_HEAD}{{"content":"Hi "}},"logprobs":null,"finish_reason":null}}]}}\n\n'
            f'data: {_HEAD}{{"content":"there"}},"logprobs":null,"finish_reason":null}}]}}\n\n'
            f'data: {_HEAD}{{}},"logprobs":null,"finish_reason":"stop"}}]}}\n\n'
            "data: [DONE]\n\n"
        ).encode()
    )


def test_non_streaming_tool_call_body_is_exact(server: OpenAIStubServer) -> None:
    """A non-streaming tool-call reply is one `chat.completion` with the call and usage."""
    body = {"model": "weather", "messages": [{"role": "user", "content": "weather?"}]}
    response = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=TIMEOUT)
    assert response.json() == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "weather",
        "system_fingerprint": "fp_stub",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "tool_calls": [
                        {
                            "id": "call_1_0",
                            "type": "function",
                            "function": {
                                "name": "get_weather",
                                "arguments": json.dumps({"city": "Paris"}),
                            },
                        }
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 4, "total_tokens": 5},
    }


def test_server_records_every_request_body(server: OpenAIStubServer) -> None:
    """`.requests` holds each request body the client sent, in order."""
    chat(server, "greeter").invoke("one")
    list(chat(server, "short").stream("two"))
    assert server.requests == [
        {"model": "greeter", "stream": False, "messages": [{"content": "one", "role": "user"}]},
        {"model": "short", "stream": True, "messages": [{"content": "two", "role": "user"}]},
    ]


# -- errors -----------------------------------------------------------------------------


def test_unknown_model_is_an_openai_404(server: OpenAIStubServer) -> None:
    """A model without a script gets a 404 `model_not_found` error the SDK raises."""
    with pytest.raises(openai.NotFoundError) as excinfo:
        chat(server, "nope").invoke("hi")
    assert (excinfo.value.status_code, excinfo.value.code) == (404, "model_not_found")


def test_script_error_raises_on_exit() -> None:
    """A script returning a non-Reply answers 500 and makes the server's exit raise."""
    with pytest.raises(ScriptError, match="returned 'not a Reply'"):
        with OpenAIStubServer(SCRIPTS) as stub:
            with pytest.raises(openai.InternalServerError):
                chat(stub, "broken").invoke("hi")


def test_json_schema_request_rejects_non_json_reply() -> None:
    """A json_schema request whose script answers plain text is a script error."""
    with pytest.raises(ScriptError, match="not JSON"):
        with OpenAIStubServer(SCRIPTS) as stub:
            model = chat(stub, "not_json").with_structured_output(Incident, method="json_schema")
            with pytest.raises(openai.InternalServerError):
                model.invoke("hi")


# -- lifecycle --------------------------------------------------------------------------


def test_exit_refuses_connections_and_frees_the_port() -> None:
    """After exit the port refuses connections and can be bound again without SO_REUSEADDR."""
    with OpenAIStubServer(SCRIPTS) as stub:
        port = stub.port
        list(chat(stub, "greeter").stream("hi"))
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT).close()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_exit_joins_the_serving_thread() -> None:
    """After exit no thread of the server is left running."""
    with OpenAIStubServer(SCRIPTS) as stub:
        name = f"openai-stub-{stub.port}"
        assert [t.name for t in threading.enumerate() if t.name == name] == [name]
        chat(stub, "greeter").invoke("hi")
    assert [t.name for t in threading.enumerate() if t.name == name] == []
