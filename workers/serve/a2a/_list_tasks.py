"""ListTasks: the caller's tasks of an agent, a page at a time, read through the Run
listing (``PsychClient.list_page``) and counted by ``PsychClient.count``.

A task's state in a listing comes from its Run's search attributes: its status, and for a
suspended Run whether it waits on a question or an approval (``PsychSuspension``: its own
items' reasons and its children's, which its caller answers alike). A task listed
input-required is read as GetTask reads it (``statuses_now``: the question is in no
attribute); in another state by then, a page for input-required passes it over. The A2A
``status`` filter is the listing's own filter where one says it exactly (completed,
canceled, input-required, no filter). Working (running, or suspended on anything else)
and failed (four statuses) are no one filter: their Runs are read from the agent's whole
listing and the others passed over, until the page is full, the listing ends, or ``scan``
Runs were looked at in this request; a page can then hold fewer tasks than asked, even
none, and still have a next page token. ``scan`` bounds the exact filters' pages too
(they end after ``scan`` Runs, with a token).

A page token holds psych's listing cursor (``_cursor.py``) where the page goes on, the
place in the listing's order of the Run a page that filled halfway through a chunk ended
on (``Position.after``), the tenant (a digest), the agent and the status filter it was
made for, and a check: a token edited, cut short or made up, or made for another
tenant's, agent's or status's listing, is refused naming which (``InvalidParamsError``),
as is an offset, the token of the servers before this one, and a token of this module's
first version.

With ``includeArtifacts`` a page's ended tasks carry their answer artifact, as GetTask's
do: each is read from its Run's result (Temporal's close event; a Run whose workflow was
cancelled, or is still open, its state within the query timeout), ``ANSWERS_AT_ONCE``
at a time; a failed Run has no answer, and an answer that cannot be read fails the page
naming its task.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import cast

from a2a.types import ListTasksRequest, ListTasksResponse, Task, TaskState, TaskStatus
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE, MAX_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import InvalidParamsError
from temporalio.service import RPCError

from psych_runtime.specs import BadCursor, PsychError, Scope
from psych_runtime.workers.serve.a2a._errors import internal_error
from psych_runtime.workers.serve.a2a._latest import replaced_executions
from psych_runtime.workers.serve.a2a._list_token import (
    AGAIN,
    Place,
    Position,
    make_token,
    place_of,
    read_token,
)
from psych_runtime.workers.serve.a2a._tasks import answer_artifact, statuses_now, task_state
from psych_runtime.workflows import PsychClient, RunStatus, RunSummary, SuspensionReason

LIST_SCAN = 1000
"""The most Runs one ListTasks looks at, whatever its status filter (it matters to those
applied after reading, working and failed; an exact filter's page is shorter only when
this is below its size): Temporal's default ``visibilityMaxPageSize``, the most one
visibility page holds, and what one ListTasks read before it paged."""
FILTER_CHUNK = 100
"""How many Runs such a ListTasks asks of the listing at once (A2A's largest page)."""
ASKS = (SuspensionReason.APPROVAL, SuspensionReason.QUESTION)
"""What a task waits on while it is input-required."""

ANSWERS_AT_ONCE = 8
"""How many Runs of a page one ListTasks reads at once (ended tasks' answers, asking
tasks' states, closed executions' latest)."""
_ASKING = TaskState.TASK_STATE_INPUT_REQUIRED


def listed_state(summary: RunSummary) -> TaskState | None:
    """The state a listing shows for a Run (see the module docstring); None: its status
    is none the listing knows (a Run started without psych's search attributes)."""
    if summary.status is None:
        return None
    try:
        status = RunStatus(summary.status)
    except ValueError:
        return None
    reasons = set((summary.suspension or "").split(","))
    return task_state(status, bool(reasons & set(ASKS)))


def page_size(params: ListTasksRequest) -> int:
    """The size of the page ``params`` asks for (left out: a2a-sdk's default).

    Raises:
        InvalidParamsError: a size sent out of range (0 too, as a2a-sdk checks), or a
            ``statusTimestampAfter`` (ignored, every task would be listed as changed since).
    """
    size = params.page_size if params.HasField("page_size") else DEFAULT_LIST_TASKS_PAGE_SIZE
    if not 1 <= size <= MAX_LIST_TASKS_PAGE_SIZE:
        raise InvalidParamsError(
            f"pageSize {size} is out of range: it must be 1 to {MAX_LIST_TASKS_PAGE_SIZE}, "
            f"or left out for {DEFAULT_LIST_TASKS_PAGE_SIZE}"
        )
    if params.HasField("status_timestamp_after"):
        raise InvalidParamsError(
            "statusTimestampAfter is not supported: tasks are listed from Temporal's "
            "visibility, which holds no task's last status change; list without it"
        )
    return size


def wanted_state(status: int) -> TaskState | None:
    """The state a ListTasks ``status`` asks for (None: any).

    Raises:
        InvalidParamsError: it is no TaskState.
    """
    if status == TaskState.TASK_STATE_UNSPECIFIED:
        return None
    if status not in TaskState.values():
        raise InvalidParamsError(f"status {status} is not a TaskState")
    return cast(TaskState, status)


@dataclass(frozen=True)
class Selection:
    """How the listing is asked for a status filter."""

    status: RunStatus | None = None
    waiting_on: tuple[SuspensionReason, ...] = ()
    exact: bool = True
    """Whether every Run the listing answers has the state (else: filtered after)."""


def selection(wanted: TaskState | None) -> Selection | None:
    """How tasks in state ``wanted`` are read; None: no task is ever in it (submitted,
    rejected, auth-required: a Run has no such status)."""
    if wanted is None:
        return Selection()
    if wanted == TaskState.TASK_STATE_INPUT_REQUIRED:
        return Selection(RunStatus.SUSPENDED, ASKS)
    if wanted == TaskState.TASK_STATE_WORKING:
        return Selection(exact=False)
    statuses = _ended_in(wanted)
    if not statuses:
        return None
    return Selection(statuses[0]) if len(statuses) == 1 else Selection(exact=False)


def _ended_in(wanted: TaskState) -> list[RunStatus]:
    """The terminal statuses of Runs whose task is in state ``wanted``."""
    return [s for s in RunStatus if s.terminal and task_state(s, False) == wanted]


@dataclass(frozen=True)
class TaskLister:
    """ListTasks of every agent, through ``client``; ``scan``: ``LIST_SCAN``;
    ``query_timeout``: how long an answer read from a Run's state waits for a worker (the
    serve's, as GetTask's; None: the client's RPC timeout)."""

    client: PsychClient
    scan: int = LIST_SCAN
    query_timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if self.scan < 1:
            raise ValueError(f"scan={self.scan}: a ListTasks looks at one Run at least")

    async def answer(
        self,
        scope: Scope,
        agent: str,
        wanted: TaskState | None,
        size: int,
        token: str,
        *,
        artifacts: bool = False,
    ) -> ListTasksResponse:
        """One page of ``size`` tasks at most, from ``token`` on (empty: the start), and
        how many tasks the listing holds (``count``); ``artifacts``: the ended tasks carry
        their answers (``includeArtifacts``).

        Raises:
            InvalidParamsError: the token is refused (``read_token``, or the listing's
                cursor it holds: ``BadCursor``).
            InternalError: Temporal's visibility could not be read, or an ended task's
                answer (named).
        """
        position = read_token(token, scope, agent, wanted) if token else Position(None)
        chosen = selection(wanted)
        if chosen is None:
            return ListTasksResponse(tasks=[], next_page_token="", page_size=size, total_size=0)
        try:
            shown, after = await self._page(scope, agent, wanted, chosen, size, position)
            if artifacts:
                await self._with_answers(scope, shown)
            total = await self.count(scope, agent, wanted)
        except BadCursor as err:
            raise InvalidParamsError(f"pageToken is refused: {err} ({AGAIN})") from err
        except RPCError as err:
            raise internal_error(err, "the tasks could not be listed") from err
        return ListTasksResponse(
            tasks=[task for task, _ in shown],
            next_page_token="" if after is None else make_token(scope, agent, wanted, after),
            page_size=size,
            total_size=total,
        )

    async def _page(
        self,
        scope: Scope,
        agent: str,
        wanted: TaskState | None,
        chosen: Selection,
        size: int,
        position: Position,
    ) -> tuple[list[tuple[Task, RunSummary]], Position | None]:
        """The page's tasks, each with its Run, and where the next page starts (None:
        nothing follows).

        Each chunk is asked for the places still open (a listing filtered after reading:
        at least ``FILTER_CHUNK``), never more than ``scan`` Runs looked at in all; the
        Runs a resumed chunk holds up to the place the page before ended on, which earlier
        pages went through, are read again and passed over (``Position.after``).
        """
        tasks: list[tuple[Task, RunSummary]] = []
        cursor, after = position.cursor, position.after
        looked = 0
        while True:
            places = size - len(tasks)
            wants = places if chosen.exact else max(places, FILTER_CHUNK)
            page = await self.client.list_page(
                scope=scope,
                agent=agent,
                status=chosen.status,
                waiting_on=chosen.waiting_on,
                limit=min(wants, self.scan - looked),
                cursor=cursor,
            )
            candidates: list[tuple[int, RunSummary, TaskState]] = []
            for index, summary in enumerate(page.runs):
                if after is not None:
                    if place_of(summary) <= after:
                        continue
                    after = None
                state = listed_state(summary)
                if state is not None and wanted in (None, state):
                    candidates.append((index, summary, state))
            looked += len(page.runs)
            while candidates:
                # As many as the page has places for: a closed one costs a describe
                # (``replaced_executions``), so none past the page's end is asked about.
                taken = candidates[: size - len(tasks)]
                del candidates[: len(taken)]
                replaced = await replaced_executions(
                    self.client.temporal, [summary for _, summary, _ in taken], ANSWERS_AT_ONCE
                )
                kept = [c for c in taken if c[1].execution not in replaced]
                asking = [run.workflow_id for _, run, state in kept if state == _ASKING]
                now = await statuses_now(
                    self.client, scope, asking, self.query_timeout, ANSWERS_AT_ONCE
                )
                for index, summary, state in kept:
                    status = now.get(summary.workflow_id, TaskStatus(state=state))
                    if wanted not in (None, status.state):
                        continue  # answered since it was listed: in another state now
                    task_id = summary.run_id
                    task = Task(id=task_id, context_id=task_id, status=status)
                    tasks.append((task, summary))
                    if len(tasks) == size:
                        if index + 1 < len(page.runs):
                            # The cursor that reads the chunk again (a first chunk's keeps
                            # when the listing started: see ``continued_since``).
                            return tasks, Position(page.cursor, place_of(summary))
                        return tasks, _at(page.next_cursor)
            if page.next_cursor is None or looked >= self.scan:
                # Still short of the place the page before ended on: the next page passes
                # over the rest up to it too.
                return tasks, _at(page.next_cursor, after)
            cursor = page.next_cursor

    async def _with_answers(self, scope: Scope, shown: list[tuple[Task, RunSummary]]) -> None:
        """Give each ended task of ``shown`` its answer artifact, when its Run has one."""
        gate = asyncio.Semaphore(ANSWERS_AT_ONCE)

        async def read(task: Task, summary: RunSummary) -> None:
            async with gate:
                try:
                    answer, reason = await self._answer(scope, summary)
                except (PsychError, RPCError) as err:
                    raise internal_error(
                        err, f"the answer of task {task.id} could not be read"
                    ) from err
            if answer:
                task.artifacts.append(answer_artifact(answer, reason))

        try:
            async with asyncio.TaskGroup() as group:
                for task, summary in shown:
                    if _answered(summary):
                        group.create_task(read(task, summary))
        except ExceptionGroup as failed:
            # The first that failed (the others were cancelled), naming its task: the
            # group itself said only "unhandled errors in a TaskGroup".
            raise failed.exceptions[0] from failed

    async def _answer(self, scope: Scope, summary: RunSummary) -> tuple[str | None, str | None]:
        """The answer of a listed Run that settled, and its reason (``answer_artifact``
        marks an answer cut short): its result once its workflow closed (the result of
        the execution listed, not followed: one an operator reset since
        runs on in a new execution, whose result would be waited for as long as it runs;
        a Run whose workflow was cancelled: its state, read within the query timeout,
        not ``result``'s own ``CANCELLED_STATE_TIMEOUT``); before (its status shows first,
        its next Runs start in between, and a worker lost there leaves it open), its
        state, as GetTask reads it: the result would be waited for as long as the
        workflow stays open."""
        if summary.closed_at is None:
            state = await self.client.status(
                summary.workflow_id, scope=scope, query_timeout=self.query_timeout
            )
            return state.answer, state.reason
        result = await self.client.result(
            summary.workflow_id,
            scope=scope,
            query_timeout=self.query_timeout,
            # The execution listed: a settled Run reset since runs on in another.
            execution=summary.execution,
        )
        return result.answer, result.reason

    async def count(self, scope: Scope, agent: str, wanted: TaskState | None) -> int:
        """How many of the agent's tasks are in state ``wanted`` (None: any), as visibility
        counts executions now (a reset Run's each: README): the listing's filter's count,
        or the counts of the filters whose sum or difference the state is."""

        async def counted(
            status: RunStatus | None = None, waiting_on: tuple[SuspensionReason, ...] = ()
        ) -> int:
            return await self.client.count(
                scope=scope, agent=agent, status=status, waiting_on=waiting_on
            )

        chosen = selection(wanted)
        if chosen is None:
            return 0
        if wanted is None or chosen.exact:
            return await counted(chosen.status, chosen.waiting_on)
        if wanted == TaskState.TASK_STATE_WORKING:
            running, suspended, asking = await asyncio.gather(
                counted(RunStatus.RUNNING),
                counted(RunStatus.SUSPENDED),
                counted(RunStatus.SUSPENDED, ASKS),
            )
            # Three counts, not one moment: a Run that suspends between them must not
            # make the difference negative.
            return max(running + suspended - asking, 0)
        return sum(await asyncio.gather(*(counted(s) for s in _ended_in(wanted))))


def _answered(summary: RunSummary) -> bool:
    """Whether the listed Run ended in a way that may carry an answer: settled, not
    FAILED (its result is the failure), and its workflow closed by settling."""
    if summary.status is None or summary.closed_as is not None:
        return False
    try:
        status = RunStatus(summary.status)
    except ValueError:
        return False
    return status.terminal and status is not RunStatus.FAILED


def _at(cursor: str | None, after: Place | None = None) -> Position | None:
    return None if cursor is None else Position(cursor, after)
