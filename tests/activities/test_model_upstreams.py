"""The model-call activity against real loopback upstreams that misbehave: a 401 quoting the
key, a gateway answering whole JSON (or HTML) to a streaming request, an oversized answer.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from typing import Any

import httpx
import pytest
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import Conversations, LocalBlobStore
from psych_runtime.activities.contract import (
    MODEL_CALL_FAILED,
    ChatMessage,
    ModelCallInput,
    ModelFailure,
    UnusedSummary,
    Usage,
)
from psych_runtime.activities.model import Endpoint, ModelActivities, ModelEndpoints
from psych_runtime.activities.model._failures import MAX_RESULT_BYTES
from psych_runtime.specs import ModelRef, Scope, SpecError
from tests._upstream import Answer, Request, Upstream

MODEL = "gw-model"
KEY = "sk-live-0123456789abcdef"


def completion(text: str, **extra: Any) -> str:
    """A whole (non-streamed) chat completion."""
    return json.dumps(
        {
            "id": "c1",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
            **extra,
        }
    )


def call(**fields: Any) -> ModelCallInput:
    values: dict[str, Any] = {
        "run_id": "run-1",
        "turn": 1,
        "model": MODEL,
        "params": ModelRef(model=MODEL),
        "new_messages": (ChatMessage(role="user", content="Hi"),),
        "scope": Scope(tenant="acme"),
    }
    values.update(fields)
    return ModelCallInput(**values)


def activities(
    upstream: Upstream, blobs: LocalBlobStore, http: httpx.AsyncClient, **endpoint: Any
) -> ModelActivities:
    return ModelActivities(
        endpoints=ModelEndpoints(default=Endpoint(upstream.url + "/v1", KEY, **endpoint)),
        blobs=blobs,
        http=http,
    )


async def failure(
    acts: ModelActivities, input: ModelCallInput
) -> tuple[ApplicationError, ModelFailure]:
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(acts.complete, input)
    error = caught.value
    assert error.type == MODEL_CALL_FAILED
    details = error.details[0]  # then, when the model answered first, what it billed
    return error, ModelFailure.model_validate(details)


def chain_text(error: BaseException) -> str:
    """Every message of the cause chain, as Temporal would serialise it."""
    texts = []
    link: BaseException | None = error
    while link is not None:
        texts.append(f"{type(link).__name__}: {link}")
        link = link.__cause__ or link.__context__
    return "\n".join(texts)


# --- secrets ------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_a_401_quoting_the_key_is_redacted_from_failure_causes_and_log(
    blobs: LocalBlobStore,
    http: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
    stream: bool,
) -> None:
    def respond(request: Request) -> Answer:
        sent = request.headers["authorization"]
        key = sent.removeprefix("Bearer ")
        message = (
            f"Incorrect API key provided: {key}. You sent '{sent}' "
            f"(basic: {base64.b64encode(key.encode()).decode()})"
        )
        return Answer(401, json.dumps({"error": {"message": message}}))

    caplog.set_level(logging.DEBUG)
    with Upstream(respond) as upstream:
        error, parsed = await failure(activities(upstream, blobs, http), call(stream=stream))

    assert parsed.status == 401 and not parsed.transient
    assert "Incorrect API key provided: [REDACTED:model-api-key]" in parsed.message
    assert "Bearer [REDACTED:model-api-key]" in parsed.message
    b64 = base64.b64encode(KEY.encode()).decode()
    logged = "\n".join(
        record.getMessage()
        + (logging.Formatter().formatException(record.exc_info) if record.exc_info else "")
        for record in caplog.records
    )
    for text in (parsed.message, str(error), chain_text(error), logged):
        assert KEY not in text
        assert b64 not in text
    assert "[REDACTED:model-api-key]" in logged


async def test_a_key_echoed_inside_an_answer_is_redacted(
    blobs: LocalBlobStore, http: httpx.AsyncClient
) -> None:
    with Upstream(lambda _: Answer(200, completion(f"my key is {KEY}"))) as upstream:
        result = await ActivityEnvironment().run(
            activities(upstream, blobs, http).complete, call(stream=False)
        )

    assert result.text == "my key is [REDACTED:model-api-key]"
    stored = b"".join(path.read_bytes() for path in blobs.root.rglob("*") if path.is_file())
    assert KEY.encode() not in stored


# --- what came back -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_a_whole_json_completion_is_accepted_whether_streaming_or_not(
    blobs: LocalBlobStore, http: httpx.AsyncClient, stream: bool
) -> None:
    with Upstream(lambda _: Answer(200, completion("whole answer"))) as upstream:
        result = await ActivityEnvironment().run(
            activities(upstream, blobs, http).complete, call(stream=stream)
        )
        sent = json.loads(upstream.requests[0].body)

    assert sent["stream"] is stream
    assert result.text == "whole answer"
    assert result.finish_reason == "stop"
    assert result.usage.input_tokens == 3 and result.usage.output_tokens == 2
    stored = await Conversations(blobs).messages(result.context_ref)
    assert stored[-1].content == "whole answer"


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (
            Answer(200, "<html><body><h1>Sign in to the proxy</h1></body></html>", "text/html"),
            "text/html, 55 bytes: '<html><body><h1>Sign in to the proxy</h1></body></html>'",
        ),
        (
            Answer(200, json.dumps({"status": "queued", "job": 7})),
            "JSON that is not a chat completion (no choices list): application/json, 30 bytes: "
            '\'{"status": "queued", "job": 7}\'',
        ),
        (
            Answer(200, json.dumps({"choices": []})),
            "no choices[0].message: application/json",
        ),
    ],
)
async def test_a_body_that_is_not_a_completion_is_not_transient_and_says_what_came(
    blobs: LocalBlobStore, http: httpx.AsyncClient, answer: Answer, says: str, stream: bool
) -> None:
    with Upstream(lambda _: answer) as upstream:
        _, parsed = await failure(activities(upstream, blobs, http), call(stream=stream))

    assert not parsed.transient
    assert parsed.message.startswith("model gw-model: malformed provider response: ")
    assert says in parsed.message
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("stream", [True, False])
async def test_an_answer_too_large_for_temporal_fails_at_once_naming_its_size(
    blobs: LocalBlobStore, http: httpx.AsyncClient, stream: bool
) -> None:
    text = "x" * (MAX_RESULT_BYTES + 1000)
    with Upstream(lambda _: Answer(200, completion(text))) as upstream:
        error, parsed = await failure(activities(upstream, blobs, http), call(stream=stream))

    assert not parsed.transient
    (_, paid) = error.details  # the answer came, and was billed: the Run's totals count it
    assert UnusedSummary.model_validate(paid).usage == Usage(input_tokens=3, output_tokens=2)
    assert "response too large: " in parsed.message
    assert f"more than the {MAX_RESULT_BYTES} bytes a model call may return" in parsed.message
    found = re.search(r"response too large: (\d+) bytes of result,", parsed.message)
    assert found is not None, parsed.message
    assert int(found.group(1)) > MAX_RESULT_BYTES + 1000  # the text and its envelope


async def test_an_endless_stream_is_cut_off_once_past_the_limit(
    blobs: LocalBlobStore, http: httpx.AsyncClient
) -> None:
    chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": "y" * 100_000}}]})
    body = "".join(f"data: {chunk}\n\n" for _ in range(40))  # 4 MB of text, never finished
    with Upstream(lambda _: Answer(200, body, "text/event-stream")) as upstream:
        _, parsed = await failure(activities(upstream, blobs, http), call(stream=True))

    assert not parsed.transient
    assert (
        f"response too large: over {MAX_RESULT_BYTES + 100_000 - MAX_RESULT_BYTES % 100_000}"
        in parsed.message
    )


# --- streaming off per endpoint -----------------------------------------------------------


async def test_an_endpoint_with_streaming_off_never_asks_to_stream(
    blobs: LocalBlobStore, http: httpx.AsyncClient
) -> None:
    with Upstream(lambda _: Answer(200, completion("unstreamed"))) as upstream:
        result = await ActivityEnvironment().run(
            activities(upstream, blobs, http, stream=False).complete, call(stream=True)
        )
        sent = json.loads(upstream.requests[0].body)

    assert result.text == "unstreamed"
    assert sent["stream"] is False
    assert "stream_options" not in sent


@pytest.mark.parametrize(
    ("value", "stream"), [("", True), ("1", True), ("0", False), ("false", False), ("off", False)]
)
def test_openai_stream_variable_turns_streaming_off(value: str, stream: bool) -> None:
    endpoints = ModelEndpoints.from_env({"OPENAI_STREAM": value})
    assert endpoints.for_model("m").stream is stream


def test_openai_stream_variable_refuses_what_is_neither_yes_nor_no() -> None:
    with pytest.raises(SpecError, match="OPENAI_STREAM='maybe'"):
        ModelEndpoints.from_env({"OPENAI_STREAM": "maybe"})


# --- expected failures are one log line ---------------------------------------------------


async def test_an_expected_failure_is_benign_and_logs_one_line_without_traceback(
    blobs: LocalBlobStore, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with Upstream(
        lambda _: Answer(500, json.dumps({"error": {"message": "upstream down"}}))
    ) as upstream:
        error, parsed = await failure(activities(upstream, blobs, http), call())

    assert parsed.transient
    assert error.category is ApplicationErrorCategory.BENIGN
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert (
        warnings[0]
        .getMessage()
        .startswith(
            "model call failed (transient): model gw-model: HTTP 500 Internal Server Error: "
            "upstream down"
        )
    )
    assert warnings[0].exc_info is None
