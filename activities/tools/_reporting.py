"""Reporting a call's outcome through the worker's client (asynchronous completion).

The SDK's own completion of an activity gives up after about 10 s of retries, so the result
of a call that finished while the Temporal server was away would be lost. A tool call not
safe to repeat, and a model call (whose answer is paid for, the summariser's too),
complete through the client instead, whose retries last the outage it must survive
(``workers.outage_retry``); ``drain_reports`` lets a stopping worker wait for the
outcomes still on their way.
"""

from __future__ import annotations

import asyncio
import logging
from typing import NoReturn

from temporalio import activity
from temporalio.client import AsyncActivityHandle

from psych_runtime.activities.contract import (
    CompactResult,
    SlimModelCallResult,
    SlimToolOutcome,
    ToolOutcome,
)

OUTAGE_MARGIN = 10.0
"""Seconds of a lost-call heartbeat timeout beyond the outage it survives: the longest a
worker holds a heartbeat back (5 s, set by ``build_worker``) and the server's restart."""

_log = logging.getLogger(__name__)


def complete_through_client(
    outcome: ToolOutcome | SlimToolOutcome | SlimModelCallResult | CompactResult,
    call_id: str,
    *,
    what: str = "tool call",
) -> NoReturn:
    """Hand the running activity's ``outcome`` (of ``what`` ``call_id``, for the log) to the
    worker's client to report.

    Raises:
        CompleteAsyncError: always; the SDK then leaves the completion to the client.
    """
    handle = activity.client().get_async_activity_handle(task_token=activity.info().task_token)
    task = asyncio.create_task(_report(handle, outcome, f"{what} {call_id}"))
    _REPORTS.add(task)
    task.add_done_callback(_REPORTS.discard)
    activity.raise_complete_async()


_REPORTS: set[asyncio.Task[None]] = set()
"""Outcomes on their way through the client (process-wide: the worker's shutdown waits)."""


async def drain_reports(within: float) -> int:
    """Wait up to ``within`` seconds for every outcome (tool call or model answer) still
    being reported through the client (a worker stopping must not drop a result it holds);
    return how many were still unsent when the time ran out (each tool call is then recorded
    UNKNOWN by its Run, each model call made again)."""
    pending = set(_REPORTS)
    if not pending:
        return 0
    _, unsent = await asyncio.wait(pending, timeout=within)
    if unsent:
        _log.error("%d call outcomes were not reported before the worker stopped", len(unsent))
    return len(unsent)


async def _report(
    handle: AsyncActivityHandle,
    outcome: ToolOutcome | SlimToolOutcome | SlimModelCallResult | CompactResult,
    call: str,
) -> None:
    """Complete a call through the client, retrying as long as its retry config says."""
    try:
        await handle.complete(outcome)
    except Exception:
        # A tool call is then recorded UNKNOWN by its Run; a model call is made again.
        _log.error("could not report the outcome of %s", call, exc_info=True)
