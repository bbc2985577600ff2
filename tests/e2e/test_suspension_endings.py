"""How a Run that waits for an approval ends when it is cancelled or force-settled: what its
records, report and search attributes say of the call that never ran."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.common import SearchAttributeKey
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, Scope, ToolRegistry, WorkflowBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import run_worker
from psych_runtime.workflows import RunStatus, StepFinished, ToolCallFinished

from ._time_skipping import until_settled, wiring
from ._waiting import eventually
from .conftest import Harness
from .test_suspensions import orders_agent, suspended

pytestmark = pytest.mark.e2e

STATUS = SearchAttributeKey.for_keyword("PsychStatus")
SUSPENSION = SearchAttributeKey.for_keyword("PsychSuspension")
SCOPE = Scope(tenant="acme", principal="tester")


async def test_a_call_cancelled_while_it_waits_for_approval_is_recorded_not_run(
    harness: Harness,
) -> None:
    # Before: its tool_call_finished said UNKNOWN ("the Run was cancelled before this call
    # reported"), as for a call that may have run: an operator had to go and check whether
    # the order was deleted.
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "1"}, id="c1")), Reply.text("ok")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 1", scope=harness.scope)
        await suspended(harness, run)
        handle = harness.env.client.get_workflow_handle(run.workflow_id)
        await handle.cancel()

        async def settled() -> bool:
            return (await harness.client.status(run, scope=harness.scope)).status.terminal

        await eventually(settled, what="the Run to settle")
        records = (await harness.client.records(run, scope=harness.scope)).records
        report = await harness.client.report(run, scope=harness.scope)
        attributes = (await handle.describe()).typed_search_attributes
    assert deleted == []
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert (finished.call_id, finished.status) == ("c1", "aborted")
    assert finished.content.startswith("not run: it was waiting for approval")
    assert report.status is RunStatus.ABORTED
    assert report.tool_calls[0].status == "aborted"
    (wait,) = report.suspensions
    assert (wait.pending.id, wait.outcome) == ("c1", None)
    assert attributes.get(STATUS) == "aborted"
    assert attributes.get(SUSPENSION) is None


async def test_a_call_force_settled_while_it_waits_for_approval_is_recorded_not_run(
    ts_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # The deadline passes while the turn's other call runs (the clock runs then); the grace
    # runs out with the approval still unanswered. Before: that call was UNKNOWN too.
    registry = ToolRegistry()
    deleted: list[str] = []

    @registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    @registry.register
    async def pause(seconds: float) -> str:
        """Wait, then say so."""
        await asyncio.sleep(seconds)
        return f"waited {seconds:g} s"

    deadline = 60.0
    spec = (
        AgentBuilder("orders", registry=registry)
        .model("fake-model")
        .tool("delete_order")
        .tool("pause")
        .limits(deadline_seconds=deadline)
        .build()
    )
    async with wiring(ts_env, tmp_path, registry, "endings") as wired:
        wired.settings.policy = RulePolicy(destructive="ask")
        wired.fake.enqueue(
            Reply.error(429, retry_after=deadline - 2),
            Reply.tool_calls(
                ToolCall("pause", {"seconds": 4}, id="c-pause"),
                ToolCall("delete_order", {"order_id": "1"}, id="c-del"),
            ),
            Reply.text("never asked for"),
        )
        async with run_worker(ts_env.client, wired.settings):
            run = await wired.client.dispatch(spec, "pause, delete 1", scope=SCOPE)
            async with asyncio.timeout(60):
                await until_settled(ts_env, wired.client, run, SCOPE)
            report = await wired.client.report(run, scope=SCOPE)
    assert report.status is RunStatus.FORCE_SETTLED
    assert deleted == []
    calls = {c.call_id: (c.status, c.result) for c in report.tool_calls}
    assert calls == {
        "c-pause": ("ok", "waited 4 s"),
        "c-del": (
            "aborted",
            "not run: it was waiting for approval (the Run's deadline and grace period ran "
            "out before this call reported)",
        ),
    }


async def test_a_workflow_step_cancelled_while_its_call_waits_for_approval_says_not_run(
    harness: Harness,
) -> None:
    # From a review: the call was recorded aborted, but its step still ended "unknown: ...",
    # which says the call may have run.
    deleted: list[str] = []
    orders_agent(harness, deleted)  # registers delete_order and the asking Policy
    spec = (
        WorkflowBuilder("cleanup", registry=harness.registry)
        .tool("delete_order")
        .tool_step("delete", "delete_order", {"order_id": "1"})
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "clean up", scope=harness.scope)
        await suspended(harness, run)
        await harness.env.client.get_workflow_handle(run.workflow_id).cancel()

        async def settled() -> bool:
            return (await harness.client.status(run, scope=harness.scope)).status.terminal

        await eventually(settled, what="the Run to settle")
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert deleted == []
    (call,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert call.status == "aborted"
    (step,) = [r for r in records if isinstance(r, StepFinished)]
    assert not step.ok and step.error is not None
    assert step.error.startswith("not run: it was waiting for approval"), step.error
