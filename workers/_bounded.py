"""How long a request waits for a Run's worker to take an update (approve, answer, abort...).

Temporal holds an update until a worker takes it, for as long as the caller waits: with
no worker polling, for ever. A request waits as long as a query does, then says so; the
update may still be applied when a worker takes it (it was sent), so a caller reads the
Run before sending it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError

from psych_runtime.workflows import UpdateUnanswered

T = TypeVar("T")

NOT_TAKEN_IN_TIME = (
    "no worker answered for the Run in time; the request may still be applied when one "
    "does: read the Run before sending it again"
)


class NotTakenInTime(Exception):
    """No worker took the update within the bound (it may still be applied later)."""

    def __init__(self) -> None:
        super().__init__(NOT_TAKEN_IN_TIME)


async def bounded(call: Awaitable[T], seconds: float) -> T:
    """``call``'s result, waiting ``seconds`` at most.

    Raises:
        NotTakenInTime: the wait ran out.
    """
    timeout = asyncio.timeout(seconds)
    try:
        async with timeout:
            return await call
    except TimeoutError as err:
        raise NotTakenInTime from err
    except WorkflowUpdateRPCTimeoutOrCancelledError as err:
        # The SDK turns the cancellation of its wait into this error: the bound's, or the
        # request's own (a caller that went away), which is not ours to answer. The
        # client's own bound (its ``update_timeout``, given the same length) says it too.
        if timeout.expired() or isinstance(err, UpdateUnanswered):
            raise NotTakenInTime from err
        raise
