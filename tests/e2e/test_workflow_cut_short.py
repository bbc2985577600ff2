"""A workflow settled in the middle of a tool step records that step as ended (SEMANTICS,
Workflows; docs/guides/workflows.md): cancelled, or force-settled once its deadline's grace
ran out, its call is recorded UNKNOWN and the step failed with the same reason, so the
report shows no step still running in a settled Run. From an audit of WorkflowRun: the
step kept its start record only, and `report` showed it running (``ok`` None) forever."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowFailureError

from psych_runtime.specs import WorkflowBuilder, WorkflowSpec
from psych_runtime.workflows import RunSettled, RunStatus, StepFinished, ToolCallFinished

from .conftest import Harness

pytestmark = pytest.mark.e2e


def reconciling(harness: Harness, started: asyncio.Event, **limits: float) -> WorkflowSpec:
    @harness.registry.register
    async def reconcile() -> str:
        """Reconcile the ledger (long)."""
        started.set()
        await asyncio.sleep(60)
        return "reconciled"

    @harness.registry.register
    def ping() -> str:
        """Ping."""
        return "pong"

    return (
        WorkflowBuilder("books", registry=harness.registry)
        .tool("ping")
        .tool("reconcile")
        .tool_step("ping", "ping", {})
        .tool_step("reconcile", "reconcile", {})
        .limits(**limits)
        .build()
    )


async def test_a_workflow_cancelled_during_a_tool_step_records_the_step_ended(
    harness: Harness,
) -> None:
    started = asyncio.Event()
    spec = reconciling(harness, started)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 20)
        handle = harness.client.temporal.get_workflow_handle(run.workflow_id)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        records = (await harness.client.records(run, scope=harness.scope)).records
        report = await harness.client.report(run, scope=harness.scope)
    why = "the Run was cancelled before this call reported"
    (call,) = [r for r in records if isinstance(r, ToolCallFinished) and r.call_id == "reconcile"]
    assert (call.status, call.content) == ("unknown", why)
    finished = [r for r in records if isinstance(r, StepFinished)]
    assert [(r.step, r.ok, r.error) for r in finished] == [
        ("ping", True, None),
        ("reconcile", False, f"unknown: {why}"),
    ]
    assert records.index(call) < records.index(finished[1])  # the call, then its step
    assert isinstance(records[-1], RunSettled) and records[-1].status is RunStatus.ABORTED
    assert report.status is RunStatus.ABORTED
    assert [(s.name, s.ok) for s in report.steps] == [("ping", True), ("reconcile", False)]


async def test_a_workflow_past_its_deadline_and_grace_records_its_tool_step_ended(
    harness: Harness,
) -> None:
    started = asyncio.Event()
    spec = reconciling(harness, started, deadline_seconds=1)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert started.is_set()
    assert result.status is RunStatus.FORCE_SETTLED, result.reason
    assert result.outputs == {"ping": "pong"}
    (step,) = [s for s in report.steps if s.name == "reconcile"]
    assert step.ok is False
    assert step.error == (
        "unknown: the Run's deadline and grace period ran out before this call reported"
    )
    (call,) = [c for c in report.tool_calls if c.call_id == "reconcile"]
    assert call.status == "unknown"
