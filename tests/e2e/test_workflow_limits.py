"""A workflow's limits govern the whole Run (SEMANTICS, Workflows): its steps, the agent
steps' and nested workflows' included; an abort during its last step settles it ABORTED;
a Run cancelled (as a workflow cancels a step past its deadline) records its open calls
UNKNOWN; a workflow cancelled or past its deadline and grace aborts its running agent step
and takes its totals; a steer a nested workflow cannot be trusted to take is refused (an
update) or recorded refused (a signal). From audits of WorkflowRun and of metering against
SEMANTICS.md."""

from __future__ import annotations

import asyncio
import math

import pytest
from temporalio.client import WorkflowFailureError

from psych_runtime.activities.model import ModelPrice, TablePricing
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import (
    AgentBuilder,
    AgentSpec,
    Refused,
    RunFailed,
    ValidationFailed,
    WorkflowBuilder,
)
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import (
    STEER,
    RunSettled,
    RunStatus,
    SteerInput,
    SteerReceived,
    SteerRefused,
    StepFinished,
    ToolCallFinished,
    Totals,
)

from ._waiting import eventually, is_suspended, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


def talker(harness: Harness, name: str = "talker", *tools: str) -> AgentSpec:
    builder = AgentBuilder(name, registry=harness.registry).model("fake-model")
    for tool in tools:
        builder = builder.tool(tool)
    return builder.build()


async def test_an_agent_step_past_the_workflows_max_steps_fails_unrun(harness: Harness) -> None:
    @harness.registry.register
    def ping() -> str:
        """Ping."""
        return "pong"

    spec = (
        WorkflowBuilder("capped", registry=harness.registry)
        .tool("ping")
        .tool_step("first", "ping", {})
        .agent_step("second", talker(harness))
        .limits(max_steps=1)
        .build()
    )
    harness.fake.enqueue(Reply.text("hello"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        with pytest.raises(RunFailed, match=r"step 'second' \(agent\) failed: not run: the Run's"):
            await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert harness.fake.requests == []  # the agent never called its model
    (finished,) = [r for r in records if isinstance(r, StepFinished) and r.step == "second"]
    assert not finished.ok and "max_steps (1) is used up" in (finished.error or "")


async def test_a_repeated_tool_step_is_refused_and_ends_the_run_whatever_the_hard_stop(
    harness: Harness,
) -> None:
    # The first refused repeat fails its step, and the first failed step ends a WorkflowRun:
    # repeat_call_hard_stop is never reached. A workflow that sets it is refused at publish,
    # naming it (it was accepted, to no effect), and without it the Run stops as it always
    # did.
    @harness.registry.register
    def ping() -> str:
        """Ping."""
        return "pong"

    def pinger(**limits: int) -> WorkflowBuilder:
        builder = WorkflowBuilder("pinger", registry=harness.registry).tool("ping")
        for step in "abc":
            builder = builder.tool_step(step, "ping", {})
        return builder.limits(**limits)

    with pytest.raises(ValidationFailed, match=r"limits\.repeat_call_hard_stop: a WorkflowRun"):
        harness.client.publish(pinger(repeat_call_threshold=1, repeat_call_hard_stop=10).build())
    async with harness.worker():
        spec = pinger(repeat_call_threshold=1).build()
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        with pytest.raises(RunFailed, match=r"step 'b' \(tool\) failed: refused: "):
            await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert [(r.step, r.ok) for r in records if isinstance(r, StepFinished)] == [
        ("a", True),
        ("b", False),
    ]


async def test_an_agent_step_takes_no_more_steps_than_the_workflow_has_left(
    harness: Harness,
) -> None:
    @harness.registry.register
    def lookup(n: int) -> str:
        """Look something up."""
        return f"found {n}"

    spec = (
        WorkflowBuilder("capped", registry=harness.registry)
        .agent_step("search", talker(harness, "talker", "lookup"))
        .limits(max_steps=3)
        .build()
    )
    # The agent's own max_steps is 48: the workflow's 3 stop it after 3 (a model call and
    # a tool call are a step each).
    harness.fake.responder = lambda body: Reply.tool_calls(ToolCall("lookup", {"n": 1}))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        with pytest.raises(RunFailed, match="ended stopped: max_steps: 3 steps taken"):
            await harness.client.result(run, scope=harness.scope)
    assert len(harness.fake.requests) == 2  # model, tool, model: three steps


async def test_a_nested_workflow_spends_only_what_is_left_of_the_retry_budget(
    harness: Harness,
) -> None:
    inner = WorkflowBuilder("inner", registry=harness.registry).agent_step("talk", talker(harness))
    outer = (
        WorkflowBuilder("outer", registry=harness.registry)
        .workflow_step("nested", inner.build())
        .limits(transient_retry_budget=0)
        .build()
    )
    # A transient failure with no budget left fails the agent step, however deep.
    harness.fake.enqueue(Reply.error(500), Reply.text("fine"))
    async with harness.worker():
        run = await harness.client.dispatch(outer, "go", scope=harness.scope)
        with pytest.raises(RunFailed, match="transient_retry_budget exhausted"):
            await harness.client.result(run, scope=harness.scope)
    assert len(harness.fake.requests) == 1


async def test_an_abort_during_the_last_step_settles_the_workflow_aborted(
    harness: Harness,
) -> None:
    started = asyncio.Event()

    @harness.registry.register
    async def settle_books() -> str:
        """Settle the books (cannot be interrupted)."""
        started.set()
        await asyncio.sleep(1.5)
        return "settled"

    spec = (
        WorkflowBuilder("books", registry=harness.registry)
        .tool("settle_books", interruptible=False)
        .tool_step("settle", "settle_books", {})
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 20)
        await harness.client.abort(run, scope=harness.scope, reason="stop now")
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.ABORTED, result.reason
    assert "stop now" in result.reason
    assert result.outputs == {"settle": "settled"}  # the call ran to its end


async def test_a_cancelled_run_records_its_open_calls_unknown(harness: Harness) -> None:
    # What a workflow's deadline does to its running agent step once the grace passed
    # (it cancels the child), here by an operator: the call open then never reports.
    started = asyncio.Event()

    @harness.registry.register
    async def reconcile() -> str:
        """Reconcile the ledger (cannot be interrupted)."""
        started.set()
        await asyncio.sleep(3)
        return "reconciled"

    spec = (
        AgentBuilder("clerk", registry=harness.registry)
        .model("fake-model")
        .tool("reconcile", interruptible=False)
        .build()
    )
    harness.fake.enqueue(Reply.tool_calls(ToolCall("reconcile", {}, id="c1")), Reply.text("ok"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 20)
        handle = harness.client.temporal.get_workflow_handle(run.workflow_id)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        records = (await harness.client.records(run, scope=harness.scope)).records
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert (finished.call_id, finished.status) == ("c1", "unknown")
    assert "cancelled before this call reported" in finished.content
    assert isinstance(records[-1], RunSettled) and records[-1].status is RunStatus.ABORTED


PRICES = TablePricing({"fake-model": ModelPrice(input=1.0, output=2.0)})


async def _settled_totals(harness: Harness, run: str) -> Totals:
    records = (await harness.client.records(run, scope=harness.scope)).records
    settled = records[-1]
    assert isinstance(settled, RunSettled), settled
    return settled.totals


async def test_a_cancelled_workflow_aborts_its_agent_step_and_takes_its_totals(
    harness: Harness,
) -> None:
    # Cancelled, the workflow cancelled its running agent step: the step settled ABORTED
    # but its totals never came back, and the workflow's cost looked known.
    started = asyncio.Event()

    @harness.registry.register
    async def reconcile() -> str:
        """Reconcile the ledger (cannot be interrupted)."""
        started.set()
        await asyncio.sleep(2)
        return "reconciled"

    harness.settings.pricing = PRICES
    clerk = (
        AgentBuilder("clerk", registry=harness.registry)
        .model("fake-model")
        .tool("reconcile", interruptible=False)
        .build()
    )
    spec = (
        WorkflowBuilder("books", registry=harness.registry)
        .agent_step("greet", talker(harness))
        .agent_step("reconcile", clerk)
        .build()
    )
    harness.fake.enqueue(
        Reply.text("hello"), Reply.tool_calls(ToolCall("reconcile", {}, id="c1")), Reply.text("ok")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 20)
        handle = harness.client.temporal.get_workflow_handle(run.workflow_id)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        records = (await harness.client.records(run, scope=harness.scope)).records
        steps = [r for r in records if isinstance(r, StepFinished)]
        children = [await _settled_totals(harness, step.run or "") for step in steps]
    assert len(harness.fake.requests) == 2  # the aborted step made no call after its tool
    greet, reconciled = steps
    assert (greet.ok, greet.status) == (True, RunStatus.COMPLETED)
    # The step's Run was aborted (not cancelled): its call ran to its end, it settled
    # ABORTED with its totals, and the workflow took them.
    assert (reconciled.ok, reconciled.status) == (False, RunStatus.ABORTED)
    assert reconciled.error is not None
    assert "cancelled by its parent or an operator" in reconciled.error
    assert reconciled.totals == children[1]
    assert children[1].model_calls == 1 and children[1].tool_calls == 1
    settled = records[-1]
    assert isinstance(settled, RunSettled) and settled.status is RunStatus.ABORTED
    totals = settled.totals
    assert totals.model_calls == 2 and totals.steps == 3
    assert totals.cost is not None and all(child.cost is not None for child in children)
    assert math.isclose(totals.cost, sum(child.cost or 0.0 for child in children))


async def test_a_workflow_past_its_deadline_aborts_its_agent_step_and_takes_its_totals(
    harness: Harness,
) -> None:
    # Past the deadline and its grace, the workflow cancelled its agent step, whose model
    # call stalled: the workflow counted one model call, its steps two.
    harness.settings.pricing = PRICES
    spec = (
        WorkflowBuilder("stalling", registry=harness.registry)
        .agent_step("greet", talker(harness))
        .agent_step("stall", talker(harness, "staller"))
        .limits(deadline_seconds=2)
        .build()
    )
    harness.fake.enqueue(Reply.text("hello"), Reply.stall(120))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
        steps = [r for r in records if isinstance(r, StepFinished)]
        children = [await _settled_totals(harness, step.run or "") for step in steps]
    assert result.status is RunStatus.FORCE_SETTLED, result.reason
    stalled = steps[1]
    assert (stalled.ok, stalled.status) == (False, RunStatus.ABORTED)
    assert stalled.error is not None and "grace passed" in stalled.error
    assert stalled.totals == children[1] and children[1].model_calls == 1
    assert result.totals.model_calls == 2 and result.totals.steps == 2
    # The stalled call's price is unknown (it never answered), so the workflow's is too.
    assert children[1].cost is None and result.totals.cost is None


async def test_the_deadline_runs_while_an_agent_step_works_beside_an_approval(
    harness: Harness,
) -> None:
    # One turn of the agent step: `gated` waits for an approval while `slow` works. The
    # workflow used to see only the pending approval and stop its clock, so the work of
    # `slow` did not count against its deadline and the next step ran.
    slow_done = asyncio.Event()
    ran: list[str] = []

    @harness.registry.register
    def gated() -> str:
        """Needs an approval."""
        return "ok"

    @harness.registry.register
    async def slow() -> str:
        """Works a while."""
        await asyncio.sleep(3)
        slow_done.set()
        return "slow done"

    @harness.registry.register
    def after() -> str:
        """Runs after the agent step."""
        ran.append("after")
        return "after ran"

    harness.settings.policy = RulePolicy(tools={"gated": "ask"})
    spec = (
        WorkflowBuilder("timed", registry=harness.registry)
        .tool("after")
        .agent_step("work", talker(harness, "worker", "gated", "slow"))
        .tool_step("after", "after", {})
        .limits(deadline_seconds=1.5)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("gated", {}, id="g1"), ToolCall("slow", {}, id="s1")),
        Reply.text("done"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        await asyncio.wait_for(slow_done.wait(), 20)
        await asyncio.sleep(0.5)  # the call's end reaches the workflows
        await harness.client.approve(run, "g1", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.FORCE_SETTLED, result.reason
    assert result.reason == "deadline: 1.5 s passed"
    assert ran == []


async def test_a_steer_while_a_nested_workflow_runs_is_refused_naming_its_run(
    harness: Harness,
) -> None:
    # Forwarded, it was refused by the nested Run (its step is a tool step) and the
    # refusal only logged: the caller had been told it was taken.
    @harness.registry.register
    def create(plan: str) -> str:
        """Create an account."""
        return "made"

    harness.settings.policy = RulePolicy(tools={"create": "ask"})
    inner = (
        WorkflowBuilder("inner", registry=harness.registry)
        .tool("create")
        .tool_step("make", "create", {"plan": "x"})
        .build()
    )
    outer = WorkflowBuilder("outer", registry=harness.registry).workflow_step("nested", inner)
    async with harness.worker():
        run = await harness.client.dispatch(outer.build(), "go", scope=harness.scope)
        state = await state_when(harness.client, run, harness.scope, is_suspended, what="waits")
        (item,) = state.pending
        with pytest.raises(Refused, match=r"is a nested workflow: send the steer to its Run"):
            await harness.client.steer(run, "Hurry.", scope=harness.scope)
        assert item.run is not None
        with pytest.raises(Refused, match="only an agent step takes"):
            await harness.client.steer(item.run, "Hurry.", scope=harness.scope)
        await harness.client.approve(run, item.id, scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason


async def test_a_steer_signal_it_cannot_take_is_recorded_refused_not_lost(
    harness: Harness,
) -> None:
    # A caller without updates signals psych.steer: forwarded to the nested workflow in a
    # tool step, the steer was refused there and only logged (steer_received recorded in
    # the outer Run as if taken); now each Run records what it did not take, and why.
    @harness.registry.register
    def create(plan: str) -> str:
        """Create an account."""
        return "made"

    harness.settings.policy = RulePolicy(tools={"create": "ask"})
    inner = (
        WorkflowBuilder("inner", registry=harness.registry)
        .tool("create")
        .tool_step("make", "create", {"plan": "x"})
        .build()
    )
    outer = WorkflowBuilder("outer", registry=harness.registry).workflow_step("nested", inner)
    temporal = harness.env.client

    def steer(text: str, tenant: str | None = None) -> SteerInput:
        return SteerInput(tenant=tenant or harness.scope.tenant, message=text, by="ops")

    async def refused(run: str) -> list[SteerRefused]:
        records = (await harness.client.records(run, scope=harness.scope)).records
        return [r for r in records if isinstance(r, SteerRefused)]

    async with harness.worker():
        run = await harness.client.dispatch(outer.build(), "go", scope=harness.scope)
        state = await state_when(harness.client, run, harness.scope, is_suspended, what="waits")
        (item,) = state.pending
        assert item.run is not None
        outer_handle = temporal.get_workflow_handle(run.workflow_id)
        await outer_handle.signal(STEER, steer("Hurry."))
        await outer_handle.signal(STEER, steer("Not mine.", tenant="globex"))
        # Straight to the nested Run, whose step is a tool step.
        await temporal.get_workflow_handle(item.run).signal(STEER, steer("Hurry, inner."))

        async def both_recorded() -> bool:
            return bool(await refused(run.workflow_id)) and bool(await refused(item.run or ""))

        await eventually(both_recorded, what="both Runs to record the refused steers")
        await harness.client.approve(run, item.id, scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        outer_records = (await harness.client.records(run, scope=harness.scope)).records
        inner_records = (await harness.client.records(item.run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    (on_outer,) = [r for r in outer_records if isinstance(r, SteerRefused)]
    assert (on_outer.mode, on_outer.message, on_outer.by, on_outer.refusal) == (
        "steer",
        "Hurry.",
        "ops",
        "NoStep",
    )
    assert on_outer.reason == (
        f"step 'nested' is a nested workflow: send the steer to its Run {item.run} "
        "(it takes one while an agent step of its runs)"
    )
    (on_inner,) = [r for r in inner_records if isinstance(r, SteerRefused)]
    assert (on_inner.message, on_inner.refusal) == ("Hurry, inner.", "NoStep")
    assert on_inner.reason == "step 'make' is a tool step: only an agent step takes steer messages"
    # Neither Run claims to have taken a steer; the other tenant's signal left no record.
    taken = [r for r in outer_records + inner_records if isinstance(r, SteerReceived)]
    assert taken == []
    assert "Not mine." not in repr(outer_records)
