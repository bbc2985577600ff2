"""A follower across continue-as-new, on the real dev server.

Continue-as-new of the Run kinds is built on another branch. This drives the follower with
``Chain``, a stand-in that keeps the contract the follower relies on: the ``psych.records``
query of each execution answers for the records that execution wrote, each execution goes
on from the seq the one before reached, and the last one ends with ``run_settled``.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from psych_runtime.specs import Scope
from psych_runtime.workflows import Record, RunSettled, RunStatus, Totals, TurnStarted
from psych_runtime.workflows._contract import QUERY_RECORDS, RecordsPage, RecordsQuery
from psych_runtime.workflows._follow import RecordFollower

pytestmark = pytest.mark.e2e

SCOPE = Scope(tenant="acme")
PER_EXECUTION = 3
EXECUTIONS = 3
LAST_SEQ = PER_EXECUTION * EXECUTIONS + 1


class ChainInput(BaseModel):
    next_seq: int = 1
    executions_left: int = EXECUTIONS


@activity.defn(name="chain.pause")
async def pause() -> None:
    """A short piece of work between two records (the dev server's timers fire to the
    second, too slow for this test)."""
    await asyncio.sleep(0.1)


async def paused() -> None:
    await workflow.execute_activity(pause, start_to_close_timeout=timedelta(seconds=10))


@workflow.defn(name="StreamChain")
class Chain:
    """Writes ``PER_EXECUTION`` records per execution, an activity apart, then continues as new
    with the next seq; the last execution also settles."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.settled = False

    @workflow.run
    async def run(self, given: ChainInput) -> None:
        seq = given.next_seq
        for _ in range(PER_EXECUTION):
            await paused()
            self.records.append(TurnStarted(seq=seq, at=workflow.now(), scope=SCOPE, turn=seq))
            seq += 1
        if given.executions_left > 1:
            await paused()
            left = given.executions_left - 1
            workflow.continue_as_new(
                given.model_copy(update={"next_seq": seq, "executions_left": left})
            )
        self.records.append(
            RunSettled(
                seq=seq,
                at=workflow.now(),
                scope=SCOPE,
                status=RunStatus.COMPLETED,
                reason="done",
                totals=Totals(),
            )
        )
        self.settled = True

    @workflow.query(name=QUERY_RECORDS)
    def page(self, query: RecordsQuery) -> RecordsPage:
        after = [r for r in self.records if r.seq > query.after]
        last = self.records[-1].seq if self.records else 0
        return RecordsPage(records=tuple(after), last_seq=last, settled=self.settled)


async def follow(env: WorkflowEnvironment, workflow_id: str, after: int = 0) -> list[Record]:
    follower = RecordFollower(env.client, workflow_id, after=after)
    async with asyncio.timeout(30):
        return [record async for record in follower.records()]


async def test_a_follower_goes_on_across_continue_as_new(dev_env: WorkflowEnvironment) -> None:
    task_queue = f"chain-{uuid.uuid4().hex[:12]}"
    workflow_id = f"psych-acme-chain{uuid.uuid4().hex[:8]}"
    async with Worker(
        dev_env.client,
        task_queue=task_queue,
        workflows=[Chain],
        activities=[pause],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await dev_env.client.start_workflow(
            Chain.run, ChainInput(), id=workflow_id, task_queue=task_queue
        )
        live = await follow(dev_env, workflow_id)
        # Followed from the middle of the first execution, once all have ended: it walks
        # back from the latest execution and forward again.
        late = await follow(dev_env, workflow_id, after=2)
        # Only the latest execution's records are left to give.
        tail = await follow(dev_env, workflow_id, after=PER_EXECUTION * 2)
        executions = {
            execution.run_id
            async for execution in dev_env.client.list_workflows(f"WorkflowId = '{workflow_id}'")
        }
        assert handle.first_execution_run_id is not None
    assert [r.seq for r in live] == list(range(1, LAST_SEQ + 1))
    assert isinstance(live[-1], RunSettled)
    assert late == live[2:]
    assert tail == live[PER_EXECUTION * 2 :]
    assert len(executions) == EXECUTIONS
