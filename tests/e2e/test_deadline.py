"""The deadline on the time-skipping test server: timers run ahead, calls in flight do not.

The test server skips its clock ahead to the next timer only while no activity is
scheduled: it must, since a running activity's heartbeat timeout is measured on that clock.
So these Runs spend the deadline's time in a skippable wait (the model answers 429 with a
long Retry-After, which the workflow waits out on a timer) and only the last stretch with a
call in flight runs at wall-clock speed. The test server has no custom search attributes,
so the client starts Runs without them (and the Run then upserts none either).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.specs import (
    AgentBuilder,
    AgentSpec,
    ExternalWait,
    Limits,
    Scope,
    SpecError,
    ToolRegistry,
)
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers import run_worker, start_time_skipping_server
from psych_runtime.workflows import (
    PsychClient,
    RunHandle,
    RunResult,
    RunStatus,
    ToolCallFinished,
)
from psych_runtime.workflows.kernel._deadline import DEADLINE_GRACE_SECONDS
from psych_runtime.workflows.kernel._guards import over_cap_reason, repeated_id_message

from ._time_skipping import server_seconds, until_settled, wiring

pytestmark = pytest.mark.e2e

DEADLINE = 60.0


async def pause(seconds: float) -> str:
    """Wait, then say so.

    Args:
        seconds: How long to wait.
    """
    await asyncio.sleep(seconds)
    return f"waited {seconds:g} s"


LAPS: list[float] = []
"""Every ``lap`` that ran (its seconds), across the tests of this module."""


async def lap(seconds: float) -> str:
    """Wait, then say which lap this was (each call another result).

    Args:
        seconds: How long to wait.
    """
    LAPS.append(seconds)
    number = len(LAPS)
    await asyncio.sleep(seconds)
    return f"lap {number} took {seconds:g} s"


def hold(ref: str) -> ExternalWait:
    """Wait for the courier to call back.

    Args:
        ref: What the courier quotes (no "k" in it: the wiring's model API key is "k", and
            what the model sends is redacted of it).
    """
    return ExternalWait(token=ref, message="waiting for the courier")


@dataclass
class TimeSkipping:
    env: WorkflowEnvironment
    client: PsychClient
    fake: FakeModel
    scope: Scope
    registry: ToolRegistry

    def spec(self) -> AgentSpec:
        return (
            AgentBuilder("courier", registry=self.registry)
            .model("fake-model")
            .tool("pause")
            .limits(deadline_seconds=DEADLINE)
            .build()
        )

    async def settled(self, run: RunHandle) -> RunResult:
        async with asyncio.timeout(60):
            await until_settled(self.env, self.client, run, self.scope)
        return await self.client.result(run, scope=self.scope)

    async def server_seconds(self, run: RunHandle) -> float:
        """Server-clock seconds from admission to settling."""
        return server_seconds((await self.client.records(run, scope=self.scope)).records)


@asynccontextmanager
async def harness(env: WorkflowEnvironment, home: Path) -> AsyncIterator[TimeSkipping]:
    """A fake model, a client without search attributes and a worker, on ``env``."""
    registry = ToolRegistry()
    registry.register(pause)
    registry.register(hold)
    registry.register(lap)
    async with (
        wiring(env, home, registry, "deadline") as wired,
        run_worker(env.client, wired.settings),
    ):
        yield TimeSkipping(env, wired.client, wired.fake, Scope(tenant="acme"), registry)


@pytest.fixture
async def ts(ts_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[TimeSkipping]:
    async with harness(ts_env, tmp_path) as ts:
        yield ts


@pytest.fixture
async def own_ts(tmp_path: Path) -> AsyncIterator[TimeSkipping]:
    """A harness on a test server of its own, for a Run that settles with a call in flight.

    The test server stops skipping time while any activity is open, and it never closes
    an activity whose workflow has completed (the worker's cancellation report is refused
    as NOT_FOUND), so after such a Run its clock stays at wall speed for good.
    """
    env = await start_time_skipping_server()
    try:
        async with harness(env, tmp_path) as ts:
            yield ts
    finally:
        await env.shutdown()


async def test_call_in_flight_past_deadline_and_grace_is_force_settled_unknown(
    own_ts: TimeSkipping,
) -> None:
    ts = own_ts
    started = time.monotonic()
    # 59 s of the deadline go by on a skippable timer; then the tool call blocks for an
    # hour and only the last second of the deadline plus the grace run in real time.
    ts.fake.enqueue(
        Reply.error(429, retry_after=DEADLINE - 1),
        Reply.tool_calls(ToolCall("pause", {"seconds": 3600})),
        Reply.text("never asked for"),
    )
    run = await ts.client.dispatch(ts.spec(), "Wait for the courier", scope=ts.scope)
    result = await ts.settled(run)
    wall = time.monotonic() - started
    report = await ts.client.report(run, scope=ts.scope)

    assert result.status is RunStatus.FORCE_SETTLED
    grace = DEADLINE_GRACE_SECONDS
    assert result.reason == f"deadline: {DEADLINE:g} s and {grace:g} s grace passed"
    [call] = report.tool_calls
    assert call.tool == "pause"
    assert call.status == "unknown"
    assert "deadline" in (call.result or "")
    assert result.totals.tool_calls == 1
    assert len(ts.fake.requests) == 2  # no model call after the deadline

    server = await ts.server_seconds(run)
    assert DEADLINE + DEADLINE_GRACE_SECONDS <= server < DEADLINE + DEADLINE_GRACE_SECONDS + 5
    # The 59 s wait was skipped; the grace with the call in flight was not (it cannot be).
    assert wall < server - (DEADLINE - 5)


async def test_deadline_passing_during_a_tool_call_stops_before_the_next_turn(
    ts: TimeSkipping,
) -> None:
    # The deadline passes while a 4 s tool call runs; the call finishes within the grace,
    # is recorded, and no further turn starts.
    ts.fake.enqueue(
        Reply.error(429, retry_after=DEADLINE - 3),
        Reply.tool_calls(ToolCall("pause", {"seconds": 4})),
        Reply.text("never asked for"),
    )
    run = await ts.client.dispatch(ts.spec(), "Wait a little", scope=ts.scope)
    result = await ts.settled(run)
    report = await ts.client.report(run, scope=ts.scope)

    assert result.status is RunStatus.FORCE_SETTLED
    assert result.reason == f"deadline: {DEADLINE:g} s passed"
    [call] = report.tool_calls
    assert call.status == "ok"
    assert call.result == "waited 4 s"
    assert result.totals.turns == 1
    assert len(ts.fake.requests) == 2
    server = await ts.server_seconds(run)
    assert DEADLINE < server < DEADLINE + DEADLINE_GRACE_SECONDS


async def test_force_settled_mid_batch_records_every_call_of_the_batch(
    ts: TimeSkipping,
) -> None:
    # The deadline passes during a 4 s call; it finishes within the grace, while the other
    # call of its turn waits for a callback that never comes: the grace runs out, and the
    # finished call is recorded with its result (until patch psych-batch-accounting neither
    # call had a tool_call_finished), the waiting one UNKNOWN. The call under a repeated id
    # and the one past max_tool_calls_per_turn are recorded too, in call order (the latter
    # had no tool_call_finished at first), each apart in the report.
    ts.fake.enqueue(
        Reply.error(429, retry_after=DEADLINE - 2),
        Reply.tool_calls(
            ToolCall("pause", {"seconds": 4}, id="c-pause"),
            ToolCall("hold", {"ref": "courier"}, id="c-hold"),
            ToolCall("hold", {"ref": "other"}, id="c-hold"),
            ToolCall("pause", {"seconds": 1}, id="c-over"),
        ),
        Reply.text("never asked for"),
    )
    spec = (
        AgentBuilder("courier", registry=ts.registry)
        .model("fake-model")
        .tool("pause")
        .tool("hold")
        .limits(deadline_seconds=DEADLINE, max_tool_calls_per_turn=3)
        .build()
    )
    run = await ts.client.dispatch(spec, "Wait for the courier", scope=ts.scope)
    result = await ts.settled(run)
    report = await ts.client.report(run, scope=ts.scope)

    assert result.status is RunStatus.FORCE_SETTLED
    grace = DEADLINE_GRACE_SECONDS
    assert result.reason == f"deadline: {DEADLINE:g} s and {grace:g} s grace passed"
    calls = [(c.call_id, json.loads(c.arguments), c.status, c.result) for c in report.tool_calls]
    over = over_cap_reason(3, Limits(max_tool_calls_per_turn=3))
    assert calls == [
        ("c-pause", {"seconds": 4}, "ok", "waited 4 s"),
        (
            "c-hold",
            {"ref": "courier"},
            "unknown",
            "the Run's deadline and grace period ran out before this call reported",
        ),
        ("c-hold", {"ref": "other"}, "error", repeated_id_message("c-hold")),
        ("c-over", {"seconds": 1}, "error", over),
    ]
    page = await ts.client.records(run, scope=ts.scope)
    finished = [r.call_id for r in page.records if isinstance(r, ToolCallFinished)]
    assert finished == ["c-pause", "c-hold", "c-hold", "c-over"]
    assert len(ts.fake.requests) == 2


def _repeating(ts: TimeSkipping, tool: str) -> AgentSpec:
    """A Spec whose third identical call of a turn waits for the two before it (the repeat
    guard could refuse it once they returned: ``kernel/_tool_batch.py``)."""
    return (
        AgentBuilder("repeater", registry=ts.registry)
        .model("fake-model")
        .tool(tool)
        .limits(deadline_seconds=DEADLINE, repeat_call_threshold=2)
        .build()
    )


async def test_a_call_queued_behind_identical_calls_starts_nothing_past_the_deadline(
    ts: TimeSkipping,
) -> None:
    # Three identical calls of a tool whose results differ: the third waits for the first
    # two, which finish in the grace; it then starts nothing (no new work past the
    # deadline), where it would have run as the grace's new work.
    LAPS.clear()
    same = [ToolCall("lap", {"seconds": 4}, id=f"c{n}") for n in range(3)]
    ts.fake.enqueue(
        Reply.error(429, retry_after=DEADLINE - 2),
        Reply.tool_calls(*same),
        Reply.text("never asked for"),
    )
    run = await ts.client.dispatch(_repeating(ts, "lap"), "Three laps", scope=ts.scope)
    result = await ts.settled(run)
    report = await ts.client.report(run, scope=ts.scope)

    assert result.status is RunStatus.FORCE_SETTLED
    assert result.reason == f"deadline: {DEADLINE:g} s passed"
    assert LAPS == [4, 4]
    calls = [(c.call_id, c.status, c.result) for c in report.tool_calls]
    assert calls[2] == ("c2", "rejected", f"not run: deadline: {DEADLINE:g} s passed")
    assert [status for _, status, _ in calls[:2]] == ["ok", "ok"]
    assert len(ts.fake.requests) == 2


async def test_a_call_queued_behind_identical_calls_cut_short_is_aborted_not_unknown(
    own_ts: TimeSkipping,
) -> None:
    # The two calls before it outlast the deadline and grace: they are UNKNOWN (they may
    # have run), the queued third one never started and says so.
    ts = own_ts
    same = [ToolCall("pause", {"seconds": 3600}, id=f"c{n}") for n in range(3)]
    ts.fake.enqueue(
        Reply.error(429, retry_after=DEADLINE - 1),
        Reply.tool_calls(*same),
        Reply.text("never asked for"),
    )
    run = await ts.client.dispatch(_repeating(ts, "pause"), "Wait thrice", scope=ts.scope)
    result = await ts.settled(run)
    report = await ts.client.report(run, scope=ts.scope)

    assert result.status is RunStatus.FORCE_SETTLED
    why = "the Run's deadline and grace period ran out before this call reported"
    calls = [(c.call_id, c.status, c.result) for c in report.tool_calls]
    assert calls == [
        ("c0", "unknown", why),
        ("c1", "unknown", why),
        ("c2", "aborted", f"not run: it was waiting for the identical calls before it ({why})"),
    ]


async def test_deadline_passing_during_a_retry_wait_starts_no_new_call(ts: TimeSkipping) -> None:
    # The model asks to be retried after the deadline: the Run waits it out (nothing in
    # flight) and settles then, without another model call in the grace period.
    ts.fake.enqueue(Reply.error(429, retry_after=DEADLINE + 15), Reply.text("late answer"))
    started = time.monotonic()
    run = await ts.client.dispatch(ts.spec(), "Hello", scope=ts.scope)
    result = await ts.settled(run)
    wall = time.monotonic() - started

    assert result.status is RunStatus.FORCE_SETTLED
    assert result.reason == f"deadline: {DEADLINE:g} s passed"
    assert result.answer is None
    assert len(ts.fake.requests) == 1
    assert result.totals.model_calls == 1
    assert result.totals.transient_failures == 1
    server = await ts.server_seconds(run)
    assert DEADLINE + 15 <= server < DEADLINE + DEADLINE_GRACE_SECONDS
    assert wall < 10  # all of it skipped


async def test_client_without_search_attributes_refuses_to_list(ts: TimeSkipping) -> None:
    with pytest.raises(SpecError, match="search attributes"):
        await ts.client.list(scope=ts.scope)
