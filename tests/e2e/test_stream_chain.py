"""A follower across continue-as-new, on the real dev server: a real AgentRun continues as
new at every turn boundary and the follower reads it live, from the middle of its first
execution once all have ended, and from its last execution only."""

from __future__ import annotations

import asyncio

import pytest

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import Record, RunContinued, RunSettled
from psych_runtime.workflows.client._follow import RecordFollower

from .conftest import Harness

pytestmark = pytest.mark.e2e

TURNS = 4


async def follow(harness: Harness, workflow_id: str, after: int = 0) -> list[Record]:
    follower = RecordFollower(harness.env.client, workflow_id, after=after)
    async with asyncio.timeout(60):
        return [record async for record in follower.records()]


async def test_a_follower_goes_on_across_continue_as_new(harness: Harness) -> None:
    @harness.registry.register
    def step(n: int) -> str:
        """One step."""
        return f"step {n} done"

    spec = AgentBuilder("steps", registry=harness.registry).model("fake-model").tool("step")
    harness.fake.enqueue(
        *(Reply.tool_calls(ToolCall("step", {"n": n})) for n in range(1, TURNS)),
        Reply.text("all steps done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            spec.build(), "take the steps", scope=harness.scope, continue_after_events=1
        )
        live = await follow(harness, run.workflow_id)
        continued = [r for r in live if isinstance(r, RunContinued)]
        # Followed from the middle of the first execution, once all have ended: it goes to
        # the execution holding seq 3 and forward again.
        late = await follow(harness, run.workflow_id, after=2)
        # Only the latest execution's records are left to give.
        tail = await follow(harness, run.workflow_id, after=continued[-1].seq - 1)
        executions = {
            execution.run_id
            async for execution in harness.env.client.list_workflows(
                f"WorkflowId = '{run.workflow_id}'"
            )
        }
    assert [r.seq for r in live] == list(range(1, len(live) + 1))
    assert isinstance(live[-1], RunSettled)
    assert late == live[2:]
    assert tail == live[continued[-1].seq - 1 :]
    assert len(continued) >= 2
    assert len(executions) == len(continued) + 1
