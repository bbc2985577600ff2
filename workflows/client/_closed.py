"""What a Run whose latest workflow execution closed shows, read with no worker.

A Run's state is a query, which a worker answers for a closed execution too (it replays
it): with no worker polling, a reader of a Run that ended (``psych serve``'s A2A GetTask)
waited the query timeout and answered that no worker did, though Temporal holds how it
ended. ``closed_run`` reads that instead: the latest execution's description (its search
attributes name the tenant, the Spec and its Version, its workflow type the kind) and its
close event:

- completed: the ``RunResult`` it returned (status, reason, answer);
- failed with ``RUN_FAILED``: the Run settled FAILED, the failure's message its reason;
- closed before the Run settled (terminated, timed out...: ``closed_unsettled``): failed,
  with the reason ``status`` gives it (``_unsettled.py``);
- cancelled, the Run settling ABORTED as it was, with no message undelivered: aborted,
  with the cancellation's reason (its history says so: ``_cancelled.py``).

Anything else is left to the query (None): a close event this client cannot decode (a
result or failure sealed with a key its payload codec does not hold, say: the codec's
refusal is an ``AccessDenied`` the caller would take for another tenant's Run, and a
worker, which holds the keys, answers the state), a cancelled workflow whose Run took a
steer (its reason counts the messages it did not deliver, which only its state says), an
execution Temporal closed after the Run settled (cancelled, terminated, timed out: its
reason and answer are in its state alone: with no worker, the state's read raises
``ClosedStateUnanswered``, naming how it closed), another failure, or a Run started
without psych's search attributes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHistoryEventFilterType,
)
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from psych_runtime.activities.contract import ErrorType
from psych_runtime.workflows.client._asked import (
    HISTORY_LONG_POLL_TIMEOUT,
    TEMPORAL_READ_TIMEOUT,
    TemporalCancelled,
    TemporalUnanswered,
    describe_within,
    history_events,
    mapped,
    read_mapped,
)
from psych_runtime.workflows.client._cancelled import cancelled_reason
from psych_runtime.workflows.client._listing import parse_workflow_id
from psych_runtime.workflows.client._unsettled import (
    UNSETTLED_SHOWN,
    closed_unsettled,
    unsettled_reason,
)
from psych_runtime.workflows.contract._contract import (
    AGENT_RUN,
    SA_AGENT,
    SA_STATUS,
    SA_TENANT,
    SA_VERSION,
    WORKFLOW_RUN,
    RunResult,
)
from psych_runtime.workflows.contract._records import RunStatus

_KINDS: dict[str, Literal["agent", "workflow"]] = {AGENT_RUN: "agent", WORKFLOW_RUN: "workflow"}


@dataclass(frozen=True)
class ClosedRun:
    """A Run whose latest workflow execution closed, as its state shows it (``RunState``'s
    fields of the same names), read from Temporal with no worker (``PsychClient.closed``).
    It waits on nothing."""

    run_id: str
    tenant: str
    agent: str
    """The Spec's name."""
    version_hash: str
    kind: Literal["agent", "workflow"]
    status: RunStatus
    """Terminal, always."""
    reason: str | None
    answer: str | None = None


async def closed_run(
    client: Client, workflow_id: str, rpc_timeout: timedelta | None = None
) -> ClosedRun | None:
    """The Run ``workflow_id`` as its closed latest execution shows it; None when that
    execution is open, or its close event does not carry what its state shows (see the
    module docstring: read the state, a query).

    Raises:
        NotFound: no such Run (or its history gone meanwhile).
        TemporalUnanswered: Temporal did not answer a read within ``rpc_timeout``
            (None: ``TEMPORAL_READ_TIMEOUT`` for the describe; ``HistoryNotRead``: a page
            of a cancelled one's history).
        RPCError: Temporal could not describe it or read its close event.
    """
    bound = rpc_timeout or TEMPORAL_READ_TIMEOUT
    asked_at = time.monotonic()
    try:
        described = await client.get_workflow_handle(workflow_id).describe(rpc_timeout=bound)
    except RPCError as err:
        raise read_mapped(err, workflow_id, "a describe", bound, asked_at=asked_at) from err
    closed = described.status
    if closed in (None, WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW):
        return None
    attributes = described.typed_search_attributes
    tenant, agent, version, status = (
        attributes.get(SearchAttributeKey.for_keyword(name))
        for name in (SA_TENANT, SA_AGENT, SA_VERSION, SA_STATUS)
    )
    kind = _KINDS.get(described.workflow_type)
    if tenant is None or agent is None or version is None or status is None or kind is None:
        return None
    _, run_id = parse_workflow_id(workflow_id)
    execution = client.get_workflow_handle(
        workflow_id, run_id=described.run_id, result_type=RunResult
    )

    def shown(status: RunStatus, reason: str | None, answer: str | None = None) -> ClosedRun:
        return ClosedRun(run_id, tenant, agent, version, kind, status, reason, answer)

    if closed is WorkflowExecutionStatus.COMPLETED:  # the Run returned its result
        asked_at = time.monotonic()  # one request: the execution closed
        try:
            result: RunResult = await execution.result(follow_runs=False, rpc_timeout=rpc_timeout)
        except RPCError as err:
            raise read_mapped(
                err, workflow_id, "its close event", rpc_timeout, asked_at=asked_at
            ) from err
        except Exception:  # not decoded here: its state, as a worker decodes it, says
            return None
        return shown(result.status, result.reason, result.answer)
    closed_as = closed_unsettled(status, int(closed))
    if closed_as is not None:
        return shown(UNSETTLED_SHOWN, await unsettled_reason(execution, closed_as, rpc_timeout))
    if closed is WorkflowExecutionStatus.CANCELED:  # settled ABORTED as it was, or before
        reason = await cancelled_reason(client, execution, workflow_id, rpc_timeout)
        return None if reason is None else shown(RunStatus.ABORTED, reason)
    if closed is not WorkflowExecutionStatus.FAILED:
        return None
    failure: BaseException | None = None
    asked_at = time.monotonic()  # one request: the execution closed
    try:
        await execution.result(follow_runs=False, rpc_timeout=rpc_timeout)
    except WorkflowFailureError as err:
        failure = err.cause
    except RPCError as err:
        raise read_mapped(
            err, workflow_id, "its close event", rpc_timeout, asked_at=asked_at
        ) from err
    except Exception:  # its failure not decoded here: as for a result, its state says
        return None
    if isinstance(failure, ApplicationError) and failure.type == ErrorType.RUN_FAILED:
        return shown(RunStatus.FAILED, failure.message)  # it settled FAILED, saying why
    return None


async def awaited_result(client: Client, workflow_id: str, execution: str | None) -> RunResult:
    """What the Run's execution returned, once it closed (its ``result()``): of the latest
    execution, followed past each continue-as-new and each reset, when ``execution`` (a
    Temporal run id) is None, else of that one (``WorkflowContinuedAsNewError`` when it
    continued as new; terminated, when reset).

    ``result()`` asks again, unseen, after each empty answer of its long poll (Temporal's,
    at its own interval), so the time it took is not the time its failed request waited:
    the close event of one execution, named by its run id, is waited for here, each long
    poll timed on its own and waiting ``HISTORY_LONG_POLL_TIMEOUT`` at most, and then read,
    which Temporal answers at once. The latest execution is described first for its run
    id; a close event naming the execution it went on as (a continue-as-new, a retry, a
    cron's next run) has that one's waited for the same way, as does a termination by a
    reset: its close event names no new execution (Temporal records the reset's reason,
    the identity ``history-resetter``), nor does the terminated execution's description
    when the reset was made from an earlier execution (``reset_run_id`` is the base's):
    the latest execution, described, is the reset's when it is another of the same chain
    (its first run id the one the Run's first describe read: a terminate alone starts
    none, and a workflow id reused starts another chain).

    Raises:
        WorkflowFailureError: the execution failed, was cancelled, terminated, timed out.
        TemporalUnanswered: Temporal did not answer a long poll of the close event (or a
            describe, within ``TEMPORAL_READ_TIMEOUT``) in time.
        TemporalCancelled: it gave one up at once (a CANCELLED under load).
        NotFound: no such Run.
        RPCError: Temporal refused otherwise.
    """
    what = "a long poll of the close event"
    run_id = execution
    chain = ""
    if run_id is None:
        latest = await _described(client, workflow_id, None)
        run_id, chain = latest.run_id, _first_run_id(latest)
    while True:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id, result_type=RunResult)
        closes = handle.fetch_history_events(
            wait_new_event=True,
            event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT,
            skip_archival=True,
            rpc_timeout=HISTORY_LONG_POLL_TIMEOUT,
        )
        close: HistoryEvent | None = None
        try:
            async for event in history_events(
                closes, workflow_id, HISTORY_LONG_POLL_TIMEOUT, what=what
            ):
                close = event
                break
        except (TemporalUnanswered, TemporalCancelled):
            raise
        except RPCError as err:
            raise mapped(err, workflow_id) from err
        if execution is None and close is not None:
            went_on = _went_on(close) or await _reset_to(client, workflow_id, run_id, close, chain)
            if went_on:
                run_id = went_on  # its close event waited for as this one's was
                continue
        asked_at = time.monotonic()
        try:  # one request: the execution, named, closed
            result: RunResult = await handle.result(
                follow_runs=False, rpc_timeout=HISTORY_LONG_POLL_TIMEOUT
            )
        except RPCError as err:
            raise read_mapped(
                err, workflow_id, what, HISTORY_LONG_POLL_TIMEOUT, asked_at=asked_at
            ) from err
        return result


async def _described(
    client: Client, workflow_id: str, run_id: str | None
) -> WorkflowExecutionDescription:
    """The execution ``run_id`` (None: the latest) of the Run described, within
    ``TEMPORAL_READ_TIMEOUT`` (``describe_within``; NOT_FOUND as ``NotFound``)."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    try:
        return await describe_within(handle, workflow_id, TEMPORAL_READ_TIMEOUT)
    except (TemporalUnanswered, TemporalCancelled):
        raise
    except RPCError as err:
        raise mapped(err, workflow_id) from err


async def _reset_to(
    client: Client, workflow_id: str, run_id: str, close: HistoryEvent, chain: str
) -> str | None:
    """The run id of the execution a reset started, when ``close``, the close event of
    ``run_id``, is a termination and the latest execution is another of the chain whose
    first run is ``chain``. Not ``run_id``'s ``workflow_extended_info.reset_run_id``:
    Temporal sets it on the reset's base execution, which is an earlier one when the reset
    was made from before a continue-as-new (the latest, terminated, then names none)."""
    if not close.HasField("workflow_execution_terminated_event_attributes"):
        return None
    latest = await _described(client, workflow_id, None)
    return latest.run_id if latest.run_id != run_id and _first_run_id(latest) == chain else None


def _first_run_id(described: WorkflowExecutionDescription) -> str:
    """The run id of the first execution of ``described``'s chain (continue-as-new, retry,
    cron and reset keep it)."""
    return described.raw_description.workflow_execution_info.first_run_id


_WENT_ON_FROM = (
    "workflow_execution_continued_as_new_event_attributes",
    "workflow_execution_completed_event_attributes",
    "workflow_execution_failed_event_attributes",
    "workflow_execution_timed_out_event_attributes",
)


def _went_on(close: HistoryEvent) -> str | None:
    """The run id of the execution the close event ``close`` names its workflow went on as
    (a continue-as-new; a retry or a cron's next run, which ``result()`` follows too)."""
    attributes = close.WhichOneof("attributes")
    if attributes not in _WENT_ON_FROM:
        return None
    return getattr(close, attributes).new_execution_run_id or None
