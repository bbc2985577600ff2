"""Suspension expiry and the deadline's pause while suspended, on the time-skipping server.

An unanswered approval, question or external wait settles the Run ABANDONED when its
expiry timer fires; the test server jumps straight to that timer (a day, for the default
approval expiry), so each test takes seconds of wall time. The server skips only while
no activity is open and only while time skipping is unlocked, which ``until_settled``
(and ``WorkflowEnvironment.sleep``, which skips an exact span) do; ``PsychClient.result``
does not. The test server has no custom search attributes: the client starts Runs without.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import (
    AgentBuilder,
    AgentSpec,
    ExternalWait,
    Refused,
    Scope,
    SuspensionPolicy,
    ToolRegistry,
)
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers import run_worker
from psych_runtime.workflows import (
    ModelCallFailed,
    Pending,
    PsychClient,
    Record,
    Resumed,
    RunHandle,
    RunResult,
    RunSettled,
    RunStatus,
    Suspended,
    SuspensionExpired,
)

from ._time_skipping import server_seconds, until_settled, wiring
from ._waiting import eventually, is_suspended, only_pending, state_when

pytestmark = pytest.mark.e2e

DAY = 86400.0
SCOPE = Scope(tenant="acme", principal="tester")
WALL_LIMIT = 20.0
"""Wall seconds a test may take: server time of hours or days is skipped, not waited out."""


@dataclass
class Rig:
    """A fake model, a client without search attributes and a worker on the test server."""

    env: WorkflowEnvironment
    client: PsychClient
    fake: FakeModel
    registry: ToolRegistry
    scope: Scope = SCOPE
    deleted: list[str] = field(default_factory=list)
    payments: list[str] = field(default_factory=list)

    def orders(self, **limits: float) -> AgentSpec:
        builder = AgentBuilder("orders", registry=self.registry).model("fake-model")
        builder = builder.tool("delete_order")
        return builder.limits(**limits).build() if limits else builder.build()

    async def suspended(self, run: RunHandle) -> Pending:
        """Wait (at wall speed: time skipping stays locked) until the Run suspends on one
        item; return it."""
        state = await state_when(
            self.client, run, self.scope, is_suspended, what="the Run to suspend", unsettled=True
        )
        return only_pending(state)

    async def settled(self, run: RunHandle) -> RunResult:
        async with asyncio.timeout(WALL_LIMIT):
            await until_settled(self.env, self.client, run, self.scope)
        return await self.client.result(run, scope=self.scope)

    async def records(self, run: RunHandle) -> tuple[Record, ...]:
        return (await self.client.records(run, scope=self.scope)).records

    async def server_seconds(self, run: RunHandle) -> float:
        """Server-clock seconds from admission to settling."""
        return server_seconds(await self.records(run))


@pytest.fixture
async def rig(ts_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Rig]:
    registry = ToolRegistry()
    async with wiring(ts_env, tmp_path, registry, "expiry") as wired:
        rig = Rig(env=ts_env, client=wired.client, fake=wired.fake, registry=registry)

        @registry.register(destructive=True)
        def delete_order(order_id: str) -> str:
            """Delete an order for good."""
            rig.deleted.append(order_id)
            return f"order {order_id} deleted"

        @registry.register
        def request_payment(order_id: str) -> ExternalWait:
            """Ask the payment provider to charge an order; it calls back when done."""
            rig.payments.append(order_id)
            return ExternalWait(token=f"pay-{order_id}", message="waiting for the webhook")

        wired.settings.policy = RulePolicy(destructive="ask")
        async with run_worker(ts_env.client, wired.settings):
            yield rig


async def expires(
    rig: Rig,
    spec: AgentSpec,
    call: ToolCall,
    reason: str,
    seconds: float,
    late: Callable[[RunHandle, str], Awaitable[object]],
) -> None:
    """Dispatch ``spec``, let ``call`` suspend it unanswered until it expires, then resume
    late with ``late(run, pending id)``: the Run is ABANDONED and the late resume refused."""
    rig.fake.enqueue(Reply.tool_calls(call), Reply.text("never asked for"))
    started = time.monotonic()
    run = await rig.client.dispatch(spec, "go", scope=rig.scope)
    pending = await rig.suspended(run)
    assert pending.reason == reason
    result = await rig.settled(run)
    wall = time.monotonic() - started
    records = await rig.records(run)

    assert result.status is RunStatus.ABANDONED
    assert result.reason.startswith("suspension_expired"), result.reason
    assert f"{reason} {pending.id}" in result.reason
    expired = [r for r in records if isinstance(r, SuspensionExpired)]
    assert [(r.reason, r.id) for r in expired] == [(reason, pending.id)]
    assert not any(isinstance(r, Resumed) for r in records)
    (settled,) = [r for r in records if isinstance(r, RunSettled)]
    assert settled.status is RunStatus.ABANDONED
    assert len(rig.fake.requests) == 1  # the model never heard back
    (suspended,) = [r for r in records if isinstance(r, Suspended)]
    assert (settled.at - suspended.at).total_seconds() == pytest.approx(seconds, abs=1.0)
    report = await rig.client.report(run, scope=rig.scope)
    (wait,) = report.suspensions
    assert (wait.pending, wait.outcome, wait.by) == (pending, "expired", None)
    assert wait.seconds == pytest.approx(seconds, abs=1.0)
    assert settled.at >= pending.expires_at
    assert await rig.server_seconds(run) >= seconds
    assert wall < WALL_LIMIT  # the server jumped; nobody waited

    with pytest.raises(Refused, match=r"settled abandoned: suspension_expired") as refused:
        await late(run, pending.id)
    assert refused.value.kind == "NotSuspended"


async def test_unanswered_approval_expires_after_a_day_and_abandons_the_run(rig: Rig) -> None:
    spec = rig.orders()
    assert spec.suspension.approval_expires_seconds == DAY  # the default, not a test value

    async def approve(run: RunHandle, call_id: str) -> object:
        return await rig.client.approve(run, call_id, scope=rig.scope)

    call = ToolCall("delete_order", {"order_id": "42"}, id="call-del")
    await expires(rig, spec, call, "approval", DAY, approve)
    assert rig.deleted == []


async def test_unanswered_question_expires_and_abandons_the_run(rig: Rig) -> None:
    spec = (
        AgentBuilder("asker")
        .model("fake-model")
        .suspension(may_ask_questions=True, question_expires_seconds=3 * 3600)
        .build()
    )

    async def answer(run: RunHandle, call_id: str) -> object:
        return await rig.client.answer(run, call_id, "order 42", scope=rig.scope)

    call = ToolCall("ask_question", {"question": "Which order?"}, id="q1")
    await expires(rig, spec, call, "question", 3 * 3600, answer)


async def test_uncompleted_external_wait_expires_and_abandons_the_run(rig: Rig) -> None:
    spec = (
        AgentBuilder("payer", registry=rig.registry)
        .model("fake-model")
        .tool("request_payment")
        .suspension(external_expires_seconds=2 * DAY)
        .build()
    )
    assert spec.suspension.external_expires_seconds != SuspensionPolicy().external_expires_seconds

    async def complete(run: RunHandle, token: str) -> object:
        return await rig.client.complete(run, token, {"paid": True}, scope=rig.scope)

    call = ToolCall("request_payment", {"order_id": "42"}, id="p1")
    await expires(rig, spec, call, "external", 2 * DAY, complete)
    assert rig.payments == ["42"]  # the tool ran once; only its callback never came


async def test_time_suspended_does_not_count_toward_the_deadline(rig: Rig) -> None:
    deadline = 60.0
    suspended_for = 2 * 3600.0
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "7"}, id="c7")),
        Reply.text("Deleted order 7."),
    )
    started = time.monotonic()
    run = await rig.client.dispatch(
        rig.orders(deadline_seconds=deadline), "delete 7", scope=rig.scope
    )
    pending = await rig.suspended(run)
    # Two hours of server time pass with the Run suspended (the test server fires every
    # timer due in that span, a 60 s deadline's included if one were running).
    await rig.env.sleep(suspended_for)
    state = await rig.client.status(run, scope=rig.scope)
    assert state.status is RunStatus.SUSPENDED, (state.status, state.reason)

    await rig.client.approve(run, pending.id, scope=rig.scope)
    result = await rig.settled(run)
    wall = time.monotonic() - started

    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "Deleted order 7."
    assert rig.deleted == ["7"]
    assert await rig.server_seconds(run) >= suspended_for
    assert wall < WALL_LIMIT


async def test_the_same_skip_fires_a_deadline_that_is_running(rig: Rig) -> None:
    # The control for the test above: skipping the same span over a Run that is not
    # suspended (waiting out an hour-long Retry-After) fires its deadline.
    rig.fake.enqueue(Reply.error(429, retry_after=3600), Reply.text("never asked for"))
    run = await rig.client.dispatch(rig.orders(deadline_seconds=60), "hi", scope=rig.scope)

    async def waiting_to_retry() -> bool:
        return any(isinstance(r, ModelCallFailed) for r in await rig.records(run))

    await eventually(waiting_to_retry, what="the model call to wait to retry")
    await rig.env.sleep(2 * 3600.0)
    state = await rig.client.status(run, scope=rig.scope)
    assert state.status is RunStatus.FORCE_SETTLED, (state.status, state.reason)
    assert len(rig.fake.requests) == 1


async def test_a_deadline_paused_by_a_suspension_fires_once_the_run_works_again(rig: Rig) -> None:
    # The deadline's timer is kept when the Run goes idle, not cancelled (kernel/_deadline.py):
    # it fires during the suspension and is ignored, and once the Run works again a timer is
    # armed for what is left, which fires while it waits out a Retry-After.
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "7"}, id="c7")),
        Reply.error(429, retry_after=3600),
        Reply.text("never asked for"),
    )
    run = await rig.client.dispatch(rig.orders(deadline_seconds=60), "hi", scope=rig.scope)
    pending = await rig.suspended(run)
    await rig.env.sleep(2 * 3600.0)
    state = await rig.client.status(run, scope=rig.scope)
    assert state.status is RunStatus.SUSPENDED, (state.status, state.reason)
    await rig.client.approve(run, pending.id, scope=rig.scope)

    async def waiting_to_retry() -> bool:
        return any(isinstance(r, ModelCallFailed) for r in await rig.records(run))

    await eventually(waiting_to_retry, what="the model call to wait to retry")
    await rig.env.sleep(2 * 3600.0)
    state = await rig.client.status(run, scope=rig.scope)
    assert state.status is RunStatus.FORCE_SETTLED, (state.status, state.reason)
    assert rig.deleted == ["7"]
    assert len(rig.fake.requests) == 2


async def test_a_subagent_that_outlives_the_children_expiry_abandons_the_lead(rig: Rig) -> None:
    # The subagent waits out a two-hour Retry-After; the lead's children expiry (an hour,
    # the default) passes first on the server's clock. Their deadlines are a day, so only
    # the expiry can end it (the lead's clock runs while its subagent works, retries too).
    researcher = (
        AgentBuilder("researcher", registry=rig.registry)
        .model("fake-model")
        .limits(deadline_seconds=DAY)
        .build()
    )
    lead = (
        AgentBuilder("lead", registry=rig.registry)
        .model("fake-model")
        .subagent("researcher", "Researches a question and reports back.", researcher)
        .limits(deadline_seconds=DAY)
        .build()
    )
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "researcher", "task": "find x"})),
        Reply.error(429, retry_after=7200),
    )
    run = await rig.client.dispatch(lead, "find x", scope=rig.scope)
    pending = await rig.suspended(run)
    assert pending.reason == "children"
    result = await rig.settled(run)
    child = await rig.client.status(pending.id, scope=rig.scope)

    assert result.status is RunStatus.ABANDONED
    assert result.reason.startswith(f"suspension_expired: subagent {pending.id}")
    # The lead settles at its expiry (an hour), not at the subagent's retry (two): a few
    # seconds of slack for the settling tasks a loaded machine runs after the timer.
    assert await rig.server_seconds(run) == pytest.approx(
        SuspensionPolicy().children_expires_seconds, abs=5.0
    )
    # Aborted by its lead (not cancelled), so it settled with its totals, which the lead
    # took: its ABANDONED ending counts what the subagent spent.
    assert child.status is RunStatus.ABORTED
    assert child.reason is not None
    assert child.reason.startswith(f"aborted by parent Run {run.workflow_id}: suspension_expired")
    report = await rig.client.report(run, scope=rig.scope)
    (line,) = report.children
    assert (line.status, line.totals) == (RunStatus.ABORTED, child.totals)
    assert result.totals.model_calls == 1 + child.totals.model_calls
    # The lead's call and the subagent's one; the time-skipping server may skip to the
    # subagent's retry (a third request, answered 500) in the moment between the lead's
    # expiry and its cancellation reaching the child, when no task is outstanding.
    assert len(rig.fake.requests) in (2, 3)


async def test_an_expiry_ends_the_other_waits_of_its_turn(rig: Rig) -> None:
    # Before: the approval's expiry recorded suspension_expired after a day, and the Run
    # went on waiting for the payment webhook for the rest of the week (still suspended,
    # still taking a completion) before it settled ABANDONED for the approval.
    spec = (
        AgentBuilder("orders", registry=rig.registry)
        .model("fake-model")
        .tool("delete_order")
        .tool("request_payment")
        .build()
    )
    rig.fake.enqueue(
        Reply.tool_calls(
            ToolCall("delete_order", {"order_id": "1"}, id="c-del"),
            ToolCall("request_payment", {"order_id": "2"}, id="c-pay"),
        ),
        Reply.text("never asked for"),
    )
    run = await rig.client.dispatch(spec, "delete 1, charge 2", scope=rig.scope)
    state = await state_when(
        rig.client, run, rig.scope, lambda s: len(s.pending) == 2, what="both waits", unsettled=True
    )
    assert {(p.reason, p.id) for p in state.pending} == {
        ("approval", "c-del"),
        ("external", "pay-2"),
    }
    result = await rig.settled(run)
    records = await rig.records(run)

    assert result.status is RunStatus.ABANDONED
    assert result.reason.startswith("suspension_expired: approval c-del was not answered")
    assert await rig.server_seconds(run) == pytest.approx(DAY, abs=60.0)
    expired = [(r.reason, r.id) for r in records if isinstance(r, SuspensionExpired)]
    assert expired == [("approval", "c-del")]
    assert (await rig.client.status(run, scope=rig.scope)).pending == ()
    report = await rig.client.report(run, scope=rig.scope)
    assert {(w.pending.id, w.outcome) for w in report.suspensions} == {
        ("c-del", "expired"),
        ("pay-2", None),
    }
    assert len(rig.fake.requests) == 1
    with pytest.raises(Refused, match="settled abandoned: suspension_expired") as late:
        await rig.client.complete(run, "pay-2", {"paid": True}, scope=rig.scope)
    assert late.value.kind == "NotSuspended"
