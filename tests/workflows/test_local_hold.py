"""The hold of the tool-call pipeline (issue 27): calls that finish while a local call runs
go on once none runs, in the order they started, whatever order they finished in
(``ToolCalls._hold`` and ``_release_held``; sdk-python issue 1578)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from psych_runtime.workflows.kernel._tool_calls import ToolCalls


def _pipeline(pending: int) -> Any:
    """What ``_hold`` and ``_release_held`` read and write of a ToolCalls."""
    return cast(Any, SimpleNamespace(_held=[], _local_pending=pending))


async def _local_call(calls: Any, order: int, finished: asyncio.Event, went_on: list[int]) -> None:
    """A local call started ``order``-th: it finishes when told, is held, then goes on."""
    await finished.wait()
    held = ToolCalls._hold(calls, order)
    calls._local_pending -= 1
    ToolCalls._release_held(calls)
    await held
    went_on.append(order)


async def test_calls_go_on_in_the_order_they_started_not_the_order_they_finished() -> None:
    calls = _pipeline(pending=3)
    finished = [asyncio.Event() for _ in range(3)]
    went_on: list[int] = []
    tasks = [
        asyncio.create_task(_local_call(calls, order, finished[order], went_on))
        for order in range(3)
    ]
    for order in (2, 0, 1):  # the last started finishes first
        finished[order].set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert went_on == [0, 1, 2]
    assert calls._held == []


async def test_nothing_goes_on_while_a_local_call_runs() -> None:
    calls = _pipeline(pending=2)
    first = asyncio.Event()
    went_on: list[int] = []
    task = asyncio.create_task(_local_call(calls, 1, first, went_on))
    first.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert went_on == []  # held: call 0 still runs
    calls._local_pending -= 1  # call 0 ends (as a cancelled call would: no hold of its own)
    ToolCalls._release_held(calls)
    await task
    assert went_on == [1]
