"""What Temporal itself knows of a Run, without a worker: so no command waits on queries
that nobody answers.

A Run's state and records are queries, which Temporal hands to a worker polling the Run's
task queue; with none polling, a query waits until its deadline. ``status``, ``report``
and ``follow`` first ask ``run_facts`` (a describe and a DescribeTaskQueue, both answered
by the server itself) and, when no worker polls, print those facts instead.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.specs import AccessDenied, NotFound, Scope
from psych_runtime.workers.fleet._pollers import has_live_poller
from psych_runtime.workflows import (
    TEMPORAL_READ_TIMEOUT,
    TemporalCancelled,
    TemporalUnanswered,
    describe_within,
    parse_workflow_id,
)

QUERY_TIMEOUT = timedelta(seconds=3)
"""How long ``status``/``report`` wait for each query before they fall back to
``run_facts``. A live worker answers in milliseconds (a settled Run it must replay first,
in well under a second); the server goes on listing a stopped worker's poller for up to
a minute and a half, and a query to it waits for the whole timeout."""

# The contract's search attribute names (docs/guides/temporal-cli.md).
_TENANT = SearchAttributeKey.for_keyword("PsychTenant")
_AGENT = SearchAttributeKey.for_keyword("PsychAgent")
_VERSION = SearchAttributeKey.for_keyword("PsychVersion")
_STATUS = SearchAttributeKey.for_keyword("PsychStatus")
_SUSPENSION = SearchAttributeKey.for_keyword("PsychSuspension")


@dataclass(frozen=True)
class RunFacts:
    """A Run as the Temporal server describes it, with no worker involved."""

    workflow_id: str
    workflow_type: str
    task_queue: str
    execution_status: str
    """Temporal's own status of the workflow: ``RUNNING``, ``COMPLETED``, ``FAILED``,
    ``TERMINATED``, ...; a settled Run that did not complete still closes ``COMPLETED``."""
    status: str | None
    """The Run's status as it last upserted it (``PsychStatus``); None without search
    attributes."""
    suspension: str | None
    """What a suspended Run waits on (``PsychSuspension``: approval, question, ...)."""
    agent: str | None
    version_hash: str | None
    started_at: datetime | None
    closed_at: datetime | None
    worker_polling: bool
    """Whether a worker polls the Run's task queue for workflow tasks now, so its queries
    are answered."""


async def has_worker(client: Client, task_queue: str) -> bool:
    """Whether any worker polls ``task_queue`` for workflow tasks now.

    A poller the server last saw more than ``POLLER_LIVE_SECONDS`` ago is a stopped
    worker's (a live one polls again within about a minute); a worker stopped more
    recently than that still counts.

    Raises:
        TemporalUnanswered: Temporal did not answer the task queue's describe within
            ``TEMPORAL_READ_TIMEOUT`` (its ``why`` names the task queue).
    """
    return await has_live_poller(client, task_queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW)


async def run_facts(client: Client, workflow_id: str, *, scope: Scope) -> RunFacts:
    """What the server knows of the Run ``workflow_id``; needs no worker.

    Raises:
        NotFound: no such Run (or not a psych Run id).
        AccessDenied: the Run belongs to another tenant than ``scope``'s.
        TemporalUnanswered: Temporal did not answer its describe within
            ``TEMPORAL_READ_TIMEOUT``.
    """
    tenant, _ = parse_workflow_id(workflow_id)
    if tenant != scope.tenant:
        raise AccessDenied(f"Run {workflow_id} does not belong to tenant {scope.tenant!r}")
    try:
        handle = client.get_workflow_handle(workflow_id)
        description = await describe_within(handle, workflow_id, TEMPORAL_READ_TIMEOUT)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise NotFound(f"no Run {workflow_id}") from err
        raise
    attributes = description.typed_search_attributes
    owner = attributes.get(_TENANT)
    if owner is not None and owner != scope.tenant:
        raise AccessDenied(f"Run {workflow_id} does not belong to tenant {scope.tenant!r}")
    status = description.status
    return RunFacts(
        workflow_id=workflow_id,
        workflow_type=description.workflow_type,
        task_queue=description.task_queue,
        execution_status=status.name if status is not None else "UNKNOWN",
        status=attributes.get(_STATUS),
        suspension=attributes.get(_SUSPENSION),
        agent=attributes.get(_AGENT),
        version_hash=attributes.get(_VERSION),
        started_at=description.start_time,
        closed_at=description.close_time,
        worker_polling=await has_worker(client, description.task_queue),
    )


def no_answer_notice(facts: RunFacts) -> str:
    """The one line saying why the Run's own answer is missing, for standard error."""
    if facts.worker_polling:
        why = f"no worker of task queue {facts.task_queue!r} answered within " + (
            f"{QUERY_TIMEOUT.total_seconds():g} s"
        )
    else:
        why = f"no worker polls task queue {facts.task_queue!r} (`psych worker` starts one)"
    return f"psych: {facts.workflow_id} cannot answer: {why}; what Temporal itself knows:"


def _time(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value is not None else "-"


def format_facts(facts: RunFacts) -> str:
    """The facts as aligned ``label: value`` lines."""
    status = facts.status or "unknown (no PsychStatus search attribute)"
    if facts.suspension and facts.status == "suspended":
        status += f", waiting on {facts.suspension}"
    agent = facts.agent or "-"
    if facts.version_hash:
        agent += f" ({facts.version_hash})"
    polling = "a worker polls it" if facts.worker_polling else "no worker polls it"
    rows = [
        ("run", facts.workflow_id),
        ("status", status),
        ("temporal", f"{facts.execution_status} ({facts.workflow_type})"),
        ("agent", agent),
        ("started", _time(facts.started_at)),
        ("closed", _time(facts.closed_at)),
        ("task queue", f"{facts.task_queue} ({polling})"),
    ]
    return "\n".join(f"{label + ':':<12}  {value}" for label, value in rows)


def facts_json(facts: RunFacts) -> str:
    """The facts as a JSON object (times ISO 8601, ``worker_polling`` telling them apart
    from a RunState or a RunReport)."""
    data = asdict(facts)
    for key in ("started_at", "closed_at"):
        value = data[key]
        data[key] = value.isoformat() if value is not None else None
    return json.dumps(data, indent=2)


def unanswered(err: RPCError) -> bool:
    """Whether a failed query means no worker answered (rather than a real refusal). Not
    a ``TemporalUnanswered`` (a read Temporal itself did not answer: a closed Run's
    describe) nor a ``TemporalCancelled`` (one it gave up at once), though their status is
    a timeout's: the command says that, not "no worker"."""
    said_by_temporal = isinstance(err, TemporalUnanswered | TemporalCancelled)
    return not said_by_temporal and err.status in (
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.CANCELLED,
        RPCStatusCode.FAILED_PRECONDITION,  # the server's word for "no poller took it"
    )


def print_fallback(facts: RunFacts, *, json_output: bool) -> None:
    """Say on standard error why the Run cannot answer; print the facts on standard output."""
    print(no_answer_notice(facts), file=sys.stderr, flush=True)
    print(facts_json(facts) if json_output else format_facts(facts))
