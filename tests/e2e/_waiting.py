"""Polling a Run (or any condition) at wall speed until it holds, for the e2e tests.

One place for the loop, so every test waits the same way (a 50 ms poll, a bounded wait
that fails with what it was waiting for) and says only what it waits for and how long.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from psych_runtime.specs import Scope
from psych_runtime.workflows import (
    Pending,
    PsychClient,
    Record,
    RunHandle,
    RunState,
    RunStatus,
)

POLL = 0.05
"""Seconds between two checks."""


async def eventually(
    check: Callable[[], Awaitable[bool]], within: float = 15.0, what: str = "condition"
) -> None:
    """Await ``check`` every POLL seconds until it returns True.

    Args:
        check: The condition; an exception from it fails the wait at once.
        within: Wall seconds to wait at most.
        what: What is waited for, named in the failure.

    Raises:
        AssertionError: ``check`` did not hold within ``within`` seconds.
    """
    try:
        async with asyncio.timeout(within):
            while True:
                if await check():
                    return
                await asyncio.sleep(POLL)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def state_when(
    client: PsychClient,
    run: RunHandle,
    scope: Scope,
    ready: Callable[[RunState], bool],
    *,
    what: str,
    within: float = 15.0,
    unsettled: bool = False,
) -> RunState:
    """Poll the Run's state until ``ready`` holds for it; return that state.

    Args:
        client: The client to ask.
        run: The Run.
        scope: The caller's scope.
        ready: When the state is the one waited for.
        what: What is waited for, named in the failure.
        within: Wall seconds to wait at most.
        unsettled: Fail at once, with the Run's status and reason, if it settles first
            (instead of waiting out ``within`` for a state that cannot come).

    Raises:
        AssertionError: ``ready`` did not hold within ``within`` seconds, or (with
            ``unsettled``) the Run settled first.
    """
    state: RunState | None = None

    async def check() -> bool:
        nonlocal state
        state = await client.status(run, scope=scope)
        if unsettled:
            assert not state.status.terminal, f"settled {state.status}: {state.reason}"
        return ready(state)

    await eventually(check, within=within, what=what)
    assert state is not None
    return state


def is_suspended(state: RunState) -> bool:
    """Whether the Run is suspended (a ``ready`` for ``state_when``)."""
    return state.status is RunStatus.SUSPENDED


def is_waiting(state: RunState) -> bool:
    """Whether the Run is suspended with something pending (a ``ready`` for ``state_when``)."""
    return state.status is RunStatus.SUSPENDED and bool(state.pending)


def only_pending(state: RunState) -> Pending:
    """The one item the Run waits on (fails if there are none or several)."""
    (item,) = state.pending
    return item


async def all_records(client: PsychClient, run: RunHandle, scope: Scope) -> list[Record]:
    """Every record of ``run``, across its executions, read page by page."""
    records: list[Record] = []
    while True:
        page = await client.records(run, scope=scope, after=len(records))
        records.extend(page.records)
        if len(records) >= page.last_seq:
            return records
