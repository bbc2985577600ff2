"""The heartbeat timer of a running call beats on time and leaves no garbage cycle."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import weakref
from typing import Any

from temporalio.testing import ActivityEnvironment

from psych_runtime.activities._beat import BeatTimer


class Details:
    """Heartbeat details that can be watched with a weak reference."""


async def test_beats_then_frees_everything_without_the_collector() -> None:
    beats: list[tuple[Any, ...]] = []
    three = asyncio.Event()

    def heard(*details: Any) -> None:
        beats.append(details)
        if len(beats) >= 3:
            three.set()

    env = ActivityEnvironment()
    env.on_heartbeat = heard
    details = Details()
    gone = weakref.ref(details)

    async def call(details: Details) -> None:
        timer = BeatTimer(0.01, 0.01, (details,))
        try:
            # Waited for, not slept: a loaded machine may run the loop late.
            await asyncio.wait_for(three.wait(), timeout=30)
        finally:
            timer.cancel()

    gc.disable()
    try:
        await env.run(call, details)
        assert all(beat == (details,) for beat in beats)
        beats.clear()
        del details
        # Freed by reference counting: nothing of the finished call waits in a cycle.
        assert gone() is None
    finally:
        gc.enable()
    await asyncio.sleep(0.05)
    assert beats == []  # cancelled: no beat after the call


async def test_without_a_period_it_beats_once() -> None:
    beats: list[tuple[Any, ...]] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)

    async def call() -> None:
        timer = BeatTimer(0.01, None, ("here",))
        await asyncio.sleep(0.1)
        timer.cancel()

    await env.run(call)
    assert beats == [("here",)]


_current: contextvars.ContextVar[Details | None] = contextvars.ContextVar("current")


async def test_a_cancelled_timer_lets_the_calls_context_go_before_its_due_time() -> None:
    """A cancelled timer stays scheduled until its due time; the call's context (which
    holds the SDK's activity context) must not stay with it."""
    held = Details()
    gone = weakref.ref(held)
    # A timer due sooner, as a busy worker has: the loop drops a cancelled timer early
    # only from the head of its queue.
    sooner = asyncio.get_running_loop().call_later(30, lambda: None)

    async def call(held: Details) -> None:
        _current.set(held)  # in the task's own context, as an activity's is
        BeatTimer(60, 60).cancel()

    try:
        await asyncio.create_task(call(held))
        del held
        for _ in range(3):
            await asyncio.sleep(0)  # the finished task's last callbacks run
        gc.collect()
        assert gone() is None
    finally:
        sooner.cancel()
