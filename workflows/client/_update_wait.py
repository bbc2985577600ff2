"""How long an update of a Run (resume, approve, deny, answer, complete, abort, steer; the
wait for a keyed request's outcome, ``taken``) waits for the Run's worker.

Temporal holds an update until a worker of the Run's task queue takes and answers it, for
as long as the caller waits. The SDK's ``rpc_timeout`` does not bound that wait
(temporalio 1.35, ``client/_impl.py`` ``start_workflow_update``): it is each RPC's; the
SDK sends ``UpdateWorkflowExecution`` again while the server answers it "not accepted
yet", then polls ``PollWorkflowExecutionUpdate`` for the outcome with no timeout at all
(``execute_update`` does not pass it on), again after each empty answer (``result``'s
``rpc_timeout`` is each poll's: measured on the dev server with no worker, 3 s ended after
two polls, 6.1 s). So the whole wait is bounded here, ``asyncio.timeout`` around it: the
SDK turns the cancellation into its ``WorkflowUpdateRPCTimeoutOrCancelledError``, raised
as ``UpdateUnanswered`` when the bound ran out; the same error of a timeout's status
Temporal answered (a CANCELLED under load) as ``UpdateEndedByTemporal``.

Past the bound nothing the SDK saw tells "no worker took it" (Temporal admitted the update
and holds it) from "Temporal did not answer" (its send never answered): its loop swallows
the answers short of ACCEPTED. So Temporal is asked once more, how far it has the update
(``held_stage``: one PollWorkflowExecutionUpdate waiting for no stage past ADMITTED, which
it answers at once, 2 ms measured on the dev server), and ``UpdateUnanswered`` says which;
not when the bound ran out in the pause after Temporal refused an attempt as not ready
(``Sent.not_ready``): then it holds no such update, and it did answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage as Stage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import Client, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.workflows.client._asked import given_timeout

UPDATE_TIMEOUT = timedelta(seconds=10)
"""How long an update of a Run waits for the Run's worker to take and answer it, where the
caller gives no ``update_timeout`` (the serve's query timeout's default)."""


class UpdateUnanswered(WorkflowUpdateRPCTimeoutOrCancelledError):
    """The Run's worker did not take and answer an update within its ``update_timeout``
    (none polls the Run's task queue, or Temporal did not answer). The request was sent:
    it may still be applied when a worker takes it. The SDK's error for an update's wait
    that ended (callers handling that still do); ``why`` says it in words, with how to
    learn the outcome, and which of the two it was when Temporal said how far it has the
    update (``held``). Pickles and copies whole (``__reduce__``)."""

    held: str | None = None
    """How far Temporal had the update, asked once the bound ran out (``held_stage``):
    ``admitted``, ``accepted``, ``completed``, ``unknown``; ``not-ready``: not asked,
    Temporal refused its last attempt as not ready (``Sent.not_ready``); None: not
    asked, or no answer. A class default too: one pickled before the attribute existed
    is rebuilt from its ``__dict__`` (``_rebuilt``), which has none, and reads None."""

    def __init__(
        self,
        workflow_id: str,
        what: str,
        timeout: timedelta,
        idempotency_key: str | None,
        *,
        held: str | None = None,
    ) -> None:
        self.workflow_id = workflow_id
        """The Run the update was sent to."""
        self.what = what
        """The request, in words (``the update psych.resume``)."""
        self.timeout = timeout
        """How long it waited."""
        self.idempotency_key = idempotency_key
        """The key it was sent under (None: none)."""
        self.held = held
        within = f"within {timeout.total_seconds():g} s"
        learn = _learn(idempotency_key)
        if held == "admitted":
            said = (
                f"no worker took {what} {within} (Temporal holds it: none polls the Run's "
                f"task queue, or its worker is busy); it may still be applied when a worker "
                f"takes it: {learn}"
            )
        elif held == "accepted":
            said = (
                f"the Run's worker took {what} but had not answered it {within}; it may "
                f"still be applied: {learn}"
            )
        elif held == "completed":  # its answer was lost on the way, or came just after
            said = (
                f"the Run's worker answered {what}, but its answer did not come back "
                f"{within} (Temporal, asked after, has it answered): {learn}"
            )
        elif held == "not-ready":
            said = (
                f"Temporal refused {what} as not ready (the Run's workflow task that carried "
                f"it failed, so it was not applied) and {timeout.total_seconds():g} s ran out "
                f"before it was sent again: {learn}"
            )
        elif held == "unknown":
            said = (
                f"Temporal did not answer {what} {within}, and, asked after, holds no such "
                f"update (it most likely never received it; no worker is waited for): {learn}"
            )
        else:
            said = (
                f"no worker took and answered {what} {within} (none polls the Run's task "
                f"queue, or Temporal did not answer); it may still be applied when a worker "
                f"takes it: {learn}"
            )
        self.why = f"Run {workflow_id}: {said}"
        Exception.__init__(self, self.why)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), self.args, self.__dict__))


class UpdateEndedByTemporal(WorkflowUpdateRPCTimeoutOrCancelledError):
    """Temporal ended an update's call (its send, or the wait for its outcome) with a
    timeout's status before the Run answered it: a CANCELLED a server under load answers,
    a DEADLINE_EXCEEDED of its own, not the caller's ``update_timeout`` (that is
    ``UpdateUnanswered``). The SDK's error for it (its bare one, whose cause is the
    ``RPCError``), ``why`` in words; the request may have been taken, and may still be
    applied. Pickles and copies whole (``__reduce__``)."""

    def __init__(
        self, workflow_id: str, what: str, cause: RPCError, idempotency_key: str | None
    ) -> None:
        self.workflow_id = workflow_id
        """The Run the update was sent to."""
        self.status = cause.status
        """The status Temporal answered."""
        self.said = (
            f"Temporal ended {what} ({cause.status.name}: {cause.message}) before the Run "
            "answered it"
        )
        """What happened, without the Run's id or what to do (REST's detail starts so)."""
        self.idempotency_key = idempotency_key
        """The key it was sent under (None: none)."""
        self.why = (
            f"Run {workflow_id}: {self.said}; it may still be applied: {_learn(idempotency_key)}"
        )
        Exception.__init__(self, self.why)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), self.args, self.__dict__))


def _learn(idempotency_key: str | None) -> str:
    """How the caller of an update whose outcome it did not learn learns it."""
    if idempotency_key is None:
        return (
            "read the Run's state before sending it again (sent under an idempotency "
            "key, it could be sent again safely)"
        )
    return (
        f"send it again under the same idempotency key ({idempotency_key!r}), or ask "
        "`taken` with it, to learn its outcome: it is applied at most once"
    )


def _rebuilt(cls: type[Exception], args: tuple[Any, ...], state: dict[str, Any]) -> Exception:
    """An error of ``cls`` with ``args`` and ``state``, its ``__init__`` not run (it builds
    the message from its arguments, which the default rebuild does not pass)."""
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


def update_timeout_given(value: timedelta | None) -> timedelta:
    """The bound of an update's wait: ``value``, else ``UPDATE_TIMEOUT``.

    Raises:
        ValueError: zero or negative, naming ``update_timeout`` (``given_timeout``).
    """
    return given_timeout(value, "update_timeout") or UPDATE_TIMEOUT


HELD_READ_TIMEOUT = timedelta(seconds=2)
"""How long ``held_stage`` waits for Temporal's answer (one it gives at once), past the
update's own bound."""

_HELD = {
    Stage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED: "admitted",
    Stage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ACCEPTED: "accepted",
    Stage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_COMPLETED: "completed",
}


async def held_stage(client: Client, workflow_id: str, update_id: str) -> str | None:
    """How far Temporal has the update ``update_id`` of the Run ``workflow_id`` (its latest
    execution): ``admitted`` (it holds it, no worker took it), ``accepted`` (the Run's
    worker took it and has not answered), ``completed``, or ``unknown`` (NOT_FOUND: it
    holds no such update). None when it did not answer within ``HELD_READ_TIMEOUT`` or
    failed otherwise: the caller then says what it knew before asking."""
    request = PollWorkflowExecutionUpdateRequest(
        namespace=client.namespace,
        update_ref=UpdateRef(
            workflow_execution=WorkflowExecution(workflow_id=workflow_id), update_id=update_id
        ),
        identity=client.identity,
        wait_policy=WaitPolicy(
            lifecycle_stage=Stage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
        ),
    )
    try:
        answer = await client.workflow_service.poll_workflow_execution_update(
            request, timeout=HELD_READ_TIMEOUT
        )
    except RPCError as err:
        return "unknown" if err.status == RPCStatusCode.NOT_FOUND else None
    return _HELD.get(answer.stage)


@dataclass
class Sent:
    """An update sent in ``update_wait``'s block: the client that sent it and its id, for
    ``held_stage`` once the bound ran out."""

    client: Client
    update_id: str
    not_ready: bool = False
    """Temporal refused its last attempt as not ready and it is not sent again yet: the
    bound running out then is said so, not asked (Temporal holds no such update)."""


@contextlib.asynccontextmanager
async def update_wait(
    workflow_id: str,
    what: str,
    wait: timedelta,
    idempotency_key: str | None,
    sent: Sent | None = None,
) -> AsyncIterator[None]:
    """Bound the update waited for in the block by ``wait``. ``sent``: the update sent,
    for ``held_stage`` once the bound ran out (up to ``HELD_READ_TIMEOUT`` more).

    Raises:
        UpdateUnanswered: the bound ran out (the SDK's error for it, or a sleep between
            attempts cut short).
        UpdateEndedByTemporal: Temporal ended a call with a timeout's status first.
    """
    bound = asyncio.timeout(wait.total_seconds())
    try:
        async with bound:
            yield
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
        if bound.expired():
            held = None
            if sent is not None:
                held = "not-ready" if sent.not_ready else None
                held = held or await held_stage(sent.client, workflow_id, sent.update_id)
            raise UpdateUnanswered(workflow_id, what, wait, idempotency_key, held=held) from err
        # The SDK turns a CANCELLED or DEADLINE_EXCEEDED Temporal answers into its error
        # too (its cause); any other is the caller's own cancellation, not ours to answer.
        cause = err.__cause__
        if isinstance(err, WorkflowUpdateRPCTimeoutOrCancelledError) and isinstance(
            cause, RPCError
        ):
            raise UpdateEndedByTemporal(workflow_id, what, cause, idempotency_key) from err
        raise
