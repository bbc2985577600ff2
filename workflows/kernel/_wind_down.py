"""How a child Run ended, and winding one down when its parent stops while it runs.

A parent that stops while a child runs (a subagent's parent at its expiry, an abort, or
cancelled or past its deadline and grace; a workflow cancelled, or past its deadline and
grace, during an agent or workflow step; an agent's spawned children as it settles)
aborts the child rather than cancelling it: an abort ends the child's waits at once and
cancels its interruptible calls, and the child settles ABORTED with its totals, which the
parent adds to its own. A cancelled workflow carries no details back, so a child that does
not settle within ``WIND_DOWN_SECONDS`` (a call that may not be interrupted runs on) is
cancelled, and what it spent is unknown: the parent's cost becomes unknown too, never a
partial sum shown as the whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.workflows.contract._contract import ABORT, AbortInput, RunResult
    from psych_runtime.workflows.contract._records import RunStatus, Totals
    from psych_runtime.workflows.kernel._children import failed_totals
    from psych_runtime.workflows.kernel._feature import RunView
    from psych_runtime.workflows.kernel._run_base import cause_text

WIND_DOWN_SECONDS = 30.0
"""How long a parent that stops waits for its aborted child to settle and hand back its
totals before it cancels the child instead."""


@dataclass(frozen=True)
class ChildEnding:
    """How a settled child Run ended, as its parent sees it."""

    status: RunStatus
    """Its status; FAILED when it failed with its totals, ABORTED when it ended without
    them (cancelled, terminated, timed out)."""
    reason: str
    totals: Totals | None
    """What it spent; None when its totals did not reach the parent."""
    result: RunResult | None = None
    """Its result, when it settled with one (any status but FAILED)."""

    @property
    def described(self) -> str:
        """Its reason, saying so when its totals did not reach the parent."""
        if self.totals is None:
            return f"{self.reason} (its totals did not reach this Run)"
        return self.reason


def take_totals(run: RunView, ending: ChildEnding) -> None:
    """Add what the child spent to ``run``'s totals; when that did not reach it, ``run``'s
    cost becomes unknown (never a partial sum)."""
    if ending.totals is None:
        run.cost_unknown()
    else:
        run.add_child_totals(ending.totals)


def ending_of(child: workflow.ChildWorkflowHandle[Any, RunResult]) -> ChildEnding:
    """How ``child``, which is done, ended: its result, or the error it failed with."""
    try:
        result: RunResult = child.result()
    except ChildWorkflowError as err:
        totals = failed_totals(err)
        status = RunStatus.ABORTED if totals is None else RunStatus.FAILED
        return ChildEnding(status, cause_text(err), totals)
    return ChildEnding(result.status, result.reason, result.totals, result)


async def wind_down(
    child: workflow.ChildWorkflowHandle[Any, RunResult],
    *,
    tenant: str,
    reason: str,
    summary: str,
) -> ChildEnding:
    """Abort ``child`` because its parent stops (for ``reason``) and wait for its ending.

    A child that has not settled within ``WIND_DOWN_SECONDS`` is cancelled instead: its
    ending is ABORTED without totals. ``summary`` names the wait's timer.
    """
    abort = AbortInput(tenant=tenant, by=f"parent Run {workflow.info().workflow_id}", reason=reason)
    try:
        await child.signal(ABORT, abort)
    except ApplicationError as err:  # it settled meanwhile: its result is there to take
        workflow.logger.info("aborting child Run %s: %s", child.id, err)
    try:
        await workflow.wait_condition(
            child.done, timeout=WIND_DOWN_SECONDS, timeout_summary=summary
        )
    except TimeoutError:
        child.cancel()
        return ChildEnding(
            RunStatus.ABORTED, f"cancelled after {WIND_DOWN_SECONDS:g} s: {reason}", None
        )
    return ending_of(child)
