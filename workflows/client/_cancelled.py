"""A Run whose workflow Temporal cancelled, read with no worker (``_closed.py``).

A cancelled workflow's close event carries nothing (the Run raises the cancellation as
Temporal expects), but the Run settled ABORTED as it was cancelled, with a reason fixed but
for one note: how many messages it took and did not deliver (``CANCELLED_REASON``, then
``with_undelivered``). Its history says both, with no worker:

- whether the Run settled as it was cancelled: its ``PsychStatus`` was last set (an upsert
  of its search attributes) after Temporal was asked to cancel it. Set terminal before,
  the Run had settled otherwise (its reason and answer are its state's alone);
- that it left no message undelivered: its execution took no steer (an update or a signal;
  an update a reset reapplied is in an ``UpdateAdmitted`` event, its ``UpdateAccepted``
  holding no request) and the execution it continued from, if any, handed it none (its
  input's ``carry``, read only then). When it took one, only its state says whether a
  model read it.

Anything else (or a history not read to its end here: an input this client cannot decode)
is its state's to say (None).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.converter import PayloadConverter
from temporalio.service import RPCError

from psych_runtime.workflows.client._asked import (
    HistoryNotRead,
    TemporalCancelled,
    history_events,
    mapped,
)
from psych_runtime.workflows.contract._contract import (
    CANCELLED_REASON,
    SA_STATUS,
    STEER,
    RunInput,
)
from psych_runtime.workflows.contract._records import RunStatus


async def cancelled_reason(
    client: Client,
    execution: WorkflowHandle[Any, Any],
    workflow_id: str,
    rpc_timeout: timedelta | None,
) -> str | None:
    """The reason of the Run whose latest ``execution`` Temporal cancelled, when its history
    shows it settled ABORTED as it was cancelled with no message undelivered (the module
    docstring); None when only its state says how it settled.

    Each page of the history is read within ``rpc_timeout`` (None: the client's default,
    which may be none: give one).

    Raises:
        NotFound: its history gone meanwhile.
        HistoryNotRead: Temporal did not answer a page within ``rpc_timeout``.
        TemporalCancelled: it gave a page up at once (a CANCELLED under load).
        RPCError: Temporal could not read its history.
    """
    cancel_asked = False
    settled_as_cancelled = False
    try:
        pages = execution.fetch_history_events(skip_archival=True, rpc_timeout=rpc_timeout)
        async for event in history_events(pages, workflow_id, rpc_timeout):
            if event.HasField("workflow_execution_started_event_attributes"):
                if await _handed_messages(client, event):
                    return None
            elif event.HasField("workflow_execution_cancel_requested_event_attributes"):
                cancel_asked = True
            elif _took_steer(event):
                return None
            elif (status := _status_set(event)) in _TERMINAL:
                if not cancel_asked or status != RunStatus.ABORTED:
                    return None  # it settled before it was cancelled: its state says how
                settled_as_cancelled = True
    except (HistoryNotRead, TemporalCancelled):  # each page's read waits ``rpc_timeout``
        raise
    except RPCError as err:
        raise mapped(err, workflow_id) from err
    return CANCELLED_REASON if settled_as_cancelled else None


async def _handed_messages(client: Client, started: HistoryEvent) -> bool:
    """Whether the execution ``started`` began was handed messages not yet delivered by the
    one it continued from (a Run's first execution is handed none: its input has no
    ``carry``); True as well when its input cannot be read here (undecided)."""
    attributes = started.workflow_execution_started_event_attributes
    if not attributes.continued_execution_run_id:
        return False
    payloads = attributes.input.payloads
    if not payloads:
        return True
    try:
        (input, *_) = await client.data_converter.decode(payloads[:1], [RunInput])
    except Exception:  # not decoded here (a codec's key not held, say): its state says
        return True
    carry = input.carry if isinstance(input, RunInput) else None
    return carry is not None and bool(carry.steer or carry.follow_up or carry.unanswered)


def _took_steer(event: HistoryEvent) -> bool:
    """Whether ``event`` delivered a steer to the execution (a signal, or an update it
    accepted), or may have: an update Temporal admitted durably (reapplied by a reset),
    whose ``UpdateAccepted`` then holds no request, its ``UpdateAdmitted`` (earlier in the
    same history) does."""
    if event.HasField("workflow_execution_signaled_event_attributes"):
        return event.workflow_execution_signaled_event_attributes.signal_name == STEER
    if event.HasField("workflow_execution_update_admitted_event_attributes"):
        admitted = event.workflow_execution_update_admitted_event_attributes
        return admitted.request.input.name == STEER
    if event.HasField("workflow_execution_update_accepted_event_attributes"):
        accepted = event.workflow_execution_update_accepted_event_attributes
        return accepted.accepted_request.input.name == STEER  # none: judged as admitted
    return False


_TERMINAL = {status.value for status in RunStatus if status.terminal}


def _status_set(event: HistoryEvent) -> str | None:
    """The ``PsychStatus`` an upsert of the search attributes set, if it set one."""
    if not event.HasField("upsert_workflow_search_attributes_event_attributes"):
        return None
    fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
    payload = fields.indexed_fields.get(SA_STATUS)
    if payload is None or not payload.data:
        return None
    value = PayloadConverter.default.from_payload(payload)
    return value if isinstance(value, str) else None
