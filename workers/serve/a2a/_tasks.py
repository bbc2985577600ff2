"""A Run seen as an A2A Task: its id, its state, and its progress as task events.

The task id is the Run id, the part of the workflow id after the tenant
(``psych-<tenant>-<task id>``); the workflow id is rebuilt from the caller's
authenticated tenant and the task id, so a caller can only ever name its own tenant's
Runs (another tenant's task id names a Run that does not exist in the caller's). The
context id is the task id: each task is one conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from datetime import timedelta
from typing import Any

from a2a.server.events.event_queue import Event
from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import TaskNotFoundError
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Struct, Value
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities.a2a import TERMINAL
from psych_runtime.activities.contract import ids_from, workflow_id_for
from psych_runtime.specs import PsychError, Scope
from psych_runtime.workers.serve.a2a._child_polls import CHILD_POLL_SECONDS, Failing, child_polls
from psych_runtime.workers.serve.a2a._closing import CUT, until_closed
from psych_runtime.workers.serve.a2a._errors import internal_error
from psych_runtime.workers.serve.a2a._latest import runs_on
from psych_runtime.workflows import (
    ClosedRun,
    DeltasDropped,
    Pending,
    PsychClient,
    Resumed,
    RunAdmitted,
    RunSettled,
    RunState,
    RunStatus,
    Suspended,
    SuspensionReason,
    TokenDelta,
    answer_cut_short,
    closed_without_settling,
)

ANSWER_ARTIFACT = "answer"
"""The artifact id of a Run's final answer."""

logger = logging.getLogger(__name__)

_TASK_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_ASKS = (SuspensionReason.QUESTION, SuspensionReason.APPROVAL)

_STATES = {
    RunStatus.RUNNING: TaskState.TASK_STATE_WORKING,
    RunStatus.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    # A budget stopped it, its deadline ran out, or nobody answered in time: the task
    # was not done, and there is no A2A state closer than failed.
    RunStatus.STOPPED: TaskState.TASK_STATE_FAILED,
    RunStatus.FAILED: TaskState.TASK_STATE_FAILED,
    RunStatus.FORCE_SETTLED: TaskState.TASK_STATE_FAILED,
    RunStatus.ABANDONED: TaskState.TASK_STATE_FAILED,
    RunStatus.ABORTED: TaskState.TASK_STATE_CANCELED,
}


def workflow_id_of(task_id: str, scope: Scope) -> str:
    """The workflow id of the caller's task ``task_id``.

    Raises:
        TaskNotFoundError: the id cannot be a task id.
    """
    if not _TASK_ID.match(task_id):
        raise TaskNotFoundError(f"no task {task_id!r}")
    return workflow_id_for(scope.tenant, task_id)


def task_id_of(workflow_id: str) -> str:
    """The task id of a Run's workflow id."""
    ids = ids_from(workflow_id)
    if ids is None:
        raise ValueError(f"{workflow_id!r} is not a psych Run's workflow id")
    return ids[1]


def asks(pending: Pending) -> bool:
    """Whether the caller of the task answers ``pending``: a question or an approval, of
    this Run or of a child Run it holds (a subagent's, a spawned Run's, a step's agent's:
    answered through this Run, which forwards it to the child, as REST answers it; the
    listing's ``PsychSuspension`` counts them too). External waits, a child Run's end and
    an MCP server's consent are not the caller's."""
    return pending.reason in _ASKS


def task_state(status: RunStatus | str, asking: bool) -> TaskState:
    """The task state of a Run in ``status`` (``asking``: it waits on its caller)."""
    status = RunStatus(status)
    if status is RunStatus.SUSPENDED:
        return TaskState.TASK_STATE_INPUT_REQUIRED if asking else TaskState.TASK_STATE_WORKING
    return _STATES[status]


def _data(value: dict[str, Any]) -> Value:
    return ParseDict(value, Value())


def agent_message(
    task_id: str, message_id: str, text: str, data: dict[str, Any] | None = None
) -> Message:
    """A message from the agent in the task."""
    parts = [Part(text=text)]
    if data is not None:
        parts.append(Part(data=_data(data)))
    return Message(
        message_id=f"{task_id}.{message_id}",
        task_id=task_id,
        context_id=task_id,
        role=Role.ROLE_AGENT,
        parts=parts,
    )


def ask_message(task_id: str, pending: Pending) -> Message:
    """The status message of an input-required task: the question, or the approval asked
    (with how to answer it), and the item as data."""
    if pending.reason is SuspensionReason.QUESTION:
        text = pending.question or "(the agent asked without a question text)"
    else:
        text = (
            f"Approve the call of {pending.tool} with {pending.arguments or '{}'}? Reply "
            "'approve' or 'deny' (optionally 'deny: <note>'), or with a data part "
            '{"approve": true|false, "note": "..."}.'
        )
    item = {
        "reason": str(pending.reason),
        "id": pending.id,
        "tool": pending.tool,
        "arguments": pending.arguments,
        "question": pending.question,
        "expires_at": pending.expires_at.isoformat(),
        "run": pending.run,  # the child Run that holds it; None: this task's own
    }
    # A child's item ids are its own (its model's call ids): two children asking may hold
    # the same one, so its message id names the child, each question its own message.
    held = "" if pending.run is None else f"{task_id_of(pending.run)}."
    return agent_message(task_id, f"ask.{held}{pending.id}", text, {"pending": item})


def answer_artifact(answer: str, reason: str | None) -> Artifact:
    """The artifact of a Run's final answer, settled for ``reason``: one the model cut at
    its output limit carries ``{"cut_short": true}`` as metadata (``answer_cut_short``)."""
    artifact = Artifact(artifact_id=ANSWER_ARTIFACT, name="answer", parts=[Part(text=answer)])
    if answer_cut_short(reason):
        artifact.metadata.update({"cut_short": True})
    return artifact


def answer_event(task_id: str, answer: str, reason: str | None) -> TaskArtifactUpdateEvent:
    """The event that gives a task its final answer (sent before its terminal status)."""
    return TaskArtifactUpdateEvent(
        task_id=task_id,
        context_id=task_id,
        artifact=answer_artifact(answer, reason),
        last_chunk=True,
    )


def _status(
    task_id: str, status: RunStatus, reason: str | None, pending: tuple[Pending, ...]
) -> TaskStatus:
    asking = [p for p in pending if asks(p)]
    state = task_state(status, bool(asking))
    if asking and status is RunStatus.SUSPENDED:
        return TaskStatus(state=state, message=ask_message(task_id, asking[0]))
    cut = answer_cut_short(reason)
    if status.terminal and reason and (status is not RunStatus.COMPLETED or cut):
        # A completed task says why only when its answer is cut short: the peer must not
        # take a cut text for the whole one (its artifact says so too).
        return TaskStatus(state=state, message=agent_message(task_id, "settled", reason))
    return TaskStatus(state=state)


def task_of(state: RunState | ClosedRun) -> Task:
    """The Task a Run's state shows (or its closed execution, which waits on nothing)."""
    task_id = state.run_id  # the Run id: the task id
    pending = state.pending if isinstance(state, RunState) else ()
    return Task(
        id=task_id,
        context_id=task_id,
        status=_status(task_id, state.status, state.reason, pending),
        artifacts=[answer_artifact(state.answer, state.reason)] if state.answer else [],
        metadata=_struct({"agent": state.agent, "version_hash": state.version_hash}),
    )


async def statuses_now(
    client: PsychClient,
    scope: Scope,
    workflow_ids: list[str],
    query_timeout: timedelta | None,
    at_once: int,
) -> dict[str, TaskStatus]:
    """The status of each Run of ``workflow_ids`` (each waits on its caller, as a listing
    shows it) as GetTask reads it: its state, ``at_once`` at a time, all of them within
    ``query_timeout`` (one page's reads wait one timeout in all, not one a round: 100
    Runs with no worker took 13). A Run that cannot be read (no worker answered in time,
    or its read not done by then) is still shown waiting on its caller, its message saying
    what it asks could not be read and why (the problem's type and status as data, as an
    error's), and logged: one Run without a worker does not fail the listing of every
    other."""
    gate = asyncio.Semaphore(at_once)

    def unread(workflow_id: str, err: Exception) -> TaskStatus:
        task_id = task_id_of(workflow_id)
        problem = internal_error(err, "what it asks could not be read now")
        logger.warning("task %s: %s", task_id, problem.message, exc_info=err)
        said = f"The task waits for its caller's input; {problem.message} (GetTask reads it)"
        message = agent_message(task_id, "unread", said, {"unread": problem.data})
        return TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED, message=message)

    async def read(workflow_id: str) -> TaskStatus:
        async with gate:
            try:
                state = await client.status(workflow_id, scope=scope, query_timeout=query_timeout)
            except (PsychError, RPCError) as err:
                return unread(workflow_id, err)
        return task_of(state).status

    reads = {workflow_id: asyncio.ensure_future(read(workflow_id)) for workflow_id in workflow_ids}
    done: set[asyncio.Future[TaskStatus]] = set()
    try:
        if reads:
            bound = None if query_timeout is None else query_timeout.total_seconds()
            done, _ = await asyncio.wait(reads.values(), timeout=bound)
    finally:
        for reading in reads.values():
            reading.cancel()  # not done within the bound (or the listing was cancelled)
        await asyncio.gather(*reads.values(), return_exceptions=True)
    # A read cut by the bound: what its own query says when no worker answers in time.
    late = RPCError(
        "no worker answered within the query timeout", RPCStatusCode.DEADLINE_EXCEEDED, b""
    )
    return {
        workflow_id: reading.result() if reading in done else unread(workflow_id, late)
        for workflow_id, reading in reads.items()
    }


def _struct(values: dict[str, Any]) -> Struct:
    struct = Struct()
    struct.update(values)
    return struct


def stops(state: RunState) -> bool:
    """Whether a sender's wait ends at ``state``: settled, or waiting on its caller."""
    return state.status.terminal or any(asks(p) for p in state.pending)


def _child_status(task_id: str, state: RunState) -> TaskStatus | None:
    """The task's status a read of its Run shows when a child's item decides it: the
    child's question (``input-required``), or ``working`` with none. None: its own items
    or its end decide it, which its records tell."""
    if state.status.terminal or any(asks(p) and p.run is None for p in state.pending):
        return None
    theirs = [p for p in state.pending if asks(p) and p.run is not None]
    if not theirs:
        return TaskStatus(state=TaskState.TASK_STATE_WORKING)
    return TaskStatus(
        state=TaskState.TASK_STATE_INPUT_REQUIRED, message=ask_message(task_id, theirs[0])
    )


async def task_events(
    client: PsychClient,
    workflow_id: str,
    *,
    scope: Scope,
    after: int,
    deltas: bool,
    through_input: bool,
    grace: timedelta,
    told: Task | None = None,
    earlier: bool = True,
) -> AsyncGenerator[Event]:
    """The task's events from the Run's Records after ``after`` on, until it settles
    (``through_input`` False: or until it waits on its caller).

    Text streams as chunks of a ``draft-<attempt>`` artifact (``deltas``); the final answer
    is the ``answer`` artifact, sent before the terminal status. Once the Run's workflow
    execution has closed, its records get ``grace`` (how long a read waits for a worker)
    to reach their end; past it (no worker answers) the task's end is told from Temporal
    (``_closing.py``, ``_cut_short``). ``told``: the task as the stream's caller was told it
    before (None: working). ``earlier``: whether a child Run may have started before
    ``after`` (``children_before``; False: Temporal is not asked which run).
    """
    task_id = task_id_of(workflow_id)

    def status(state: TaskStatus) -> TaskStatusUpdateEvent:
        return TaskStatusUpdateEvent(task_id=task_id, context_id=task_id, status=state)

    working = TaskStatus(state=TaskState.TASK_STATE_WORKING)
    shown = working if told is None else told.status
    records = client.stream(workflow_id, scope=scope, after=after, deltas=deltas)
    following = until_closed(records, client.temporal, workflow_id, grace.total_seconds())

    failing = Failing(task_id)
    failed, read_again = failing.failed, failing.failing.discard

    async def read() -> RunState | None:
        try:
            state = await client.status(workflow_id, scope=scope, query_timeout=grace)
        except (PsychError, RPCError) as err:  # the next read tries again
            failed("state", err)
            return None
        read_again("state")
        return state

    async def children() -> set[str] | None:
        try:
            handle = client.temporal.get_workflow_handle(workflow_id)
            described = await handle.describe(rpc_timeout=grace)
        except RPCError as err:  # asked again next time
            failed("running children", err)
            return None
        read_again("running children")
        return {child.workflow_id for child in described.raw_description.pending_children}

    polls = child_polls(
        following,
        read=read,
        children=children,
        status=lambda state: _child_status(task_id, state),
        every=CHILD_POLL_SECONDS,
        told=shown,
        after=after,
        earlier=earlier,
    )
    # Closed on every way out (a return mid-stream too): it holds the close watch's task.
    async with contextlib.aclosing(following), contextlib.aclosing(polls) as items:
        async for item in items:
            if item is CUT:
                async for event in _cut_short(client, workflow_id, scope, grace, failed):
                    yield event
                return
            if isinstance(item, TaskStatus):  # read while a child Run may run
                yield status(item)
                if item.state == TaskState.TASK_STATE_INPUT_REQUIRED and not through_input:
                    return
                continue
            if isinstance(item, TokenDelta):
                if item.text:
                    yield TaskArtifactUpdateEvent(
                        task_id=task_id,
                        context_id=task_id,
                        artifact=Artifact(
                            artifact_id=f"draft-{item.call}",
                            name="draft",
                            parts=[Part(text=item.text)],
                        ),
                        append=item.n > 1,
                    )
            elif isinstance(item, DeltasDropped):
                note = f"a model call attempt ended without an answer ({item.reason}); "
                note += f"its draft-{item.call} is void"
                yield status(
                    TaskStatus(
                        state=TaskState.TASK_STATE_WORKING,
                        message=agent_message(task_id, f"dropped.{item.call}", note),
                    )
                )
            elif isinstance(item, RunAdmitted | Resumed):
                yield status(working)
            elif isinstance(item, Suspended) and asks(item.pending):
                yield status(
                    TaskStatus(
                        state=TaskState.TASK_STATE_INPUT_REQUIRED,
                        message=ask_message(task_id, item.pending),
                    )
                )
                if not through_input:
                    return
            elif isinstance(item, RunSettled):
                if item.answer:
                    yield answer_event(task_id, item.answer, item.reason)
                yield status(_status(task_id, item.status, item.reason, ()))
                return
    # The stream ended without a RunSettled after ``after``: the Run had settled before
    # it, or its workflow closed without settling (terminated by an operator), which its
    # closed execution (no worker), or else its status, answers failed, saying how;
    # read and neither, it ended unsettled. A read that fails is no end: unless the Run
    # runs on, the stream fails with its error (the handler answers it, as a cut-short
    # stream's), never telling the peer an end it does not know (it stops following).
    unread: PsychError | RPCError | None = None
    try:
        # As GetTask reads it; each read waits ``grace`` at most (a Temporal that hangs
        # would hold the stream's end for ever).
        closed = await _closed(client, workflow_id, scope, grace, failed)
        state: RunState | ClosedRun | None = closed or await client.status(
            workflow_id, scope=scope, query_timeout=grace
        )
    except (PsychError, RPCError) as err:
        failed("end", err)
        state, unread = None, err
    if state is not None and state.status.terminal:
        for event in _ended(task_id, state):  # as a RunSettled read in the stream gives it
            yield event
        return
    if await runs_on(client.temporal, workflow_id):
        return  # an operator reset the Run: not its end (the caller follows it again)
    if unread is not None:
        raise unread
    yield status(
        TaskStatus(
            state=TaskState.TASK_STATE_FAILED,
            message=agent_message(task_id, "closed", "the Run ended without settling"),
        )
    )


async def _closed(
    client: PsychClient,
    workflow_id: str,
    scope: Scope,
    rpc_timeout: timedelta | None,
    failed: Callable[[str, Exception], None],
) -> ClosedRun | None:
    """The Run's closed execution, from Temporal with no worker (``PsychClient.closed``);
    None where its close event does not carry what its state shows (open, closed after
    the Run settled, not decoded here) or Temporal failed to read it (an RPCError, logged by
    ``failed``): a worker may still answer its state, as before 12-06 it alone did."""
    try:
        return await client.closed(workflow_id, scope=scope, rpc_timeout=rpc_timeout)
    except RPCError as err:
        failed("closed execution", err)
        return None


def _ended(task_id: str, state: RunState | ClosedRun) -> list[Event]:
    """The events that end a task whose Run settled as ``state`` shows: its answer (marked
    cut short when the reason says so), then its terminal status."""
    events: list[Event] = []
    if state.answer:
        events.append(answer_event(task_id, state.answer, state.reason))
    status = _status(task_id, state.status, state.reason, ())
    events.append(TaskStatusUpdateEvent(task_id=task_id, context_id=task_id, status=status))
    return events


async def _cut_short(
    client: PsychClient,
    workflow_id: str,
    scope: Scope,
    query_timeout: timedelta,
    failed: Callable[[str, Exception], None],
) -> AsyncIterator[Event]:
    """The task's end once its Run's execution closed and its records did not come (no
    worker answered): read from Temporal with no worker, as GetTask reads it
    (``PsychClient.closed``: a completed Run's result, its answer too; a Run that closed
    without settling, ``failed``, saying how and why, as the listing shows it); where the
    close event does not say it, a Run that closed without settling by
    ``closed_without_settling``, and one that settled from its state, within
    ``query_timeout`` (no worker: the RPCError, which the handler answers as REST's
    ``no-worker``); one that runs on since (reset), nothing.
    """
    task_id = task_id_of(workflow_id)
    shown = await _closed(client, workflow_id, scope, query_timeout, failed)
    if shown is None:
        why = await closed_without_settling(client.temporal, workflow_id, query_timeout)
        if why is not None:
            status = _status(task_id, RunStatus.FAILED, why, ())
            yield TaskStatusUpdateEvent(task_id=task_id, context_id=task_id, status=status)
            return
    state = shown or await client.status(workflow_id, scope=scope, query_timeout=query_timeout)
    if state.status.terminal:
        for event in _ended(task_id, state):
            yield event


def ends_task(event: Event) -> bool:
    """Whether ``event`` is a task's terminal status."""
    return isinstance(event, TaskStatusUpdateEvent) and event.status.state in TERMINAL
