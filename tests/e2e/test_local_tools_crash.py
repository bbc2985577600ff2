"""A worker killed with SIGKILL while a quick tool safe to repeat runs as a local activity.

One crash serves both tests. A worker in its own process starts two Runs: one calls
``count_stock`` (registered ``idempotent=True, local_seconds=10``: a local activity, run
where the Run's workflow task runs), the other ``ship_parcel`` (not safe to repeat: a normal
activity). Each tool appends a line to its own tally file per run, then holds. Once both
have run once, the process is SIGKILLed and a worker in the test process takes over: the
local call is run again once (the workflow task that ran it never completed, so nothing of
it is in history) and its Run completes; the write tool is never run again and settles
UNKNOWN. A third Run calls both in one turn (the write first): the write runs exactly
once, however the kill falls between its call and the local one.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities.contract import TOOL_RUN_CODE
from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workflows import RunReport, RunResult, RunStatus
from psych_runtime.workflows.kernel._tool_calls import UNKNOWN_OUTCOME

from ._crash import doomed_worker
from ._worker_proc import REGISTRY

pytestmark = pytest.mark.e2e

HOLD = 30.0
"""Seconds the first run of each tool holds: it is in flight when the worker dies."""


@dataclass
class Settled:
    result: RunResult
    report: RunReport
    events: list[HistoryEvent]
    runs: int
    """How many times the tool ran (lines in its tally file)."""


@dataclass
class Crash:
    local: Settled
    write: Settled
    mixed: Settled
    mixed_writes: int
    """How many times the mixed Run's write tool ran."""


def _tally_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture(scope="module")
async def crash(dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Crash:
    home = tmp_path_factory.mktemp("local-crash")
    stock, parcels = home / "stock.tally", home / "parcels.tally"
    mixed_stock, mixed_parcels = home / "mixed-stock.tally", home / "mixed-parcels.tally"
    task_queue = f"local-crash-{uuid.uuid4().hex[:12]}"
    scope = Scope(tenant="acme")
    counter = (
        AgentBuilder("stock-counter-local", registry=REGISTRY)
        .model("fake-model")
        .tool("count_stock")
        .build()
    )
    shipper = (
        AgentBuilder("shipper-local", registry=REGISTRY)
        .model("fake-other")
        .tool("ship_parcel")
        .build()
    )
    both = (
        AgentBuilder("stock-and-ship-local", registry=REGISTRY)
        .model("fake-mixed")
        .tool("ship_parcel")
        .tool("count_stock")
        .build()
    )
    async with FakeModel(models=("fake-model", "fake-other", "fake-mixed")) as fake:
        fake.enqueue(
            Reply.tool_calls(ToolCall("count_stock", {"tally": str(stock), "hold": HOLD})),
            Reply.text("12 in stock."),
            model="fake-model",
        )
        fake.enqueue(
            Reply.tool_calls(ToolCall("ship_parcel", {"tally": str(parcels), "hold": HOLD})),
            Reply.text("I could not confirm the shipment."),
            model="fake-other",
        )
        fake.enqueue(
            Reply.tool_calls(
                ToolCall("ship_parcel", {"tally": str(mixed_parcels), "hold": 0.1}),
                ToolCall("count_stock", {"tally": str(mixed_stock), "hold": HOLD}),
            ),
            Reply.text("Shipped; 12 in stock."),
            model="fake-mixed",
        )
        async with doomed_worker(dev_env.client, task_queue, home, fake.base_url) as doomed:
            client = doomed.psych
            local_run = await client.dispatch(counter, "How much stock?", scope=scope)
            write_run = await client.dispatch(shipper, "Ship it.", scope=scope)
            mixed_run = await client.dispatch(both, "Ship and count.", scope=scope)
            await doomed.kill_when(
                lambda: all(_tally_lines(path) == 1 for path in (stock, parcels, mixed_stock))
            )
            async with doomed.survivor():
                results = await asyncio.wait_for(
                    asyncio.gather(
                        client.result(local_run, scope=scope),
                        client.result(write_run, scope=scope),
                        client.result(mixed_run, scope=scope),
                    ),
                    timeout=90,
                )
                runs = (local_run, write_run, mixed_run)
                reports = [await client.report(run, scope=scope) for run in runs]
        histories = [
            list((await dev_env.client.get_workflow_handle(run.workflow_id).fetch_history()).events)
            for run in runs
        ]
    return Crash(
        local=Settled(results[0], reports[0], histories[0], _tally_lines(stock)),
        write=Settled(results[1], reports[1], histories[1], _tally_lines(parcels)),
        mixed=Settled(results[2], reports[2], histories[2], _tally_lines(mixed_stock)),
        mixed_writes=_tally_lines(mixed_parcels),
    )


def _scheduled(events: list[HistoryEvent]) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


def _local_activities(events: list[HistoryEvent]) -> list[str]:
    """The activity type of every local activity marker (the catalogue's included)."""
    found = []
    for e in events:
        if e.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        if e.marker_recorded_event_attributes.marker_name != "core_local_activity":
            continue  # the patch every Run asks at its start
        details = e.marker_recorded_event_attributes.details
        data = json.loads(details["data"].payloads[0].data)
        found.append(data["activity_type"])
    return found


async def test_the_local_call_is_run_again_once_and_the_run_completes(crash: Crash) -> None:
    local = crash.local
    assert local.result.status is RunStatus.COMPLETED, local.result.reason
    assert local.result.answer == "12 in stock."
    # Run by the killed worker, then once more by the survivor's replay.
    assert local.runs == 2
    [call] = local.report.tool_calls
    assert (call.tool, call.status, call.result) == ("count_stock", "ok", "12 in stock")
    # It ran where the workflow task ran: a marker, never a scheduled activity.
    assert TOOL_RUN_CODE not in _scheduled(local.events)
    assert _local_activities(local.events).count(TOOL_RUN_CODE) == 1


async def test_the_write_tool_is_never_run_again(crash: Crash) -> None:
    write = crash.write
    assert write.result.status is RunStatus.COMPLETED, write.result.reason
    assert write.runs == 1
    [call] = write.report.tool_calls
    assert (call.tool, call.status, call.result) == ("ship_parcel", "unknown", UNKNOWN_OUTCOME)
    assert _scheduled(write.events).count(TOOL_RUN_CODE) == 1
    assert TOOL_RUN_CODE not in _local_activities(write.events)


async def test_a_write_beside_a_local_call_in_one_turn_runs_exactly_once(crash: Crash) -> None:
    mixed = crash.mixed
    assert mixed.result.status is RunStatus.COMPLETED, mixed.result.reason
    # Killed while the local call ran: the write had not gone out (a local call holds the
    # workflow task, and its commands with it), so it ran once, on the survivor; had it
    # gone out, it would have been settled UNKNOWN, never run again.
    assert crash.mixed_writes == 1
    ship, count = mixed.report.tool_calls
    assert (ship.tool, count.tool) == ("ship_parcel", "count_stock")
    assert ship.status in ("ok", "unknown"), ship
    assert (count.status, count.result) == ("ok", "12 in stock")
    assert mixed.runs == 2
    assert _scheduled(mixed.events).count(TOOL_RUN_CODE) == 1
    assert _local_activities(mixed.events).count(TOOL_RUN_CODE) == 1
