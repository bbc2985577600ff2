"""A followed task's child poll: what a child Run asks reaches its parent by a signal, which
writes no record there, so a stream that follows the Run's records reads the Run's state
while a child Run of it may be running, and tells the task's status when a child's item
changes it (``input-required`` with the child's question, ``working`` once it is answered).

Which children run, without a read of the Run for it (``RunState`` names none):
- those its records start and end: a spawned child (``child_spawned`` .. ``child_settled``),
  a subagent (its ``delegate`` wait, ``suspended`` on ``children`` with the child's workflow
  id, .. ``child_settled``), a workflow step's Run (``step_started`` .. ``step_finished``);
- those it started before the stream's first record: Temporal's pending children of its
  workflow, described once, when the stream has followed it ``every`` seconds (a stream
  that ends sooner costs nothing), less those whose end the records told (a child a
  settling parent cancelled is recorded ended before it closes). A Run continues as new
  only with no child running, so the execution described holds them all. Not asked when
  the Run's state where the stream starts says it made no tool call (``children_before``).
- and any a read shows: an item a child holds, or a wait on children (a stream that
  starts at a question reads the Run once for it: the child that asked may have ended).

A Run with none of them is not read at all. While one may run, the Run is read every
``every`` seconds, whether or not records came meanwhile: a parent that works on (a model
call streaming its text, its tools) while its child asks would otherwise never go idle long
enough to be read. A read is told where the records reach it (its ``last_seq``): records it
already counts go out first, and a read older than a record passed on is dropped (read
again at once, ``REREADS`` times in a row at most, then next time), so a status is never
told before a record older than it, nor after a record newer than it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, get_args

import anyio
from a2a.types import TaskState, TaskStatus

from psych_runtime.workflows import (
    ChildSettled,
    ChildSpawned,
    DeltasDropped,
    Record,
    Resumed,
    RunAdmitted,
    RunState,
    StepFinished,
    StepStarted,
    Suspended,
    SuspensionReason,
)

logger = logging.getLogger(__name__)

CHILD_POLL_SECONDS = 3.0
"""How often a followed task whose Run may have a child Run running reads the Run's state:
a child's question or approval reaches the parent by a signal, which writes no record."""

REREADS = 2
"""How many times in a row a read dropped for a record newer than it is read again at once
(a Run writing records faster than it is read: then every ``every`` seconds, as before)."""

_CHILDREN = SuspensionReason.CHILDREN
_RECORDS = get_args(Record)[0]  # the union of the record types (``Record`` is annotated)
T = TypeVar("T")


class _Done(enum.Enum):
    DONE = "done"


def _started(item: object) -> str | None:
    """The workflow id of the child Run ``item`` starts (or waits on), if any."""
    if isinstance(item, ChildSpawned):
        return item.run
    if isinstance(item, StepStarted):
        return item.run
    if isinstance(item, Suspended) and item.pending.reason is _CHILDREN:
        # A subagent's wait names the child; ``wait_children``'s names none (its children
        # were spawned, recorded already): the read that follows says what is left.
        return item.pending.id if item.pending.tool == "delegate" else None
    return None


def _ended(item: object) -> str | None:
    """The workflow id of the child Run ``item`` records the end of, if any."""
    if isinstance(item, ChildSettled | StepFinished):
        return item.run
    return None


def _near(state: RunState) -> bool:
    """Whether ``state`` shows a child at work: an item a child holds, or a wait on one."""
    return any(p.reason is _CHILDREN or p.run is not None for p in state.pending)


def children_before(state: RunState) -> bool:
    """Whether a child Run of the Run may have started by ``state``: an agent starts one only
    from its model's tool calls (``delegate``, ``spawn``), counted before they run, so one
    that made no tool call has none (a workflow's steps start theirs)."""
    return state.kind != "agent" or state.totals.tool_calls > 0


class Failing:
    """A followed task's reads that fail (its state, its running children), asked again
    every poll: a failure that lasts (a permission refused) is warned of when it starts,
    then logged at debug until a read of it succeeds (``failing.discard``), not every
    poll of a stream that may last hours."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.failing: set[str] = set()

    def failed(self, what: str, err: Exception) -> None:
        """Log that the task's ``what`` could not be read."""
        level = logging.DEBUG if what in self.failing else logging.WARNING
        self.failing.add(what)
        logger.log(level, "task %s: its %s could not be read: %s", self.task_id, what, err)


async def child_polls(
    items: AsyncIterator[T],
    *,
    read: Callable[[], Awaitable[RunState | None]],
    children: Callable[[], Awaitable[set[str] | None]],
    status: Callable[[RunState], TaskStatus | None],
    every: float,
    told: TaskStatus,
    after: int,
    earlier: bool = True,
) -> AsyncGenerator[T | TaskStatus]:
    """``items`` (the Run's records after ``after``, and what else its stream carries) and,
    while a child Run may be running, the task's status a read of the Run shows when it
    differs from what the stream shows.

    ``read``: the Run's state (None: it could not be read, tried again next time).
    ``children``: the workflow ids of the Run's running children, as Temporal holds them
    (None: it could not say, asked again next time; a child the records show is read for
    meanwhile). ``status``: the task's status a read
    shows when a child's item decides it (None: the Run's own items or its end decide it,
    which its records tell). ``told``: the status the stream started from (a child's
    question it holds is not told again). ``earlier``: whether a child may have started
    before ``after`` (False: the Run's state there says none did; Temporal is not asked).
    """
    loop = asyncio.get_running_loop()
    last = (told.state, told.message.message_id)
    running: set[str] = set()
    ended: set[str] = set()  # children whose end a record passed on told
    unknown = earlier  # the children started before ``after``: not asked yet
    # The last read showed a child at work; at the start, a question the stream shows may
    # be a child's whose end came before the stream's first record: one read says.
    near = told.state == TaskState.TASK_STATE_INPUT_REQUIRED
    seen = after  # the seq of the last record passed on
    heard: RunState | None = None  # a read not told yet: the records have not reached it
    due: float | None = None
    again = 0  # reads made again at once since the last one that was not dropped
    nexting: asyncio.Future[T | _Done] | None = None
    try:
        while True:
            if nexting is None:
                nexting = asyncio.ensure_future(anext(items, _Done.DONE))
            if unknown or running or near:
                due = loop.time() + every if due is None else due
                await asyncio.wait({nexting}, timeout=max(0.0, due - loop.time()))
            else:
                due = None
                await asyncio.wait({nexting})
            if not nexting.done():  # due: ask which children run, and read the Run
                due = loop.time() + every
                if unknown:
                    # Not said (asked again next time): those the records started are
                    # read for all the same.
                    found = await children()
                    if found is not None:
                        unknown = False
                        # Less those whose end was recorded: a child a settling parent
                        # cancelled is recorded ended before it closes.
                        running |= found - ended
                    if not (running or near):
                        continue
                state = await read()
                if state is not None:
                    near = _near(state)
                    heard = state
            else:
                # Taken first: what it raises is raised once, not again on the way out.
                taken, nexting = nexting, None
                item = await taken
                if item is _Done.DONE:
                    return
                if isinstance(item, _RECORDS):
                    seen = item.seq
                    if heard is not None and item.seq > heard.last_seq:
                        heard = None  # older than this record: read again
                        if again < REREADS:  # at once, not a period later
                            again += 1
                            due = loop.time()
                if (child := _started(item)) is not None:
                    running.add(child)
                    ended.discard(child)
                if (child := _ended(item)) is not None:
                    running.discard(child)
                    ended.add(child)
                if isinstance(item, RunAdmitted | Resumed | DeltasDropped):
                    # As the stream shows it (a dropped draft: working, the draft void).
                    last = (TaskState.TASK_STATE_WORKING, "")
                yield item
            if heard is None or seen < heard.last_seq or (nexting is not None and nexting.done()):
                continue  # the records go out first
            shown, heard, again = status(heard), None, 0
            if shown is None:
                continue
            key = (shown.state, shown.message.message_id)
            if key != last:
                last = key
                yield shown
    finally:
        if nexting is not None:
            # Left for another reason (the caller's return or cancel, a raise here): what
            # the item not taken raised meanwhile is logged, not raised in its place.
            nexting.cancel()
            try:
                await _until_done(nexting)
            finally:  # a cancel it raises comes once the read ended: its failure logged too
                if not nexting.cancelled() and (err := nexting.exception()) is not None:
                    logger.warning("a followed stream failed after it was left: %r", err)


async def _until_done(task: asyncio.Future[Any]) -> None:
    """Wait for ``task`` to end even when this wait is cancelled again meanwhile (an anyio
    cancel scope, as a served stream's, cancels at every await until its task leaves it),
    then raise that cancel: ``task`` runs the records' generator, which its caller closes
    next; closed while ``task`` still ran it, the close failed with "asynchronous generator
    is already running" in place of the cancel (logged as the request's failure). The
    wait is shielded from an enclosing anyio scope, so it sleeps rather than spins."""
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            # Shielded from an enclosing anyio scope's cancel, which it would deliver
            # again at every turn of the loop while ``task`` ends: a busy loop (12-07).
            with anyio.CancelScope(shield=True):
                await asyncio.wait({task})
        except asyncio.CancelledError as err:  # asyncio's own cancel (task.cancel())
            cancelled = err
    if cancelled is not None:
        raise cancelled
