"""The deadline clock: a Run's unsuspended time, bounded by ``deadline_seconds``.

Time spent suspended (waiting for a person or a system, each wait bounded by its own
expiry) does not count: the deadline bounds the Run's work, not its waiting. The clock runs
whenever any call is executing, even beside a suspended one, and while a child of an agent
works (``Suspensions.clocked``; a workflow's step child, likewise).

Its timer is never cancelled (since the patch ``psych-local-resolution-safe``; before it, the
timer was cancelled whenever the Run went idle and started again when it went on). A local
activity can resolve, live, in a later workflow task than the one its marker is recorded in:
when the worker answers a query in the task in which the local activity finishes, the SDK
(sdk-core's ``prepare_complete_resp``) sends the marker with the query's answer and tells
the workflow in the next task, while a replay resolves it in the marker's task. A timer
started before the resolution and cancelled after it (the Run's first step waits for an
approval, or the catalogue fails and the Run settles) was then started and cancelled in one
task on replay, where the SDK drops both commands, but in two tasks live, where history has
both events: the replay failed ("... does not handle HistoryEvent(TimerStarted)"), and with
it every ``psych.records`` of the closed Run and every worker that took the Run over. A
timer that is never cancelled has no such pair. Cost: a timer armed before the Run went idle
fires while it is idle or early (one workflow task, two events), and is armed again for
what is left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio import workflow

DEADLINE_GRACE_SECONDS = 30.0
"""After the deadline, in-flight calls get this long to finish before FORCE_SETTLED."""

_SHORTEST = 0.001
"""Seconds a timer is armed for at least (a timer must have a positive duration)."""

Clock = tuple[float, float | None]
"""Seconds used before the running stretch, and the workflow time it began (None:
stopped, the Run only waits)."""


async def within(
    loop: asyncio.Task[Any],
    deadline: float,
    used: float,
    *,
    waiting_only: Callable[[], bool],
    show: Callable[[Clock], None],
    kept: bool,
) -> bool:
    """Wait for ``loop``; False when ``deadline`` seconds of unsuspended time ran out.

    ``used`` seconds are used already (a continued Run's), ``waiting_only`` says whether the
    Run only waits now, ``show`` is told the clock whenever it stops or starts (the carry of
    continue-as-new reads it), ``kept`` says whether the Run keeps its timers (the patch
    ``psych-local-resolution-safe``).
    """
    if not kept:
        return await _cancelling(loop, deadline, used, waiting_only, show)
    timer: asyncio.Task[None] | None = None
    # Whether the timer in flight was armed before the Run last went idle: it fires before
    # the deadline, and one is armed again for what is left.
    early = False
    while not loop.done():
        if waiting_only():
            show((used, None))
            early = timer is not None
            await workflow.wait_condition(lambda: loop.done() or not waiting_only())
            continue
        started = workflow.time()
        show((used, started))
        if timer is None or timer.done():
            timer = asyncio.create_task(
                workflow.sleep(max(deadline - used, _SHORTEST), summary="deadline")
            )
            early = False
        await workflow.wait_condition(_stretch_over(loop, waiting_only, timer))
        used += workflow.time() - started
        # Whether the deadline is reached is told by which timer fired, never by comparing
        # workflow times: those read after a local activity differ by the task it resolved in.
        if timer.done() and not early and not loop.done():
            return False
    return True


def _stretch_over(
    loop: asyncio.Task[Any], waiting_only: Callable[[], bool], timer: asyncio.Task[None]
) -> Callable[[], bool]:
    """When a running stretch is over: the body ended, the Run only waits, or ``timer``
    fired."""
    return lambda: loop.done() or waiting_only() or timer.done()


async def _cancelling(
    loop: asyncio.Task[Any],
    deadline: float,
    used: float,
    waiting_only: Callable[[], bool],
    show: Callable[[Clock], None],
) -> bool:
    """The clock of a Run recorded before ``psych-local-resolution-safe``: one timer per
    running stretch, cancelled when the Run goes idle."""
    while not loop.done():
        if waiting_only():
            show((used, None))
            await workflow.wait_condition(lambda: loop.done() or not waiting_only())
            continue
        started = workflow.time()
        show((used, started))
        try:
            await workflow.wait_condition(
                lambda: loop.done() or waiting_only(),
                timeout=deadline - used,
                timeout_summary="deadline",
            )
        except TimeoutError:
            return False
        used += workflow.time() - started
    return True


def passed(deadline: float) -> str:
    """Why a Run whose ``deadline`` and grace ran out is force-settled (and what a child it
    aborts then is told)."""
    return f"deadline: {deadline:g} s and {DEADLINE_GRACE_SECONDS:g} s grace passed"


async def grace(loop: asyncio.Task[Any], *, kept: bool) -> bool:
    """Wait up to ``DEADLINE_GRACE_SECONDS`` for ``loop`` after the deadline; whether it
    finished."""
    if not kept:
        try:
            await workflow.wait_condition(
                loop.done, timeout=DEADLINE_GRACE_SECONDS, timeout_summary="deadline grace"
            )
        except TimeoutError:
            return False
        return True
    timer = asyncio.create_task(workflow.sleep(DEADLINE_GRACE_SECONDS, summary="deadline grace"))
    await workflow.wait_condition(lambda: loop.done() or timer.done())
    return loop.done()
