"""A query the worker failed on its own timer is asked once more (``_asked.STALLED``).

The worker SDK fails an activation that does not yield within 2 s of wall clock as a
"potential deadlock" (TMPRL1101): a query of a closed Run replays it, and on a worker whose
CPUs are busy that replay has taken longer (a suite run failed a status read so). Here a
query handler that takes 2.5 s the first time stands for that replay, on a real dev server.

What psych controls is how many times the client asks, counted by a client interceptor;
the handler may run once more than the client asked (a loaded suite run saw a third run
for two asks: the worker's SDK, after failing an activation as stalled, may run the query
again on the run it rebuilds), so its count is only a lower bound.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from psych_runtime.workflows import RecordsPage, RecordsQuery
from psych_runtime.workflows.client._asked import STALLED, query_run
from psych_runtime.workflows.client._follow import RecordFollower

_ASKED: dict[str, int] = {}
"""Workflow id -> how many times its query handler ran (the runner is unsandboxed)."""


def _counted() -> int:
    """Count one more run of this workflow's query handler; the count."""
    workflow_id = workflow.info().workflow_id
    _ASKED[workflow_id] = _ASKED.get(workflow_id, 0) + 1
    return _ASKED[workflow_id]


@workflow.defn(name="StallingQuery")
class StallingQuery:
    @workflow.run
    async def run(self, stalls: int) -> str:
        self._stalls = stalls
        return "done"

    @workflow.query(name="state")
    def state(self) -> str:
        asked = _counted()
        if self._stalls < 0:
            time.sleep(6)  # blocked in a call: the SDK cannot interrupt it
        elif asked <= self._stalls:
            time.sleep(2.5)  # past the SDK's 2 s bound: the worker fails the query
        return f"answered on ask {asked}"


@workflow.defn(name="StallingRecords")
class StallingRecords:
    """A Run's records query, as a follower asks it, that takes 2.5 s the first time."""

    @workflow.run
    async def run(self) -> str:
        return "done"

    @workflow.query(name="psych.records")
    def records(self, query: RecordsQuery) -> RecordsPage:
        asked = _counted()
        if asked == 1:
            time.sleep(2.5)
        return RecordsPage(records=(), last_seq=7, settled=True)


class _Asks(Interceptor):
    """Counts the queries a client sends, by name."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _AskCounter(next, self.sent)


class _AskCounter(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, sent: list[str]) -> None:
        super().__init__(next)
        self._sent = sent

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self._sent.append(input.query)
        return await super().query_workflow(input)


@asynccontextmanager
async def closed_run(
    dev_env: WorkflowEnvironment, workflow_class: type[Any], *args: Any
) -> AsyncIterator[tuple[WorkflowHandle[Any, Any], list[str]]]:
    """``workflow_class`` run to its end on a worker of its own (unsandboxed: the handlers
    count in ``_ASKED`` and sleep); its handle, on a client whose queries are counted (the
    list of their names), given while the worker still runs."""
    task_queue = f"stalled-{uuid.uuid4().hex[:8]}"
    asks = _Asks()
    config: dict[str, Any] = {**dev_env.client.config(), "interceptors": [asks]}
    client = Client(**config)
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[workflow_class],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle: WorkflowHandle[Any, Any] = await client.start_workflow(
            workflow_class.run, *args, id=f"stalled-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
        assert await handle.result() == "done"
        yield handle, asks.sent


async def ask_closed_run(dev_env: WorkflowEnvironment, stalls: int) -> tuple[Any, int]:
    """Run ``StallingQuery`` to its end, then ``query_run`` its state; the answer (or the
    error raised) and how many times the client asked (the handler ran at least as often)."""
    async with closed_run(dev_env, StallingQuery, stalls) as (handle, sent):
        try:
            answer: Any = await query_run(
                handle, handle.id, "state", None, str, rpc_timeout=timedelta(seconds=4)
            )
        except WorkflowQueryFailedError as err:
            answer = err
    assert _ASKED[handle.id] >= len(sent)
    return answer, len(sent)


async def test_a_query_the_worker_failed_as_stalled_is_asked_again(
    dev_env: WorkflowEnvironment,
) -> None:
    answer, asked = await ask_closed_run(dev_env, stalls=1)
    assert asked == 2
    assert answer.startswith("answered on ask ") and answer != "answered on ask 1"


async def test_a_query_that_stalls_again_fails_saying_so(dev_env: WorkflowEnvironment) -> None:
    failure, asked = await ask_closed_run(dev_env, stalls=5)
    assert isinstance(failure, WorkflowQueryFailedError)
    assert STALLED in failure.message and "deadlock" in failure.message
    assert asked == 2


async def test_a_query_blocked_in_a_call_fails_as_stalled_not_as_unanswered(
    dev_env: WorkflowEnvironment,
) -> None:
    # The first ask fails as stalled at 2 s; the worker's SDK waits for the blocked call
    # before it lets go of the run (and a replay blocks again), so the second ask runs out
    # its 4 s unanswered: the stall is what the caller is told, not a timeout.
    failure, _ = await ask_closed_run(dev_env, stalls=-1)
    assert isinstance(failure, WorkflowQueryFailedError)
    assert STALLED in failure.message and "went unanswered" in failure.message


async def test_a_followers_records_query_failed_as_stalled_is_asked_again(
    dev_env: WorkflowEnvironment,
) -> None:
    async with closed_run(dev_env, StallingRecords) as (handle, _):
        follower = RecordFollower(dev_env.client, handle.id)
        assert await follower.head() == 7
    assert follower.queries == 2 and _ASKED[handle.id] >= 2


@pytest.fixture(autouse=True)
def _forget_asks() -> None:
    _ASKED.clear()
