"""Tool calls held while a local one runs, so replay meets their commands in one order.

Concurrent local activities resolve in the order they finished live but in the order they
were started on replay (sdk-python issue 1578). So a call may go on past its execution only
once no local call is running, and the calls held for that go on in the order they
started: whatever order their local activities resolved in, the commands that follow them
(an external wait's timer and upsert, the next model call) come in the same order.
"""

from __future__ import annotations

import asyncio


class LocalHold:
    """The calls of a Run held for its running local calls (one per Run, in the workflow)."""

    def __init__(self) -> None:
        self._pending = 0
        """Tool calls running as local activities now."""
        self._held: list[tuple[int, asyncio.Future[None]]] = []
        """Calls waiting for the local calls to finish, by the order they started in."""
        self._started = 0
        """Calls started so far: the next call's place in that order."""

    def start(self, local: bool) -> int:
        """A call starts (``local``: as a local activity); its place in the start order."""
        order, self._started = self._started, self._started + 1
        self._pending += local
        return order

    def finish(self, order: int, local: bool) -> asyncio.Future[None] | None:
        """The call ``start`` placed at ``order`` ended: what it must await before it goes
        on (None: nothing; no local call runs)."""
        held = None
        if local:
            held = self._hold(order)
            self._pending -= 1
            self._release()
        if held is None and self._pending:
            held = self._hold(order)
        return held

    def _hold(self, order: int) -> asyncio.Future[None]:
        held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held.append((order, held))
        return held

    def _release(self) -> None:
        """With no local call running, let the held calls go on, in the order they started.

        Released from a callback, not here: the call releasing them holds too, and would
        otherwise go on first (awaiting a future already done does not yield).
        """
        if self._pending or not self._held:
            return
        held = sorted(self._held, key=lambda entry: entry[0])
        self._held = []

        def release() -> None:
            for _, future in held:
                if not future.done():
                    future.set_result(None)

        asyncio.get_running_loop().call_soon(release)
