"""The full model-call and tool payloads as the data converter writes them: default
fields left out (issue 15, item 1). Their slim wire forms are ``test_slim.py``'s."""

from __future__ import annotations

import json
from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter

from psych_runtime.activities.contract import (
    CodeToolCall,
    Latency,
    ModelCallInput,
    ModelCallResult,
    ToolOutcome,
    Usage,
)
from psych_runtime.specs import ModelRef, Scope
from tests.activities._calls import MODEL, call

REF = "sha256:" + "a" * 64


def wire(value: Any) -> dict[str, Any]:
    """``value`` as the workers' data converter puts it in history."""
    (payload,) = pydantic_data_converter.payload_converter.to_payloads([value])
    decoded: dict[str, Any] = json.loads(payload.data)
    return decoded


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
