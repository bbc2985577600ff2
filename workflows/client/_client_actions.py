"""PsychClient's resume, approve, deny, answer, complete, abort and steer calls.

Each is an update the Run's worker answers; its payload is checked against the contract's
size bounds before it is sent, and a refusal comes back as ``Refused`` (its ``kind`` a
``RefusalKind``) or ``AccessDenied`` for another tenant's Run.

Each takes an ``idempotency_key``: the caller's name for the request, so that sending it
again (after a timeout, a lost answer, a 503) applies it at most once. It becomes the
update's id (``update_id``); Temporal keeps a Run's update ids, so a second update of the
same id gets the first one's outcome (and waits for it if it is still running) instead
of being applied again, even once the Run has settled. A request the Run refused when it
came (not suspended, already answered) left nothing behind: sent again, it is checked
again; one the Run took and then refused keeps that refusal under its id. Temporal
keeps the ids per workflow execution; a Run that continues as new hands on the ids of its
last keyed actions with their answers (``workflows/kernel/_kept_actions.py``), so the next
execution answers a request sent again as the first was; once such a Run has settled, the
answer is read with the ``psych.kept_action`` query.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, Literal

from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.specs import AccessDenied, NotFound, PsychError, Refused, Scope
from psych_runtime.workflows.client._asked import (
    TemporalCancelled,
    TemporalUnanswered,
    unanswered,
)
from psych_runtime.workflows.client._update_wait import Sent, update_timeout_given, update_wait
from psych_runtime.workflows.contract._carry import KeptAction
from psych_runtime.workflows.contract._contract import (
    ABORT,
    QUERY_KEPT_ACTION,
    RESUME,
    STEER,
    AbortInput,
    RefusalKind,
    ResumeInput,
    ResumeResult,
    RunHandle,
    RunState,
    SteerInput,
    sent_problem,
)
from psych_runtime.workflows.contract._records import SuspensionReason

IDEMPOTENCY_KEY_MAX = 256
"""The longest ``idempotency_key`` an action (or ``dispatch``) takes, in characters."""

KEPT_QUERY_TIMEOUT = timedelta(seconds=10)
"""How long an action sent again waits for a worker to say what the Run kept of it (after
continue-as-new; a settled Run's query is answered by replaying its history)."""


def update_id(name: str, idempotency_key: str | None) -> str | None:
    """The id of update ``name`` sent under ``idempotency_key`` (None: a fresh id).

    A digest of the key, so any key fits an update id. The update's name is part of it:
    approve, deny, answer and complete share ``psych.resume``'s (a key reused across them
    is caught by ``resume``), steer and abort have their own.

    Raises:
        ValueError: an empty key, or one over ``IDEMPOTENCY_KEY_MAX`` characters.
    """
    if idempotency_key is None:
        return None
    if not 0 < len(idempotency_key) <= IDEMPOTENCY_KEY_MAX:
        raise ValueError(
            f"idempotency key of {len(idempotency_key)} characters: it must have 1 to "
            f"{IDEMPOTENCY_KEY_MAX}"
        )
    return f"{name}/{hashlib.sha256(idempotency_key.encode()).hexdigest()}"


NOT_READY_DELAYS = (0.1, 0.2, 0.4, 0.8, 1.6)
"""Seconds between the attempts of an update the server aborted because the workflow task
carrying it failed (``_not_ready``)."""


def _not_ready(err: RPCError) -> bool:
    """Whether the server aborted the update because the workflow task that carried it
    failed: a task completed while an activity's result arrived (common while local
    activities hold a turn's task) is failed and scheduled again, and every update it
    carried is refused ``WorkflowNotReady``, not applied. Sent again, it rides the next."""
    if err.status != RPCStatusCode.FAILED_PRECONDITION:
        return False
    details = err.grpc_status.details
    return any(d.type_url.endswith(".WorkflowNotReadyFailure") for d in details)


@contextlib.contextmanager
def _refusals(workflow_id: str) -> Iterator[None]:
    """An update the Run refused, as the caller is told of it: ``AccessDenied``, or
    ``Refused`` with its kind; a failure whose cause is no refusal stands as the SDK's."""
    try:
        yield
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        if not isinstance(cause, ApplicationError):
            raise
        if cause.type == RefusalKind.ACCESS_DENIED:
            raise AccessDenied(cause.message) from err
        raise Refused(cause.type or "Refused", f"{workflow_id}: {cause.message}") from err


_KEPT_OR_NONE: Any = KeptAction | None
"""The query's result type (the SDK types it as a class; a union decodes the same)."""


async def _kept_action(
    handle: WorkflowHandle[Any, Any], id: str, wait: timedelta
) -> KeptAction | None:
    """What the Run keeps of the update ``id`` it took in an execution it continued from
    (``psych.kept_action``), waited for ``wait`` at most; None if nothing, or if it cannot
    say (a worker of a build before the query, none answering in time, the Run gone)."""
    try:
        kept: KeptAction | None = await handle.query(
            QUERY_KEPT_ACTION, id, result_type=_KEPT_OR_NONE, rpc_timeout=wait
        )
    except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
        return None
    return kept


def _answers(result: ResumeResult, request: ResumeInput) -> bool:
    """Whether ``result`` can be ``request``'s outcome (what it says of it: the item, the
    kind of answer, and an approval's verdict)."""
    if (result.reason, result.id) != (request.reason, request.id):
        return False
    if request.reason is SuspensionReason.APPROVAL:
        return (result.outcome == "approved") == bool(request.approved)
    return True


def _left(deadline: float, most: timedelta | None = None) -> timedelta | None:
    """The time left until ``deadline`` (``time.monotonic()``), ``most`` at most; None when
    under 10 ms are left (a zero RPC timeout is none at all to the SDK)."""
    left = timedelta(seconds=deadline - time.monotonic())
    if left < timedelta(milliseconds=10):
        return None
    return left if most is None else min(left, most)


def _settled_unread(workflow_id: str, timeout: timedelta) -> Refused:
    """The refusal of an update Temporal refused because the Run settled, when no worker
    said how it settled within the update's ``timeout``."""
    return Refused(
        RefusalKind.NOT_SUSPENDED,
        f"{workflow_id} has settled (no worker answered how within "
        f"{timeout.total_seconds():g} s: `status` says it once one polls the Run's task queue)",
    )


class RunActions(abc.ABC):
    """The calls that act on a Run (PsychClient has them all)."""

    temporal: Client

    @abc.abstractmethod
    def _handle(self, run: RunHandle | str, scope: Scope) -> tuple[str, WorkflowHandle[Any, Any]]:
        """The Run's workflow id and handle, after checking the caller's tenant owns it."""

    @abc.abstractmethod
    async def status(
        self, run: RunHandle | str, *, scope: Scope, query_timeout: timedelta | None = None
    ) -> RunState:
        """The Run's state (the ``psych.state`` query), waited for ``query_timeout``."""

    async def _update(
        self,
        run: RunHandle | str,
        scope: Scope,
        name: str,
        arg: Any,
        result_type: type[Any],
        idempotency_key: str | None,
        update_timeout: timedelta | None,
    ) -> Any:
        timeout = update_timeout_given(update_timeout)
        deadline = time.monotonic() + timeout.total_seconds()
        # One id for every attempt (a fresh one without a key): a retried update the
        # server did take is answered once, not applied twice.
        keyed = update_id(name, idempotency_key)
        id = keyed or f"{name}@{uuid.uuid4()}"
        workflow_id, handle = self._handle(run, scope)
        problem = sent_problem(arg)
        if problem is not None:
            raise Refused(RefusalKind.TOO_LARGE, f"{workflow_id}: {problem}")
        try:
            # One bound for every attempt (``timeout`` in all); ``sent``: how the last went.
            sent, what = Sent(self.temporal, id), f"the update {name}"
            async with update_wait(workflow_id, what, timeout, idempotency_key, sent):
                for delay in (*NOT_READY_DELAYS, None):
                    sent.not_ready = False
                    try:
                        with _refusals(workflow_id):
                            return await handle.execute_update(
                                name, arg, id=id, result_type=result_type
                            )
                    except RPCError as err:
                        if delay is None or not _not_ready(err):
                            raise
                    sent.not_ready = True
                    await asyncio.sleep(delay)
            raise AssertionError("unreachable: the last attempt returns or raises")
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                # A settled Run has no handlers left. If it continued as new after taking
                # this request, its last execution keeps the answer: the first outcome.
                # Both reads need a worker: within what is left of ``timeout``.
                left = _left(deadline, KEPT_QUERY_TIMEOUT)
                kept = None
                if keyed is not None and left is not None:
                    kept = await _kept_action(handle, keyed, left)
                if kept is not None and (kept.answer is not None or name != RESUME):
                    return kept.answer
                # Say how it settled.
                try:
                    left = _left(deadline)
                    if left is None:
                        raise _settled_unread(workflow_id, timeout) from err
                    state = await self.status(workflow_id, scope=scope, query_timeout=left)
                except NotFound:
                    raise NotFound(f"no Run {workflow_id}") from err
                except (TemporalUnanswered, TemporalCancelled) as unread:
                    # Temporal's silence, or its giving the read up: no worker's.
                    raise Refused(
                        RefusalKind.NOT_SUSPENDED,
                        f"{workflow_id} has settled (how could not be read: {unread.why})",
                    ) from unread
                except RPCError as unread:
                    if not unanswered(unread):
                        raise
                    raise _settled_unread(workflow_id, timeout) from unread
                raise Refused(
                    RefusalKind.NOT_SUSPENDED,
                    f"{workflow_id} has settled {state.status.value}: {state.reason}",
                ) from err
            raise

    async def resume(
        self,
        run: RunHandle | str,
        request: ResumeInput,
        *,
        scope: Scope,
        idempotency_key: str | None = None,
        update_timeout: timedelta | None = None,
    ) -> ResumeResult:
        """Answer what a suspended Run waits for; see ``approve``, ``answer``, ``complete``.
        ``idempotency_key``: see the module docstring. ``update_timeout``: how long to wait
        for the Run's worker to take and answer it (None: ``UPDATE_TIMEOUT``, 10 s), as every
        action here waits.

        Raises:
            ValueError: an empty ``idempotency_key`` or one over 256 characters; an
                ``update_timeout`` zero or negative.
            UpdateUnanswered: not answered within ``update_timeout`` (its ``why`` says
                whose silence, when Temporal told, and how to learn the outcome).
            PsychError: ``idempotency_key`` already answered another item, or this one
                with the other verdict.
            Refused: not suspended, settled (how, read in what is left of ``update_timeout``),
                unknown or stale id, expired, already answered; a payload with NaN or Infinity.
            AccessDenied: another tenant's Run.
        """
        if request.tenant != scope.tenant:
            raise AccessDenied(f"a resume for tenant {request.tenant!r} under {scope.tenant!r}")
        if request.payload is not None:
            try:  # the payload converter would send each as null, silently
                json.dumps(request.payload, allow_nan=False)
            except ValueError:
                raise Refused(
                    RefusalKind.BAD_RESUME,
                    "payload holds NaN or Infinity, which JSON cannot carry",
                ) from None
        result: ResumeResult = await self._update(
            run, scope, RESUME, request, ResumeResult, idempotency_key, update_timeout
        )
        if not _answers(result, request):
            # Only under a key: the first request's outcome, and this is another request.
            raise PsychError(
                f"idempotency key {idempotency_key!r} already {result.outcome} {result.reason} "
                f"{result.id!r} on this Run; a key names one request, so another needs a new key"
            )
        return result

    async def taken(
        self,
        run: RunHandle | str,
        idempotency_key: str,
        *,
        scope: Scope,
        update_timeout: timedelta | None = None,
    ) -> ResumeResult | None:
        """The outcome of the approve, deny, answer or complete sent to ``run`` under
        ``idempotency_key``, waiting for it if the Run has not answered it yet; None when
        the Run took none (it refused it, or nothing was sent). After the Run continued as
        new, the answer it keeps (``psych.kept_action``).

        Raises:
            Refused: the Run took it, then refused it (answered meanwhile, expired).
            AccessDenied: another tenant's Run.
            UpdateUnanswered: not answered within ``update_timeout``; ask again later.
            ValueError: an ``update_timeout`` zero or negative.
        """
        timeout = update_timeout_given(update_timeout)
        deadline = time.monotonic() + timeout.total_seconds()
        workflow_id, handle = self._handle(run, scope)
        id = update_id(RESUME, idempotency_key)
        assert id is not None
        what = "the outcome of the request"
        try:
            async with update_wait(workflow_id, what, timeout, idempotency_key):
                with _refusals(workflow_id):
                    result: ResumeResult = await handle.get_update_handle(
                        id, result_type=ResumeResult
                    ).result()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                left = _left(deadline, KEPT_QUERY_TIMEOUT)
                kept = None if left is None else await _kept_action(handle, id, left)
                return None if kept is None else kept.answer
            raise
        return result

    async def approve(
        self,
        run: RunHandle | str,
        call_id: str,
        *,
        scope: Scope,
        note: str | None = None,
        idempotency_key: str | None = None,
        held_by: str | None = None,
        update_timeout: timedelta | None = None,
    ) -> ResumeResult:
        """Approve a pending tool call; it runs. ``held_by``: the Run holding it
        (``Pending.run``), needed only when its id is pending in more than one Run."""
        request = self._decision(call_id, True, scope, note, held_by)
        return await self.resume(
            run,
            request,
            scope=scope,
            idempotency_key=idempotency_key,
            update_timeout=update_timeout,
        )

    async def deny(
        self,
        run: RunHandle | str,
        call_id: str,
        *,
        scope: Scope,
        note: str | None = None,
        idempotency_key: str | None = None,
        held_by: str | None = None,
        update_timeout: timedelta | None = None,
    ) -> ResumeResult:
        """Reject a pending tool call; it settles rejected and the model is told (with note).
        ``held_by``: as for ``approve``."""
        request = self._decision(call_id, False, scope, note, held_by)
        return await self.resume(
            run,
            request,
            scope=scope,
            idempotency_key=idempotency_key,
            update_timeout=update_timeout,
        )

    @staticmethod
    def _decision(
        call_id: str, approved: bool, scope: Scope, note: str | None, held_by: str | None
    ) -> ResumeInput:
        return ResumeInput(
            reason=SuspensionReason.APPROVAL,
            id=call_id,
            tenant=scope.tenant,
            by=scope.principal,
            approved=approved,
            note=note,
            run=held_by,
        )

    async def answer(
        self,
        run: RunHandle | str,
        call_id: str,
        text: str,
        *,
        scope: Scope,
        idempotency_key: str | None = None,
        held_by: str | None = None,
        update_timeout: timedelta | None = None,
    ) -> ResumeResult:
        """Answer a pending ``ask_question`` call. ``held_by``: as for ``approve``."""
        return await self.resume(
            run,
            ResumeInput(
                reason=SuspensionReason.QUESTION,
                id=call_id,
                tenant=scope.tenant,
                by=scope.principal,
                answer=text,
                run=held_by,
            ),
            scope=scope,
            idempotency_key=idempotency_key,
            update_timeout=update_timeout,
        )

    async def complete(
        self,
        run: RunHandle | str,
        token: str,
        payload: Any,
        *,
        scope: Scope,
        idempotency_key: str | None = None,
        held_by: str | None = None,
        update_timeout: timedelta | None = None,
    ) -> ResumeResult:
        """Complete an external wait: ``payload`` becomes the waiting tool's result.
        ``held_by``: as for ``approve``."""
        return await self.resume(
            run,
            ResumeInput(
                reason=SuspensionReason.EXTERNAL,
                id=token,
                tenant=scope.tenant,
                by=scope.principal,
                payload=payload,
                run=held_by,
            ),
            scope=scope,
            idempotency_key=idempotency_key,
            update_timeout=update_timeout,
        )

    async def abort(
        self,
        run: RunHandle | str,
        *,
        scope: Scope,
        reason: str = "aborted by request",
        idempotency_key: str | None = None,
        update_timeout: timedelta | None = None,
    ) -> None:
        """Abort the Run (it settles ABORTED once non-interruptible calls finish).
        ``update_timeout``: as for ``resume``."""
        await self._update(
            run,
            scope,
            ABORT,
            AbortInput(tenant=scope.tenant, by=scope.principal, reason=reason),
            type(None),
            idempotency_key,
            update_timeout,
        )

    async def steer(
        self,
        run: RunHandle | str,
        message: str,
        *,
        scope: Scope,
        mode: Literal["steer", "follow_up", "next_run"] = "steer",
        idempotency_key: str | None = None,
        update_timeout: timedelta | None = None,
    ) -> None:
        """Give the Run a message: into this turn, after it, or for the next Run.
        ``update_timeout``: as for ``resume``."""
        await self._update(
            run,
            scope,
            STEER,
            SteerInput(tenant=scope.tenant, message=message, mode=mode, by=scope.principal),
            type(None),
            idempotency_key,
            update_timeout,
        )
