"""The model-call activity, run in an activity context against the loopback fake model."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import Conversations, LocalBlobStore
from psych_runtime.activities.contract import (
    MODEL_CALL_FAILED,
    ChatMessage,
    ModelCallInput,
    ModelCallResult,
    ModelFailure,
    ToolCallRequest,
    ToolDefinition,
    Usage,
    blob_ref,
)
from psych_runtime.activities.model import (
    Endpoint,
    ModelActivities,
    ModelEndpoints,
    ModelPrice,
    TablePricing,
    classify,
)
from psych_runtime.activities.model._failures import ProviderResponseError, StreamIdle
from psych_runtime.specs import ModelRef, NotFound
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.testing import Usage as FakeUsage
from tests.activities._calls import HELLO, MODEL, call

KEY = "sk-test-key"
WEATHER = ToolDefinition(
    name="get_weather",
    description="Weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
CLOCK = ToolDefinition(name="clock", description="The time.", parameters={"type": "object"})


@pytest.fixture
async def fake() -> AsyncIterator[FakeModel]:
    async with FakeModel(models=(MODEL,)) as model:
        yield model


@pytest.fixture
def acts(fake: FakeModel, blobs: LocalBlobStore, http: httpx.AsyncClient) -> ModelActivities:
    return ModelActivities(
        endpoints=ModelEndpoints(default=Endpoint(fake.base_url, KEY)), blobs=blobs, http=http
    )


@pytest.fixture
def env() -> ActivityEnvironment:
    return ActivityEnvironment()


async def run(env: ActivityEnvironment, acts: ModelActivities, input: ModelCallInput) -> Any:
    return await env.run(acts.complete, input)


async def failure(
    env: ActivityEnvironment, acts: ModelActivities, input: ModelCallInput
) -> tuple[ApplicationError, ModelFailure]:
    with pytest.raises(ApplicationError) as caught:
        await run(env, acts, input)
    error = caught.value
    assert error.type == MODEL_CALL_FAILED
    assert error.non_retryable  # the workflow owns retries
    assert error.__cause__ is not None
    (details,) = error.details
    parsed = ModelFailure.model_validate(details)
    assert str(error) == f"{MODEL_CALL_FAILED}: {parsed.message}"
    return error, parsed


# --- replies ------------------------------------------------------------------------------


async def test_stream_heartbeats_on_a_timer_through_a_silent_gap(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment
) -> None:
    # A reasoning model may be silent for longer than the heartbeat timeout before its
    # first token: the activity must keep beating through the gap, not only per chunk.
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=0.3))
    beats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    fake.enqueue(Reply.stall(0.6, after_chunks=0, then=Reply.text("late")))

    result = await run(env, acts, call())

    assert result.text == "late"
    assert len(beats) >= 4  # every 0.1 s through a 0.6 s silence


async def test_a_call_shorter_than_a_third_of_its_heartbeat_timeout_sends_no_beat(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment
) -> None:
    # The server counts the timeout from the attempt's start: a beat at once would be a
    # round trip per call for nothing (without live deltas, whose address it would carry).
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=3))
    beats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    fake.enqueue(Reply.text("quick"))

    result = await run(env, acts, call())

    assert result.text == "quick"
    assert beats == []


async def test_streamed_text(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment
) -> None:
    fake.enqueue(Reply.text("The quick brown fox jumps.", chunk_size=4))

    result = await run(env, acts, call(system_prompt="Be brief."))

    assert isinstance(result, ModelCallResult)
    assert result.text == "The quick brown fox jumps."
    assert result.tool_calls == ()
    assert result.finish_reason == "stop"
    assert result.model == MODEL
    assert result.latency.first_token_ms is not None
    assert 0 < result.latency.first_token_ms <= result.latency.duration_ms
    (body,) = fake.requests
    assert body["model"] == MODEL
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello!"},
    ]
    assert "tools" not in body
    assert not {"temperature", "top_p", "max_completion_tokens", "reasoning_effort"} & set(body)


async def test_unstreamed_text(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment
) -> None:
    fake.enqueue(Reply.text("Plain answer."))

    result = await run(env, acts, call(stream=False))

    assert result.text == "Plain answer."
    assert result.finish_reason == "stop"
    assert result.latency.first_token_ms is None
    assert result.latency.duration_ms > 0
    (body,) = fake.requests
    assert body["stream"] is False
    assert "stream_options" not in body
    assert body["messages"] == [{"role": "user", "content": "Hello!"}]


async def test_sampling_params_sent_only_when_set(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment
) -> None:
    fake.enqueue(Reply.text("ok"))
    params = ModelRef(
        model="primary", temperature=0.2, top_p=0.9, max_output_tokens=64, reasoning_effort="low"
    )

    await run(env, acts, call(params=params))

    (body,) = fake.requests
    assert body["model"] == MODEL  # the attempt's model, not params.model
    assert body["temperature"] == 0.2
    assert body["top_p"] == 0.9
    assert body["max_completion_tokens"] == 64
    assert body["reasoning_effort"] == "low"


@pytest.mark.parametrize("stream", [True, False])
async def test_tool_calls_reassembled(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment, stream: bool
) -> None:
    fake.enqueue(
        Reply.tool_calls(
            ToolCall("get_weather", {"city": "Paris", "unit": "celsius"}, id="call_a"),
            ToolCall("clock", '{"tz": "Europe/Par', id="call_b"),  # malformed: kept raw
            content="Checking.",
        )
    )

    result = await run(env, acts, call(stream=stream))

    assert result.finish_reason == "tool_calls"
    assert result.text == "Checking."
    assert result.tool_calls == (
        ToolCallRequest(
            id="call_a",
            name="get_weather",
            arguments=json.dumps({"city": "Paris", "unit": "celsius"}),
        ),
        ToolCallRequest(id="call_b", name="clock", arguments='{"tz": "Europe/Par'),
    )
    stored = await acts.conversations.messages(result.context_ref)
    assert stored[-1] == ChatMessage(
        role="assistant", content="Checking.", tool_calls=result.tool_calls
    )


# --- conversation by reference ------------------------------------------------------------


async def test_conversation_chain(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment, blobs: LocalBlobStore
) -> None:
    fake.enqueue(
        Reply.tool_calls(ToolCall("get_weather", {"city": "Paris"}, id="call_1")),
        Reply.text("It is sunny in Paris."),
    )
    first = await run(env, acts, call(system_prompt="You are helpful."))
    assert first.system_ref == blob_ref(b"You are helpful.")

    # The tool activity stores its result message; the workflow adds a note after it.
    tool_message = ChatMessage(role="tool", content='{"sky": "clear"}', tool_call_id="call_1")
    tool_ref = await Conversations(blobs).put_message(tool_message)
    note = ChatMessage(role="user", content="Answer in one sentence.")
    second = await run(
        env,
        acts,
        call(
            turn=2,
            system_ref=first.system_ref,
            context_ref=first.context_ref,
            new_messages=(tool_ref, note),
        ),
    )

    assert second.text == "It is sunny in Paris."
    assert second.system_ref == first.system_ref
    assert fake.requests[1]["messages"] == [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hello!"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "content": '{"sky": "clear"}', "tool_call_id": "call_1"},
        {"role": "user", "content": "Answer in one sentence."},
    ]
    # A fresh reader (no cache) resolves the head to the whole conversation.
    assert await Conversations(blobs).messages(second.context_ref) == (
        HELLO,
        ChatMessage(role="assistant", tool_calls=first.tool_calls),
        tool_message,
        note,
        ChatMessage(role="assistant", content="It is sunny in Paris."),
    )
    # One node per call: the second node's parent is the first call's head.
    node = json.loads(await blobs.get(second.context_ref))
    assert node["parent"] == first.context_ref
    assert len(node["messages"]) == 3


async def test_system_ref_reused_or_absent(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment, blobs: LocalBlobStore
) -> None:
    system_ref = await blobs.put(b"Stored prompt.")
    fake.enqueue(Reply.text("one"), Reply.text("two"))

    with_ref = await run(env, acts, call(system_ref=system_ref))
    without = await run(env, acts, call())

    assert with_ref.system_ref == system_ref
    assert fake.requests[0]["messages"][0] == {"role": "system", "content": "Stored prompt."}
    assert without.system_ref is None
    assert [m["role"] for m in fake.requests[1]["messages"]] == ["user"]


async def test_excluded_tools_not_offered(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment, blobs: LocalBlobStore
) -> None:
    tools = [WEATHER.model_dump(mode="json"), CLOCK.model_dump(mode="json")]
    tools_ref = await blobs.put(json.dumps(tools).encode())
    fake.enqueue(Reply.text("a"), Reply.text("b"))

    await run(env, acts, call(tools_ref=tools_ref))
    await run(env, acts, call(tools_ref=tools_ref, exclude_tools=("clock",)))

    assert [t["function"]["name"] for t in fake.requests[0]["tools"]] == ["get_weather", "clock"]
    assert fake.requests[1]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather in a city.",
                "parameters": WEATHER.parameters,
            },
        }
    ]


# --- usage, cost, latency -----------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_usage_split(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment, stream: bool
) -> None:
    usage = FakeUsage(input_tokens=1000, output_tokens=300, cache_read_tokens=400)
    fake.enqueue(Reply.text("hi", usage=dataclasses.replace(usage, reasoning_tokens=120)))

    result = await run(env, acts, call(stream=stream))

    assert result.usage == Usage(
        input_tokens=600, output_tokens=300, cache_read_tokens=400, reasoning_tokens=120
    )
    assert result.cost is None  # no pricing configured: unknown, never 0


async def test_cost_from_table_pricing(
    fake: FakeModel, blobs: LocalBlobStore, http: httpx.AsyncClient, env: ActivityEnvironment
) -> None:
    pricing = TablePricing({MODEL: ModelPrice(input=2.0, output=8.0, cache_read=0.5)})
    acts = ModelActivities(
        endpoints=ModelEndpoints(default=Endpoint(fake.base_url)),
        blobs=blobs,
        pricing=pricing,
        http=http,
    )
    usage = FakeUsage(input_tokens=1_000_000, output_tokens=500_000, cache_read_tokens=200_000)
    fake.enqueue(Reply.text("priced", usage=usage))

    result = await run(env, acts, call())

    assert result.cost == pytest.approx(0.8 * 2.0 + 0.5 * 8.0 + 0.2 * 0.5)


def test_table_pricing_unknown_is_none() -> None:
    pricing = TablePricing({MODEL: ModelPrice(input=1.0, output=2.0)})
    assert pricing.price("other-model", Usage(input_tokens=10)) is None
    assert pricing.price(MODEL, Usage(input_tokens=10, output_tokens=5)) == pytest.approx(2e-5)
    # Cache reads with no cache price are unknown, not free.
    assert pricing.price(MODEL, Usage(input_tokens=10, cache_read_tokens=5)) is None
    assert pricing.price(MODEL, Usage()) == 0.0  # known price, no tokens


@pytest.mark.parametrize("answer", [math.nan, math.inf, -0.5, True, "0.1"])
async def test_a_pricing_answer_that_is_no_cost_is_unknown(
    fake: FakeModel,
    blobs: LocalBlobStore,
    http: httpx.AsyncClient,
    env: ActivityEnvironment,
    answer: Any,
) -> None:
    class Odd:
        def price(self, model: str, usage: Usage) -> float | None:
            return answer  # type: ignore[no-any-return]

    acts = ModelActivities(
        endpoints=ModelEndpoints(default=Endpoint(fake.base_url)),
        blobs=blobs,
        pricing=Odd(),
        http=http,
    )
    fake.enqueue(Reply.text("priced oddly"))
    result = await run(env, acts, call())
    assert result.text == "priced oddly" and result.cost is None


async def test_queue_wait_from_activity_info(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment
) -> None:
    scheduled = datetime(2025, 1, 1, tzinfo=UTC)
    env.info = dataclasses.replace(
        env.info,
        current_attempt_scheduled_time=scheduled,
        started_time=scheduled + timedelta(milliseconds=1500),
    )
    fake.enqueue(Reply.text("ok"))

    result = await run(env, acts, call())

    assert result.latency.queue_wait_ms == pytest.approx(1500)


async def test_unstreamed_call_heartbeats_while_waiting(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment
) -> None:
    beats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=0.3))
    fake.enqueue(Reply.stall(0.5, then=Reply.text("slow")))

    result = await run(env, acts, call(stream=False))

    assert result.text == "slow"
    assert len(beats) >= 3  # every 0.1 s while the server was silent


# --- failures -----------------------------------------------------------------------------


async def test_429_with_retry_after_is_transient(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment
) -> None:
    fake.enqueue(Reply.error(429, retry_after=2.5, message="Rate limit reached"))

    _, parsed = await failure(env, acts, call())

    assert parsed == ModelFailure(
        transient=True,
        status=429,
        retry_after=2.5,
        message="model fake-model: HTTP 429 Too Many Requests: Rate limit reached",
    )


@pytest.mark.parametrize(
    ("status", "transient"), [(500, True), (503, True), (408, True), (400, False), (401, False)]
)
@pytest.mark.parametrize("stream", [True, False])
async def test_http_errors_classified(
    fake: FakeModel,
    acts: ModelActivities,
    env: ActivityEnvironment,
    status: int,
    transient: bool,
    stream: bool,
) -> None:
    fake.enqueue(Reply.error(status, message="boom"))

    _, parsed = await failure(env, acts, call(stream=stream))

    assert parsed.transient is transient
    assert parsed.status == status
    assert parsed.retry_after is None
    assert parsed.message.startswith(f"model fake-model: HTTP {status} ")
    assert parsed.message.endswith(": boom")


async def test_model_unknown_to_provider_is_not_transient(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment
) -> None:
    _, parsed = await failure(env, acts, call(model="gpt-nope"))

    assert parsed.status == 404
    assert not parsed.transient
    assert "gpt-nope" in parsed.message


async def test_stall_longer_than_idle_limit_is_transient(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment
) -> None:
    fake.enqueue(Reply.stall(5.0, after_chunks=1))

    error, parsed = await failure(env, acts, call(stream_idle_seconds=0.2))

    assert parsed.transient
    assert parsed.status is None
    assert parsed.message == "model fake-model: stream idle for more than 0.2 s"
    assert isinstance(error.__cause__, StreamIdle)


async def test_unstreamed_silence_longer_than_idle_limit_is_transient(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment
) -> None:
    # An endpoint that does not stream is bounded by the same limit: a read timeout is a
    # gap between received bytes (before, only the activity's 10 minutes bounded it).
    fake.enqueue(Reply.stall(5.0, then=Reply.text("too late")))

    error, parsed = await failure(env, acts, call(stream=False, stream_idle_seconds=0.2))

    assert parsed.transient
    assert parsed.status is None
    assert parsed.message == (
        "model fake-model: response idle for more than 0.2 s (not streamed: "
        "stream_idle_seconds bounds the wait for the answer's bytes)"
    )
    assert isinstance(error.__cause__, StreamIdle)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("idle", [0.0, 2.0])
async def test_stall_within_idle_limit_finishes(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment, idle: float, stream: bool
) -> None:
    fake.enqueue(Reply.stall(0.3, then=Reply.text("late but whole")))

    result = await run(env, acts, call(stream=stream, stream_idle_seconds=idle))

    assert result.text == "late but whole"


@pytest.mark.parametrize("stream", [True, False])
async def test_connection_dropped_is_transient(
    fake: FakeModel, acts: ModelActivities, env: ActivityEnvironment, stream: bool
) -> None:
    fake.enqueue(Reply.abort(after_chunks=2))

    error, parsed = await failure(env, acts, call(stream=stream))

    assert parsed.transient
    assert parsed.status is None
    assert isinstance(error.__cause__, httpx.RemoteProtocolError)
    assert "connection dropped mid-response" in parsed.message


async def test_unreachable_endpoint_is_transient(
    blobs: LocalBlobStore, http: httpx.AsyncClient, env: ActivityEnvironment
) -> None:
    async with FakeModel() as gone:
        base_url = gone.base_url  # a loopback port nobody listens on once it stops
    acts = ModelActivities(
        endpoints=ModelEndpoints(default=Endpoint(base_url)), blobs=blobs, http=http
    )

    _, parsed = await failure(env, acts, call())

    assert parsed.transient
    assert parsed.message.startswith("model fake-model: ConnectError")


async def test_malformed_provider_response_is_not_transient(
    blobs: LocalBlobStore, env: ActivityEnvironment
) -> None:
    # The fake model only speaks valid chat completions, so this one reply is mocked.
    transport = httpx.MockTransport(lambda _: httpx.Response(200, json={"choices": "nope"}))
    async with httpx.AsyncClient(transport=transport) as client:
        acts = ModelActivities(
            endpoints=ModelEndpoints(default=Endpoint("http://provider.invalid/v1")),
            blobs=blobs,
            http=client,
        )
        error, parsed = await failure(env, acts, call(stream=False))

    assert not parsed.transient
    assert parsed.message.startswith("model fake-model: malformed provider response:")
    assert isinstance(error.__cause__, ProviderResponseError)


# --- endpoints and credentials ------------------------------------------------------------


async def test_credentials_per_endpoint(
    fake: FakeModel, blobs: LocalBlobStore, http: httpx.AsyncClient, env: ActivityEnvironment
) -> None:
    endpoints = ModelEndpoints(
        default=Endpoint(fake.base_url + "/", KEY),  # a trailing slash is tolerated
        routes={"keyless": Endpoint(fake.base_url)},
    )
    acts = ModelActivities(endpoints=endpoints, blobs=blobs, http=http)
    fake.models = (MODEL, "keyless")
    fake.enqueue(Reply.text("a"), Reply.text("b"))

    await run(env, acts, call())
    await run(env, acts, call(model="keyless"))

    assert fake.headers[0]["authorization"] == f"Bearer {KEY}"
    assert "authorization" not in fake.headers[1]
    assert KEY not in repr(endpoints)


async def test_model_without_endpoint_fails_clearly(
    fake: FakeModel, blobs: LocalBlobStore, http: httpx.AsyncClient, env: ActivityEnvironment
) -> None:
    endpoints = ModelEndpoints(routes={MODEL: Endpoint(fake.base_url, KEY)})
    acts = ModelActivities(endpoints=endpoints, blobs=blobs, http=http)

    error, parsed = await failure(env, acts, call(model="gpt-4o"))

    assert not parsed.transient
    assert parsed.message.startswith("model gpt-4o: no model endpoint configured for 'gpt-4o'")
    assert isinstance(error.__cause__, NotFound)
    assert fake.requests == []


def test_endpoint_resolution() -> None:
    default, special = Endpoint("https://a.example/v1"), Endpoint("https://b.example/v1", "k")
    endpoints = ModelEndpoints(default=default, routes={"special": special})
    assert endpoints.for_model("special") is special
    assert endpoints.for_model("anything") is default
    with pytest.raises(NotFound, match="'x'"):
        ModelEndpoints().for_model("x")


def test_endpoints_from_env() -> None:
    assert ModelEndpoints.from_env({}).for_model("m") == Endpoint("https://api.openai.com/v1")
    configured = ModelEndpoints.from_env(
        {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-env"}
    )
    assert configured.for_model("m") == Endpoint("http://127.0.0.1:9/v1", "sk-env")


async def test_owned_client_is_closed(fake: FakeModel, blobs: LocalBlobStore) -> None:
    endpoints = ModelEndpoints(default=Endpoint(fake.base_url))
    fake.enqueue(Reply.text("own client"))
    async with ModelActivities(endpoints=endpoints, blobs=blobs) as acts:
        result = await ActivityEnvironment().run(acts.complete, call())
    assert result.text == "own client"
    assert acts.http.is_closed


# --- classify -----------------------------------------------------------------------------


def response(status: int, *, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
    return httpx.Response(
        status, headers=headers, request=httpx.Request("POST", "http://x/v1"), **kw
    )


@pytest.mark.parametrize(
    ("status", "transient"),
    [
        (500, True),
        (502, True),
        (503, True),
        (504, True),
        (429, True),
        (408, True),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (422, False),
    ],
)
def test_classify_status(status: int, transient: bool) -> None:
    failure = classify(response(status, json={"error": {"message": "why"}}), model="m")
    assert failure.transient is transient
    assert failure.status == status
    assert failure.message == f"model m: HTTP {status} {httpx.codes.get_reason_phrase(status)}: why"


def test_classify_status_error_and_plain_body() -> None:
    bad_gateway = response(502, text="<html>Bad   gateway</html>")
    err = httpx.HTTPStatusError("x", request=bad_gateway.request, response=bad_gateway)
    failure = classify(err, model="m")
    assert failure.transient
    assert failure.message == "model m: HTTP 502 Bad Gateway: <html>Bad gateway</html>"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, 0.0),
        ({}, None),
    ],
)
def test_classify_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert classify(response(429, headers=headers), model="m").retry_after == expected


def test_classify_retry_after_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    retry_after = classify(response(503, headers={"retry-after": when}), model="m").retry_after
    assert retry_after is not None
    assert 100 < retry_after <= 120
    past = format_datetime(datetime(2000, 1, 1, tzinfo=UTC), usegmt=True)
    assert classify(response(503, headers={"retry-after": past}), model="m").retry_after == 0.0


@pytest.mark.parametrize(
    "error",
    [
        httpx.ConnectError("refused"),
        httpx.ConnectTimeout("slow connect"),
        httpx.ReadTimeout("slow read"),
        httpx.WriteTimeout("slow write"),
        httpx.PoolTimeout("no connection free"),
        httpx.ReadError("reset"),
        httpx.RemoteProtocolError("peer closed connection"),
        StreamIdle(30),
    ],
)
def test_classify_transient_exceptions(error: Exception) -> None:
    failure = classify(error, model="m")
    assert failure.transient
    assert failure.status is None
    assert failure.message.startswith("model m: ")


@pytest.mark.parametrize(
    "error",
    [
        ProviderResponseError("no choices[0].message"),
        NotFound("no blob"),
        httpx.UnsupportedProtocol("ftp://"),
        ValueError("bug"),
    ],
)
def test_classify_non_transient_exceptions(error: Exception) -> None:
    failure = classify(error, model="m")
    assert not failure.transient
    assert str(error) in failure.message


def test_classify_stream_idle_message() -> None:
    assert classify(StreamIdle(30), model="gpt-4o").message == (
        "model gpt-4o: stream idle for more than 30 s"
    )
