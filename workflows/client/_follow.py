"""Following a Run's records as they are appended, without a query on a timer.

A Run's records live in its workflow state and are appended only by workflow tasks, so a
follower needs to read them only after a workflow task completed. The server tells it
when: a long-poll of the execution's history (``GetWorkflowExecutionHistory`` with
``wait_new_event``) answers as soon as new events are written. The follower reads the
``psych.records`` query once per answer that holds a completed workflow task (or the
execution's close event), from the last seq it has. Neither the long-poll nor a query
writes to the Run's history, so followers never grow it; a Run that does nothing (waiting
for an approval for days) costs its worker nothing, and each follower costs it one query
per batch of workflow tasks. Why not ``temporalio.contrib.workflow_streams``: its reads are
updates, and an accepted update writes events, measured at ~25 events per subscriber over a
5-item stream (docs/decisions/workflows.md, "Following a Run").

Continue-as-new: the workflow id stays and each execution carries on from the seq the last
one reached. The follower asks the latest execution first; when its answer's ``earlier``
segments say an earlier execution holds the next record (``_chain.holder``, what
``PsychClient.records`` uses too), it follows that one; when the execution it follows
closes by continuing as new, it follows ``new_execution_run_id`` (``successor``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, HistoryEventFilterType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.specs import NotFound, PsychError
from psych_runtime.workflows.client._asked import (
    HISTORY_LONG_POLL_TIMEOUT,
    STALLED,
    TEMPORAL_READ_TIMEOUT,
    describe_within,
    history_read,
    unanswered,
)
from psych_runtime.workflows.client._chain import holder
from psych_runtime.workflows.contract._contract import QUERY_RECORDS, RecordsPage, RecordsQuery
from psych_runtime.workflows.contract._records import Record

HISTORY_PAGE_SIZE = 1000
"""Events per long-poll answer while catching up with an execution's existing history."""

CLOSE_EVENTS = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
    }
)

NO_WORKER_RETRY_SECONDS = 1.0
"""How long a follower waits before asking again when no worker answered its query (the
Run's worker is restarting): the records are in history, a new worker will answer."""

BUSY_RETRY_SECONDS = 0.05
"""The least wait before asking again when the server's query buffer was full."""

_NO_ANSWER = (
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.CANCELLED,
    RPCStatusCode.FAILED_PRECONDITION,
)
"""A query no worker answered: its timeout, as the server (deadline exceeded) or the
client's transport ("Timeout expired", cancelled) reports it, or the server's "no poller
seen for task queue recently" (failed precondition: the Run's worker died, ~30 s on)."""
_RETRIED = (*_NO_ANSWER, RPCStatusCode.RESOURCE_EXHAUSTED)


def successor(close: HistoryEvent) -> str | None:
    """The run id of the execution that continues the Run, from the close event of the one
    before it; None when the Run ended there (completed, failed, terminated...)."""
    if close.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
        return None
    return close.workflow_execution_continued_as_new_event_attributes.new_execution_run_id


@dataclass
class _HistoryWatch:
    """Long-polls one execution's history; sets ``changed`` when a workflow task completed
    or the execution closed, and keeps its close event. Each poll waits
    ``HISTORY_LONG_POLL_TIMEOUT`` at most (past Temporal's own interval, after which it
    answers empty): past it, ``HistoryNotRead``, which the follower raises; a timeout's
    status Temporal answers sooner (a CANCELLED under load), ``TemporalCancelled``."""

    client: Client
    execution: WorkflowExecution
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    closed: HistoryEvent | None = None
    error: BaseException | None = None

    async def run(self) -> None:
        token = b""
        events_read = 0
        try:
            while True:
                request = GetWorkflowExecutionHistoryRequest(
                    namespace=self.client.namespace,
                    execution=self.execution,
                    maximum_page_size=HISTORY_PAGE_SIZE,
                    next_page_token=token,
                    wait_new_event=True,
                    history_event_filter_type=HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT,
                )
                asked_at = time.monotonic()  # of this one request (its retries too)
                try:
                    answer = await self.client.workflow_service.get_workflow_execution_history(
                        request, retry=True, timeout=HISTORY_LONG_POLL_TIMEOUT
                    )
                except RPCError as err:
                    if unanswered(err):
                        raise history_read(
                            err,
                            self.execution.workflow_id,
                            events_read,
                            HISTORY_LONG_POLL_TIMEOUT,
                            asked_at=asked_at,
                        ) from err
                    raise
                events_read += len(answer.history.events)
                for event in answer.history.events:
                    if event.event_type in CLOSE_EVENTS:
                        self.closed = event
                if self.closed is not None or any(
                    event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
                    for event in answer.history.events
                ):
                    self.changed.set()
                token = answer.next_page_token
                if not token:
                    break
            if self.closed is None:
                raise PsychError(f"the history of {self.execution.workflow_id} ended unclosed")
        except Exception as err:  # handed to the follower, which raises it
            self.error = err
            self.changed.set()

    async def wait(self) -> None:
        """Until the next change; raises what stopped the long-poll, at once when it has
        stopped: the follower clears ``changed`` before each records query, so the change
        its failure set may be cleared unseen (12-07: a watch failed while records were
        read page by page left the follower waiting for a change no watch would tell)."""
        if self.error is None:
            await self.changed.wait()
        if self.error is not None:
            raise _mapped(self.error, self.execution.workflow_id)


class RecordFollower:
    """Yields a Run's records with ``seq > after`` as they are appended, across worker
    restarts and continue-as-new (see the module docstring).

    Args:
        client: the Temporal client (pydantic data converter).
        workflow_id: the Run's workflow id (the caller has authorized it).
        after: the last seq the caller has.
        on_page: called after each records query answered, ``last_seq`` set (a page may
            hold no record: the follower's owner learns the Run's last seq from it).
    """

    def __init__(
        self,
        client: Client,
        workflow_id: str,
        *,
        after: int = 0,
        on_page: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.workflow_id = workflow_id
        self.after = after
        self.on_page = on_page
        self.last_seq: int | None = None
        """The highest seq the Run had written at the last records query; None before
        the first."""
        self.answered = 0
        """Which query (counting ``queries``) gave ``last_seq`` (its execution's; ``head``
        asks the current one)."""
        self._watch: _HistoryWatch | None = None
        self.queries = 0
        """How many records queries this follower made (what it cost the Run's worker)."""
        self.retried = 0
        """How many of them no worker answered in time or the server refused as busy."""

    async def records(self) -> AsyncIterator[Record]:
        """The records in order, gapless, until ``run_settled`` (or the Run's end)."""
        run_id: str | None = await self._latest()
        looking = True  # until the execution that holds ``after + 1`` is found
        while run_id is not None:
            async with _watching(self.client, self.workflow_id, run_id) as watch:
                self._watch = watch
                # Read once the execution has completed a workflow task: the server holds a
                # query made before that until one has (a second on a fresh worker).
                await watch.wait()
                while True:
                    watch.changed.clear()
                    # Closed before this query was made: the query sees its last records.
                    closed = watch.closed
                    page, asked = await self._page(run_id)
                    # The first (current) execution's answer is the whole chain's last
                    # seq; an earlier execution read for its records answers its own.
                    self.last_seq = max(self.last_seq or 0, page.last_seq)
                    self.answered = asked
                    if self.on_page is not None:
                        self.on_page()
                    if looking:
                        earlier = holder(page, self.after)
                        if earlier is not None:
                            run_id = earlier
                            break
                        looking = False
                    for record in page.records:
                        yield record
                        self.after = record.seq
                    if self.after < page.last_seq:
                        continue
                    if page.settled:
                        return
                    if closed is not None:
                        run_id = successor(closed)
                        break
                    await watch.wait()

    def refresh(self) -> None:
        """Query the Run again now, not at its next workflow task: ``last_seq`` may be
        older than a record someone read elsewhere (the records route, another
        replica)."""
        if self._watch is not None:
            self._watch.changed.set()

    async def _latest(self) -> str:
        """The run id of the workflow id's latest execution."""
        try:
            handle = self.client.get_workflow_handle(self.workflow_id)
            run_id = (await describe_within(handle, self.workflow_id, TEMPORAL_READ_TIMEOUT)).run_id
        except RPCError as err:
            raise _mapped(err, self.workflow_id) from err
        if run_id is None:
            raise PsychError(f"Temporal described {self.workflow_id} without a run id")
        return run_id

    async def head(self) -> int:
        """The Run's last seq now, asked of its current execution: ``last_seq`` may be an
        earlier execution's own (one read for its records, or one that has just continued
        as new), below records its successors wrote."""
        page, _ = await self._page(None, RecordsQuery(after=self.after, limit=1))
        return page.last_seq

    async def _page(
        self, run_id: str | None, query: RecordsQuery | None = None
    ) -> tuple[RecordsPage, int]:
        """The answer of execution ``run_id`` (None: the current one) to ``query`` (the
        records after ``after``), and which of ``queries`` gave it."""
        handle = self.client.get_workflow_handle(self.workflow_id, run_id=run_id)
        stalled = False
        while True:
            self.queries += 1
            asked = self.queries
            try:
                page: RecordsPage = await handle.query(
                    QUERY_RECORDS, query or RecordsQuery(after=self.after), result_type=RecordsPage
                )
                return page, asked
            except WorkflowQueryFailedError as err:
                if STALLED in err.message and not stalled:
                    stalled = True  # the worker's own timer, not the Run: ask once more
                    continue
                # The Run refused to answer (its input was no valid input: it failed
                # before it had records), or its query handler failed: say which Run, and
                # what it said.
                raise PsychError(f"{self.workflow_id}: its records cannot be read: {err}") from err
            except RPCError as err:
                self.retried += err.status in _RETRIED
                if err.status in _NO_ANSWER:
                    # No worker answered in time (one is restarting): the server still holds
                    # the records in history, so ask again rather than end the stream.
                    await asyncio.sleep(NO_WORKER_RETRY_SECONDS)
                elif err.status == RPCStatusCode.RESOURCE_EXHAUSTED:
                    # The server holds few queries while a workflow task runs ("consistent
                    # query buffer is full"): many followers woken by one task all ask at
                    # once. Spread the retries so they do not collide again.
                    await asyncio.sleep(BUSY_RETRY_SECONDS * (1 + random.random()))
                else:
                    raise _mapped(err, self.workflow_id) from err


@contextlib.asynccontextmanager
async def _watching(client: Client, workflow_id: str, run_id: str) -> AsyncIterator[_HistoryWatch]:
    """A watch of one execution's history, long-polling while the block runs."""
    watch = _HistoryWatch(client, WorkflowExecution(workflow_id=workflow_id, run_id=run_id))
    task = asyncio.create_task(watch.run())
    try:
        yield watch
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _mapped(err: BaseException, workflow_id: str) -> BaseException:
    if isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND:
        return NotFound(f"no Run {workflow_id}")
    return err
