"""A followed task's child poll (``_tasks._child_polls``): a record that came while the
Run's state was read goes out before what that read found. The read may be older than the
record (the child's question answered meanwhile, the Run gone on): sent first, its
``input-required`` ended a send there (a blocking or streaming send stops at a question),
and the record telling the Run went on was never sent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from datetime import UTC, datetime, timedelta

from a2a.types import TaskState, TaskStatus

from psych_runtime.workers.serve.a2a._tasks import _child_polls
from psych_runtime.workflows import Pending, RunState, RunStatus, SuspensionReason, Totals

EVERY = 0.05
WORKING = TaskStatus(state=TaskState.TASK_STATE_WORKING)
CHILD_ASKS = Pending(
    reason=SuspensionReason.QUESTION,
    id="q-child",
    call_id="q-child",
    tool="ask_question",
    question="Which warehouse?",
    expires_at=datetime(2026, 12, 6, tzinfo=UTC) + timedelta(days=1),
    run="psych-acme-child",
)
ASKING = RunState(
    run_id="lead",
    tenant="acme",
    agent="lead",
    version_hash="sha256:abc",
    status=RunStatus.SUSPENDED,
    turn=1,
    last_seq=4,
    totals=Totals(turns=1),
    pending=(CHILD_ASKS,),
)


async def test_a_record_that_came_during_a_read_goes_out_before_the_read() -> None:
    records: asyncio.Queue[str] = asyncio.Queue()
    reads = 0

    async def items() -> AsyncGenerator[str]:
        while True:
            yield await records.get()

    async def read() -> RunState:
        nonlocal reads
        reads += 1
        if reads == 1:  # the Run goes on (a record) while its state is being read
            await records.put("the Run went on")
            await asyncio.sleep(EVERY)
        return ASKING

    seen: list[object] = []
    followed = items()
    polls = _child_polls("lead", followed, read, EVERY, WORKING)
    async with contextlib.aclosing(followed), contextlib.aclosing(polls):
        async with asyncio.timeout(5):
            async for item in polls:
                seen.append(item)
                if len(seen) == 2:
                    break
    assert seen[0] == "the Run went on", seen
    assert isinstance(seen[1], TaskStatus)
    assert seen[1].state == TaskState.TASK_STATE_INPUT_REQUIRED
