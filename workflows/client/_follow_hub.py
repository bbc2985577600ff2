"""One upstream per followed Run in a process: many streams, one long-poll, one query.

A dashboard or an API server holds many streams of the same Run through one client. Each
``RecordFollower`` of its own would long-poll the history and query the worker once per
workflow task, so a hundred of them ask a hundred times at the same instant (enough to fill
the server's buffer of queries held during a workflow task: measured, bench section 9).
``FollowHub`` gives every stream of a workflow id one shared follower: it keeps the records
it has read from its start, and each stream reads them from its own ``after``. A stream that
wants records from before the shared follower's start gets a follower of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio.client import Client

from psych_runtime.workflows.client._follow import RecordFollower
from psych_runtime.workflows.contract._records import Record


class _Shared:
    """A follower of one Run whose records every stream of it reads."""

    def __init__(self, client: Client, workflow_id: str, start: int) -> None:
        self.start = start
        self.records: list[Record] = []
        """The records with seq ``start + 1`` on, in order and gapless."""
        self.done = False
        self.error: BaseException | None = None
        self.users = 0
        self.follower = RecordFollower(client, workflow_id, after=start)
        self._tick = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            async for record in self.follower.records():
                self.records.append(record)
                self._wake()
        except Exception as err:  # every stream of the Run raises it
            self.error = err
        finally:
            self.done = True
            self._wake()

    def _wake(self) -> None:
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()

    async def read(self, after: int) -> AsyncIterator[Record]:
        position = after - self.start
        while True:
            tick = self._tick
            while position < len(self.records):
                yield self.records[position]
                position += 1
            if self.done:
                if self.error is not None:
                    raise self.error
                return
            await tick.wait()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


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

    async def stream(self, workflow_id: str, after: int) -> AsyncIterator[Record]:
        """The Run's records with ``seq > after``, as ``RecordFollower.records`` gives them."""
        shared = self._runs.get(workflow_id)
        if shared is not None and after < shared.start:
            own = RecordFollower(self.client, workflow_id, after=after)
            try:
                async for record in own.records():
                    yield record
            finally:
                self.queries += own.queries
            return
        if shared is None:
            shared = self._runs[workflow_id] = _Shared(self.client, workflow_id, after)
        shared.users += 1
        try:
            async for record in shared.read(after):
                yield record
        finally:
            shared.users -= 1
            if shared.users == 0 and self._runs.get(workflow_id) is shared:
                del self._runs[workflow_id]
                self.queries += shared.follower.queries
                await shared.stop()
