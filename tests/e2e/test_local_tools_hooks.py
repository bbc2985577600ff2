"""A quick tool safe to repeat (``local_seconds``) that a hook of the worker covers: the
hooks' time is theirs, not the tool's, so the call behaves as any tool's (issue 27: every
rule of a normal tool call holds for a local one).

A pre command hook that takes longer than the tool's ``local_seconds`` must not turn a
quick tool into one that times out (and runs its hook three times): the call succeeds,
the hook and the tool each run once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from temporalio.api.enums.v1 import EventType

from psych_runtime.activities.contract import TOOL_RUN_CODE
from psych_runtime.activities.hooks import CommandHook, Hooks
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from .conftest import Harness

RAN: list[str] = []


def stock_level(sku: str) -> str:
    """How many of an item are in stock.

    Args:
        sku: The item.
    """
    RAN.append(sku)
    return f"{sku}: 12"


async def test_a_hook_slower_than_local_seconds_runs_once_and_the_call_succeeds(
    harness: Harness, tmp_path: Path
) -> None:
    RAN.clear()
    tally = tmp_path / "hook.tally"
    harness.registry.register(stock_level, idempotent=True, read_only=True, local_seconds=0.5)
    # A check that takes a second, well inside a command hook's own 10 s.
    check = CommandHook(("/bin/sh", "-c", f"echo seen >> {tally}; sleep 1"))
    harness.settings = dataclasses.replace(harness.settings, hooks=Hooks().pre("stock_*", check))
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("stock_level", {"sku": "bolt"})), Reply.text("12 bolts.")
    )
    spec = (
        AgentBuilder("stock-hooked", registry=harness.registry)
        .model("fake-model")
        .tool("stock_level")
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "How many bolts?", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    [call] = report.tool_calls
    assert (call.status, call.result) == ("ok", "bolt: 12")
    assert tally.read_text().splitlines() == ["seen"]
    assert RAN == ["bolt"]
    # A hooked tool runs as a normal activity, with a normal tool's bounds.
    history = await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert TOOL_RUN_CODE in scheduled


async def _waiting_on_a_backoff(harness: Harness, workflow_id: str) -> None:
    """Until the Run's first model call failed and its Retry-After timer started: no
    activity of the Run is open, and the next task runs on whichever worker polls."""
    handle = harness.env.client.get_workflow_handle(workflow_id)
    async with asyncio.timeout(30):
        while True:
            events = (await handle.fetch_history()).events
            types = [e.event_type for e in events]
            closed = [
                i
                for i, t in enumerate(types)
                if t
                in (
                    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
                    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
                )
            ]
            if closed and EventType.EVENT_TYPE_TIMER_STARTED in types[closed[0] :]:
                return
            await asyncio.sleep(0.05)


async def test_a_hooked_tool_a_worker_without_the_hook_catalogued_local_runs_as_an_activity(
    harness: Harness, tmp_path: Path
) -> None:
    # A fleet in the middle of a change of hooks: the Run's catalogue, resolved once at its
    # start (and carried across continue-as-new), came from a worker without the hook and
    # says local_seconds; a worker with it runs the call. Run locally there, the hook took
    # the tool's 0.5 s on each of three attempts and the model read a timeout.
    RAN.clear()
    tally = tmp_path / "hook.tally"
    harness.registry.register(stock_level, idempotent=True, read_only=True, local_seconds=0.5)
    harness.fake.enqueue(
        Reply.error(503, retry_after=1.0),
        Reply.tool_calls(ToolCall("stock_level", {"sku": "bolt"})),
        Reply.text("12 bolts."),
    )
    spec = (
        AgentBuilder("stock-hooked-later", registry=harness.registry)
        .model("fake-model")
        .tool("stock_level")
        .build()
    )
    async with harness.worker():  # no hooks: the catalogue has local_seconds
        run = await harness.client.dispatch(spec, "How many bolts?", scope=harness.scope)
        await _waiting_on_a_backoff(harness, run.workflow_id)
    check = CommandHook(("/bin/sh", "-c", f"echo seen >> {tally}; sleep 1"))
    harness.settings = dataclasses.replace(harness.settings, hooks=Hooks().pre("stock_*", check))
    async with harness.worker():
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    [call] = report.tool_calls
    assert (call.status, call.result) == ("ok", "bolt: 12")
    assert tally.read_text().splitlines() == ["seen"]
    assert RAN == ["bolt"]
