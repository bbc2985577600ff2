"""The model-call activity against real loopback servers sending what real providers send:
an error inside a 200 stream or body (Groq, OpenRouter, vLLM, an ``event: error``),
Mistral's list-of-parts ``content``, Gemini's index-less tool-call deltas and the
``extra_content`` it needs echoed, and raw U+2028 inside a streamed JSON string.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import Conversations, LocalBlobStore
from psych_runtime.activities.contract import ChatMessage, ModelCallResult
from psych_runtime.activities.model import Endpoint, ModelActivities, ModelEndpoints
from psych_runtime.activities.model import _stream as _stream_module
from psych_runtime.activities.model._stream import _Stream
from tests._upstream import Answer, Upstream
from tests.activities.test_model_upstreams import call, completion, failure

KEY = "sk-test-provider-streams"


def sse(*events: str | dict[str, Any]) -> str:
    """An event stream: each dict a ``data:`` chunk, each string sent as written."""
    return "".join(
        f"data: {json.dumps(e, ensure_ascii=False)}\n\n" if isinstance(e, dict) else e
        for e in events
    )


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def acts(url: str, blobs: LocalBlobStore, http: httpx.AsyncClient) -> ModelActivities:
    return ModelActivities(
        endpoints=ModelEndpoints(default=Endpoint(url + "/v1", KEY)), blobs=blobs, http=http
    )


async def answer(
    upstream: Upstream, blobs: LocalBlobStore, http: httpx.AsyncClient, **fields: Any
) -> ModelCallResult:
    result: ModelCallResult = await ActivityEnvironment().run(
        acts(upstream.url, blobs, http).complete, call(**fields)
    )
    return result


# --- an error inside a 200 response ---------------------------------------------------------

ROLE = chunk({"role": "assistant", "content": ""})

STREAM_ERRORS = [
    pytest.param(
        sse(
            ROLE,
            "event: error\n"
            'data: {"error": {"message": "Overloaded", "type": "overloaded_error"}}\n\n',
        ),
        "Overloaded (type overloaded_error)",
        True,
        None,
        id="event-error-overloaded",
    ),
    pytest.param(
        sse(
            ROLE,
            {
                "error": {
                    "message": "Failed to call a function. Please adjust your prompt.",
                    "type": "invalid_request_error",
                    "code": "tool_use_failed",
                    "failed_generation": "<function=lookup>{}",
                }
            },
        ),
        "Failed to call a function. Please adjust your prompt. "
        "(code tool_use_failed, type invalid_request_error)",
        False,
        None,
        id="groq-tool-use-failed",
    ),
    pytest.param(
        sse(
            ROLE,
            chunk(
                {"content": ""},
                "error",
                error={"code": 429, "message": "Rate limit exceeded: free-models-per-day"},
            ),
            "data: [DONE]\n\n",
        ),
        "Rate limit exceeded: free-models-per-day (code 429)",
        True,
        429,
        id="openrouter-429-beside-choices",
    ),
    pytest.param(
        sse(
            ROLE,
            chunk({"content": "Hel"}),
            chunk({}, "error", error={"code": 502, "message": "Provider returned error"}),
        ),
        "Provider returned error (code 502)",
        True,
        502,
        id="openrouter-502-mid-answer",
    ),
    pytest.param(
        sse(
            ROLE,
            {"object": "error", "message": "max_tokens is too large", "code": 400},
        ),
        "max_tokens is too large (code 400)",
        False,
        400,
        id="vllm-object-error",
    ),
    pytest.param(
        sse(ROLE, chunk({"content": "Hel"}), chunk({}, "error"), "data: [DONE]\n\n"),
        'the answer ended with finish_reason "error" and no error message',
        False,
        None,
        id="finish-reason-error-without-message",
    ),
    pytest.param(
        sse(ROLE, "event: error\ndata: upstream model went away\n\n"),
        "upstream model went away",
        False,
        None,
        id="event-error-plain-text",
    ),
    pytest.param(
        # JSON without the word: an error because the event says so.
        sse(ROLE, 'event: error\ndata: {"message": "Overloaded", "type": "overloaded"}\n\n'),
        "Overloaded (type overloaded)",
        True,
        None,
        id="event-error-without-the-word",
    ),
    pytest.param(
        # Its key spelled with an escape: a chunk is read in one pass only when it cannot
        # be an error, and this one could.
        sse(ROLE, 'data: {"\\u0065rror": {"message": "Escaped", "type": "server_error"}}\n\n'),
        "Escaped (type server_error)",
        True,
        None,
        id="error-key-escaped",
    ),
]


@pytest.mark.parametrize(("body", "says", "transient", "status"), STREAM_ERRORS)
async def test_an_error_inside_a_200_stream_fails_with_the_providers_message(
    blobs: LocalBlobStore,
    http: httpx.AsyncClient,
    body: str,
    says: str,
    transient: bool,
    status: int | None,
) -> None:
    with Upstream(lambda _: Answer(200, body, "text/event-stream")) as upstream:
        _, parsed = await failure(acts(upstream.url, blobs, http), call(stream=True))

    assert parsed.message == f"model gw-model: provider error in a 200 response: {says}"
    assert parsed.transient is transient
    assert parsed.status == status
    assert "connection dropped" not in parsed.message
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(
    ("error", "says", "transient"),
    [
        ({"message": "Service Unavailable", "code": 503}, "Service Unavailable (code 503)", True),
        (
            {"message": "Rate limit reached for model", "type": "rate_limit_exceeded"},
            "Rate limit reached for model (type rate_limit_exceeded)",
            True,
        ),
        (
            {"message": "The prompt was flagged", "code": "content_filter"},
            "The prompt was flagged (code content_filter)",
            False,
        ),
    ],
)
async def test_an_error_in_a_200_json_body_fails_with_the_providers_message(
    blobs: LocalBlobStore,
    http: httpx.AsyncClient,
    stream: bool,
    error: dict[str, Any],
    says: str,
    transient: bool,
) -> None:
    with Upstream(lambda _: Answer(200, json.dumps({"error": error}))) as upstream:
        _, parsed = await failure(acts(upstream.url, blobs, http), call(stream=stream))

    assert parsed.message == f"model gw-model: provider error in a 200 response: {says}"
    assert parsed.transient is transient


# --- Mistral: content as a list of typed parts ----------------------------------------------

THINKING = {"type": "thinking", "thinking": [{"type": "text", "text": "The user greets me."}]}


@pytest.mark.parametrize("stream", [True, False])
async def test_mistral_list_content_answers_its_text_parts_without_the_thinking(
    blobs: LocalBlobStore, http: httpx.AsyncClient, stream: bool
) -> None:
    if stream:
        body = sse(
            chunk({"role": "assistant", "content": [THINKING]}),
            chunk({"content": [{"type": "text", "text": "Hello"}]}),
            chunk({"content": " there"}),
            chunk({"content": [{"type": "text", "text": "!"}]}, "stop"),
            "data: [DONE]\n\n",
        )
        sent = Answer(200, body, "text/event-stream")
    else:
        content = [THINKING, {"type": "text", "text": "Hello"}, {"type": "text", "text": " there!"}]
        whole = json.loads(completion(""))
        whole["choices"][0]["message"]["content"] = content
        sent = Answer(200, json.dumps(whole))
    with Upstream(lambda _: sent) as upstream:
        result = await answer(upstream, blobs, http, stream=stream)

    assert result.text == "Hello there!"
    stored = await Conversations(blobs).messages(result.context_ref)
    assert stored[-1].content == "Hello there!"


# --- Gemini: index-less tool-call deltas, and what it needs echoed ------------------------------

SIGNATURE = {"google": {"thought_signature": "CiQBcsjafQ8x+sig/=="}}


def gemini_call(id_: str, name: str, args: str, **extra: Any) -> dict[str, Any]:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}, **extra}


async def test_index_less_tool_call_deltas_are_assembled_by_id(
    blobs: LocalBlobStore, http: httpx.AsyncClient
) -> None:
    body = sse(
        chunk({"role": "assistant", "tool_calls": [gemini_call("a1", "lookup", '{"id": ')]}),
        chunk({"tool_calls": [{"function": {"arguments": '"42"}'}}]}),  # continues a1
        chunk({"tool_calls": [gemini_call("b2", "refund", '{"id": "42"}')]}),
        chunk({"tool_calls": [gemini_call("c3", "notify", "{}")]}),
        # Neither id nor index: the first piece continues c3, the second is a call of its own.
        chunk(
            {
                "tool_calls": [
                    {"function": {"arguments": ""}},
                    {"function": {"name": "close", "arguments": "{}"}},
                ]
            },
            "tool_calls",
        ),
        "data: [DONE]\n\n",
    )
    with Upstream(lambda _: Answer(200, body, "text/event-stream")) as upstream:
        result = await answer(upstream, blobs, http, stream=True)

    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("a1", "lookup", '{"id": "42"}'),
        ("b2", "refund", '{"id": "42"}'),
        ("c3", "notify", "{}"),
        ("call_1_3", "close", "{}"),
    ]


@pytest.mark.parametrize("stream", [True, False])
async def test_gemini_extra_content_is_stored_and_sent_back_next_request(
    blobs: LocalBlobStore, http: httpx.AsyncClient, stream: bool
) -> None:
    tool_call = gemini_call("g1", "lookup", '{"id": "42"}', extra_content=SIGNATURE)
    if stream:
        first = Answer(
            200,
            sse(
                chunk({"role": "assistant", "tool_calls": [tool_call]}),
                chunk({"content": "", "extra_content": SIGNATURE}, "tool_calls"),
                "data: [DONE]\n\n",
            ),
            "text/event-stream",
        )
    else:
        whole = json.loads(completion(""))
        whole["choices"][0]["message"].update(tool_calls=[tool_call], extra_content=SIGNATURE)
        first = Answer(200, json.dumps(whole))
    # Earlier in the conversation: an assistant message as stored before provider_fields
    # existed (no such key at all), and its tool result.
    old = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c0", "name": "lookup", "arguments": "{}"}],
        "tool_call_id": None,
    }
    conversations = Conversations(blobs)
    earlier = await conversations.append(
        None,
        [
            await blobs.put(json.dumps(old).encode()),
            await conversations.put_message(
                ChatMessage(role="tool", content="ok", tool_call_id="c0")
            ),
        ],
    )
    replies = iter([first, Answer(200, completion("delivered"))])
    with Upstream(lambda _: next(replies)) as upstream:
        activities = acts(upstream.url, blobs, http)
        one = await ActivityEnvironment().run(
            activities.complete, call(stream=stream, context_ref=earlier)
        )
        result = ModelCallResult.model_validate_json(one.model_dump_json())
        tool_result = ChatMessage(role="tool", content="delivered", tool_call_id="g1")
        two = call(stream=stream, turn=2, context_ref=one.context_ref, new_messages=(tool_result,))
        await ActivityEnvironment().run(activities.complete, two)
        sent = json.loads(upstream.requests[1].body)

    # The workflow's result carries no provider fields (history stays small) ...
    assert result.tool_calls[0].provider_fields is None
    assert "extra_content" not in one.model_dump_json()
    # ... the stored assistant message does, and the next request sends them back.
    assistant = sent["messages"][-2]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"] == [
        {
            "id": "g1",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"id": "42"}'},
            "extra_content": SIGNATURE,
        }
    ]
    assert assistant["extra_content"] == SIGNATURE
    assert "extra_content" not in sent["messages"][-1]
    # The older message is sent as it always was.
    assert sent["messages"][0] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        ],
    }


# --- line ends: CR, LF and CRLF only -------------------------------------------------------


TRICKY_LINES = [
    # (line, whether it is read in one pass, what the stream makes of it): the others take
    # the general way, which must not take them for errors either.
    ('data: {"choices": [{"index": 0, "delta": {"content": "error"}}]}', False, "answer"),
    (
        'data: {"choices": [{"index": 0, "delta": {"content": "\\"error\\" caf\\u00e9"}}]}',
        False,
        "answer",
    ),
    (
        'data: {"choices": [{"index": 0, "delta": {"extra_content": {"error": {"a": 1}}}}]}',
        False,
        "answer",
    ),
    (
        'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", '
        '"function": {"name": "f", "arguments": "{\\"error\\": 1}"}}]}}]}',
        True,
        "answer",
    ),
    (
        'data: {"choices": [{"index": 0, "delta": {"content": 1e400}}], "usage": null}',
        False,
        "raised",
    ),
    ('data: {"choices": [{"index": 0, "delta": {"content": "a"}, "index": 0}]}', True, "answer"),
    (
        'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], '
        '"usage": {"prompt_tokens": 3, "completion_tokens": 1}}',
        True,
        "answer",
    ),
]


def _read(lines: Sequence[str]) -> tuple[str, object]:
    stream = _Stream(started=0.0)
    try:
        for line in lines:
            stream.feed(line)
            stream.feed("")
        stream.close()
        # When the first piece came differs between two readings; nothing else may.
        return ("answer", dataclasses.replace(stream.answer(1), first_token_ms=None))
    except Exception as err:
        return ("raised", f"{type(err).__name__}: {err}")


@pytest.mark.parametrize(("line", "one_pass", "reads"), TRICKY_LINES)
def test_a_chunk_read_in_one_pass_reads_as_the_general_way_reads_it(
    line: str, one_pass: bool, reads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (_stream_module._plain_chunk(line.removeprefix("data: ")) is not None) is one_pass
    ending = TRICKY_LINES[-1][0]
    fast = _read([line, ending])
    assert fast[0] == reads, fast
    monkeypatch.setattr(_stream_module, "_plain_chunk", lambda value: None)
    assert fast == _read([line, ending])


ODD = "one\u2028two\u0085three\u2029four\x1cfive"
"""Characters ``str.splitlines`` splits at and JSON may carry raw inside a string."""


@pytest.mark.parametrize("stream", [True, False])
async def test_raw_line_separators_inside_a_streamed_string_stay_in_the_text(
    blobs: LocalBlobStore, http: httpx.AsyncClient, stream: bool
) -> None:
    # stream=False: a gateway that streams although asked not to (the whole-body path).
    body = sse(chunk({"role": "assistant", "content": ODD}), chunk({}, "stop"), "data: [DONE]\n\n")
    assert "\u2028" in body  # sent raw, not escaped
    with Upstream(lambda _: Answer(200, body, "text/event-stream")) as upstream:
        result = await answer(upstream, blobs, http, stream=stream)

    assert result.text == ODD


@asynccontextmanager
async def raw_server(pieces: Sequence[bytes]) -> AsyncIterator[str]:
    """A loopback HTTP/1.1 server writing ``pieces`` one by one, a pause between each, then
    closing: a stream whose line ends and characters fall across reads."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


async def test_crlf_and_a_separator_split_across_reads_are_read_whole(
    blobs: LocalBlobStore, http: httpx.AsyncClient
) -> None:
    first = f"data: {json.dumps(chunk({'content': 'a' + chr(0x2028) + 'b'}), ensure_ascii=False)}"
    data = first.encode()
    cut = data.index("\u2028".encode()) + 1  # inside the separator's three UTF-8 bytes
    last = json.dumps(chunk({"content": "c"}, "stop")).encode()
    pieces = [data[:cut], data[cut:] + b"\r", b"\n\r\n", b"data: " + last + b"\r\n\r\n"]
    async with raw_server(pieces) as url:
        result = await ActivityEnvironment().run(acts(url, blobs, http).complete, call(stream=True))

    assert result.text == "a\u2028bc"
