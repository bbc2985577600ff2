"""The hot path's slim payloads in a real Run's history (issue 15 item 1): the new activity
names, no summaries, and only what the other side cannot derive, while what the Run
records and reports (sizes, refs, the conversation the model sees) stays as it was."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from temporalio.api.history.v1 import HistoryEvent

from psych_runtime.activities.contract import MODEL_CALL, TOOL_RUN_CODE, TOOL_SEND_HTTP
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, ToolCallFinished

from ._http_server import CountingServer, refund_tool
from .conftest import Harness

pytestmark = pytest.mark.e2e


def page(turn: int) -> str:
    """Return a 4 KB page for this turn.

    Args:
        turn: The turn number.
    """
    stem = f"turn {turn}: "
    return stem + "x" * (4096 - len(stem))


def scheduled(events: list[HistoryEvent]) -> list[tuple[str, HistoryEvent]]:
    return [
        (e.activity_task_scheduled_event_attributes.activity_type.name, e)
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


def data(payloads: Any) -> dict[str, Any]:
    (payload,) = payloads.payloads
    decoded: dict[str, Any] = json.loads(payload.data)
    return decoded


async def test_a_run_sends_the_slim_payloads_and_records_what_it_did(harness: Harness) -> None:
    harness.registry.register(page)
    spec = (
        AgentBuilder("slim", registry=harness.registry)
        .instructions("Read pages.")
        .model("fake-model")
        .tool("page")
        .limits(large_result_bytes=8192)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("page", {"turn": 1})),
        Reply.tool_calls(ToolCall("page", {"turn": 2})),
        Reply.text("Read both."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Read.", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = [r async for r in harness.client.stream(run, scope=harness.scope)]
    assert result.status is RunStatus.COMPLETED and result.answer == "Read both."

    handle = harness.env.client.get_workflow_handle(run.workflow_id)
    events = list((await handle.fetch_history()).events)
    calls = scheduled(events)
    names = [name for name, _ in calls]
    assert names.count(MODEL_CALL) == 3 and names.count(TOOL_RUN_CODE) == 2
    assert set(names) == {MODEL_CALL, TOOL_RUN_CODE}
    hot = [e for name, e in calls if name in (MODEL_CALL, TOOL_RUN_CODE)]
    assert all(not e.user_metadata.HasField("summary") for e in hot)

    model_inputs = [
        data(e.activity_task_scheduled_event_attributes.input)
        for name, e in calls
        if name == MODEL_CALL
    ]
    second = model_inputs[1]
    # The run id and tenant are the workflow id's; params said nothing beyond the model.
    assert set(second) == {
        "turn",
        "model",
        "system_ref",
        "context_ref",
        "new_messages",
        "tools_ref",
        "scope",
    }
    assert second["scope"] == {"principal": "tester"}
    assert all(r.startswith("~") and len(r) == 44 for r in second["new_messages"])
    # The same call in its full form was 506 bytes (bench/README.md).
    assert len(json.dumps(second, separators=(",", ":"))) < 320

    completed = {
        e.activity_task_completed_event_attributes.scheduled_event_id: data(
            e.activity_task_completed_event_attributes.result
        )
        for e in events
        if e.HasField("activity_task_completed_event_attributes")
    }
    outcomes = [completed[e.event_id] for name, e in calls if name == TOOL_RUN_CODE]
    # A result shown whole travels as its content and latency: size and refs are derived.
    assert [set(o) for o in outcomes] == [{"content", "latency"}] * 2
    answers = [completed[e.event_id] for name, e in calls if name == MODEL_CALL]
    assert answers[0]["tool_calls"] == [["call_1", "page", '{"turn": 1}']]
    assert "context_ref" not in answers[1] and "model" not in answers[1]

    # What the Run derived is what the activities stored: the model saw both results
    # (its conversation was rebuilt from the refs), and the records carry exact refs.
    finished = [r for r in records if isinstance(r, ToolCallFinished)]
    for turn, record in enumerate(finished, start=1):
        assert record.size == 4096 and not record.truncated
        digest = hashlib.sha256(page(turn).encode()).hexdigest()
        assert record.result_ref == f"sha256:{digest}"
    last = harness.fake.requests[-1]["messages"]
    assert [m["content"] for m in last if m["role"] == "tool"] == [page(1), page(2)]


async def test_an_http_tool_call_is_psych_tool_send_http_with_a_slim_outcome(
    harness: Harness,
) -> None:
    api = CountingServer().start()
    try:
        spec = (
            AgentBuilder("refunds")
            .model("fake-model")
            .http_tool("refund", **refund_tool(api.url))
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("refund", {"order_id": "42"})), Reply.text("Refunded.")
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Refund 42", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
    finally:
        api.stop()
    assert result.status is RunStatus.COMPLETED
    assert api.count("POST", "/orders/42/refund") == 1
    handle = harness.env.client.get_workflow_handle(run.workflow_id)
    events = list((await handle.fetch_history()).events)
    (call,) = [e for name, e in scheduled(events) if name == TOOL_SEND_HTTP]
    sent = data(call.activity_task_scheduled_event_attributes.input)
    # The tool travels with the fields its Spec set (method POST is the default).
    assert "method" not in sent["tool"] and "run_id" not in sent
    (done,) = [
        e
        for e in events
        if e.HasField("activity_task_completed_event_attributes")
        and e.activity_task_completed_event_attributes.scheduled_event_id == call.event_id
    ]
    assert set(data(done.activity_task_completed_event_attributes.result)) == {
        "content",
        "latency",
    }
    (record,) = report.tool_calls
    assert record.status == "ok" and record.size == len((record.result or "").encode())
