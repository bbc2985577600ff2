"""``psych.model.complete.v2`` and the model-call payloads as they travel: only what the
other side cannot derive (issue 15, item 1)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import (
    ChatMessage,
    CodeToolCall,
    Latency,
    ModelCallInput,
    ModelCallResult,
    ModelCallResultV2,
    ToolOutcome,
    Usage,
)
from psych_runtime.activities.model import Endpoint, ModelActivities, ModelEndpoints
from psych_runtime.specs import ModelRef, Scope
from psych_runtime.testing import FakeModel, Reply

MODEL = "fake-model"
REF = "sha256:" + "a" * 64


@pytest.fixture
async def fake() -> AsyncIterator[FakeModel]:
    async with FakeModel(models=(MODEL,)) as model:
        yield model


@pytest.fixture
def acts(fake: FakeModel, blobs: LocalBlobStore, http: httpx.AsyncClient) -> ModelActivities:
    return ModelActivities(
        endpoints=ModelEndpoints(default=Endpoint(fake.base_url, "k")), blobs=blobs, http=http
    )


def call(**fields: Any) -> ModelCallInput:
    values: dict[str, Any] = {
        "run_id": "run-1",
        "turn": 1,
        "model": MODEL,
        "params": ModelRef(model=MODEL),
        "new_messages": (ChatMessage(role="user", content="Hello!"),),
        "scope": Scope(tenant="acme"),
    }
    values.update(fields)
    return ModelCallInput(**values)


def wire(value: Any) -> dict[str, Any]:
    """``value`` as the workers' data converter puts it in history."""
    (payload,) = pydantic_data_converter.payload_converter.to_payloads([value])
    decoded: dict[str, Any] = json.loads(payload.data)
    return decoded


async def test_v2_returns_the_system_ref_only_when_it_stored_the_inline_prompt(
    fake: FakeModel, acts: ModelActivities
) -> None:
    fake.enqueue(Reply.text("one"), Reply.text("two"))
    env = ActivityEnvironment()
    first = await env.run(acts.complete_v2, call(system_prompt="Be brief."))
    assert isinstance(first, ModelCallResultV2)
    assert first.model is None
    assert first.system_ref is not None
    assert first.text == "one"
    second = await env.run(
        acts.complete_v2,
        call(turn=2, system_ref=first.system_ref, context_ref=first.context_ref),
    )
    assert second.model is None and second.system_ref is None
    assert second.text == "two"
    # The stored system prompt was still sent: the reference resolved.
    assert fake.requests[1]["messages"][0] == {"role": "system", "content": "Be brief."}
    sent = wire(second)
    assert "model" not in sent and "system_ref" not in sent
    assert wire(ModelCallResultV2.model_validate(sent)) == sent


async def test_the_old_name_still_echoes_model_and_system_ref(
    fake: FakeModel, acts: ModelActivities
) -> None:
    fake.enqueue(Reply.text("one"))
    result = await ActivityEnvironment().run(acts.complete, call(system_prompt="Be brief."))
    assert type(result) is ModelCallResult
    sent = wire(result)
    assert sent["model"] == MODEL and sent["system_ref"] == result.system_ref


def test_model_call_input_leaves_out_model_parameter_and_scope_defaults() -> None:
    sent = wire(call(scope=Scope(tenant="acme", principal="ann")))
    assert sent["params"] == {"model": MODEL}
    assert sent["scope"] == {"tenant": "acme", "principal": "ann"}
    tuned = wire(call(params=ModelRef(model=MODEL, temperature=0.2, fallbacks=("b",))))
    assert tuned["params"] == {"model": MODEL, "temperature": 0.2, "fallbacks": ["b"]}
    labelled = call(scope=Scope(tenant="acme", labels={"team": "x"}))
    assert ModelCallInput.model_validate(wire(labelled)) == labelled


def test_usage_zeros_and_latency_noise_stay_off_the_wire() -> None:
    result = ModelCallResult(
        model=MODEL,
        system_ref=None,
        context_ref=REF,
        text="hi",
        usage=Usage(input_tokens=20, output_tokens=5),
        latency=Latency(queue_wait_ms=0.043000000000000003, duration_ms=27.861041999130975),
    )
    sent = wire(result)
    assert sent["usage"] == {"input_tokens": 20, "output_tokens": 5}
    assert sent["latency"] == {"queue_wait_ms": 0.043, "duration_ms": 27.861}
    back = ModelCallResult.model_validate(sent)
    assert back.usage == result.usage
    assert back.latency.duration_ms == 27.861


def test_tool_call_and_outcome_leave_out_their_defaults() -> None:
    sent = wire(
        CodeToolCall(
            run_id="r",
            call_id="c",
            tool="t",
            arguments={},
            large_result_bytes=8192,
            scope=Scope(tenant="acme"),
        )
    )
    assert sent["scope"] == {"tenant": "acme"}
    outcome = ToolOutcome(
        call_id="c",
        status="ok",
        content="x",
        truncated=False,
        size=1,
        result_ref=REF,
        message_ref=REF,
        latency=Latency(queue_wait_ms=0.0, duration_ms=1.0),
    )
    sent = wire(outcome)
    assert "wait_token" not in sent and sent["truncated"] is False
    assert ToolOutcome.model_validate(sent) == outcome
