"""A model call's heartbeat timeout follows the worker's outage tolerance.

The workflows worker tells its workflows (``MODEL_LOST_EXTERN``) its ``outage_seconds`` plus
the margin, as its tool calls get: a fleet tolerating a longer outage does not give up on an
answer its model worker still holds, one tolerating none notices a dead model worker within
the margin. Real dev server, a worker in the sandbox (the extern crosses it).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from temporalio.api.enums.v1 import EventType

from psych_runtime.activities.contract import MODEL_CALL
from psych_runtime.activities.tools import OUTAGE_MARGIN
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply
from psych_runtime.workers._worker import run_worker
from psych_runtime.workers._worker_checks import DEFAULT_OUTAGE_SECONDS
from psych_runtime.workflows import RunStatus

from .conftest import Harness

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("outage_seconds", [DEFAULT_OUTAGE_SECONDS, 5.0, 0.0])
async def test_a_model_calls_heartbeat_timeout_is_the_workers_outage_plus_the_margin(
    harness: Harness, outage_seconds: float
) -> None:
    settings = dataclasses.replace(harness.settings, outage_seconds=outage_seconds)
    harness.fake.enqueue(Reply.text("Hello."))
    spec = AgentBuilder("greeter").model("fake-model").build()
    async with run_worker(harness.env.client, settings):
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    history = await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
    (timeout,) = [
        e.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta()
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == MODEL_CALL
    ]
    assert timeout == timedelta(seconds=outage_seconds + OUTAGE_MARGIN)
