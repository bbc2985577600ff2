"""The request body from pieces kept between calls (issue 27): the same bytes ``httpx``'s
``json=`` writes, the same bytes on a worker that made the Run's last call as on one that
did not, and only what is new to a conversation encoded on its next call."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import (
    ChatMessage,
    ModelCallInput,
    ModelCallResult,
    ToolCallRequest,
    ToolDefinition,
)
from psych_runtime.activities.model import Endpoint, ModelActivities, ModelEndpoints
from psych_runtime.activities.model import _request as request_module
from psych_runtime.activities.model._request import RequestBodies, encode_tools
from psych_runtime.specs import ModelRef
from tests._upstream import Answer, Request, Upstream
from tests.activities.test_model_upstreams import MODEL, call

KEY = "sk-test-request"
WEATHER = ToolDefinition(
    name="get_weather",
    description="Weather in a city, météo.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
ASKED = ChatMessage(role="user", content="Où est le soleil? \u2028 ok")
CALLED = ChatMessage(
    role="assistant",
    content="",
    tool_calls=(
        ToolCallRequest(
            id="c1",
            name="get_weather",
            arguments='{"city": "Paris"}',
            provider_fields={"extra_content": {"z": 1, "a": [True, None]}},
        ),
    ),
    provider_fields={"reasoning": "thought"},
)
ANSWERED = ChatMessage(role="tool", content='{"sky": "clear"}', tool_call_id="c1")


def as_httpx_sends(body: dict[str, Any]) -> bytes:
    """What ``httpx`` sends for ``json=body``."""
    return httpx.Request("POST", "http://127.0.0.1/", json=body).read()


def wire(message: ChatMessage) -> dict[str, Any]:
    """The chat-completions form of the three messages above, written out by hand."""
    if message is ASKED:
        return {"role": "user", "content": ASKED.content}
    if message is ANSWERED:
        return {"role": "tool", "content": ANSWERED.content, "tool_call_id": "c1"}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                "extra_content": {"z": 1, "a": [True, None]},
            }
        ],
        "reasoning": "thought",
    }


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("system", [None, "Be brief."])
@pytest.mark.parametrize("tools", [(), (WEATHER,)])
@pytest.mark.parametrize("split", [0, 1, 3])
@pytest.mark.parametrize(
    ("params", "sampling"),
    [
        (ModelRef(model=MODEL), {}),
        (
            ModelRef(model=MODEL, temperature=0.25, top_p=1.0, max_output_tokens=7),
            {"temperature": 0.25, "top_p": 1.0, "max_completion_tokens": 7},
        ),
        (ModelRef(model=MODEL, reasoning_effort="low"), {"reasoning_effort": "low"}),
    ],
)
def test_the_body_is_what_httpx_writes_for_the_same_dict(
    stream: bool,
    system: str | None,
    tools: tuple[ToolDefinition, ...],
    split: int,
    params: ModelRef,
    sampling: dict[str, Any],
) -> None:
    conversation = (ASKED, CALLED, ANSWERED)
    input = call(params=params)
    written = RequestBodies().write(
        input,
        system,
        "sha256:" + "0" * 64 if split else None,
        conversation[:split],
        conversation[split:],
        encode_tools(tools),
        stream=stream,
    )
    messages = [wire(m) for m in conversation]
    if system:
        messages.insert(0, {"role": "system", "content": system})
    expected: dict[str, Any] = {"model": MODEL, "messages": messages, "stream": stream}
    if tools:
        expected["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": WEATHER.name,
                    "description": WEATHER.description,
                    "parameters": WEATHER.parameters,
                },
            }
        ]
    expected.update(sampling)
    if stream:
        expected["stream_options"] = {"include_usage": True}
    assert written.body == as_httpx_sends(expected)


def answers() -> list[Answer]:
    """A tool call carrying provider fields (keys not sorted), then two text answers."""
    tool_call = {
        "id": "g1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        "extra_content": {"z": 1, "a": {"y": 2, "b": 3}},
    }
    first = {
        "id": "c1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "", "tool_calls": [tool_call]},
                "finish_reason": "tool_calls",
            }
        ],
    }
    texts = [
        {
            "id": f"c{n}",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"answer {n} é"},
                    "finish_reason": "stop",
                }
            ],
        }
        for n in (2, 3)
    ]
    return [Answer(200, json.dumps(body)) for body in (first, *texts)]


def turns(previous: ModelCallResult | None, turn: int) -> ModelCallInput:
    """Turn ``turn``'s call after ``previous``'s answer (None: the first turn)."""
    if previous is None:
        return call(stream=False, system_prompt="Be brief.", new_messages=(ASKED,))
    return call(
        stream=False,
        turn=turn,
        system_ref=previous.system_ref,
        context_ref=previous.context_ref,
        new_messages=(ChatMessage(role="tool", content=f"result {turn}", tool_call_id="g1"),),
    )


def worker(upstream: Upstream, blobs: LocalBlobStore, http: httpx.AsyncClient) -> ModelActivities:
    """A model activity of its own (a worker) on the shared store, calling ``upstream``."""
    return ModelActivities(
        endpoints=ModelEndpoints(default=Endpoint(upstream.url + "/v1", KEY)),
        blobs=blobs,
        http=http,
    )


async def test_a_warm_worker_sends_the_bytes_a_cold_one_sends(
    blobs: LocalBlobStore, http: httpx.AsyncClient
) -> None:
    scripted = answers()
    replies = iter(scripted * 2)
    with Upstream(lambda _: next(replies)) as upstream:
        warm = worker(upstream, blobs, http)
        env = ActivityEnvironment()
        previous: ModelCallResult | None = None
        inputs: list[ModelCallInput] = []
        for turn in (1, 2, 3):
            inputs.append(turns(previous, turn))
            previous = await env.run(warm.complete, inputs[-1])
        # The same calls, each on a worker that never saw the Run (it reads the store).
        for input in inputs:
            await env.run(worker(upstream, blobs, http).complete, input)
        sent: list[Request] = list(upstream.requests)

    assert [r.body for r in sent[:3]] == [r.body for r in sent[3:]]
    assert all(r.headers["content-type"] == "application/json" for r in sent)
    second = json.loads(sent[1].body)
    # As stored: the provider's fields come back with their keys sorted.
    assert second["messages"][2]["tool_calls"][0]["extra_content"] == {
        "a": {"b": 3, "y": 2},
        "z": 1,
    }
    assert list(second["messages"][2]["tool_calls"][0]["extra_content"]) == ["a", "z"]


async def test_an_inline_message_is_kept_as_stored_not_as_sent(
    blobs: LocalBlobStore, http: httpx.AsyncClient
) -> None:
    # A message the workflow sends inline with a provider's fields, keys not sorted: the
    # store sorts them, and the next call must send them as stored, warm or cold.
    noted = ChatMessage(
        role="user", content="Noted.", provider_fields={"z_hint": 1, "a_hint": {"y": 2, "b": 3}}
    )
    replies = iter([*answers()[1:], *answers()[1:]])
    with Upstream(lambda _: next(replies)) as upstream:
        warm = worker(upstream, blobs, http)
        env = ActivityEnvironment()
        first = call(stream=False, new_messages=(noted,))
        answered = await env.run(warm.complete, first)
        second = call(
            stream=False,
            turn=2,
            context_ref=answered.context_ref,
            new_messages=(ChatMessage(role="user", content="And?"),),
        )
        await env.run(warm.complete, second)
        await env.run(worker(upstream, blobs, http).complete, first)
        await env.run(worker(upstream, blobs, http).complete, second)
        sent = [r.body for r in upstream.requests]
    assert sent[1] == sent[3]
    assert b'"a_hint":{"b":3,"y":2},"z_hint":1' in sent[1]
    assert b'"z_hint":1,"a_hint"' in sent[0]  # the first call sends it as given


async def test_a_warm_call_encodes_only_what_is_new(
    blobs: LocalBlobStore, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[str] = []
    original = request_module.wire_message

    def counting(message: ChatMessage) -> dict[str, Any]:
        encoded.append(message.role)
        return original(message)

    monkeypatch.setattr(request_module, "wire_message", counting)
    replies = iter(answers())
    with Upstream(lambda _: next(replies)) as upstream:
        acts = worker(upstream, blobs, http)
        env = ActivityEnvironment()
        first = await env.run(acts.complete, turns(None, 1))
        second = await env.run(acts.complete, turns(first, 2))
        encoded.clear()
        await env.run(acts.complete, turns(second, 3))
    # The tool message sent, then the answer kept for the next call: not the four before.
    assert encoded == ["tool", "assistant"]
    # One conversation, one entry: each head's replaced the one before it.
    assert len(acts.requests) == 1


def test_what_is_kept_is_bounded_in_bytes() -> None:
    heads = [f"sha256:{n:064x}" for n in range(20)]
    size = len(RequestBodies().write(call(), None, None, [], [ASKED], b"", stream=True).new[0])
    one = RequestBodies(max_bytes=16 * size)
    for head in heads:
        one.write(call(), None, head, [ASKED], [], b"", stream=True)
    assert len(one) == 16  # the sixteen used last fill the bound
    small = RequestBodies(max_bytes=16 * 200)
    for head in heads:
        small.write(call(), None, head, [ASKED, ANSWERED], [], b"", stream=True)
    assert 0 < small.kept_bytes <= 16 * 200
    # A conversation larger than a sixteenth of the bound is written, not kept.
    big = RequestBodies(max_bytes=16 * 50)
    big.write(call(), None, heads[0], [ASKED, ANSWERED], [], b"", stream=True)
    assert (len(big), big.kept_bytes) == (0, 0)
