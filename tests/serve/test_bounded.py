"""How long a request waits for a Run's worker to take an update (``workers/_bounded.py``):
the bound's expiry is ``NotTakenInTime`` whether the wait ends in asyncio's TimeoutError or
in the error the Temporal SDK makes of its cancelled wait; any other cancellation is not."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError

from psych_runtime.workers._bounded import NotTakenInTime, bounded


async def forever() -> None:
    await asyncio.Event().wait()


async def as_the_sdk_waits() -> None:
    # The SDK catches the cancellation of an update's wait and raises its own error.
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError as err:
        raise WorkflowUpdateRPCTimeoutOrCancelledError() from err


@pytest.mark.parametrize("call", [forever, as_the_sdk_waits])
async def test_a_wait_past_the_bound_is_not_taken_in_time(
    call: Callable[[], Coroutine[Any, Any, None]],
) -> None:
    with pytest.raises(NotTakenInTime, match="may still be applied"):
        await bounded(call(), 0.05)


async def test_an_update_error_before_the_bound_is_left_as_it_is() -> None:
    async def refused() -> None:
        raise WorkflowUpdateRPCTimeoutOrCancelledError()

    with pytest.raises(WorkflowUpdateRPCTimeoutOrCancelledError):
        await bounded(refused(), 5.0)


async def test_a_result_in_time_is_returned() -> None:
    async def quick() -> int:
        return 7

    assert await bounded(quick(), 5.0) == 7
