"""The hold of the tool-call pipeline (issue 27): calls that finish while a local call runs
go on once none runs, in the order they started, whatever order they finished in
(``LocalHold``; sdk-python issue 1578)."""

from __future__ import annotations

import asyncio

from psych_runtime.workflows.kernel._local_hold import LocalHold


async def _call(
    hold: LocalHold, order: int, local: bool, finished: asyncio.Event, went_on: list[int]
) -> None:
    """A call started ``order``-th: it finishes when told, waits if held, then goes on."""
    await finished.wait()
    held = hold.finish(order, local)
    if held is not None:
        await held
    went_on.append(order)


async def test_calls_go_on_in_the_order_they_started_not_the_order_they_finished() -> None:
    hold = LocalHold()
    orders = [hold.start(local=True) for _ in range(3)]
    assert orders == [0, 1, 2]
    finished = [asyncio.Event() for _ in range(3)]
    went_on: list[int] = []
    tasks = [
        asyncio.create_task(_call(hold, order, True, finished[order], went_on)) for order in orders
    ]
    for order in (2, 0, 1):  # the last started finishes first
        finished[order].set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert went_on == [0, 1, 2]


async def test_nothing_goes_on_while_a_local_call_runs() -> None:
    hold = LocalHold()
    local = hold.start(local=True)
    activity = hold.start(local=False)
    local_done, activity_done = asyncio.Event(), asyncio.Event()
    went_on: list[int] = []
    tasks = [
        asyncio.create_task(_call(hold, activity, False, activity_done, went_on)),
        asyncio.create_task(_call(hold, local, True, local_done, went_on)),
    ]
    activity_done.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert went_on == []  # held: the local call still runs
    local_done.set()
    await asyncio.gather(*tasks)
    assert went_on == [local, activity]


async def test_with_no_local_call_nothing_is_held() -> None:
    hold = LocalHold()
    order = hold.start(local=False)
    assert hold.finish(order, local=False) is None
