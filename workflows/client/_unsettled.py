"""A Run whose workflow execution Temporal closed without the Run settling (an operator's
terminate, an execution timeout, the execution a reset terminates): its ``PsychStatus``
and its state still say running or suspended, as the execution was cut. Listings
(``_listing.py``) and ``PsychClient.status`` show it failed instead, as ``result()`` ends
it (``RunFailed``); this module decides that for both.

``status`` asks the state query with Temporal's reject condition ``NOT_COMPLETED_CLEANLY``:
the server answers an open or completed execution's query as before (so a live Run's read
costs nothing more), and refuses a closed one's otherwise at once, naming how it closed,
without asking a worker. Only then is the execution described and its state asked again
(a worker replays the closed execution), and, when that state is not terminal, the reason
``result()`` gives read from its close event (``closed_state``). A close event whose
payloads this client cannot decode (a terminate's details sealed with a key its codec
does not hold) still gives the reason, read undecoded: the codec's refusal, an
``AccessDenied``, made the Run read as another tenant's (A2A: task not found).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowHistoryEventFilterType,
)
from temporalio.common import QueryRejectCondition, SearchAttributeKey
from temporalio.service import RPCError

from psych_runtime.workflows.client._asked import (
    TEMPORAL_READ_TIMEOUT,
    ClosedStateUnanswered,
    query_run,
    read_mapped,
    unanswered,
)
from psych_runtime.workflows.contract._contract import QUERY_STATE, SA_STATUS, RunState
from psych_runtime.workflows.contract._records import RunStatus

OPEN = (
    WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING,
    WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW,
)
"""Temporal's statuses of an execution that does not end its Run: open, or handed on to
the next execution (continue-as-new). Any other closed execution (terminated, timed out,
a reset's terminated one...) whose ``PsychStatus`` is not terminal ended without the Run
settling: it is shown ``failed`` (``UNSETTLED_SHOWN``)."""
OPEN_NAMES = "('Running', 'ContinuedAsNew')"
"""``OPEN`` as the visibility query names them (``ExecutionStatus``)."""
UNSETTLED_SHOWN = RunStatus.FAILED
"""The status shown for a Run whose workflow execution closed without it settling (its
``PsychStatus`` and its state still say running or suspended): the one ``result()`` gives
it (it raises ``RunFailed``), and A2A's (failed)."""
UNSETTLED = tuple(str(status) for status in RunStatus if not status.terminal)
"""The ``PsychStatus`` values of a Run that has not settled."""
REJECT_CLOSED = QueryRejectCondition.NOT_COMPLETED_CLEANLY
"""The reject condition of ``status``'s state query (see the module docstring)."""


def closed_unsettled(status: RunStatus | str | None, execution: int | None) -> str | None:
    """How Temporal closed a Run's execution (``terminated``, ``timed_out``...: its
    ``ExecutionStatus``, lower case) when it closed without the Run settling: the Run's
    ``status`` is not terminal and ``execution`` (Temporal's status of it, None: unknown)
    is neither open nor continued-as-new. None otherwise."""
    if execution is None or execution in OPEN or str(status) not in UNSETTLED:
        return None
    name = WorkflowExecutionStatus.Name(WorkflowExecutionStatus.ValueType(execution))
    return name.removeprefix("WORKFLOW_EXECUTION_STATUS_").lower()


def failure_reason(err: WorkflowFailureError) -> str:
    """Why a workflow's result failed, as ``result()`` says it in ``RunFailed``: the
    terminate's reason, "Workflow timed out", the failure's message."""
    cause = err.cause
    return getattr(cause, "message", None) or str(cause or err)


async def closed_state(client: Client, workflow_id: str, rpc_timeout: timedelta | None) -> RunState:
    """The state of the Run ``workflow_id`` whose latest execution closed other than
    cleanly (its state query was rejected, ``REJECT_CLOSED``), as it is shown: that
    execution is described, asked (no reject condition) by its own run id and, when it
    closed without the Run settling, its state shown failed (``UNSETTLED_SHOWN``), waiting
    on nothing, with a reason naming how Temporal closed it and why (``result()``'s reason,
    read from its close event).

    Raises:
        NotFound: no such Run (its history gone meanwhile).
        TemporalUnanswered: Temporal did not answer its describe within ``rpc_timeout``.
        ClosedStateUnanswered: no worker answered its state in time.
        RPCError: Temporal or the query failed otherwise, as for ``query_run``.
    """
    bound = rpc_timeout or TEMPORAL_READ_TIMEOUT
    asked_at = time.monotonic()
    try:
        described = await client.get_workflow_handle(workflow_id).describe(rpc_timeout=bound)
    except RPCError as err:
        raise read_mapped(err, workflow_id, "a describe", bound, asked_at=asked_at) from err
    execution = client.get_workflow_handle(workflow_id, run_id=described.run_id)
    try:
        state: RunState = await query_run(
            execution, workflow_id, QUERY_STATE, None, RunState, rpc_timeout=rpc_timeout
        )
    except RPCError as err:
        closed = described.status
        if not unanswered(err) or closed is None or int(closed) in OPEN:
            raise  # open again meanwhile (a reset): a query no worker answered, no more
        status = described.typed_search_attributes.get(SearchAttributeKey.for_keyword(SA_STATUS))
        unsettled = closed_unsettled(status, int(closed)) is not None  # its close event says
        raise ClosedStateUnanswered(
            workflow_id, closed.name.lower(), err, unsettled=unsettled
        ) from err
    closed_as = closed_unsettled(
        state.status, None if described.status is None else int(described.status)
    )
    if closed_as is None:
        return state
    reason = await unsettled_reason(execution, closed_as, rpc_timeout)
    return state.model_copy(update={"status": UNSETTLED_SHOWN, "reason": reason, "pending": ()})


async def closed_without_settling(
    client: Client, workflow_id: str, rpc_timeout: timedelta | None = None
) -> str | None:
    """Read without a worker: when the latest execution of the Run ``workflow_id`` closed
    without the Run settling (its ``PsychStatus``, a search attribute, is not terminal,
    and the execution is neither open nor continued as new), the ``reason`` its state is
    shown ``failed`` with (``closed_state``'s, from the close event); None when the
    execution is open, or the Run settled (its state, which a worker answers, says how).

    Asking the Run's state of a closed execution needs a worker to replay it; this needs
    none, so a reader with no worker polling (``psych serve``'s A2A stream of a Run an
    operator terminated) still answers how it ended.

    Raises:
        NotFound: no such Run.
        TemporalUnanswered: Temporal did not answer its describe within ``rpc_timeout``
            (None: ``TEMPORAL_READ_TIMEOUT``).
        RPCError: Temporal could not describe it.
    """
    bound = rpc_timeout or TEMPORAL_READ_TIMEOUT
    asked_at = time.monotonic()
    try:
        described = await client.get_workflow_handle(workflow_id).describe(rpc_timeout=bound)
    except RPCError as err:
        raise read_mapped(err, workflow_id, "a describe", bound, asked_at=asked_at) from err
    status = described.typed_search_attributes.get(SearchAttributeKey.for_keyword(SA_STATUS))
    execution_status = None if described.status is None else int(described.status)
    closed_as = closed_unsettled(status, execution_status)
    if closed_as is None:
        return None
    execution = client.get_workflow_handle(workflow_id, run_id=described.run_id)
    return await unsettled_reason(execution, closed_as, rpc_timeout)


async def unsettled_reason(
    execution: WorkflowHandle[Any, Any], closed_as: str, rpc_timeout: timedelta | None
) -> str:
    """The reason of a Run shown failed whose ``execution`` Temporal closed (``closed_as``)
    before it settled: how, and why (``result()``'s reason, read from its close event)."""
    why = ""
    try:
        await execution.result(follow_runs=False, rpc_timeout=rpc_timeout)
    except WorkflowFailureError as err:
        why = f": {failure_reason(err)}"
    except RPCError as err:
        why = f" (why could not be read: {err.message})"
    except Exception:  # what it holds not decoded here (a codec's key not held, say)
        why = await _undecoded_why(execution, rpc_timeout)
    return f"Temporal closed the Run's workflow execution ({closed_as}) before the Run settled{why}"


async def _undecoded_why(execution: WorkflowHandle[Any, Any], rpc_timeout: timedelta | None) -> str:
    """Why ``execution`` closed, read from its close event undecoded: a terminate's reason
    is plain text (its details are not); a failure's message may be sealed, so is not told.
    The codec's refusal is not: its words name keys and tenants."""
    try:
        async for event in execution.fetch_history_events(
            event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT,
            skip_archival=True,
            rpc_timeout=rpc_timeout,
        ):
            if event.HasField("workflow_execution_terminated_event_attributes"):
                reason = event.workflow_execution_terminated_event_attributes.reason
                return f": {reason or 'Workflow terminated'}"
    except RPCError as err:
        return f" (why could not be read: {err.message})"
    return " (why could not be read: its close event could not be decoded here)"
