"""The heartbeat timer of a running activity call (the model call's, a tool call's).

An object rather than a closure that re-arms itself: such a closure holds itself (and its
timer, which holds the closure) in a reference cycle, so every finished call left a few
objects for the garbage collector, and at the rate of a turn's calls that garbage makes
the collector run more often. Here the only cycle is the armed timer's, and ``cancel``
breaks it: a finished call's objects are freed at once.

The timers are armed in an empty context, and the beat runs in the call's own context,
which this object holds until ``cancel``: a timer keeps the context it was armed in even
once cancelled, until its due time, and the call's context holds the SDK's activity
context (its events and locks) with it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any, TypeVar

from temporalio import activity

_T = TypeVar("_T")


class BeatTimer:
    """Heartbeat ``details`` after ``first`` seconds, then every ``every`` (or just once)."""

    __slots__ = ("_call", "_details", "_every", "_loop", "_timer")

    def __init__(self, first: float, every: float | None, details: tuple[Any, ...] = ()) -> None:
        self._loop = asyncio.get_running_loop()
        self._call: contextvars.Context | None = contextvars.copy_context()
        self._details = details
        self._every = every
        self._timer: asyncio.TimerHandle | None = self._arm(first)

    def _arm(self, delay: float) -> asyncio.TimerHandle:
        return self._loop.call_later(delay, self._beat, context=contextvars.Context())

    def _beat(self) -> None:
        if self._call is None:
            return
        self._call.run(activity.heartbeat, *self._details)
        every = self._every
        self._timer = None if every is None else self._arm(every)

    def cancel(self) -> None:
        """Stop beating (a cancelled timer drops its callback, so no cycle is left, and
        the call's context is let go)."""
        self._call = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def heartbeating(work: Coroutine[Any, Any, _T], every: float) -> _T:
    """Await ``work``, heartbeating every ``every`` seconds until it is done.

    The beat is a timer of the event loop, not a task: a call shorter than ``every`` (the
    usual one) costs one timer and sends no heartbeat. ``work`` runs in the activity's own
    task, so a cancellation (an abort) is raised inside it, its cleanup runs, and the
    cancellation propagates. A local activity (a quick tool safe to repeat) has no
    heartbeat at the server, so it sends none: each would be refused and logged.
    """
    if activity.info().is_local:
        return await work
    timer = BeatTimer(every, every)
    try:
        return await work
    finally:
        timer.cancel()
