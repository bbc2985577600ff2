"""A followed task's child poll (``_child_polls.child_polls``).

- A record that came while the Run's state was read goes out before what that read found;
  a read older than it is dropped and read again. Sent first, an older read's
  ``input-required`` ended a send there (a blocking or streaming send stops at a
  question), and the record telling the Run went on (the child's question answered
  meanwhile) was never sent.
- The Run is read while a child of it may run (12-06): from a record starting one to the
  record of its end, and for one Temporal says runs when the stream starts; never for a
  Run with none. Records coming all the while (a model call streaming) do not hold the
  read off. Before, it was read only while it waited on children (``delegate``,
  ``wait_children``), so a spawned child's question, asked while its parent worked on,
  never reached a stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from a2a.types import TaskState, TaskStatus

from psych_runtime.specs import Scope
from psych_runtime.workers.serve.a2a._child_polls import Failing, child_polls
from psych_runtime.workers.serve.a2a._tasks import _child_status
from psych_runtime.workflows import (
    ChildSettled,
    ChildSpawned,
    DeltasDropped,
    ModelCallStarted,
    Pending,
    RunState,
    RunStatus,
    SuspensionReason,
    TokenDelta,
    Totals,
)

EVERY = 0.05
WORKING = TaskStatus(state=TaskState.TASK_STATE_WORKING)
SCOPE = Scope(tenant="acme")
AT = datetime(2026, 12, 6, tzinfo=UTC)
CHILD = "psych-acme-lead-spawn1"
CHILD_ASKS = Pending(
    reason=SuspensionReason.QUESTION,
    id="q-child",
    call_id="q-child",
    tool="ask_question",
    question="Which warehouse?",
    expires_at=AT + timedelta(days=1),
    run=CHILD,
)


def _state(last_seq: int, *pending: Pending) -> RunState:
    return RunState(
        run_id="lead",
        tenant="acme",
        agent="lead",
        version_hash="sha256:abc",
        status=RunStatus.SUSPENDED if pending else RunStatus.RUNNING,
        turn=1,
        last_seq=last_seq,
        totals=Totals(turns=1),
        pending=pending,
    )


def _working(seq: int) -> ModelCallStarted:
    return ModelCallStarted(seq=seq, at=AT, scope=SCOPE, turn=2, model="m", attempt=1)


def _spawned(seq: int) -> ChildSpawned:
    return ChildSpawned(
        seq=seq,
        at=AT,
        scope=SCOPE,
        turn=1,
        call_id="c1",
        run=CHILD,
        agent="asker",
        version_hash="sha256:def",
        model="m",
    )


def _settled(seq: int) -> ChildSettled:
    return ChildSettled(
        seq=seq,
        at=AT,
        scope=SCOPE,
        turn=1,
        call_id="c1",
        run=CHILD,
        agent="asker",
        via="spawn",
        version_hash="sha256:def",
        status=RunStatus.COMPLETED,
        reason="answered",
        totals=Totals(),
    )


class _Run:
    """The followed Run: its records (put as they come), its reads and its children."""

    def __init__(self, running: set[str] | None = None) -> None:
        self.records: asyncio.Queue[object] = asyncio.Queue()
        self.states: list[RunState] = []
        self.reads = 0
        self.asked = 0
        self.running = running or set()
        self.every = EVERY
        self.earlier = True

    async def items(self) -> AsyncGenerator[object]:
        while True:
            yield await self.records.get()

    async def read(self) -> RunState:
        self.reads += 1
        return self.states[min(self.reads, len(self.states)) - 1]

    async def children(self) -> set[str]:
        self.asked += 1
        return set(self.running)

    def polls(
        self, items: AsyncIterator[object], after: int = 0, told: TaskStatus = WORKING
    ) -> AsyncGenerator[object]:
        return child_polls(
            items,
            read=self.read,
            children=self.children,
            status=lambda state: _child_status("lead", state),
            every=self.every,
            told=told,
            after=after,
            earlier=self.earlier,
        )


async def _take(run: _Run, count: int, after: int = 0) -> list[object]:
    seen: list[object] = []
    followed = run.items()
    polls = run.polls(followed, after)
    async with contextlib.aclosing(followed), contextlib.aclosing(polls), asyncio.timeout(5):
        async for item in polls:
            seen.append(item)
            if len(seen) == count:
                break
    return seen


async def _during(
    run: _Run, seconds: float, after: int = 0, told: TaskStatus = WORKING
) -> list[object]:
    """What the poll passes on in ``seconds``."""
    seen: list[object] = []
    followed = run.items()
    polls = run.polls(followed, after, told)
    async with contextlib.aclosing(followed), contextlib.aclosing(polls):
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                async for item in polls:
                    seen.append(item)
    return seen


def _asks(item: object) -> bool:
    return isinstance(item, TaskStatus) and item.state == TaskState.TASK_STATE_INPUT_REQUIRED


async def test_a_record_newer_than_a_read_goes_out_first_and_the_read_is_read_again() -> None:
    run = _Run(running={CHILD})
    newer = _working(5)

    async def read() -> RunState:
        run.reads += 1
        if run.reads == 1:  # the Run goes on (a record) while its state is being read
            await run.records.put(newer)
            await asyncio.sleep(EVERY)
            return _state(4, CHILD_ASKS)
        return _state(5, CHILD_ASKS)

    run.read = read  # type: ignore[method-assign]  # this Run's reads race its records
    seen = await _take(run, 2, after=4)
    assert seen[0] is newer, seen
    assert _asks(seen[1]) and run.reads == 2, (seen, run.reads)


async def test_a_record_older_than_a_read_goes_out_first_then_the_read() -> None:
    run = _Run(running={CHILD})
    older = _working(5)

    async def read() -> RunState:
        run.reads += 1
        await run.records.put(older)  # written before the read: the read counts it
        await asyncio.sleep(EVERY)
        return _state(5, CHILD_ASKS)

    run.read = read  # type: ignore[method-assign]
    seen = await _take(run, 2, after=4)
    assert seen[0] is older and _asks(seen[1]) and run.reads == 1, (seen, run.reads)


async def test_a_run_with_no_child_running_is_not_read() -> None:
    run = _Run()
    run.states = [_state(3)]
    assert await _during(run, 6 * EVERY, after=3) == []
    assert (run.asked, run.reads) == (1, 0)  # Temporal asked once which children run


async def test_a_spawned_childs_question_is_told_while_records_come_and_its_end_stops_it() -> None:
    run = _Run()
    run.states = [_state(1, CHILD_ASKS), _state(1)]
    seen: list[TaskStatus] = []
    followed = run.items()
    polls = run.polls(followed)
    await run.records.put(_spawned(1))

    async def stream_text() -> None:  # the parent works on: its model call streams
        for n in range(1, 1000):
            await run.records.put(TokenDelta(call="2.m#1", turn=2, n=n, text="x"))
            await asyncio.sleep(EVERY / 5)

    streaming = asyncio.ensure_future(stream_text())
    try:
        async with contextlib.aclosing(followed), contextlib.aclosing(polls), asyncio.timeout(5):
            async for item in polls:
                if isinstance(item, TaskStatus):
                    seen.append(item)
                if len(seen) == 2:
                    break
    finally:
        streaming.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await streaming
    assert _asks(seen[0]) and seen[1].state == TaskState.TASK_STATE_WORKING, seen

    # Its end recorded, the Run is read no more.
    run = _Run()
    run.states = [_state(2)]
    for record in (_spawned(1), _settled(2)):
        await run.records.put(record)
    taken = await _during(run, 6 * EVERY)
    assert [type(r) for r in taken] == [ChildSpawned, ChildSettled]
    assert run.reads == 0, run.reads


async def test_a_stream_started_at_a_childs_question_reads_once_whether_it_still_stands() -> None:
    """A subscription starts at a child's question (the task it starts with); the child
    ended before its first record (its question expired, say): Temporal lists no child,
    and one read tells the task ``working`` again."""
    run = _Run()
    run.states = [_state(3)]
    asking = _child_status("lead", _state(3, CHILD_ASKS))
    assert asking is not None and _asks(asking)
    seen = await _during(run, 6 * EVERY, after=3, told=asking)
    assert [s.state for s in seen if isinstance(s, TaskStatus)] == [WORKING.state], seen
    assert run.reads == 1, run.reads


async def test_a_child_the_records_started_is_read_for_while_temporal_cannot_say() -> None:
    """Temporal's describe of the workflow fails (unavailable, refused): a child the records
    started still has the Run read. Before, every failed describe skipped the read, so a
    describe refused for good (a permission) hid the child's question for ever."""
    run = _Run()
    run.states = [_state(1, CHILD_ASKS)]

    async def children() -> None:
        run.asked += 1  # Temporal could not say: asked again next time

    run.children = children  # type: ignore[assignment,method-assign]
    await run.records.put(_spawned(1))
    seen = await _during(run, 8 * EVERY)
    assert any(_asks(item) for item in seen), (seen, run.asked, run.reads)


async def test_a_childs_question_still_standing_is_told_again_after_a_dropped_draft() -> None:
    """A model call attempt of the parent ended without an answer while its child asked:
    the stream tells that as ``working`` (its draft void), so the question, still standing,
    is told again at the next read. Before, it was told once: the stream stayed working."""
    run = _Run(running={CHILD})
    run.states = [_state(1, CHILD_ASKS)]
    await run.records.put(_spawned(1))
    seen: list[object] = []
    followed = run.items()
    polls = run.polls(followed)
    async with contextlib.aclosing(followed), contextlib.aclosing(polls):
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(20 * EVERY):
                async for item in polls:
                    seen.append(item)
                    if _asks(item):
                        if any(isinstance(s, DeltasDropped) for s in seen):
                            break
                        dropped = DeltasDropped(call="2.m#1", turn=2, reason="timeout")
                        await run.records.put(dropped)
    assert [type(s).__name__ for s in seen] == [
        "ChildSpawned",
        "TaskStatus",
        "DeltasDropped",
        "TaskStatus",
    ], seen


async def test_a_stream_failing_after_its_caller_left_at_a_question_does_not_fail_the_leaving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A blocking send stops at a child's question; the record stream it no longer takes
    fails meanwhile: the send ends as told (input-required), the failure logged. Before,
    the poll's close raised it in place of the send's return (or of its cancel)."""
    run = _Run(running={CHILD})
    run.states = [_state(1, CHILD_ASKS)]

    async def items() -> AsyncGenerator[object]:
        yield _spawned(1)
        await asyncio.sleep(4 * EVERY)
        raise RuntimeError("the records could not be read")

    followed = items()
    polls = run.polls(followed)
    async with contextlib.aclosing(followed), contextlib.aclosing(polls), asyncio.timeout(5):
        async for item in polls:
            if _asks(item):
                await asyncio.sleep(8 * EVERY)  # its caller sends the status out meanwhile
                break
    assert "the records could not be read" in caplog.text


async def _cancelled_at_first_item(run: _Run, followed: AsyncGenerator[object]) -> None:
    """``run``'s poll of ``followed`` under an anyio cancel scope (as sse-starlette ends a
    served stream) cancelled at its first item; the scope must have caught the cancel."""
    polls = run.polls(followed)
    with anyio.CancelScope() as scope:
        async with contextlib.aclosing(followed), contextlib.aclosing(polls):
            async for _ in polls:
                scope.cancel()
    assert scope.cancelled_caught


async def test_a_stream_its_server_cancels_closes_its_records_once_their_read_ended() -> None:
    """A served stream ends by an anyio cancel scope (sse-starlette's, when its caller
    leaves), which cancels its task at every await until the task leaves the scope: the
    poll's wait for its pending read of the records was cancelled again, the records'
    generator closed while that read still ran it, and the close's "asynchronous
    generator is already running" replaced the cancel (logged as the request's failure,
    12-07 CI)."""
    run = _Run()
    closed: list[str] = []

    async def items() -> AsyncGenerator[object]:
        try:
            yield _working(1)
            await asyncio.sleep(3600)
        finally:  # a close that takes a few turns of the loop (the close watch's)
            for _ in range(3):
                await asyncio.sleep(0)
            closed.append("records")

    await _cancelled_at_first_item(run, items())
    assert closed == ["records"]


async def test_a_read_failing_as_its_cancelled_stream_leaves_is_logged_not_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The records' read, cancelled as the served stream leaves by its cancel scope, fails
    on its way out: the failure is logged as a followed stream's failure. Before, the
    cancel raised past the check, the read's task was never asked for it, and asyncio
    logged "Task exception was never retrieved" (or nothing) in its place."""
    run = _Run()

    async def items() -> AsyncGenerator[object]:
        try:
            yield _working(1)
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0)
            raise RuntimeError("the records' read failed on its way out")

    await _cancelled_at_first_item(run, items())
    gc.collect()  # an unretrieved task's failure is logged by asyncio here, not mid-assert
    assert "a followed stream failed after it was left" in caplog.text
    assert "the records' read failed on its way out" in caplog.text


async def test_a_stream_its_server_cancels_waits_out_its_records_read_without_spinning() -> None:
    """The anyio scope cancelling a served stream delivers its cancel again at every turn
    of the loop while the task waits: the wait for the records' read (its clean-up taking
    a second here) spun the CPU for as long (12-07: ~100% of a core), now it sleeps."""
    run = _Run()
    closed: list[str] = []

    async def items() -> AsyncGenerator[object]:
        try:
            yield _working(1)
            await asyncio.sleep(3600)
        finally:  # a clean-up cancels do not cut short (a follower's stop, say)
            await asyncio.shield(asyncio.sleep(1.0))
            closed.append("records")

    cpu = time.process_time()
    await _cancelled_at_first_item(run, items())
    spent = time.process_time() - cpu
    assert closed == ["records"]
    assert spent < 0.2, f"{spent:.2f} s of CPU waiting 1 s for the records' read"


def test_a_read_failing_at_every_poll_is_warned_of_once_until_it_reads_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failing = Failing("t1")
    caplog.set_level(logging.DEBUG, logger="psych_runtime.workers.serve.a2a._child_polls")
    for _ in range(3):
        failing.failed("running children", RuntimeError("permission denied"))
    failing.failed("state", RuntimeError("no worker"))
    failing.failing.discard("running children")  # read again
    failing.failed("running children", RuntimeError("permission denied"))
    levels = [(r.levelno, r.getMessage()) for r in caplog.records]
    children = "task t1: its running children could not be read: permission denied"
    assert levels == [
        (logging.WARNING, children),
        (logging.DEBUG, children),
        (logging.DEBUG, children),
        (logging.WARNING, "task t1: its state could not be read: no worker"),
        (logging.WARNING, children),
    ]


async def test_a_stream_whose_run_made_no_tool_call_asks_temporal_nothing() -> None:
    """A stream that starts where the Run has made no tool call (a new task's first
    message): an agent starts a child only from one, so no child can run from before the
    stream's first record. Until 12-07 each such stream living ``every`` seconds described
    the workflow once."""
    run = _Run()
    run.earlier = False
    seen = await _during(run, 6 * EVERY, after=3)
    assert (seen, run.asked, run.reads) == ([], 0, 0)


async def test_a_child_whose_end_was_recorded_is_not_read_for_when_temporal_lists_it() -> None:
    """A settling parent that cancels a spawned child records its end at once; the child
    closes later. Temporal, asked after that record went out, still lists it running:
    until 12-07 the stream then read the Run every ``every`` seconds until the Run ended."""
    run = _Run(running={CHILD})  # Temporal lists it: it has not closed yet
    run.states = [_state(2)]
    for record in (_spawned(1), _settled(2)):
        await run.records.put(record)
    taken = await _during(run, 8 * EVERY)
    assert [type(r) for r in taken] == [ChildSpawned, ChildSettled]
    assert (run.asked, run.reads) == (1, 0), (run.asked, run.reads)


async def test_a_read_dropped_for_a_newer_record_is_read_again_at_once() -> None:
    """Until 12-07 a read dropped because a record newer than it went out was read again a
    period later (3 s in production): the child's question waited that long."""
    every = 1.0
    run = _Run(running={CHILD})
    newer = _working(5)
    loop = asyncio.get_running_loop()
    reads: list[float] = []

    async def read() -> RunState:
        reads.append(loop.time())
        if len(reads) == 1:  # the Run goes on (a record) while its state is being read
            await run.records.put(newer)
            await asyncio.sleep(0.05)
            return _state(4, CHILD_ASKS)
        return _state(5, CHILD_ASKS)

    run.read = read  # type: ignore[method-assign]
    run.every = every
    seen = await _take(run, 2, after=4)
    assert seen[0] is newer and len(reads) == 2, (seen, reads)
    assert reads[1] - reads[0] < every / 4, reads  # measured: 1.0 s before, ~0.05 s now


async def test_a_run_outrunning_every_read_is_read_again_at_once_only_twice() -> None:
    """Every read dropped (a record newer than each): read again at once twice, then once a
    period, not in a loop."""
    every = 0.5
    run = _Run(running={CHILD})
    seq = 4

    async def read() -> RunState:
        nonlocal seq
        run.reads += 1
        seq += 1
        await run.records.put(_working(seq))  # each read outrun by a record
        await asyncio.sleep(0.01)
        return _state(seq - 1, CHILD_ASKS)

    run.read = read  # type: ignore[method-assign]
    run.every = every
    seen = await _during(run, every * 1.5, after=4)
    assert not any(_asks(s) for s in seen), seen
    # The first at ``every``, two again at once, then the next period's: 3 in 1.5 periods.
    assert run.reads == 3, run.reads


def test_two_childrens_questions_with_the_same_id_are_two_messages() -> None:
    """Two children asking hold their own ids, which may be the same (their models' call
    ids): until 12-07 both were the message ``lead.ask.q-child``, so a stream that had told
    the first child's question did not tell the second's once the first was answered."""
    other = CHILD_ASKS.model_copy(update={"run": "psych-acme-lead-spawn2", "question": "Why?"})
    first = _child_status("lead", _state(3, CHILD_ASKS, other))
    second = _child_status("lead", _state(4, other))
    assert first is not None and second is not None
    assert first.message.parts[0].text == "Which warehouse?"  # the one a reply answers
    assert first.message.message_id == "lead.ask.lead-spawn1.q-child"
    assert second.message.message_id == "lead.ask.lead-spawn2.q-child"
