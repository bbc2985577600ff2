"""Following a task whose Run's workflow execution closes while no worker answers.

A Run's records are read by a query, which a worker answers, of an open execution or of
a closed one (replaying it). With no worker polling, a follower of a Run whose execution
an operator terminated asks again and again for records that will not come until a
worker starts: an A2A stream of it was held open (seen at 250 s and more), though
Temporal knows at once that the execution closed, and the listing shows such a Run
``failed``. So a task's stream also watches its workflow's latest execution close (a
long-poll of its close event, as ``result()`` waits, no worker needed; the event is not
decoded, so a result or failure the serve's converter or codec cannot read does not
fail the stream, and a large one is not decoded for nothing); once it has,
the records get ``grace`` seconds (the serve's query timeout, what a read waits for a
worker) to reach their end, and then the stream is cut (``CUT``) and the task's end is
told from what Temporal holds (``_tasks.task_events``).

An execution closed by a reset or by continue-as-new is not an end: the watch goes on
with the execution the workflow runs on in.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistoryEventFilterType

from psych_runtime.workflows import HISTORY_LONG_POLL_TIMEOUT, describe_within, history_events

T = TypeVar("T")


class Cut(enum.Enum):
    """The records were cut short: the execution closed, and they did not end in time."""

    CUT = "cut"


CUT = Cut.CUT


class _End(enum.Enum):
    END = "end"


async def execution_closed(temporal: Client, workflow_id: str, rpc_timeout: timedelta) -> None:
    """Return once the latest execution of ``workflow_id`` is closed and no other runs on
    in its place (reset, continue-as-new: the watch moves to the new one). Each describe
    waits ``rpc_timeout`` at most, each long poll of the close event
    ``HISTORY_LONG_POLL_TIMEOUT`` (Temporal answers it empty sooner: the SDK asks again).

    Raises:
        TemporalUnanswered: Temporal did not answer a describe, or a long poll of the
            close event, in time.
        TemporalCancelled: it gave one of them up at once (a CANCELLED under load).
        RPCError: Temporal could not say (the stream fails with it, as its following does).
    """
    while True:
        latest = temporal.get_workflow_handle(workflow_id)
        description = await describe_within(latest, workflow_id, rpc_timeout)
        if description.status is not WorkflowExecutionStatus.RUNNING:
            return
        execution = temporal.get_workflow_handle(workflow_id, run_id=description.run_id)
        # How it closed does not matter here (the next describe says whether it runs on),
        # so its close event is waited for and not read: ``result()`` would decode what it
        # holds, and fail on what the serve's converter cannot read.
        closes = execution.fetch_history_events(
            wait_new_event=True,
            event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT,
            skip_archival=True,
            rpc_timeout=HISTORY_LONG_POLL_TIMEOUT,
        )
        # Each long poll timed on its own (an empty answer is asked again unseen).
        what = "a long poll of the close event"
        async for _close in history_events(
            closes, workflow_id, HISTORY_LONG_POLL_TIMEOUT, what=what
        ):
            break


async def until_closed(
    items: AsyncIterator[T], temporal: Client, workflow_id: str, grace: float
) -> AsyncGenerator[T | Cut]:
    """``items`` until they end; or, once the workflow's execution closed
    (``execution_closed``) and they have not ended ``grace`` seconds after, ``CUT`` and
    no more. What ``items`` or the watch raise is raised here (the watch's describes wait
    ``grace`` at most: the serve's query timeout, what any of its reads waits; its long
    polls ``HISTORY_LONG_POLL_TIMEOUT``, which must outlast Temporal's own interval)."""
    queue: asyncio.Queue[T | _End | BaseException] = asyncio.Queue(maxsize=1)

    async def pump() -> None:
        try:
            async for item in items:
                await queue.put(item)
        except Exception as err:
            await queue.put(err)
        else:
            await queue.put(_End.END)
        finally:
            if isinstance(items, AsyncGenerator):
                await items.aclose()

    loop = asyncio.get_running_loop()
    pumping = asyncio.create_task(pump())
    closing = asyncio.create_task(execution_closed(temporal, workflow_id, timedelta(seconds=grace)))
    getting: asyncio.Task[Any] | None = None
    deadline: float | None = None
    try:
        while True:
            if getting is None:
                getting = asyncio.create_task(queue.get())
            waiting: set[asyncio.Task[Any]] = {getting}
            if deadline is None:
                waiting.add(closing)
            timeout = None if deadline is None else max(0.0, deadline - loop.time())
            done, _ = await asyncio.wait(
                waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if getting in done:
                item = getting.result()
                getting = None
                if item is _End.END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
            elif closing in done:
                closing.result()  # its error, if the watch failed
                deadline = loop.time() + grace
            elif not done:  # closed, and the records did not end within grace
                yield CUT
                return
    finally:
        tasks = [task for task in (getting, pumping, closing) if task is not None]
        for task in tasks:
            task.cancel()
        # Collected, not raised: the stream has ended (or raised) already, and the watch's
        # own failure past that point tells its caller nothing.
        await asyncio.gather(*tasks, return_exceptions=True)
