"""A WorkflowRun's unanswered approvals expire by the workflow's SuspensionPolicy, on the
time-skipping server.

A tool step that waits for approval nobody gives settles the workflow ABANDONED at the
workflow's ``approval_expires_seconds``; an agent step whose own tool waits for approval
expires at the workflow's expiry too, not the agent's (the child is given the workflow's
SuspensionPolicy), and the workflow then settles ABANDONED. The expiries chosen here are
none of them the default (a day), and the workflow's and the agent's differ, so the
server-clock time to settling says which one applied. See ``test_expiry.py`` for how the
test server's clock is let run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import (
    AgentBuilder,
    Refused,
    Scope,
    SuspensionPolicy,
    ToolRegistry,
    WorkflowBuilder,
    WorkflowSpec,
)
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers import run_worker
from psych_runtime.workflows import (
    Pending,
    PsychClient,
    Record,
    RunHandle,
    RunSettled,
    RunStatus,
    StepFinished,
    StepStarted,
    Suspended,
    SuspensionExpired,
)

from ._time_skipping import server_seconds, until_settled, wiring
from ._waiting import is_waiting, only_pending, state_when

pytestmark = pytest.mark.e2e

HOUR = 3600.0
DAY = 86400.0
SCOPE = Scope(tenant="acme", principal="tester")
WALL_LIMIT = 20.0
"""Wall seconds a test may take: server hours and days are skipped, not waited out."""


@dataclass
class Rig:
    """A fake model, a client without search attributes, and a worker on the test server
    whose Policy asks before every ``create_account``."""

    env: WorkflowEnvironment
    client: PsychClient
    fake: FakeModel
    registry: ToolRegistry
    created: list[str] = field(default_factory=list)

    async def suspended(self, run: RunHandle) -> Pending:
        """Wait (at wall speed: the clock stays locked) until the Run waits on one item."""
        state = await state_when(
            self.client, run, SCOPE, is_waiting, what="the Run to suspend", unsettled=True
        )
        return only_pending(state)

    async def settle(self, run: RunHandle) -> tuple[Record, ...]:
        """Let the server's clock run until the Run settles; its records."""
        async with asyncio.timeout(WALL_LIMIT):
            await until_settled(self.env, self.client, run, SCOPE)
        return (await self.client.records(run, scope=SCOPE)).records


@pytest.fixture
async def rig(ts_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Rig]:
    registry = ToolRegistry()
    async with wiring(ts_env, tmp_path, registry, "wfexpiry") as wired:
        rig = Rig(env=ts_env, client=wired.client, fake=wired.fake, registry=registry)

        @registry.register
        def create_account(plan: str) -> str:
            """Create an account on a plan."""
            rig.created.append(plan)
            return f"account on {plan}"

        wired.settings.policy = RulePolicy(tools={"create_account": "ask"})
        async with run_worker(ts_env.client, wired.settings):
            yield rig


async def test_an_unapproved_tool_step_expires_at_the_workflows_expiry(rig: Rig) -> None:
    expiry = 2 * HOUR
    assert expiry != SuspensionPolicy().approval_expires_seconds
    spec = (
        WorkflowBuilder("gated", registry=rig.registry)
        .tool("create_account")
        .suspension(approval_expires_seconds=expiry)
        .tool_step("create", "create_account", {"plan": "pro"})
        .tool_step("again", "create_account", {"plan": "team"})
        .build()
    )
    started = time.monotonic()
    run = await rig.client.dispatch(spec, "go", scope=SCOPE)
    item = await rig.suspended(run)
    assert (item.reason, item.id, item.tool, item.run) == (
        "approval",
        "create",
        "create_account",
        None,
    )
    records = await rig.settle(run)
    wall = time.monotonic() - started
    result = await rig.client.result(run, scope=SCOPE)

    assert result.status is RunStatus.ABANDONED, result.reason
    assert result.reason == (
        f"suspension_expired: approval create was not answered within {expiry:g} s"
    )
    assert [(r.reason, r.id) for r in records if isinstance(r, SuspensionExpired)] == [
        ("approval", "create")
    ]
    (suspended,) = [r for r in records if isinstance(r, Suspended)]
    (settled,) = [r for r in records if isinstance(r, RunSettled)]
    assert (item.expires_at - suspended.at).total_seconds() == pytest.approx(expiry, abs=1.0)
    assert (settled.at - suspended.at).total_seconds() == pytest.approx(expiry, abs=1.0)
    assert server_seconds(records) == pytest.approx(expiry, abs=5.0)
    # The workflow stopped at the step: it is recorded failed and the next never started.
    assert [r.step for r in records if isinstance(r, StepStarted)] == ["create"]
    finished = [(r.step, r.ok) for r in records if isinstance(r, StepFinished)]
    assert finished == [("create", False)]
    assert rig.created == []
    assert wall < WALL_LIMIT

    with pytest.raises(Refused) as late:
        await rig.client.approve(run, "create", scope=SCOPE)
    assert late.value.kind == "NotSuspended"


def assisted(rig: Rig, *, workflow_expiry: float, agent_expiry: float) -> WorkflowSpec:
    agent = (
        AgentBuilder("opener", registry=rig.registry)
        .model("fake-model")
        .tool("create_account")
        .suspension(approval_expires_seconds=agent_expiry)
        .build()
    )
    return (
        WorkflowBuilder("assisted", registry=rig.registry)
        .suspension(approval_expires_seconds=workflow_expiry)
        .agent_step("open", agent)
        .build()
    )


async def test_an_agent_steps_approval_expires_at_the_workflows_expiry(rig: Rig) -> None:
    workflow_expiry, agent_expiry = HOUR, 3 * DAY
    spec = assisted(rig, workflow_expiry=workflow_expiry, agent_expiry=agent_expiry)
    rig.fake.enqueue(
        Reply.tool_calls(ToolCall("create_account", {"plan": "team"}, id="call-open")),
        Reply.text("never asked for"),
    )
    started = time.monotonic()
    run = await rig.client.dispatch(spec, "open one", scope=SCOPE)
    child = f"{run.workflow_id}-step1"
    item = await rig.suspended(run)
    assert (item.reason, item.id, item.run) == ("approval", "call-open", child)
    records = await rig.settle(run)
    wall = time.monotonic() - started
    result = await rig.client.result(run, scope=SCOPE)
    child_state = await rig.client.status(child, scope=SCOPE)
    child_records = (await rig.client.records(child, scope=SCOPE)).records

    # The child's wait expired after the workflow's hour, not the agent's three days.
    (suspended,) = [r for r in child_records if isinstance(r, Suspended)]
    assert suspended.pending.expires_at == item.expires_at
    assert (item.expires_at - suspended.at).total_seconds() == pytest.approx(
        workflow_expiry, abs=1.0
    )
    assert [(r.reason, r.id) for r in child_records if isinstance(r, SuspensionExpired)] == [
        ("approval", "call-open")
    ]
    assert child_state.status is RunStatus.ABANDONED
    assert server_seconds(child_records) == pytest.approx(workflow_expiry, abs=5.0)

    # ... and the workflow settles ABANDONED with it, naming the step.
    assert result.status is RunStatus.ABANDONED, result.reason
    assert result.reason == (
        "step 'open': suspension_expired: approval call-open was not answered within "
        f"{workflow_expiry:g} s"
    )
    assert server_seconds(records) == pytest.approx(workflow_expiry, abs=5.0)
    (step,) = [r for r in records if isinstance(r, StepFinished)]
    assert (step.step, step.ok, step.status, step.run) == (
        "open",
        False,
        RunStatus.ABANDONED,
        child,
    )
    assert rig.created == []
    assert len(rig.fake.requests) == 1  # the model never heard back
    assert wall < WALL_LIMIT
