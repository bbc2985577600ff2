"""Which listed executions are not their Run's latest (ListTasks lists a task once), and
whether a Run's latest execution runs on (``runs_on``)."""

from __future__ import annotations

import asyncio

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.workflows import (
    TEMPORAL_READ_TIMEOUT,
    RunStatus,
    RunSummary,
    describe_within,
)


async def replaced_executions(temporal: Client, runs: list[RunSummary], at_once: int) -> set[str]:
    """The executions of ``runs`` that are not their Run's latest (an operator reset the Run
    after it closed there: it runs on in another), which are not listed.

    The task id names the Run, whose state is its latest execution's: GetTask, a message
    and CancelTask all read or act on that one. The Run listing holds each execution; an
    open one is its Run's latest (a workflow id has one open execution at most), a closed
    one is asked of Temporal (a describe, ``at_once`` at a time, each within
    ``TEMPORAL_READ_TIMEOUT``; one gone past retention is kept, as listed). An execution
    the Run continued as new from (closed, its status not terminal and not closed
    unsettled) is its Run's too: a listing paging on lists it only
    to stand for its Run, whose new execution went to the listing's head
    (``continued_since``), so it is not asked about.

    Raises:
        TemporalUnanswered: Temporal did not answer a describe in time.
        RPCError: Temporal refused one.
    """
    gate = asyncio.Semaphore(at_once)

    async def latest(workflow_id: str) -> str | None:
        async with gate:
            try:
                handle = temporal.get_workflow_handle(workflow_id)
                return (await describe_within(handle, workflow_id, TEMPORAL_READ_TIMEOUT)).run_id
            except RPCError as err:
                if err.status is RPCStatusCode.NOT_FOUND:
                    return None
                raise

    closed = [
        run
        for run in runs
        if run.closed_at is not None and run.execution and (run.closed_as or not _went_on(run))
    ]
    ids = sorted({run.workflow_id for run in closed})
    latest_of = dict(zip(ids, await asyncio.gather(*map(latest, ids)), strict=True))
    return {
        run.execution
        for run in closed
        if run.execution and latest_of[run.workflow_id] not in (None, run.execution)
    }


def _went_on(summary: RunSummary) -> bool:
    return summary.status in (RunStatus.RUNNING, RunStatus.SUSPENDED)


async def runs_on(temporal: Client, workflow_id: str) -> bool:
    """Whether the workflow id's latest execution is running: after a Run's records ended
    unsettled, that means an operator reset it (its execution closed, the workflow goes
    on in a new one), not that it ended.

    Raises:
        TemporalUnanswered: Temporal did not answer within ``TEMPORAL_READ_TIMEOUT``.
        RPCError: Temporal could not say (not found aside: that is not running).
    """
    handle = temporal.get_workflow_handle(workflow_id)
    try:
        described = await describe_within(handle, workflow_id, TEMPORAL_READ_TIMEOUT)
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            return False
        raise
    return described.status is WorkflowExecutionStatus.RUNNING
