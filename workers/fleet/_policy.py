"""One approval policy per task queue: the worker identity that carries a policy's digest,
and the check that refuses to join a queue whose live workers carry another."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, DescribeTaskQueueResponse
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities.contract import (
    MODEL_ROLE,
    TOOLS_ROLE,
    WORKFLOWS_ROLE,
    role_task_queue,
)
from psych_runtime.activities.tools import Policy, policy_description, policy_digest
from psych_runtime.specs import PsychError
from psych_runtime.workflows import (
    TEMPORAL_READ_TIMEOUT,
    TemporalUnanswered,
    read_mapped,
    waited_out,
)

POLLER_LIVE_SECONDS = 90.0
"""A poller the server last saw longer ago than this is taken for a stopped worker. An
idle worker's long poll lasts about a minute, so a live one is always seen within it."""
_POLICY_IN_IDENTITY = re.compile(r"(?:\+|\spolicy=)([0-9a-f]{8})$")
"""The policy digest at the end of a worker identity: ``<pid>@<host>+<digest>``, or
``psych@<host>:<pid> policy=<digest>`` as workers before it wrote it (still read, so a
fleet being upgraded is checked across both)."""


_DECIDING_ROLES = (WORKFLOWS_ROLE, TOOLS_ROLE)
"""The roles whose workers decide approvals: the tools role runs ``psych.policy.decide``
for a Run whose fleet runs roles apart, the workflows role (which registers every
activity) for one whose fleet does not."""


def policy_queues(base: str, roles: Sequence[str]) -> tuple[str, ...]:
    """The task queues of the fleet ``base`` whose live workers a worker running ``roles``
    must agree with on its approval policy.

    A worker that decides approvals (workflows or tools role) is checked against the
    deciding workers of both queues, not only those of the queues it polls: a workflows-role
    worker started with ``--ask`` beside a tools-role worker without it would otherwise
    announce approvals that the tools worker, which decides for the Runs it starts, never
    asks for. The model role decides nothing and is checked on its own queue.
    """
    queues: list[str] = []
    for role in roles:
        for each in _DECIDING_ROLES if role in _DECIDING_ROLES else (MODEL_ROLE,):
            queue = role_task_queue(base, each)
            if queue not in queues:
                queues.append(queue)
    return tuple(queues)


def worker_identity(policy: Policy, base: str | None = None) -> str:
    """The Temporal identity of a psych worker: ``<pid>@<host>+<digest>``.

    Temporal's own default (``<pid>@<host>``) plus the policy digest (``policy_digest``),
    which lets every worker of a task queue see, through ``DescribeTaskQueue``, whether
    the others decide approvals as it does. ``base`` replaces ``<pid>@<host>``. Short on
    purpose: the identity is written into about ten history events per turn (every
    workflow and activity task started and completed), so each character costs a Run
    ten bytes a turn.
    """
    who = base or f"{os.getpid()}@{socket.gethostname()}"
    return f"{who}+{policy_digest(policy)}"


def digest_in_identity(identity: str) -> str | None:
    """The policy digest a worker identity ends with (either form), or None."""
    found = _POLICY_IN_IDENTITY.search(identity)
    return None if found is None else found.group(1)


async def check_fleet_policy(client: Client, task_queue: str, policy: Policy) -> None:
    """Refuse to join a task queue whose live psych workers use another approval policy.

    Every live poller (workflow and activity tasks) whose identity carries a policy
    digest (see ``worker_identity``) must carry this one. Pollers without a digest (not
    psych workers) cannot be compared and are left alone, as are pollers not seen for
    ``POLLER_LIVE_SECONDS``. A server without DescribeTaskQueue (the time-skipping test
    server) has nothing to compare.

    Raises:
        PsychError: another live worker's digest differs; the message names it and both
            digests, and this policy's description.
        TemporalUnanswered: Temporal did not answer a describe of the queue within
            ``TEMPORAL_READ_TIMEOUT`` (``_described``).
        TemporalCancelled: it answered the describe's last try a timeout's status at once.
    """
    ours = policy_digest(policy)
    now = datetime.now(UTC)
    others: dict[str, str] = {}
    for task_type in (
        TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    ):
        request = DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=task_type,
        )
        try:
            response = await _described(client, request)
        except RPCError as err:
            # Temporal's time-skipping test server implements no DescribeTaskQueue; it
            # serves the one process that started it, so there is no fleet to compare.
            if err.status is RPCStatusCode.UNIMPLEMENTED:
                return
            raise
        for poller in response.pollers:
            digest = digest_in_identity(poller.identity)
            seen = poller.last_access_time.ToDatetime(tzinfo=UTC)
            if digest is None or now - seen > timedelta(seconds=POLLER_LIVE_SECONDS):
                continue
            if digest != ours:
                others[poller.identity] = digest
    if others:
        listed = ", ".join(f"{who!r} (policy={digest})" for who, digest in sorted(others.items()))
        raise PsychError(
            f"refusing to start: task queue {task_queue!r} is polled by {listed}, whose approval "
            f"policy differs from this worker's (policy={ours}: {policy_description(policy)}). "
            "Workers of one queue (and the workflows and tools queues of one fleet) must "
            "decide alike, or a call that waits for approval on one runs unasked on another: "
            "give this worker the same --ask/--ask-destructive "
            "(PSYCH_ASK, PSYCH_ASK_DESTRUCTIVE), stop the other, or use another --task-queue. "
            f"A stopped worker drops out of this check {POLLER_LIVE_SECONDS:g} s after its "
            "last poll."
        )


DESCRIBE_TRIES = 5
"""How often a worker's start asks DescribeTaskQueue before a transient failure stops it."""
_TRANSIENT = frozenset(
    {RPCStatusCode.CANCELLED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED}
)


async def _described(
    client: Client, request: DescribeTaskQueueRequest
) -> DescribeTaskQueueResponse:
    """The server's answer to ``request``, asked again (the client's own retries, then
    ``DESCRIBE_TRIES`` in all, 0.2 s apart, doubling) while it fails transiently: a server
    under load answered one with CANCELLED, and the worker's start failed for it (seen
    in a CI run). A refusal, or a transient failure past the tries, is raised.

    Each try waits ``TEMPORAL_READ_TIMEOUT`` at most: one not answered in that time is
    Temporal's silence, not asked again (the client's timeout is a CANCELLED too, told
    apart by how long the try took: most of its timeout, against a server's transient
    answer at once).

    Raises:
        TemporalUnanswered: a try was not answered within ``TEMPORAL_READ_TIMEOUT``.
        TemporalCancelled: the last try was answered a timeout's status at once (a
            CANCELLED under load): Temporal gave the describe up, which is neither its
            silence nor a refusal (``read_mapped``, as ``has_live_poller`` says it).
        RPCError: Temporal refused, or failed transiently otherwise past the tries.
    """
    subject = f"task queue {request.task_queue.name!r}"
    tries = 1
    while True:
        asked_at = time.monotonic()
        try:
            return await client.workflow_service.describe_task_queue(
                request, retry=True, timeout=TEMPORAL_READ_TIMEOUT
            )
        except RPCError as err:
            if waited_out(err, asked_at, TEMPORAL_READ_TIMEOUT):
                raise TemporalUnanswered(
                    None, "a describe", TEMPORAL_READ_TIMEOUT, err, subject=subject
                ) from err
            if err.status not in _TRANSIENT or tries >= DESCRIBE_TRIES:
                raise read_mapped(
                    err,
                    None,
                    "a describe",
                    TEMPORAL_READ_TIMEOUT,
                    asked_at=asked_at,
                    subject=subject,
                ) from err
        await asyncio.sleep(0.2 * 2 ** (tries - 1))
        tries += 1
