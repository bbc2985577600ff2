"""A query of a Run, asked once more when the Run ended while it waited.

The worker SDK lets go of queries it holds for a run it evicts (sdk-core's workflow
stream: "There were leftover buffered tasks when evicting run"), and it evicts a run as
the run finishes: a query asked while the Run ends can go unanswered until its timeout,
though the closed Run answers the same query at once (a worker replays it). So a query no
worker answered is asked again, once, when the Run closed after it was asked. So is one a
worker failed on its own timer, not the Run's answer (``STALLED``). A Run
closed before (its workers gone) is not asked twice: that would only double the wait.
"After" is the server's close time against this process's clock: a clock that runs
behind the server's may ask twice for a Run that closed that much before the query, one
that runs ahead misses the second question (as before this module).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowHistoryEventAsyncIterator,
    WorkflowQueryFailedError,
)
from temporalio.common import QueryRejectCondition
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.specs import NotFound
from psych_runtime.workflows.client._attempts import AttemptFailed

_UNANSWERED = (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED)
"""A query's timeout, as the server (deadline exceeded) or the client's transport
("Timeout expired", cancelled) reports it."""
STALLED = "[TMPRL1101]"
"""The worker SDK's code for "Potential deadlock detected": an activation (here, the replay
a query of a closed or evicted Run makes) that did not yield within 2 s of wall clock. A
worker whose CPUs are busy with other Runs meets it with no deadlock in the Run, and a
query is not retried by Temporal: the query is asked once more (the worker evicted the run
and replays it afresh); a real deadlock fails the second ask the same way."""


async def query_run(
    handle: WorkflowHandle[Any, Any],
    workflow_id: str,
    name: str,
    arg: Any,
    result_type: type[Any],
    *,
    rpc_timeout: timedelta | None = None,
    reject_condition: QueryRejectCondition | None = None,
) -> Any:
    """The answer of the query ``name`` (with ``arg`` unless None) of ``handle``'s Run;
    ``reject_condition``: the server's (``WorkflowQueryRejectedError`` when it applies).

    Raises:
        NotFound: no such Run.
        RPCError: the query failed; a timeout when no worker answered (twice, if the Run
            closed while the first waited).
        WorkflowQueryRejectedError: the Run's execution met ``reject_condition``.
    """
    asked_at = datetime.now(UTC)
    try:
        return await _ask_past_a_stall(
            handle, name, arg, result_type, rpc_timeout, reject_condition
        )
    except RPCError as err:
        if err.status not in _UNANSWERED or not await _closed_since(handle, asked_at, rpc_timeout):
            raise mapped(err, workflow_id) from err
    try:
        return await _ask_past_a_stall(
            handle, name, arg, result_type, rpc_timeout, reject_condition
        )
    except RPCError as err:
        raise mapped(err, workflow_id) from err


async def _ask_past_a_stall(
    handle: WorkflowHandle[Any, Any],
    name: str,
    arg: Any,
    result_type: type[Any],
    rpc_timeout: timedelta | None,
    reject_condition: QueryRejectCondition | None,
) -> Any:
    """``_ask``, once more if the worker failed it as stalled (``STALLED``).

    Raises:
        WorkflowQueryFailedError: the stall's, when the second ask went unanswered: workflow
            code blocked in a call (a real deadlock) keeps the worker's SDK on that run,
            retrying its eviction, and it answers no later query of it; the timeout alone
            would read as "no worker".
    """
    try:
        return await _ask(handle, name, arg, result_type, rpc_timeout, reject_condition)
    except WorkflowQueryFailedError as err:
        if STALLED not in err.message:
            raise
        stalled = err
    try:
        return await _ask(handle, name, arg, result_type, rpc_timeout, reject_condition)
    except RPCError as err:
        if err.status not in _UNANSWERED:
            raise
        raise WorkflowQueryFailedError(
            f"{stalled.message} (asked again, it went unanswered: {err.message}; workflow "
            "code blocked in a call keeps its worker from answering any query of the Run)"
        ) from err


async def _ask(
    handle: WorkflowHandle[Any, Any],
    name: str,
    arg: Any,
    result_type: type[Any],
    rpc_timeout: timedelta | None,
    reject_condition: QueryRejectCondition | None,
) -> Any:
    if arg is None:
        return await handle.query(
            name,
            result_type=result_type,
            rpc_timeout=rpc_timeout,
            reject_condition=reject_condition,
        )
    return await handle.query(
        name,
        arg,
        result_type=result_type,
        rpc_timeout=rpc_timeout,
        reject_condition=reject_condition,
    )


async def _closed_since(
    handle: WorkflowHandle[Any, Any], asked_at: datetime, rpc_timeout: timedelta | None
) -> bool:
    """Whether the Run closed after ``asked_at`` (a failed look is "no": the caller then
    raises the query's own error)."""
    try:
        described = await handle.describe(rpc_timeout=rpc_timeout)
    except RPCError:
        return False
    if described.status in (None, WorkflowExecutionStatus.RUNNING):
        return False
    return described.close_time is not None and described.close_time > asked_at


class ClosedStateUnanswered(RPCError):
    """No worker answered, in time, the state of a Run whose workflow execution closed other
    than cleanly (cancelled, terminated, timed out, failed) where its close event does not
    say how the Run settled (``PsychClient.closed`` answers the rest with no worker): only
    its state says it, which a worker answers replaying the execution. An ``RPCError`` of
    the query's status (a timeout), so a caller handles it as any query no worker answered;
    ``why`` says it in words. ``unsettled``: the execution closed before the Run settled
    (its close event says that, and why), so what is missing is the rest of its state.
    It pickles and copies whole (``_rebuilt``), as every ``PsychError`` does."""

    def __init__(
        self, workflow_id: str, closed_as: str, err: RPCError, *, unsettled: bool = False
    ) -> None:
        self.closed_as = closed_as
        """How Temporal closed the execution (``canceled``, ``terminated``...)."""
        self.unsettled = unsettled
        """Whether it closed before the Run settled (``_unsettled.closed_unsettled``)."""
        if unsettled:
            self.why = (
                f"its workflow execution closed ({closed_as}) before the Run settled, as its "
                "close event says, but the rest of its state (what the Run did until then) "
                "is only in the workflow's memory, which a worker answers replaying it"
            )
        else:
            self.why = (
                f"its workflow execution closed ({closed_as}), and its close event does not "
                "say what its state does (how the Run settled), which a worker answers "
                "replaying it"
            )
        super().__init__(
            f"Run {workflow_id}: {err.message}; {self.why}", err.status, err.raw_grpc_status
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), self.args, self.__dict__))


TEMPORAL_READ_TIMEOUT = timedelta(seconds=10)
"""How long a read Temporal answers with no worker (a describe, a page of history) waits
for it, where the caller gives no timeout of its own: past it, ``TemporalUnanswered``."""


HISTORY_LONG_POLL_TIMEOUT = timedelta(seconds=20) + TEMPORAL_READ_TIMEOUT
"""How long a history long poll (``wait_new_event``: a follower's watch, the close watch's
wait for the close event) waits for Temporal's answer: past it, ``TemporalUnanswered``.
Temporal answers such a poll empty when nothing was written for its own interval
(``history.longPollExpirationInterval``, 20 s by default; Server 1.32 measured: 20.0 s),
or, for a caller whose deadline comes sooner, 1 s before that deadline (its frontend's
tail room: 4.0 s for a 5 s deadline). A proxy between may not pass the deadline on, so
the bound is that interval and ``TEMPORAL_READ_TIMEOUT`` more: an empty answer at 20 s is
no silence (tests/e2e/test_long_polls_bounded.py)."""


def _subject(kind: str, what: str, workflow_id: str | None, subject: str | None) -> str:
    """What a read was of, in words: ``Run <workflow_id>`` or ``subject``, exactly one given."""
    if (workflow_id is None) == (subject is None):
        raise ValueError(
            f"{kind} of {what}: give a Run's workflow id or a subject "
            f"(workflow_id={workflow_id!r}, subject={subject!r}), one of them"
        )
    return subject or f"Run {workflow_id}"


class TemporalUnanswered(RPCError):
    """Temporal did not answer, within the read's RPC timeout, a read that needs no worker
    (a describe, a page of a Run's history; a page of a Run listing, a task queue's
    pollers): an ``RPCError`` of the timeout's status (callers that handle a timeout still
    do), whose ``why`` names what was read of (the Run, else ``subject``), what was not
    read and the timeout. Pickles and copies whole (``_rebuilt``)."""

    def __init__(
        self,
        workflow_id: str | None,
        what: str,
        rpc_timeout: timedelta | None,
        err: RPCError,
        *,
        detail: str | None = None,
        subject: str | None = None,
    ) -> None:
        subject = _subject("TemporalUnanswered", what, workflow_id, subject)
        self.workflow_id = workflow_id
        """The Run read; None for a read of no single Run (``subject`` says what)."""
        self.subject = subject
        """What was read of, in words (``Run <id>``, ``tenant 'acme''s Run listing``)."""
        self.what = what
        """What was not read (``a describe``, ``a page of the history``)."""
        within = "" if rpc_timeout is None else f" within {rpc_timeout.total_seconds():g} s"
        self.why = (
            f"Temporal did not answer {what} of {self.subject}{within} ({detail or err.message})"
        )
        super().__init__(self.why, err.status, err.raw_grpc_status)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), self.args, self.__dict__))


class HistoryNotRead(TemporalUnanswered):
    """Temporal did not answer, within the read's RPC timeout (each page's), a page of the
    history of a Run read with no worker (a closed execution's, ``_cancelled.py``; the
    input a dispatch compares, ``_same_input.py``): ``why`` also says how far its
    history was read."""

    def __init__(
        self, workflow_id: str, events_read: int, rpc_timeout: timedelta | None, err: RPCError
    ) -> None:
        self.events_read = events_read
        """How many of the history's events were read before the page not answered."""
        super().__init__(
            workflow_id,
            "a page of the history",
            rpc_timeout,
            err,
            detail=f"after {events_read} events read: {err.message}",
        )


class TemporalCancelled(RPCError):
    """Temporal answered a read that needs no worker (a describe, a page of a history or
    of a Run listing, a long poll) at once with a timeout's status, CANCELLED (a server
    under load) or DEADLINE_EXCEEDED: it gave the read up, which is neither its silence
    (``TemporalUnanswered``) nor a worker's (no worker answers such a read), and asked
    again it may answer. An ``RPCError`` of that status; ``why`` says it in words, naming
    the Run read (else ``subject``) and what was not read (REST's 503 ``temporal``).
    Pickles and copies whole."""

    def __init__(
        self,
        workflow_id: str | None,
        what: str,
        err: RPCError,
        *,
        detail: str | None = None,
        subject: str | None = None,
    ) -> None:
        subject = _subject("TemporalCancelled", what, workflow_id, subject)
        self.workflow_id = workflow_id
        """The Run read; None for a read of no single Run (``subject`` says what)."""
        self.subject = subject
        """What was read of, in words."""
        self.what = what
        """What was not read (``a describe``)."""
        self.why = (
            f"Temporal cancelled {what} of {self.subject} at once ({err.status.name}: "
            f"{detail or err.message}): it gave the read up (under load, say) rather than "
            "not answering; send the request again"
        )
        super().__init__(self.why, err.status, err.raw_grpc_status)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), self.args, self.__dict__))


async def describe_within(
    handle: WorkflowHandle[Any, Any], workflow_id: str, rpc_timeout: timedelta
) -> WorkflowExecutionDescription:
    """``handle``'s describe, waited for ``rpc_timeout`` at most.

    Raises:
        TemporalUnanswered: Temporal did not answer in time.
        TemporalCancelled: it answered a timeout's status at once (a CANCELLED under load).
        RPCError: Temporal refused (NOT_FOUND too: callers tell it apart).
    """
    asked_at = time.monotonic()
    try:
        return await handle.describe(rpc_timeout=rpc_timeout)
    except RPCError as err:
        if unanswered(err):
            raise read_mapped(
                err, workflow_id, "a describe", rpc_timeout, asked_at=asked_at
            ) from err
        raise


def _rebuilt(cls: type[RPCError], args: tuple[Any, ...], state: dict[str, Any]) -> RPCError:
    """An error of ``cls`` with ``args`` and the attributes ``state``, its ``__init__`` not
    run: the default rebuild calls ``cls(*args)``, which these constructors, building the
    message from their arguments, do not accept."""
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


def given_timeout(value: timedelta | None, setting: str) -> timedelta | None:
    """``value``, a read's timeout a caller gave as ``setting`` (None: the read's default).

    Raises:
        ValueError: zero or negative, naming ``setting``: the SDK takes a zero RPC timeout
            as none at all (the read waits forever), and a negative one is no wait.
    """
    if value is not None and value <= timedelta(0):
        raise ValueError(
            f"{setting}: a positive time to wait, not {value.total_seconds():g} s (a zero "
            "RPC timeout is none at all to Temporal's SDK: the read would wait forever)"
        )
    return value


def waited_out(err: RPCError, asked_at: float, bound: timedelta) -> bool:
    """Whether ``err`` ended a call asked at ``asked_at`` (``time.monotonic()``) that waited
    ``bound``: Temporal's silence, not its answer. The client's own timeout is a
    DEADLINE_EXCEEDED or a CANCELLED, told from a CANCELLED a server under load answers at
    once by the time it took (most of ``bound``): of its last attempt when the read was
    sent again after transient failures (``AttemptFailed``, ``_attempts.py``), not of the
    attempts and pauses before it."""
    if isinstance(err, AttemptFailed):
        asked_at = max(asked_at, err.asked_at)
    waited = time.monotonic() - asked_at
    return err.status in _UNANSWERED and waited >= bound.total_seconds() * 0.9


def unanswered(err: RPCError) -> bool:
    """Whether ``err`` says no worker answered a query in time."""
    return err.status in _UNANSWERED


def mapped(err: RPCError, workflow_id: str) -> Exception:
    """``err`` as this package raises it: NOT_FOUND as ``NotFound``, anything else as is."""
    if err.status == RPCStatusCode.NOT_FOUND:
        return NotFound(f"no Run {workflow_id}")
    return err


def read_mapped(
    err: RPCError,
    workflow_id: str | None,
    what: str,
    rpc_timeout: timedelta | None,
    *,
    asked_at: float,
    subject: str | None = None,
    detail: str | None = None,
) -> Exception:
    """``err`` of one request of a read no worker answers (``what``: a describe, a close
    event, a page), asked at ``asked_at`` (``time.monotonic()``) with ``rpc_timeout``, as
    this package raises it: its timeout's status when it waited most of ``rpc_timeout``
    (``waited_out``) as ``TemporalUnanswered`` (Temporal's silence, not a worker's), the
    same status answered sooner as ``TemporalCancelled`` (Temporal gave the read up), one
    already so as it is, else as ``mapped``. With no ``rpc_timeout`` (the client's default,
    which may be none) nothing tells the two apart: its timeout is ``TemporalUnanswered``.
    ``subject`` names what was read of when no single Run was (``workflow_id`` None, and
    NOT_FOUND is then as it is); ``detail`` says more than ``err``'s message."""
    if isinstance(err, TemporalUnanswered | TemporalCancelled):
        return err
    if unanswered(err):
        if rpc_timeout is None or waited_out(err, asked_at, rpc_timeout):
            return TemporalUnanswered(
                workflow_id, what, rpc_timeout, err, detail=detail, subject=subject
            )
        return TemporalCancelled(workflow_id, what, err, detail=detail, subject=subject)
    return err if workflow_id is None else mapped(err, workflow_id)


def history_read(
    err: RPCError,
    workflow_id: str,
    events_read: int,
    rpc_timeout: timedelta | None,
    *,
    asked_at: float,
) -> Exception:
    """``err`` of a page of a Run's history (``events_read`` events read before it) asked
    at ``asked_at`` with ``rpc_timeout``, as ``read_mapped`` raises it: Temporal's silence
    as ``HistoryNotRead``, a timeout's status it answered sooner as ``TemporalCancelled``
    saying how far the history was read."""
    if unanswered(err) and (rpc_timeout is None or waited_out(err, asked_at, rpc_timeout)):
        return HistoryNotRead(workflow_id, events_read, rpc_timeout, err)
    detail = f"after {events_read} events read: {err.message}"
    return read_mapped(
        err, workflow_id, "a page of the history", rpc_timeout, asked_at=asked_at, detail=detail
    )


async def history_events(
    events: WorkflowHistoryEventAsyncIterator,
    workflow_id: str,
    rpc_timeout: timedelta | None,
    *,
    what: str | None = None,
) -> AsyncIterator[HistoryEvent]:
    """The events of ``events`` (a ``fetch_history_events`` of the Run ``workflow_id`` made
    with ``rpc_timeout``), read page by page as its own iteration reads them, but each
    page's request timed on its own: that iteration asks again, unseen, after every empty
    answer of a long poll (Temporal's at its own interval), so the time the whole of it
    took is not the time the request that failed waited.

    Raises:
        HistoryNotRead | TemporalCancelled: a page's timeout's status, as ``history_read``
            (``what`` given: as ``read_mapped`` of ``what``, ``TemporalUnanswered`` for
            Temporal's silence).
        RPCError: any other failure of a page, as it is.
    """
    read = 0
    while True:
        asked_at = time.monotonic()
        try:
            await events.fetch_next_page()
        except RPCError as err:
            if not unanswered(err):
                raise
            if what is None:
                raise history_read(err, workflow_id, read, rpc_timeout, asked_at=asked_at) from err
            raise read_mapped(err, workflow_id, what, rpc_timeout, asked_at=asked_at) from err
        for event in events.current_page or ():
            read += 1
            yield event
        if events.next_page_token is None:
            return
