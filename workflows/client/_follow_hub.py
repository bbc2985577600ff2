"""One upstream per followed Run in a process: many streams, one long-poll, one query.

A dashboard or an API server holds many streams of the same Run through one client. Each
``RecordFollower`` of its own would long-poll the history and query the worker once per
workflow task, so a hundred of them ask a hundred times at the same instant (enough to fill
the server's buffer of queries held during a workflow task: measured, bench section 9).
``FollowHub`` gives every stream of a workflow id one shared follower: it keeps the records
it has read from its start, and each stream reads them from its own ``after``. A stream that
wants records from before the shared follower's start gets a follower of its own.

Deltas (``deltas=True``): once one stream of a Run asks for them, the shared follower also
reads the deltas of each model call in flight (``LiveCall``: one describe loop and one
relay connection, whatever the number of streams) and keeps them between the records, in
the order they arrived. A call's record is kept only after its attempt's end line (or
after ``END_WAIT_SECONDS``, its pieces then dropped), so a stream sees every piece of an
attempt before the record that supersedes them. A stream skips the deltas of calls that
had ended before it started (a late joiner gets the records and the call in flight), so an
ended call's pieces are forgotten once every stream has read past them: a Run followed for
hours keeps its records, not every piece of every call. The one exception: a stream that
comes back from pieces of an attempt dropped meanwhile (``after_delta``) is sent its drop
first, so it does not keep pieces the others were told to drop. A follower that never saw
the attempt (it started after the attempt ended) sends its drop before the record that
says it ended without an answer (``_owed_drop``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from temporalio.client import Client

from psych_runtime.specs import SpecError
from psych_runtime.workflows.client._follow import RecordFollower
from psych_runtime.workflows.client._live import LiveCall, RelayClients, attempt_standing
from psych_runtime.workflows.contract._deltas import Delta, DeltasDropped, TokenDelta
from psych_runtime.workflows.contract._records import (
    ModelCallFailed,
    ModelCallFinished,
    ModelCallStarted,
    Record,
    RunSettled,
)

Item = Record | Delta


class UnknownPosition(SpecError):
    """A stream was asked to resume after a record its Run has not written (``after`` is
    past the Run's last seq: a position of another Run's stream, or made up). Waiting
    would be silent, and the records after it, once written, would not be the ones the
    caller missed.

    Attributes:
        after: the position asked for.
        last_seq: the Run's last record's seq when it was checked.
    """

    def __init__(self, workflow_id: str, after: int, last_seq: int) -> None:
        self.after = after
        self.last_seq = last_seq
        super().__init__(
            f"after={after} names no record of {workflow_id}: its last record is seq "
            f"{last_seq}; resume from a seq it sent (0: from its start)"
        )


class _Cursor:
    """Where one stream reads next in ``_Shared.items`` (None: after a record not in yet)."""

    __slots__ = ("position",)

    def __init__(self) -> None:
        self.position: int | None = None


class _Shared:
    """A follower of one Run whose records (and deltas, once asked) every stream reads."""

    def __init__(self, client: Client, workflow_id: str, start: int) -> None:
        self.client = client
        self.workflow_id = workflow_id
        self.start = start
        self.items: list[Item | None] = []
        """Records with seq ``start + 1`` on, in order and gapless, and deltas between; a
        delta of an ended call that every stream has read past is None."""
        self.record_at: list[int] = []
        """Where record ``start + 1 + k`` is in ``items``."""
        self.ended_calls: set[str] = set()
        """Attempts whose pieces are superseded: dropped, or their call's record is in."""
        self.drops: dict[str, DeltasDropped] = {}
        """The drop of each dropped attempt (one small item per failed attempt): owed to a
        stream that comes back having read pieces of it (``after_delta``)."""
        self._open_calls: set[str] = set()
        self._cursors: set[_Cursor] = set()
        self._cleared = 0
        """Items before this index hold no delta of an open call."""
        self.done = False
        self.error: BaseException | None = None
        self.users = 0
        self.deltas = False
        self.live: LiveCall | None = None
        self.http = RelayClients()
        self.in_flight: int | None = None
        """The turn of the model call started and not yet finished, if any."""
        self.follower = RecordFollower(client, workflow_id, after=start, on_page=self._wake)
        self._tick = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    def want_deltas(self) -> None:
        """Read deltas from now on, starting with the model call pending now, if any (its
        ``ModelCallStarted`` may be before this follower's start)."""
        if self.deltas:
            return
        self.deltas = True
        if not self.done:
            self.live = self._live_call(self.in_flight)

    def _live_call(self, turn: int | None) -> LiveCall:
        return LiveCall(self.client, self.workflow_id, turn, self._append, self.http)

    async def _run(self) -> None:
        try:
            async for record in self.follower.records():
                live = self.live
                if isinstance(record, RunSettled) or (
                    isinstance(record, ModelCallFinished | ModelCallFailed)
                    and (live is None or live.turn in (None, record.turn))
                ):
                    # Records of earlier turns (a follower catching up) leave the call
                    # in flight alone.
                    self.in_flight = None
                    await self._stop_live()
                self.record_at.append(len(self.items))
                self._append(record)
                if isinstance(record, ModelCallStarted):
                    self.in_flight = record.turn
                    if live is not None and not live.done and (live.turn or 0) >= record.turn:
                        continue  # already following this call (or a later one)
                    await self._stop_live()
                    if self.deltas:
                        self.live = self._live_call(record.turn)
        except Exception as err:  # every stream of the Run raises it
            self.error = err
        finally:
            try:
                await self._stop_live(0)
            finally:
                await self.http.aclose()
                self.done = True
                self._wake()

    async def _stop_live(self, wait: float | None = None) -> None:
        live, self.live = self.live, None
        if live is not None:
            await (live.finish() if wait is None else live.finish(wait))
        self.ended_calls |= self._open_calls
        self._open_calls.clear()
        self._forget_read()

    def _append(self, item: Item) -> None:
        if isinstance(item, DeltasDropped):
            self.ended_calls.add(item.call)
            self.drops[item.call] = item
        elif isinstance(item, TokenDelta):
            self._open_calls.add(item.call)
        self.items.append(item)
        self._wake()
        if isinstance(item, DeltasDropped):
            self._forget_read()

    def _forget_read(self) -> None:
        """Drop the deltas of ended calls that every stream has read past (a stream that
        joins later skips them: they ended before it started)."""
        end = len(self.items)
        low = min((end if c.position is None else c.position for c in self._cursors), default=end)
        first_open = None
        for index in range(self._cleared, low):
            item = self.items[index]
            if isinstance(item, TokenDelta | DeltasDropped):
                if item.call in self.ended_calls:
                    self.items[index] = None
                elif first_open is None:
                    first_open = index
        self._cleared = max(self._cleared, low if first_open is None else first_open)

    def _wake(self) -> None:
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()

    async def read(
        self, after: int, deltas: bool = False, after_delta: tuple[str, int] | None = None
    ) -> AsyncIterator[Item]:
        cursor = _Cursor()
        self._cursors.add(cursor)
        try:
            async for item in self._read(cursor, after, deltas, after_delta):
                yield item
        finally:
            self._cursors.discard(cursor)
            self._forget_read()

    async def _read(
        self, cursor: _Cursor, after: int, deltas: bool, after_delta: tuple[str, int] | None
    ) -> AsyncIterator[Item]:
        position = 0 if after <= self.start else None
        # Past the last record the follower read? Only a query made after this stream
        # joined says so (its records may have been read elsewhere meanwhile).
        joined = self.follower.queries
        unchecked = after > 0
        refreshed = False
        # Known from the start: a stream still waiting to read holds back what it has not.
        cursor.position = position
        # Deltas of calls that ended before this stream joined are history: skip them.
        ended_before = set(self.ended_calls)
        resumed = None if after_delta is None else self.drops.get(after_delta[0])
        owed: str | None = None  # the attempt it had pieces of, ended unseen here
        cut = False  # ended by the Run's end, not by a record of its own
        if deltas and resumed is not None:
            # Except the drop of the attempt the stream had pieces of (it comes back from
            # them), which may have been forgotten meanwhile: its pieces are void.
            yield resumed
        elif deltas and after_delta is not None and not self._seen(after_delta[0]):
            standing = await attempt_standing(self.client, self.workflow_id, after_delta[0])
            if standing != "in_flight":
                # It ended while the stream was away, before this follower started: its
                # call's next record says how (``_owed_drop``).
                owed = after_delta[0]
                cut = standing == "cut"
                ended_before.add(owed)
        while True:
            tick = self._tick
            last_seq = self.follower.last_seq
            if unchecked and last_seq is not None:
                if after <= last_seq:
                    unchecked = False
                elif self.done and self.error is None:
                    raise UnknownPosition(self.workflow_id, after, last_seq)
                elif self.follower.answered > joined:
                    # That query may have been of an earlier execution (the follower reads
                    # a continued Run's from the first): it answers its own last seq only.
                    head = await self.follower.head()
                    if after > head:
                        raise UnknownPosition(self.workflow_id, after, head)
                    unchecked = False
                elif not refreshed:
                    refreshed = True
                    self.follower.refresh()
            if position is None and after - self.start <= len(self.record_at):
                position = self.record_at[after - self.start - 1] + 1
                cursor.position = position
            while position is not None and position < len(self.items):
                item = self.items[position]
                position += 1
                cursor.position = position
                if item is None:
                    continue
                if isinstance(item, TokenDelta | DeltasDropped):
                    if not deltas or item.call in ended_before:
                        continue
                    if (
                        isinstance(item, TokenDelta)
                        and after_delta is not None
                        and item.call == after_delta[0]
                        and item.n <= after_delta[1]
                    ):
                        continue
                elif owed is not None and isinstance(item, _CALL_RECORDS):
                    drop = _owed_drop(owed, item, cut=cut)
                    owed = None
                    if drop is not None:
                        yield drop
                yield item
            if self.done:
                if self.error is not None:
                    raise self.error
                return
            await tick.wait()

    def _seen(self, call: str) -> bool:
        """Whether this follower has read pieces of the attempt ``call``, or its end."""
        return call in self.ended_calls or call in self._open_calls

    async def stop(self) -> None:
        """Stop following (the live call and the relay clients with it, in ``_run``).

        Cancelled while it waits (a stream's client went away: the server cancels its
        task at every await), the follower still stops, uncancelled a second time: that
        would interrupt its clean-up and leave the live call running."""
        self._task.cancel()
        await asyncio.wait({self._task})


_CALL_RECORDS = (ModelCallStarted, ModelCallFinished, ModelCallFailed, RunSettled)
"""The records that start or end a model call."""


def _owed_drop(call: str, record: Record, *, cut: bool) -> DeltasDropped | None:
    """The drop of ``call``, an attempt a stream had pieces of and that ended before its
    follower started, when ``record`` (the first of ``_CALL_RECORDS`` the stream reads
    after them) says it ended without an answer: its call failed, or the Run settled
    while it ran (``cut``: the closed Run still lists it pending). A ``ModelCallFinished``
    supersedes its pieces; a ``ModelCallStarted`` comes after its end, which the stream
    read already. An attempt not ``cut`` ended before the Run did: a ``RunSettled`` read
    first then is no end of it (its ``ModelCallFinished`` came before the stream's
    position, which every record after a call's pieces keeps naming them in its id)."""
    if isinstance(record, ModelCallFailed):
        why = f"the call failed while the stream was away: {record.message}"
        return DeltasDropped(call=call, turn=record.turn, reason=why)
    if isinstance(record, RunSettled) and cut:
        why = f"the Run settled {record.status.value} while the stream was away"
        return DeltasDropped(call=call, turn=0, reason=why)
    return None


class FollowHub:
    """The shared followers of one client's streams, by workflow id.

    Args:
        client: the Temporal client the followers read through.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self._runs: dict[str, _Shared] = {}
        self.queries = 0
        """Records queries made by followers that have stopped (see ``queries_made``)."""

    def queries_made(self) -> int:
        """Records queries this hub's followers have made so far, stopped ones included."""
        return self.queries + sum(s.follower.queries for s in self._runs.values())

    async def stream(
        self,
        workflow_id: str,
        after: int,
        *,
        deltas: bool = False,
        after_delta: tuple[str, int] | None = None,
    ) -> AsyncIterator[Item]:
        """The Run's records with ``seq > after``, as ``RecordFollower.records`` gives them,
        and with ``deltas`` the deltas of the calls in flight between them (those of the
        attempt ``after_delta[0]`` only after its piece ``after_delta[1]``)."""
        shared = self._runs.get(workflow_id)
        own = shared is not None and after < shared.start
        if own or shared is None:
            shared = _Shared(self.client, workflow_id, after)
            if not own:
                self._runs[workflow_id] = shared
        if deltas:
            shared.want_deltas()
        shared.users += 1
        try:
            async for item in shared.read(after, deltas, after_delta):
                yield item
        finally:
            shared.users -= 1
            if shared.users == 0:
                if self._runs.get(workflow_id) is shared:
                    del self._runs[workflow_id]
                self.queries += shared.follower.queries
                await shared.stop()
