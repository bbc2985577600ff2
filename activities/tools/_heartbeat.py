"""A running tool call heartbeats, so a crashed worker is noticed by the heartbeat timeout
and a cancellation (an abort) reaches the call."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from temporalio import activity

from psych_runtime.activities._beat import BeatTimer

_T = TypeVar("_T")


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
