"""The fake model server, driven over real loopback HTTP with httpx."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import psych_runtime.activities as activities
import psych_runtime.testing as testing
from psych_runtime.testing import FakeModel, Reply, ToolCall, Usage

HELLO = [{"role": "user", "content": "Hello there, model!"}]  # 19 characters


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    async with FakeModel(models=("fake-model", "other-model")) as fake:
        yield fake


@pytest.fixture
async def client(model: FakeModel) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=model.base_url, timeout=5) as http:
        yield http


def chat(*, stream: bool = False, model: str = "fake-model", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": HELLO, "stream": stream, **extra}


async def read_stream(
    response: httpx.Response, into: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], list[float]]:
    """The chunks of an SSE response and when each arrived; asserts it ends with [DONE]."""
    chunks = [] if into is None else into
    arrivals: list[float] = []
    done = False
    async for line in response.aiter_lines():
        if not line:
            continue
        assert not done, "data after [DONE]"
        assert line.startswith("data: ")
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            done = True
            continue
        chunks.append(json.loads(data))
        arrivals.append(time.monotonic())
    assert done, "stream ended without [DONE]"
    return chunks, arrivals


async def drain(lines: AsyncIterator[str]) -> None:
    async for _ in lines:
        pass


async def stream(client: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with client.stream("POST", "/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        chunks, _ = await read_stream(response)
    return chunks


def content_of(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def tool_calls_of(chunks: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Reassembles streamed tool-call deltas by index, as OpenAI clients do."""
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for delta in chunk["choices"][0]["delta"].get("tool_calls", []) if chunk["choices"] else []:
            call = calls.setdefault(delta["index"], {"arguments": "", "pieces": 0})
            for key in ("id", "type"):
                if key in delta:
                    call[key] = delta[key]
            function = delta.get("function", {})
            if "name" in function:
                call["name"] = function["name"]
            if function.get("arguments"):
                call["arguments"] += function["arguments"]
                call["pieces"] += 1
    return calls


def test_public_home_is_psych_runtime_testing_only() -> None:
    assert testing.__all__ == ["FakeModel", "Reply", "ToolCall", "Usage"]
    # One public home: the activities package no longer re-exports the fake.
    assert {"FakeModel", "FakeUsage", "Reply", "ToolCall"}.isdisjoint(activities.__all__)


async def test_text_non_streaming(model: FakeModel, client: httpx.AsyncClient) -> None:
    model.enqueue(Reply.text("Hi! How can I help?"))
    response = await client.post("/chat/completions", json=chat())
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert isinstance(body["created"], int)
    assert body["model"] == "fake-model"
    choice = body["choices"][0]
    assert choice["message"] == {
        "role": "assistant",
        "content": "Hi! How can I help?",
        "refusal": None,
    }
    assert choice["finish_reason"] == "stop"
    # Defaults: prompt = 19 chars // 4, completion = 19 chars // 4.
    assert body["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": 4,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


async def test_text_streaming_reassembles(model: FakeModel, client: httpx.AsyncClient) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    model.enqueue(Reply.text(text, chunk_size=5))
    chunks = await stream(client, chat(stream=True))
    assert content_of(chunks) == text
    assert len([c for c in chunks if c["choices"][0]["delta"].get("content")]) == 9
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["model"] for c in chunks} == {"fake-model"}
    assert len({c["id"] for c in chunks}) == 1
    assert [c["choices"][0]["finish_reason"] for c in chunks][-2:] == [None, "stop"]
    assert all("usage" not in c for c in chunks)


async def test_tool_calls_stream_in_pieces(model: FakeModel, client: httpx.AsyncClient) -> None:
    weather = {"city": "Paris", "units": "metric", "days": [1, 2, 3]}
    model.enqueue(
        Reply.tool_calls(
            ToolCall("get_weather", weather),
            ToolCall("search", {"q": "café ☕"}, id="call_custom"),
            content="Let me check.",
        )
    )
    chunks = await stream(client, chat(stream=True))
    assert content_of(chunks) == "Let me check."
    calls = tool_calls_of(chunks)
    assert sorted(calls) == [0, 1]
    assert calls[0]["name"] == "get_weather"
    assert calls[0]["type"] == "function"
    assert calls[0]["id"] == "call_1"
    assert calls[0]["pieces"] > 2
    assert json.loads(calls[0]["arguments"]) == weather
    assert calls[1]["id"] == "call_custom"
    assert json.loads(calls[1]["arguments"]) == {"q": "café ☕"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_tool_calls_non_streaming(model: FakeModel, client: httpx.AsyncClient) -> None:
    model.enqueue(Reply.tool_calls(ToolCall("noop"), ToolCall("add", {"a": 1, "b": 2})))
    response = await client.post("/chat/completions", json=chat())
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "noop", "arguments": "{}"}},
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
        },
    ]


async def test_malformed_tool_call_arrives_verbatim(
    model: FakeModel, client: httpx.AsyncClient
) -> None:
    raw = '{"city": "Par'
    model.enqueue(Reply.malformed_tool_call("get_weather", raw))
    model.enqueue(Reply.malformed_tool_call("get_weather", raw))
    response = await client.post("/chat/completions", json=chat())
    call = response.json()["choices"][0]["message"]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": raw}
    streamed = tool_calls_of(await stream(client, chat(stream=True)))
    assert streamed[0]["arguments"] == raw
    with pytest.raises(json.JSONDecodeError):
        json.loads(streamed[0]["arguments"])


async def test_rate_limit_error_with_retry_after(
    model: FakeModel, client: httpx.AsyncClient
) -> None:
    model.enqueue(Reply.error(429, retry_after=1.5, message="slow down"))
    response = await client.post("/chat/completions", json=chat(stream=True))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1.5"
    assert response.headers["retry-after-ms"] == "1500"
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["message"] == "slow down"
    assert error["type"] == "rate_limit_error"
    assert error["code"] == "rate_limit_exceeded"


async def test_server_error(model: FakeModel, client: httpx.AsyncClient) -> None:
    model.enqueue(Reply.error(500), Reply.text("recovered"))
    response = await client.post("/chat/completions", json=chat())
    assert response.status_code == 500
    assert "retry-after" not in response.headers
    assert response.json()["error"]["message"] == "scripted error"
    assert response.json()["error"]["type"] == "server_error"
    # The same keep-alive connection keeps serving after an error.
    retry = await client.post("/chat/completions", json=chat())
    assert retry.json()["choices"][0]["message"]["content"] == "recovered"


async def test_abort_mid_stream(model: FakeModel, client: httpx.AsyncClient) -> None:
    model.enqueue(Reply.abort(after_chunks=2), Reply.text("after the drop"))
    received: list[dict[str, Any]] = []
    async with client.stream("POST", "/chat/completions", json=chat(stream=True)) as r:
        assert r.status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):
            await read_stream(r, into=received)
    assert content_of(received) == "partial partial "
    assert all(c["choices"][0]["finish_reason"] is None for c in received)
    # Only that connection dropped: the server keeps answering.
    after = await client.post("/chat/completions", json=chat())
    assert after.json()["choices"][0]["message"]["content"] == "after the drop"


async def test_abort_non_streaming_sends_no_response(
    model: FakeModel, client: httpx.AsyncClient
) -> None:
    model.enqueue(Reply.abort())
    with pytest.raises(httpx.RemoteProtocolError):
        await client.post("/chat/completions", json=chat())
    assert len(model.requests) == 1


async def test_stall_leaves_a_gap_then_finishes(
    model: FakeModel, client: httpx.AsyncClient
) -> None:
    model.enqueue(Reply.stall(0.3, after_chunks=2, then=Reply.text("abcdefghijkl", chunk_size=3)))
    async with client.stream("POST", "/chat/completions", json=chat(stream=True)) as response:
        chunks, arrivals = await read_stream(response)
    assert content_of(chunks) == "abcdefghijkl"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    # The server sends chunk 3 at least 0.3 s after chunk 2, but chunk 2 can be read late
    # on a loaded machine, which shortens the gap seen here (0.296 s was measured in CI).
    assert gaps[1] >= 0.25
    assert max(gaps[:1] + gaps[2:]) < 0.2


async def test_stall_non_streaming_delays_answer(
    model: FakeModel, client: httpx.AsyncClient
) -> None:
    model.enqueue(Reply.stall(0.3, then=Reply.tool_calls(ToolCall("late"))))
    started = time.monotonic()
    response = await client.post("/chat/completions", json=chat())
    assert time.monotonic() - started >= 0.3
    assert response.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "late"


async def test_exit_cuts_a_stalled_stream() -> None:
    started = time.monotonic()
    async with FakeModel() as fake, httpx.AsyncClient(base_url=fake.base_url) as http:
        fake.enqueue(Reply.stall(30, after_chunks=1))
        async with http.stream("POST", "/chat/completions", json=chat(stream=True)) as response:
            lines = response.aiter_lines()
            assert (await anext(lines)).startswith("data: ")
            # Leaving the server's context must not wait out the 30 s stall.
            await fake.__aexit__(None, None, None)
            with pytest.raises(httpx.RemoteProtocolError):
                await drain(lines)
    assert time.monotonic() - started < 5


async def test_a_client_leaving_a_stalled_stream_is_counted_as_cut_at_once(
    model: FakeModel, client: httpx.AsyncClient
) -> None:
    # A provider notices a client that hangs up while it is silent; the fake did only when
    # the silence ended, so a test of an abort waited out the whole stall to see the cut.
    model.enqueue(Reply.stall(30, after_chunks=1))
    async with client.stream("POST", "/chat/completions", json=chat(stream=True)) as response:
        assert (await anext(response.aiter_lines())).startswith("data: ")
    for _ in range(200):  # 10 s at most, not the 30 s stall
        if model.streams_cut:
            break
        await asyncio.sleep(0.05)
    assert (model.streams_cut, model.streams_whole) == (1, 0)


async def test_per_model_queue_is_consumed_first(
    model: FakeModel, client: httpx.AsyncClient
) -> None:
    model.enqueue(Reply.text("shared"))
    model.enqueue(Reply.text("other only"), model="other-model")
    answers = []
    for name in ("other-model", "other-model"):
        response = await client.post("/chat/completions", json=chat(model=name))
        assert response.json()["model"] == name
        answers.append(response.json()["choices"][0]["message"]["content"])
    assert answers == ["other only", "shared"]


async def test_responder_answers_when_queue_is_empty(
    model: FakeModel, client: httpx.AsyncClient
) -> None:
    seen: list[dict[str, Any]] = []

    def echo(body: dict[str, Any]) -> Reply:
        seen.append(body)
        return Reply.text(f"echo: {body['messages'][-1]['content']}")

    model.responder = echo
    model.enqueue(Reply.text("queued"))
    first = await client.post("/chat/completions", json=chat())
    second = await client.post("/chat/completions", json=chat(stream=True))
    assert first.json()["choices"][0]["message"]["content"] == "queued"
    assert content_of(await stream(client, chat(stream=True))) == "echo: Hello there, model!"
    assert second.text.endswith("data: [DONE]\n\n")
    assert len(seen) == 2
    assert seen[0]["stream"] is True


async def test_script_exhausted_fails_loudly(model: FakeModel, client: httpx.AsyncClient) -> None:
    model.enqueue(Reply.text("only one"))
    assert (await client.post("/chat/completions", json=chat())).status_code == 200
    response = await client.post("/chat/completions", json=chat(stream=True))
    assert response.status_code == 500
    assert response.json()["error"]["message"] == "fake model: script exhausted (request 2)"


async def test_unknown_model_is_404_and_consumes_nothing(
    model: FakeModel, client: httpx.AsyncClient
) -> None:
    model.enqueue(Reply.text("kept"))
    response = await client.post("/chat/completions", json=chat(model="gpt-nonexistent"))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert "gpt-nonexistent" in response.json()["error"]["message"]
    ok = await client.post("/chat/completions", json=chat())
    assert ok.json()["choices"][0]["message"]["content"] == "kept"


async def test_models_endpoint(client: httpx.AsyncClient) -> None:
    response = await client.get("/models")
    assert response.status_code == 200
    assert [m["id"] for m in response.json()["data"]] == ["fake-model", "other-model"]


async def test_scripted_usage_non_streaming(model: FakeModel, client: httpx.AsyncClient) -> None:
    usage = Usage(input_tokens=100, output_tokens=20, cache_read_tokens=60, reasoning_tokens=7)
    model.enqueue(Reply.text("x", usage=usage))
    body = (await client.post("/chat/completions", json=chat())).json()
    assert body["usage"] == {
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "total_tokens": 120,
        "prompt_tokens_details": {"cached_tokens": 60},
        "completion_tokens_details": {"reasoning_tokens": 7},
    }


async def test_include_usage_sends_final_usage_chunk(
    model: FakeModel, client: httpx.AsyncClient
) -> None:
    usage = Usage(input_tokens=11, output_tokens=3, cache_read_tokens=5, reasoning_tokens=2)
    model.enqueue(Reply.tool_calls(ToolCall("f", {"x": 1}), usage=usage), Reply.text("abc"))
    chunks = await stream(client, chat(stream=True, stream_options={"include_usage": True}))
    final = chunks[-1]
    assert final["choices"] == []
    assert final["usage"]["prompt_tokens"] == 11
    assert final["usage"]["completion_tokens"] == 3
    assert final["usage"]["total_tokens"] == 14
    assert final["usage"]["prompt_tokens_details"] == {"cached_tokens": 5}
    assert final["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    # Without include_usage there is no usage chunk at all.
    plain = await stream(client, chat(stream=True))
    assert all(c["choices"] for c in plain)


async def test_requests_and_headers_are_recorded(
    model: FakeModel, client: httpx.AsyncClient
) -> None:
    model.enqueue(Reply.error(503))
    await client.post(
        "/chat/completions",
        json=chat(temperature=0.5),
        headers={"Authorization": "Bearer sk-test", "X-Trace-Id": "t-1"},
    )
    await client.post("/chat/completions", json=chat(model="nope"))
    assert [r["model"] for r in model.requests] == ["fake-model", "nope"]
    assert model.requests[0]["temperature"] == 0.5
    assert model.requests[0]["messages"] == HELLO
    assert len(model.headers) == 2
    assert model.headers[0]["authorization"] == "Bearer sk-test"
    assert model.headers[0]["x-trace-id"] == "t-1"
    assert "x-trace-id" not in model.headers[1]


async def test_responder_failure_is_a_500(model: FakeModel, client: httpx.AsyncClient) -> None:
    def broken(body: dict[str, Any]) -> Reply:
        raise KeyError("missing")

    model.responder = broken
    response = await client.post("/chat/completions", json=chat())
    assert response.status_code == 500
    assert "responder raised KeyError" in response.json()["error"]["message"]


def test_thread_mode_from_sync_code() -> None:
    fake = FakeModel().start_in_thread()
    try:
        fake.enqueue(Reply.text("from a thread"))
        with httpx.Client(base_url=fake.base_url, timeout=5) as http:
            response = http.post("/chat/completions", json=chat())
        assert response.json()["choices"][0]["message"]["content"] == "from a thread"
        url = fake.base_url
    finally:
        fake.stop()
    with pytest.raises(httpx.ConnectError), httpx.Client(base_url=url, timeout=5) as http:
        http.get("/models")


def test_sync_context_manager_streams() -> None:
    with FakeModel() as fake, httpx.Client(base_url=fake.base_url, timeout=5) as http:
        fake.enqueue(Reply.text("sync stream", chunk_size=4))
        with http.stream("POST", "/chat/completions", json=chat(stream=True)) as response:
            lines = [line for line in response.iter_lines() if line]
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
        assert content_of(chunks) == "sync stream"
    assert len(fake.requests) == 1


def test_reply_constructors_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="4xx or 5xx"):
        Reply.error(200)
    with pytest.raises(ValueError, match="at least one"):
        Reply.tool_calls()
    with pytest.raises(ValueError, match="text or tool_calls"):
        Reply.stall(1, then=Reply.error(500))
    with pytest.raises(ValueError, match="chunk_size"):
        Reply.text("x", chunk_size=0)


async def test_stopped_server_has_no_base_url() -> None:
    fake = FakeModel()
    with pytest.raises(RuntimeError, match="not running"):
        _ = fake.base_url
    async with fake:
        assert fake.base_url.startswith("http://127.0.0.1:")
        assert fake.base_url.endswith("/v1")
    with pytest.raises(RuntimeError, match="not running"):
        _ = fake.base_url


async def test_record_off_keeps_no_request_and_still_counts(
    model: FakeModel, client: httpx.AsyncClient
) -> None:
    model.enqueue(Reply.text("one"), Reply.text("two"))
    assert (await client.post("/chat/completions", json=chat())).status_code == 200
    model.record = False
    assert (await client.post("/chat/completions", json=chat(stream=True))).status_code == 200
    response = await client.post("/chat/completions", json=chat())
    assert response.json()["error"]["message"] == "fake model: script exhausted (request 3)"
    assert [body["stream"] for body in model.requests] == [False]
    assert len(model.headers) == 1
    model.record = True
    await client.post("/chat/completions", json=chat(stream=True))
    assert [body["stream"] for body in model.requests] == [False, True]
    assert len(model.headers) == 2


async def test_record_false_at_construction() -> None:
    async with (
        FakeModel(record=False) as fake,
        httpx.AsyncClient(base_url=fake.base_url, timeout=5) as http,
    ):
        fake.enqueue(Reply.text("kept nowhere"))
        assert (await http.post("/chat/completions", json=chat())).status_code == 200
        assert fake.requests == [] and fake.headers == []


async def test_recorded_keeps_the_block_s_requests_only_and_restores_record(
    model: FakeModel, client: httpx.AsyncClient
) -> None:
    model.enqueue(*(Reply.text(str(n)) for n in range(5)))
    model.record = False
    await client.post("/chat/completions", json=chat())
    with model.recorded() as bodies:
        await client.post("/chat/completions", json=chat(stream=True))
    assert [body["stream"] for body in bodies] == [True]
    assert model.record is False and model.requests == [] and model.headers == []
    model.record = True
    await client.post("/chat/completions", json=chat())
    yielded: list[list[dict[str, Any]]] = []

    async def a_block_that_fails() -> None:
        with model.recorded() as bodies:
            yielded.append(bodies)
            await client.post("/chat/completions", json=chat(stream=True))
            raise RuntimeError("the block failed")

    with pytest.raises(RuntimeError, match="the block failed"):
        await a_block_that_fails()
    assert [body["stream"] for body in yielded[0]] == [True]
    assert model.record is True
    assert [body["stream"] for body in model.requests] == [False, True]
    assert len(model.headers) == 2
