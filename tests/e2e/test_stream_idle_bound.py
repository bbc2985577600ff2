"""``stream_idle_seconds`` above the default, and 0, on live Runs: the model call's own bound
(its activity's start-to-close timeout, read from the Run's history) leaves room for the
silence the Spec allows.

A call was bounded at 10 minutes whatever the Spec said, so a silence longer than that
(``stream_idle_seconds`` may be up to an hour, for a model that thinks long before its first
token; 0 turns the idle limit off) ended the call as "model call timed out
(START_TO_CLOSE)", a transient failure retried until the budget or the deadline ran out.
The timeout is read from history rather than waited out: an activity in flight runs at
wall-clock speed on every test server.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from psych_runtime.activities.contract import MODEL_CALL
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply
from psych_runtime.workflows import RunStatus

from .conftest import Harness

pytestmark = pytest.mark.e2e


async def _model_call_timeouts(harness: Harness, **limits: float) -> list[timedelta]:
    spec = AgentBuilder("idlebound").model("fake-model").limits(**limits).build()
    harness.fake.enqueue(Reply.text("done"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    history = await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
    return [
        event.activity_task_scheduled_event_attributes.start_to_close_timeout.ToTimedelta()
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
        and event.activity_task_scheduled_event_attributes.activity_type.name == MODEL_CALL
    ]


@pytest.mark.parametrize("idle", [1200.0, 3600.0])
async def test_a_model_call_outlasts_the_silence_stream_idle_seconds_allows(
    harness: Harness, idle: float
) -> None:
    (timeout,) = await _model_call_timeouts(harness, stream_idle_seconds=idle)
    # The silence the Spec allows, and at least the five minutes the default leaves after it.
    assert timeout >= timedelta(seconds=idle) + timedelta(minutes=5)


async def test_stream_idle_seconds_0_leaves_the_call_to_the_runs_deadline(
    harness: Harness,
) -> None:
    (timeout,) = await _model_call_timeouts(harness, stream_idle_seconds=0, deadline_seconds=86400)
    assert timeout > timedelta(seconds=86400 + 30)


async def test_the_default_idle_limit_keeps_the_ten_minute_bound(harness: Harness) -> None:
    (timeout,) = await _model_call_timeouts(harness)
    assert timeout == timedelta(minutes=10)
