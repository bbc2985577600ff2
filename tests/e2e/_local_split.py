"""A Run polled from its dispatch, and the history shape that polling can leave.

The client's ``psych.state`` queries, sent before a worker takes the Run's first workflow
task, ride in that task. When the catalogue's local activity (started in it) finishes while
the worker answers them, the SDK sends the activity's marker with the answers and resolves
it in the workflow only in the next task, which it forces (sdk-core, ``ManagedRun::
prepare_complete_resp``: a query answer with a local resolution pending); a replay resolves
it in the marker's task. Which of the two a Run gets is a race, so the tests and the
recorder try a few Runs and check the shape they got (``resolved_after_its_marker``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from psych_runtime.activities.contract import TOOL_CATALOG
from psych_runtime.specs import AgentSpec, Scope, WorkflowSpec
from psych_runtime.workflows import PsychClient, RunHandle

QUERIES = 4
"""``psych.state`` queries waiting when the worker starts: each rides in the first task."""
EARLY = 0.3
"""Seconds the queries wait at the server before the worker starts."""
WAITING_QUERY = timedelta(seconds=120)
"""How long such a query waits for its answer: the client's default RPC deadline counts
from before the worker starts, and a loaded machine took longer to start it and answer
(``test_an_agent_continues_as_new_alike_live_and_on_replay_after_a_local_call`` failed
so under three other test runs)."""

_TASK_EVENTS = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    }
)


def resolved_after_its_marker(history: WorkflowHistory, activity: str = TOOL_CATALOG) -> bool:
    """Whether the first local ``activity`` (the catalogue) resolved in a later workflow
    task than its marker: a task completed between the marker and the next event of the
    Run's own (live, what followed the resolution was sent with the next task)."""
    events = list(history.events)
    for at, event in enumerate(events):
        if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        details = event.marker_recorded_event_attributes.details
        if "data" not in details:
            continue  # a patch marker
        if json.loads(details["data"].payloads[0].data).get("activity_type") != activity:
            continue
        for later in events[at + 1 :]:
            if later.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                return True
            if later.event_type not in _TASK_EVENTS:
                return False
        return False
    raise AssertionError(f"the history has no marker of {activity}")


async def polled_from_dispatch(
    client: PsychClient,
    spec: AgentSpec | WorkflowSpec,
    text: str,
    *,
    scope: Scope,
    worker: Callable[[], AbstractAsyncContextManager[object]],
    then: Callable[[RunHandle], Awaitable[None]],
) -> RunHandle:
    """Dispatch ``spec`` with no worker running, leave ``QUERIES`` state queries waiting,
    start ``worker`` and run ``then`` (which drives the Run to its end) under it."""
    run = await client.dispatch(spec, text, scope=scope)
    queries = [
        asyncio.create_task(client.status(run, scope=scope, query_timeout=WAITING_QUERY))
        for _ in range(QUERIES)
    ]
    await asyncio.sleep(EARLY)
    async with worker():
        await asyncio.gather(*queries)
        await then(run)
    return run
