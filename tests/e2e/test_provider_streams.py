"""A Run against a loopback provider sending real providers' shapes (issue 26, item 1):
Gemini's index-less tool call with the thought signature it needs echoed, an OpenRouter
rate limit inside a 200 stream, Mistral's list content; through a real dev server."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.specs import AgentBuilder
from psych_runtime.workflows import ModelCallFailed, RunStatus
from tests._upstream import Answer, Request, Upstream

from .conftest import Harness

pytestmark = pytest.mark.e2e

SIGNATURE = {"google": {"thought_signature": "Cs0BAdHtim9+e2e/sig=="}}


def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: The order's id.
    """
    return {"order_id": order_id, "status": "delivered"}


def sse(*chunks: dict[str, Any]) -> Answer:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return Answer(200, body, "text/event-stream")


def delta(content: Any = None, finish: str | None = None, **fields: Any) -> dict[str, Any]:
    message = {"content": content, **fields} if content is not None or fields else {}
    return {"choices": [{"index": 0, "delta": message, "finish_reason": finish}]}


async def test_a_run_reads_provider_shapes_and_retries_an_in_stream_rate_limit(
    harness: Harness,
) -> None:
    tool_call = {
        "id": "fc-1",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": '{"order_id": "42"}'},
        "extra_content": SIGNATURE,
    }
    replies = iter(
        [
            sse(delta(role="assistant", tool_calls=[tool_call]), delta(finish="tool_calls")),
            sse(
                delta("", role="assistant"),
                {
                    **delta(finish="error"),
                    "error": {"code": 429, "message": "Rate limit exceeded: e2e-per-minute"},
                },
            ),
            sse(
                delta([{"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]}]),
                delta([{"type": "text", "text": "Order 42 was delivered."}], "stop"),
            ),
        ]
    )

    def respond(_: Request) -> Answer:
        return next(replies)

    spec = (
        AgentBuilder("provider-streams-agent", registry=harness.registry)
        .model("fake-model")
        .tool(lookup_order)
        .build()
    )
    with Upstream(respond) as upstream:
        harness.settings = dataclasses.replace(
            harness.settings,
            endpoints=ModelEndpoints(default=Endpoint(upstream.url + "/v1", "test-key")),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Where is order 42?", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            records = (await harness.client.records(run, scope=harness.scope)).records
        sent = [json.loads(r.body) for r in upstream.requests]

    assert result.status is RunStatus.COMPLETED
    assert result.answer == "Order 42 was delivered."
    (failed,) = [r for r in records if isinstance(r, ModelCallFailed)]
    assert failed.transient and failed.status == 429
    assert "Rate limit exceeded: e2e-per-minute" in failed.message
    assert len(sent) == 3
    for request in sent[1:]:  # the retry sends the signature back too
        assistant, tool = request["messages"][-2:]
        assert assistant["tool_calls"][0]["extra_content"] == SIGNATURE
        assert tool["tool_call_id"] == "fc-1" and "delivered" in tool["content"]


@pytest.mark.parametrize("streamed", [True, False])
async def test_surrogate_escapes_become_text(harness: Harness, streamed: bool) -> None:
    # JSON escapes a character outside the BMP as a surrogate pair ("\ud83d\ude00"). A
    # provider (or a proxy) that cuts its text by UTF-16 units sends the two halves in two
    # chunks, each escaped alone, and may send a half with no other at all. Each half
    # decoded alone is no text: the answer could not be stored, and the Run failed with
    # "UnicodeEncodeError: ... surrogates not allowed".
    arguments = json.dumps({"order_id": "42 \U0001f600"})  # escaped, as a model writes it
    tool_call = {
        "index": 0,
        "id": "call-1",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": arguments},
    }
    if streamed:
        replies = iter(
            [
                sse(delta(role="assistant", tool_calls=[tool_call]), delta(finish="tool_calls")),
                sse(delta("smile \ud83d"), delta("\ude00 and half \ud83d"), delta("", "stop")),
            ]
        )
    else:
        whole = "smile \ud83d\ude00 and half \ud83d"
        replies = iter(
            [
                Answer(
                    200,
                    json.dumps(
                        {
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "tool_calls": [tool_call]},
                                    "finish_reason": "tool_calls",
                                }
                            ]
                        }
                    ),
                    "application/json",
                ),
                Answer(
                    200,
                    json.dumps(
                        {
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": whole},
                                    "finish_reason": "stop",
                                }
                            ]
                        }
                    ),
                    "application/json",
                ),
            ]
        )

    def respond(_: Request) -> Answer:
        return next(replies)

    spec = (
        AgentBuilder("surrogates", registry=harness.registry)
        .model("fake-model")
        .tool(lookup_order)
        .build()
    )
    with Upstream(respond) as upstream:
        harness.settings = dataclasses.replace(
            harness.settings,
            endpoints=ModelEndpoints(
                default=Endpoint(upstream.url + "/v1", "test-key", stream=streamed)
            ),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Where is order 42?", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)

    assert result.status is RunStatus.COMPLETED
    # The halves of a pair join up; a half alone is U+FFFD, the replacement character.
    assert result.answer == "smile \U0001f600 and half \ufffd"
    (call,) = report.tool_calls
    assert call.status == "ok" and "42 \U0001f600" in (call.result or "")


@pytest.mark.parametrize("streamed", [True, False])
async def test_tool_call_arguments_sent_as_an_object_are_read(
    harness: Harness, streamed: bool
) -> None:
    # OpenAI sends a tool call's arguments as JSON text; TGI, and llama.cpp's server for a
    # time (ggml-org/llama.cpp#20198), send the object itself. The answer was "malformed
    # provider response ... Input should be a valid string" and the Run failed.
    tool_call = {
        "index": 0,
        "id": "call-1",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": {"order_id": "42"}},
    }
    first = (
        sse(delta(role="assistant", tool_calls=[tool_call]), delta(finish="tool_calls"))
        if streamed
        else Answer(
            200,
            json.dumps(
                {
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "tool_calls": [tool_call]},
                            "finish_reason": "tool_calls",
                        }
                    ]
                }
            ),
            "application/json",
        )
    )
    replies = iter([first, sse(delta("Delivered.", "stop"))])

    def respond(_: Request) -> Answer:
        return next(replies)

    spec = (
        AgentBuilder("object-arguments", registry=harness.registry)
        .model("fake-model")
        .tool(lookup_order)
        .build()
    )
    with Upstream(respond) as upstream:
        harness.settings = dataclasses.replace(
            harness.settings,
            endpoints=ModelEndpoints(default=Endpoint(upstream.url + "/v1", "test-key")),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Where is order 42?", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
        sent = [json.loads(r.body) for r in upstream.requests]

    assert result.status is RunStatus.COMPLETED and result.answer == "Delivered."
    (call,) = report.tool_calls
    assert call.status == "ok" and "delivered" in (call.result or "")
    # Sent back as OpenAI's wire form says: the arguments as JSON text.
    assistant = sent[1]["messages"][-2]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"order_id": "42"}
