"""Reading a model call's deltas from the relay of the worker that runs it.

Started by a follower when it reads a ``ModelCallStarted`` record. The address is the
attempt's heartbeat details (``LiveAttempt``), which ``DescribeWorkflowExecution`` shows on
the pending activity (heartbeat details are never history events): the follower describes
the Run on a short backoff until they appear, then reads ``GET <url>?after=0`` (JSON lines,
``RelayLine``) as the worker publishes. An attempt that ends ``failed``, or whose relay
connection ends without an end line (its worker was lost), yields ``DeltasDropped``; a
Temporal retry of the same activity (new attempt, new address) is followed the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from collections.abc import Callable
from typing import Literal

import httpx
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from psych_runtime.activities.contract import MODEL_CALL, LiveAttempt, RelayLine
from psych_runtime.workflows.client._asked import TEMPORAL_READ_TIMEOUT, describe_within
from psych_runtime.workflows.contract._deltas import Delta, DeltasDropped, TokenDelta, ToolCallPiece

FIRST_DESCRIBE_SECONDS = 0.01
"""The first wait before describing again while no address is shown yet; doubled each
time up to ``LAST_DESCRIBE_SECONDS``."""
LAST_DESCRIBE_SECONDS = 0.25
END_WAIT_SECONDS = 2.0
"""How long the call's record waits for the relay's end line (it normally arrived first:
the activity ends its attempt before it returns)."""
_CONNECT_SECONDS = 5.0

logger = logging.getLogger(__name__)


class RelayClients:
    """The HTTP clients one follower reads relays through, one per URL scheme, made on
    first use: a client costs ~4 ms to make and a default TLS context ~140 ms (measured
    here), so neither is made per call, and a plain-HTTP relay never pays for TLS."""

    def __init__(self) -> None:
        self._clients: dict[str, httpx.AsyncClient] = {}

    def for_url(self, url: str) -> httpx.AsyncClient:
        secure = url.startswith("https:")
        scheme = "https" if secure else "http"
        client = self._clients.get(scheme)
        if client is None:
            timeout = httpx.Timeout(_CONNECT_SECONDS, read=None)
            # A plain-HTTP relay uses no TLS: verify=False only skips building a context.
            verify: ssl.SSLContext | bool = _tls() if secure else False
            client = self._clients[scheme] = httpx.AsyncClient(timeout=timeout, verify=verify)
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()


@functools.cache
def _tls() -> ssl.SSLContext:
    return ssl.create_default_context()


class _Gone(Exception):
    """No attempt of this model call is left to follow here."""


class LiveCall:
    """The deltas of one model call of a Run (all its attempts), handed to ``emit``.

    Args:
        client: the Temporal client (its data converter decodes the heartbeat details).
        workflow_id: the Run's workflow id.
        turn: the turn of the call (from its ``ModelCallStarted`` record); None: whichever
            model call is pending now (a follower that starts after its record), if any.
        emit: called with each ``TokenDelta`` and ``DeltasDropped`` in order.
        http: the follower's relay clients.
    """

    def __init__(
        self,
        client: Client,
        workflow_id: str,
        turn: int | None,
        emit: Callable[[Delta], None],
        http: RelayClients,
    ) -> None:
        self.client = client
        self.workflow_id = workflow_id
        self.turn = turn
        self.emit = emit
        self.http = http
        self.describes = 0
        """Describe calls made (what finding the address cost)."""
        self.reading: str | None = None
        """The attempt being read and not yet ended, if any."""
        self.failure: str | None = None
        """Why following the call failed (logged too), if it did; None otherwise."""
        self._activity_id: str | None = None
        self._task = asyncio.create_task(self._run())

    @property
    def done(self) -> bool:
        return self._task.done()

    async def finish(self, wait: float = END_WAIT_SECONDS) -> None:
        """Stop, once the attempt being read ended (within ``wait``); one that did not is
        dropped. Called when the call's record (or the Run's end) arrives."""
        try:
            if self.reading is not None and not self._task.done():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._task), wait)
        finally:
            # Cancelled itself meanwhile (a stream's client went away), the read still
            # stops: a LiveCall left running would describe the Run for as long as the
            # call stays pending.
            self._task.cancel()
        # Waits without taking the caller's cancellation for the task's (a suppressed
        # CancelledError here would swallow the caller's).
        await asyncio.wait({self._task})
        if self.reading is not None:
            self._dropped(self.reading, "the relay sent no end before the call's record")

    def _dropped(self, call: str, reason: str) -> None:
        self.reading = None
        self.emit(DeltasDropped(call=call, turn=self.turn or 0, reason=reason))

    async def _run(self) -> None:
        seen: set[str] = set()
        try:
            while True:
                attempt = await self._next_attempt(seen)
                seen.add(attempt.call)
                self.reading = attempt.call
                reason = await self._read(self.http.for_url(attempt.url), attempt)
                if reason is None:
                    self.reading = None
                    return  # completed: the call's record follows
                self._dropped(attempt.call, reason)
        except _Gone:
            return
        except Exception as err:  # deltas are a view: the records go on without them
            # Not raised: nothing awaits this task's end but ``finish``, and the follower's
            # streams read on. Logged, as it may be before any attempt was found (the
            # describe Temporal did not answer, say), when no drop says it to a stream.
            self.failure = str(err) or type(err).__name__
            call = "pending model call" if self.turn is None else f"model call of turn {self.turn}"
            logger.warning(
                "following the deltas of Run %s's %s failed; its records go on without them: %s",
                self.workflow_id,
                call,
                self.failure,
                exc_info=not isinstance(err, RPCError),  # a timeout's why says it all
            )
            if self.reading is not None:
                self._dropped(self.reading, f"following the call failed: {err}")

    async def _next_attempt(self, seen: set[str]) -> LiveAttempt:
        delay = FIRST_DESCRIBE_SECONDS
        while True:
            attempt = await self._describe(seen)
            if attempt is not None:
                return attempt
            await asyncio.sleep(delay)
            delay = min(delay * 2, LAST_DESCRIBE_SECONDS)

    async def _describe(self, seen: set[str]) -> LiveAttempt | None:
        """The pending call's attempt if it shows one not yet read; raises ``_Gone`` when
        the call is no longer pending, the Run has closed, or its worker offers no
        deltas."""
        self.describes += 1
        handle = self.client.get_workflow_handle(self.workflow_id)
        description = await describe_within(handle, self.workflow_id, TEMPORAL_READ_TIMEOUT)
        if description.status != WorkflowExecutionStatus.RUNNING:
            # A closed Run still lists the call its end cut short (an abort, a cancel, a
            # deadline: cancelled, not waited for) as pending: none is in flight.
            raise _Gone
        pending = [
            activity
            for activity in description.raw_description.pending_activities
            if activity.activity_type.name == MODEL_CALL
            and self._activity_id in (None, activity.activity_id)
        ]
        if not pending:
            raise _Gone
        activity = pending[0]
        self._activity_id = activity.activity_id
        attempt = await self._details(activity)
        if attempt is None:
            if activity.HasField("last_heartbeat_time"):
                raise _Gone  # it beats without an address: a worker without a relay
            return None
        if attempt.call in seen:
            return None
        self.turn = attempt.turn
        return attempt

    async def _details(self, activity: PendingActivityInfo) -> LiveAttempt | None:
        return await live_attempt(self.client, activity)

    async def _read(self, http: httpx.AsyncClient, attempt: LiveAttempt) -> str | None:
        """Emit the attempt's pieces; None when it completed, else why it is dropped."""
        try:
            async with http.stream("GET", attempt.url, params={"after": 0}) as response:
                if response.status_code != 200:
                    return f"the relay answered {response.status_code}"
                async for text in response.aiter_lines():
                    if not text:
                        continue
                    line = RelayLine.model_validate_json(text)
                    if line.end == "completed":
                        return None
                    if line.end is not None:
                        return line.reason or "the attempt failed"
                    self.emit(_delta(attempt.call, attempt.turn, line))
        except httpx.HTTPError as err:
            return f"the relay connection was lost ({type(err).__name__})"
        return "the relay connection ended without an end"


async def live_attempt(client: Client, activity: PendingActivityInfo) -> LiveAttempt | None:
    """The attempt a pending model call's last heartbeat offers, if any."""
    payloads = activity.heartbeat_details.payloads
    if not payloads:
        return None
    try:
        (details,) = await client.data_converter.decode(payloads[:1], [LiveAttempt])
    except Exception:  # details of another shape: not an address
        return None
    return details if isinstance(details, LiveAttempt) else None


AttemptStanding = Literal["in_flight", "cut", "ended"]
"""Where an attempt is (``attempt_standing``): pending on the running Run; still listed
pending by a closed Run, whose end cut it short (an abort, a cancel, a deadline); or
neither: it ended (answered, or failed) while the Run went on."""


async def attempt_standing(client: Client, workflow_id: str, call: str) -> AttemptStanding:
    """Where the attempt ``call`` is: a follower starting now can still read it only
    ``in_flight``, and only a ``cut`` one ended with the Run's end rather than a record
    of its own (``ModelCallFinished``, ``ModelCallFailed``)."""
    handle = client.get_workflow_handle(workflow_id)
    description = await describe_within(handle, workflow_id, TEMPORAL_READ_TIMEOUT)
    for activity in description.raw_description.pending_activities:
        if activity.activity_type.name == MODEL_CALL:
            attempt = await live_attempt(client, activity)
            if attempt is not None and attempt.call == call:
                running = description.status == WorkflowExecutionStatus.RUNNING
                return "in_flight" if running else "cut"
    return "ended"


def _delta(call: str, turn: int, line: RelayLine) -> TokenDelta:
    piece = None
    if line.tool_index is not None:
        piece = ToolCallPiece(
            index=line.tool_index,
            id=line.tool_id,
            name=line.tool_name,
            arguments=line.tool_arguments,
        )
    return TokenDelta(call=call, turn=turn, n=line.n, text=line.text, tool_call=piece)
