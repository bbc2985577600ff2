"""A running tool call heartbeats, so a crashed worker is noticed by the heartbeat timeout
and a cancellation (an abort) reaches the call."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from temporalio import activity

_T = TypeVar("_T")


async def heartbeating(work: Coroutine[Any, Any, _T], every: float) -> _T:
    """Await ``work`` as a task, heartbeating every ``every`` seconds until it is done.

    On cancellation the task is cancelled and awaited (so its cleanup runs) before the
    cancellation propagates.
    """
    task = asyncio.create_task(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            activity.heartbeat()
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task})
        if not task.cancelled():
            task.exception()  # retrieved, so asyncio does not log it as never retrieved
        raise
