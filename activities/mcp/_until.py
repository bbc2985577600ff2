"""Waiting for a piece of work unless an event comes first (a lease's unanswerable request,
``_lease.py``; a call's own consent need, ``_consent.py``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def until_set(work: Awaitable[T], event: asyncio.Event) -> asyncio.Future[T]:
    """``work``'s future once it ended, or once ``event`` was set first: then cancelled
    (and its end awaited). Work that ended by then keeps its outcome, whatever the event."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return task
