"""The heartbeat timer of a running activity call (the model call's, a tool call's).

An object rather than a closure that re-arms itself: such a closure holds itself (and its
timer, which holds the closure) in a reference cycle, so every finished call left a few
objects for the garbage collector, and at the rate of a turn's calls that garbage makes
the collector run more often. Here the only cycle is the armed timer's, and ``cancel``
breaks it: a finished call's objects are freed at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity


class BeatTimer:
    """Heartbeat ``details`` after ``first`` seconds, then every ``every`` (or just once)."""

    __slots__ = ("_details", "_every", "_loop", "_timer")

    def __init__(self, first: float, every: float | None, details: tuple[Any, ...] = ()) -> None:
        self._loop = asyncio.get_running_loop()
        self._details = details
        self._every = every
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(first, self._beat)

    def _beat(self) -> None:
        activity.heartbeat(*self._details)
        every = self._every
        self._timer = None if every is None else self._loop.call_later(every, self._beat)

    def cancel(self) -> None:
        """Stop beating (a cancelled timer drops its callback, so no cycle is left)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
