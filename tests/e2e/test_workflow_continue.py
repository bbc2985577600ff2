"""A long WorkflowRun continues as new between two steps (workflows/README.md, "Long
workflows"): a low threshold forces a chain of executions, and the Run is still one Run:
its outputs whole, one gapless ``seq``, its approvals, steers and queries reached by its
workflow id. From an audit of WorkflowRun: it never continued, so a workflow of thousands
of steps passed Temporal's event limit and was terminated."""

from __future__ import annotations

import asyncio

import pytest

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, WorkflowBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import (
    RunAdmitted,
    RunContinued,
    RunSettled,
    RunStatus,
    StepFinished,
)
from psych_runtime.workflows.runs import _workflow_run as workflow_run

from ._waiting import all_records, eventually, is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

EVERY_STEP = 1
"""A threshold every execution is past at once: the Run continues between any two steps."""


async def test_a_long_workflow_continues_as_new_and_stays_one_run(harness: Harness) -> None:
    deleted: list[str] = []
    started, release = asyncio.Event(), asyncio.Event()

    @harness.registry.register
    def tick(n: int) -> dict[str, int]:
        """Count one."""
        return {"n": n}

    @harness.registry.register
    def word(n: int) -> str:
        """Say a number as text."""
        return str(n)

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    @harness.registry.register
    async def wait_here() -> str:
        """Wait until released."""
        started.set()
        await release.wait()
        return "released"

    harness.settings.policy = RulePolicy(destructive="ask")
    talker = AgentBuilder("talker", registry=harness.registry).model("fake-model").tool("wait_here")
    builder = (
        WorkflowBuilder("long", registry=harness.registry)
        .tool("tick")
        .tool("word")
        .tool("delete_order")
    )
    for n in range(1, 9):
        builder = builder.tool_step(f"t{n}", "tick" if n % 2 else "word", {"n": n})
    builder = builder.tool_step("delete", "delete_order", {"order_id": "42"})
    builder = builder.tool_step("t9", "tick", {"n": 9})
    builder = builder.agent_step("talk", talker.build())
    builder = builder.tool_step("t10", "word", {"n": 10})
    harness.fake.enqueue(Reply.tool_calls(ToolCall("wait_here", {})), Reply.text("Talked."))
    async with harness.worker():
        run = await harness.client.dispatch(
            builder.build(), "go", scope=harness.scope, continue_after_events=EVERY_STEP
        )
        # The approval of step 9 is a later execution's; reached by the workflow id.
        state = await state_when(
            harness.client, run, harness.scope, is_waiting, what="the approval", within=30.0
        )
        (item,) = state.pending
        assert (state.step, state.turn, item.id) == ("delete", 9, "delete")
        assert deleted == []
        await harness.client.approve(run, "delete", scope=harness.scope)
        # A steer reaches the agent step another execution started.
        await asyncio.wait_for(started.wait(), 30)
        await harness.client.steer(run, "Be brief.", scope=harness.scope)
        child = f"{run.workflow_id}-step11"

        async def steered() -> bool:
            records = (await harness.client.records(child, scope=harness.scope)).records
            return any(r.kind == "steer_received" for r in records)

        await eventually(steered, within=20.0, what="the steer to reach the agent step")
        release.set()
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)
        state = await harness.client.status(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert deleted == ["42"]
    expected: dict[str, object] = {
        f"t{n}": {"n": n} if n % 2 else str(n) for n in range(1, 11) if n != 10
    }
    expected |= {"t10": "10", "delete": "order 42 deleted", "talk": "Talked."}
    assert result.outputs == expected
    assert state.outputs == expected and state.status is RunStatus.COMPLETED
    # One Run: admitted once, continued between steps, one gapless seq, settled once.
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    assert sum(isinstance(r, RunAdmitted) for r in records) == 1
    continued = [r for r in records if isinstance(r, RunContinued)]
    assert len(continued) >= 3
    assert [r.execution for r in continued] == list(range(2, len(continued) + 2))
    finished = [r.step for r in records if isinstance(r, StepFinished)]
    assert finished == [*(f"t{n}" for n in range(1, 9)), "delete", "t9", "talk", "t10"]
    assert isinstance(records[-1], RunSettled) and records[-1].outputs == expected
    assert result.totals.tool_calls == 12  # every execution's, and the agent step's one
    assert report.kind == "workflow"
    assert [(s.name, s.ok) for s in report.steps] == [(name, True) for name in finished]


async def test_a_workflow_of_local_steps_reads_its_length_after_a_pause_and_continues(
    harness: Harness,
) -> None:
    # A local step's resolution can reach the workflow a task later live than on replay,
    # so the length is not read after one; after LOCAL_STEPS_PER_READ of them in a row the
    # workflow pauses (a timer) and reads it there. Without that a workflow whose steps all
    # run locally never continued as new. (The harness's workers run in the sandbox, so the
    # count is the module's own.)
    steps = workflow_run.LOCAL_STEPS_PER_READ + 2

    def tally(n: int) -> dict[str, int]:
        """Count one, locally."""
        return {"n": n}

    harness.registry.register(tally, idempotent=True, read_only=True, local_seconds=5.0)
    builder = (
        WorkflowBuilder("local-long", registry=harness.registry)
        .tool("tally")
        .limits(max_steps=steps)
    )
    for n in range(1, steps + 1):
        builder = builder.tool_step(f"s{n}", "tally", {"n": n})
    async with harness.worker():
        run = await harness.client.dispatch(
            builder.build(), "go", scope=harness.scope, continue_after_events=EVERY_STEP
        )
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.outputs == {f"s{n}": {"n": n} for n in range(1, steps + 1)}
    continued = [r for r in records if isinstance(r, RunContinued)]
    assert len(continued) >= 1
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
