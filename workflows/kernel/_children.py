"""Starting child Runs (subagents, workflow steps, next Runs) and talking to the parent.

A child Run is a child workflow of the same tenant, ``psych-<tenant>-<parent run id>-<tag>``;
its Version travels whole (hashed in the parent, deterministically, when the parent built
it), so a replayed parent starts the same child. A child that a parent asked to
(``ParentBounds.report_pending``) tells it whenever what it waits for changes, so the parent
shows the child's items as its own and forwards answers to them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ApplicationError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ErrorType, ThreadRef
    from psych_runtime.specs import DepthCap, Limits, Scope, Version
    from psych_runtime.workflows.contract._contract import (
        CHILD_PENDING,
        SA_STATUS,
        AgentRunInput,
        ChildPending,
        ParentBounds,
        RunResult,
        WorkflowRunInput,
        run_search_attributes,
        workflow_id_for,
        workflow_type_for,
    )
    from psych_runtime.workflows.contract._records import Pending, Totals
    from psych_runtime.workflows.kernel._activity_calls import run_input
    from psych_runtime.workflows.kernel._outcome import failure_details

STATUS_KEY = SearchAttributeKey.for_keyword(SA_STATUS)


def has_search_attributes() -> bool:
    """Whether this Run was started with psych's search attributes (a fact in its history,
    so deterministic): a Run started without them must not upsert or pass them on, because
    a server that has none registered (the time-skipping test server) would fail the task."""
    return workflow.info().typed_search_attributes.get(STATUS_KEY) is not None


async def start_child(
    scope: Scope,
    run_id: str,
    version: Version,
    messages: tuple[str, ...],
    *,
    depth: int,
    summary: str,
    bounds: ParentBounds | None = None,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE,
    thread: ThreadRef | None = None,
    depth_caps: tuple[DepthCap, ...] = (),
    spawn_depth: int = 0,
) -> workflow.ChildWorkflowHandle[Any, RunResult]:
    """Start a Run of ``version`` (AgentRun or WorkflowRun, by its kind) as a child."""
    attributes = None
    if has_search_attributes():
        attributes = run_search_attributes(scope.tenant, version.spec.name, version.hash)
    input_type = AgentRunInput if version.spec.kind == "agent" else WorkflowRunInput
    return await workflow.start_child_workflow(
        workflow_type_for(version),
        input_type(
            run_id=run_id,
            version=version,
            scope=scope,
            messages=messages,
            depth=depth,
            depth_caps=depth_caps,
            spawn_depth=spawn_depth,
            bounds=bounds,
            thread=thread,
            roles_apart=run_input().roles_apart,
        ),
        id=workflow_id_for(scope.tenant, run_id),
        result_type=RunResult,
        parent_close_policy=parent_close_policy,
        search_attributes=attributes,
        static_summary=summary,
    )


def failed_totals(err: BaseException | None) -> Totals | None:
    """What a FAILED child spent (its ``RunFailed`` error carries its totals), or None when
    it ended some other way (cancelled, terminated, timed out)."""
    cause = err.__cause__ if err is not None else None
    if isinstance(cause, ApplicationError) and cause.type == ErrorType.RUN_FAILED and cause.details:
        return failure_details(Totals, cause.details[0], "child's RunFailed")
    return None


def winds_down(kind: str, children: Mapping[str, Any], reason: str) -> str | None:
    """Why a Run of ``kind`` whose ``children`` run winds them down as its body is cancelled
    (by an operator or its parent, or past its deadline and grace, for ``reason``), or None.

    An agent's running children (a subagent ``delegate`` waits for, live spawned children)
    are aborted and their totals taken (``RunView.winding_down``); a Run recorded before the
    patch left them to their close policy, their totals lost. The patch is asked only then,
    in the task the cancellation arrives in (its request, or the grace timer), before the
    body unwinds: what it awaits as it does may be a local activity's cancellation (a local
    tool call of the same turn beside ``delegate``), whose resolution can reach a replay in
    another task. A workflow's running step has its own patch (``_workflow_run.py``).
    """
    if kind == "agent" and children and workflow.patched("psych-children-wind-down"):
        return reason
    return None


def report_pending(pending: tuple[Pending, ...], working: bool, seq: int) -> None:
    """Tell the parent what this child waits for now, and whether it also executes a call
    (fire and forget: a parent that has settled meanwhile no longer cares, and the
    signal's failure must not fail this Run)."""
    parent = workflow.info().parent
    if parent is None:
        return
    handle = workflow.get_external_workflow_handle(parent.workflow_id, run_id=parent.run_id)
    payload = ChildPending(
        run=workflow.info().workflow_id, pending=pending, working=working, seq=seq
    )
    task = asyncio.create_task(handle.signal(CHILD_PENDING, payload))
    task.add_done_callback(_log_failure)


def _log_failure(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    err = task.exception()
    if err is not None:
        if not isinstance(err, ApplicationError):
            workflow.logger.warning("telling the parent Run what this Run waits for: %s", err)
        else:
            workflow.logger.info("the parent Run did not take the pending items: %s", err)


def bounded_limits(limits: Limits, bounds: ParentBounds | None) -> Limits:
    """A Run's Limits as its parent bounds them: a workflow's step takes no more steps and
    no more transient retries than the workflow has left (its limits govern the whole
    Run, a nested workflow's steps included)."""
    narrowed: dict[str, int] = {}
    if bounds is not None and bounds.max_steps is not None:
        narrowed["max_steps"] = min(limits.max_steps, bounds.max_steps)
    if bounds is not None and bounds.transient_retry_budget is not None:
        budget = min(limits.transient_retry_budget, bounds.transient_retry_budget)
        narrowed["transient_retry_budget"] = budget
    return limits.model_copy(update=narrowed) if narrowed else limits
