"""Local calls of one turn that each fall back to an activity (``LocalResultTooLarge``),
finishing in another order than they started (issue 27).

Concurrent local activities may resolve live in the order they finished and on replay in
the order they started (sdk-python issue 1578, ``_local_hold``). The fall back schedules
the call's activity right after its local failure, before the hold: were the failures
resolved in start order on replay, two activities scheduled live in finish order would
get each other's event, and so each other's result, which a replay that checks only for
nondeterminism does not see (the activities' type and id match). Checked here with the
records a new worker answers from its replay: each call keeps its own result.
"""

from __future__ import annotations

import asyncio
import json

from temporalio.api.enums.v1 import EventType

from psych_runtime.activities.contract import TOOL_RUN_CODE
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from .conftest import Harness

CALLS = 6
WORDS = 133_000
"""Each result is ``WORDS`` words of 3 bytes: 399 KB, over its share of 2 MiB among 6
(349,525) and under the 512 KiB a result shown whole may be."""


_DONE: dict[int, asyncio.Event] = {}


async def section(number: int) -> str:
    """A section of the manual; each waits for the next, so they finish at once, the
    last first.

    Args:
        number: Which section.
    """
    done = _DONE.setdefault(number, asyncio.Event())
    if number < CALLS - 1:
        await _DONE.setdefault(number + 1, asyncio.Event()).wait()
    else:
        await asyncio.sleep(0.3)
    done.set()
    return f"s{number:02d}" * WORDS


async def test_local_calls_falling_back_out_of_order_keep_their_own_results_on_replay(
    harness: Harness,
) -> None:
    harness.registry.register(section, idempotent=True, read_only=True, local_seconds=5.0)
    harness.fake.enqueue(
        Reply.tool_calls(*[ToolCall("section", {"number": n}) for n in range(CALLS)]),
        Reply.text("Read them all."),
    )
    spec = (
        AgentBuilder("reader-local-order", registry=harness.registry)
        .model("fake-model")
        .tool("section")
        .limits(large_result_bytes=500_000)
        .build()
    )
    expected = [f"s{n:02d}" * WORDS for n in range(CALLS)]
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Read the manual.", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        live = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert [c.result for c in live.tool_calls] == expected
    # The shape worth replaying: each fell back, and the activities were scheduled in the
    # order the local calls finished (the last first), not the order they started.
    history = await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
    scheduled = [
        json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == TOOL_RUN_CODE
    ]
    assert [s["arguments"]["number"] for s in scheduled] == list(reversed(range(CALLS)))
    # A new worker has no cached state: it answers the records from a replay.
    async with harness.worker():
        replayed = await harness.client.report(run, scope=harness.scope)
    assert [c.result for c in replayed.tool_calls] == expected
