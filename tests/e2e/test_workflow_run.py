"""WorkflowRun end to end on a real dev server: steps in order, through the public client.

A three-step workflow (a code tool, an agent, a nested workflow), a failing step, a tool
step that waits for approval, an agent step whose own tool waits for approval (resumed
through the workflow's id, and refused as answered when sent again), abort and steer
reaching a running agent step, idempotent dispatch and another tenant's refusal.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import (
    AccessDenied,
    AgentBuilder,
    AgentSpec,
    Refused,
    RunFailed,
    Scope,
    ValidationFailed,
    WorkflowBuilder,
    WorkflowSpec,
)
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import (
    RunHandle,
    RunState,
    RunStatus,
    StepFinished,
    StepStarted,
)

from . import _waiting as waiting
from .conftest import Harness

pytestmark = pytest.mark.e2e


async def pending_of(harness: Harness, run: RunHandle) -> RunState:
    """The workflow's state once it is suspended with something pending."""
    return await waiting.state_when(
        harness.client,
        run,
        harness.scope,
        waiting.is_waiting,
        what="the workflow to suspend",
        within=20.0,
    )


def greeter(harness: Harness, *tools: str) -> AgentSpec:
    builder = AgentBuilder("greeter", registry=harness.registry).model("fake-model")
    builder.instructions("Greet the new customer.")
    for tool in tools:
        builder.tool(tool)
    return builder.build()


def register_accounts(harness: Harness, created: list[str]) -> None:
    @harness.registry.register
    def create_account(plan: str) -> dict[str, str]:
        """Create an account on a plan."""
        created.append(plan)
        return {"account_id": f"acct-{len(created)}", "plan": plan}


def onboarding(harness: Harness) -> WorkflowSpec:
    audit = (
        WorkflowBuilder("audit", registry=harness.registry)
        .tool("create_account")
        .tool_step("second", "create_account", {"plan": "audit"})
        .build()
    )
    return (
        WorkflowBuilder("onboard", registry=harness.registry)
        .tool("create_account")
        .tool_step("create", "create_account", {"plan": "starter"})
        .agent_step("welcome", greeter(harness))
        .workflow_step("audit", audit)
        .build()
    )


async def test_three_steps_complete_with_outputs_keyed_by_step(harness: Harness) -> None:
    created: list[str] = []
    register_accounts(harness, created)
    spec = onboarding(harness)
    harness.fake.enqueue(Reply.text("Welcome aboard, acct-1!"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Onboard Ada", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert created == ["starter", "audit"]
    assert result.outputs == {
        "create": {"account_id": "acct-1", "plan": "starter"},
        "welcome": "Welcome aboard, acct-1!",
        "audit": {"second": {"account_id": "acct-2", "plan": "audit"}},
    }
    # The agent step read the workflow's input, then the prior outputs keyed by step name.
    (request,) = harness.fake.requests
    said = [m["content"] for m in request["messages"] if m["role"] == "user"]
    assert said[0] == "Onboard Ada"
    assert json.loads(said[1].split("\n", 1)[1]) == {
        "create": {"account_id": "acct-1", "plan": "starter"}
    }
    assert report.kind == "workflow"
    assert [(s.name, s.kind, s.ok) for s in report.steps] == [
        ("create", "tool", True),
        ("welcome", "agent", True),
        ("audit", "workflow", True),
    ]
    welcome = report.steps[1]
    assert welcome.child is not None
    assert welcome.run == f"{run.workflow_id}-step2"
    assert [c.text for c in welcome.child.model_calls] == ["Welcome aboard, acct-1!"]
    assert welcome.usage is not None and welcome.usage.output_tokens > 0
    assert welcome.seconds is not None and welcome.seconds > 0
    nested = report.steps[2].child
    assert nested is not None and [s.name for s in nested.steps] == ["second"]
    # Usage and counts roll up: the workflow's totals include its children's.
    assert result.totals.model_calls == 1
    assert result.totals.usage.output_tokens == welcome.usage.output_tokens
    assert result.totals.tool_calls == 2
    assert report.tool_calls[0].tool == "create_account"


async def test_a_failing_step_stops_the_workflow_naming_it(harness: Harness) -> None:
    ran: list[str] = []

    @harness.registry.register
    def charge(amount: int) -> str:
        """Charge a card."""
        raise ValueError("card declined")

    @harness.registry.register
    def notify(text: str) -> str:
        """Notify someone."""
        ran.append(text)
        return "sent"

    spec = (
        WorkflowBuilder("billing", registry=harness.registry)
        .tool("charge")
        .tool("notify")
        .tool_step("charge", "charge", {"amount": 5})
        .tool_step("notify", "notify", {"text": "charged"})
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "bill", scope=harness.scope)
        with pytest.raises(RunFailed, match=r"step 'charge' \(tool\) failed: error: .*declined"):
            await harness.client.result(run, scope=harness.scope)
        state = await harness.client.status(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert ran == []  # the Run stopped at the first failed step
    assert state.status is RunStatus.FAILED
    finished = [r for r in records if isinstance(r, StepFinished)]
    assert [(r.step, r.ok) for r in finished] == [("charge", False)]


async def test_an_agent_step_that_fails_fails_the_workflow(harness: Harness) -> None:
    created: list[str] = []
    register_accounts(harness, created)
    spec = (
        WorkflowBuilder("flaky", registry=harness.registry)
        .agent_step("welcome", greeter(harness))
        .build()
    )
    harness.fake.enqueue(Reply.error(400, message="bad request"))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        with pytest.raises(RunFailed, match=r"step 'welcome' \(agent\) failed: .*-step1"):
            await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    (step,) = report.steps
    assert step.ok is False and step.status is RunStatus.FAILED
    assert step.child is not None and step.child.status is RunStatus.FAILED
    assert report.totals is not None and report.totals.model_calls == 1  # the child's call


async def test_a_tool_step_that_asks_is_approved_through_the_workflow(harness: Harness) -> None:
    created: list[str] = []
    register_accounts(harness, created)
    harness.settings.policy = RulePolicy(tools={"create_account": "ask"})
    spec = (
        WorkflowBuilder("gated", registry=harness.registry)
        .tool("create_account")
        .tool_step("create", "create_account", {"plan": "pro"})
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        state = await pending_of(harness, run)
        (item,) = state.pending
        assert (item.reason, item.id, item.tool, item.run) == (
            "approval",
            "create",
            "create_account",
            None,
        )
        assert state.step == "create"
        assert created == []

        async def listed() -> bool:  # visibility lags the Run's own state under load
            found = await harness.client.list(scope=harness.scope, suspended=True)
            return run.workflow_id in {s.workflow_id for s in found}

        await waiting.eventually(listed, what="the suspended workflow to be listed")
        await harness.client.approve(run, "create", scope=harness.scope, note="ok")
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert created == ["pro"]
    assert result.outputs == {"create": {"account_id": "acct-1", "plan": "pro"}}


async def test_a_suspended_agent_step_is_resumed_through_the_workflow_id(
    harness: Harness,
) -> None:
    created: list[str] = []
    register_accounts(harness, created)
    harness.settings.policy = RulePolicy(tools={"create_account": "ask"})
    spec = (
        WorkflowBuilder("assisted", registry=harness.registry)
        .agent_step("open", greeter(harness, "create_account"))
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("create_account", {"plan": "team"}, id="call-open")),
        Reply.text("Opened."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "open one", scope=harness.scope)
        state = await pending_of(harness, run)
        (item,) = state.pending
        child = f"{run.workflow_id}-step1"
        assert (item.reason, item.id, item.run) == ("approval", "call-open", child)
        with pytest.raises(Refused) as wrong:
            await harness.client.approve(run, "call-nope", scope=harness.scope)
        assert wrong.value.kind == "UnknownPending"
        await harness.client.approve(run, "call-open", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        child_records = (await harness.client.records(child, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == {"open": "Opened."}
    assert created == ["team"]
    resumed = [r for r in child_records if r.kind == "resumed"]
    assert [(r.id, r.by) for r in resumed] == [("call-open", "tester")]


async def test_an_agent_steps_approval_sent_again_is_refused_as_answered(
    harness: Harness,
) -> None:
    # From an audit: once the step had taken the approval, the same approval sent again
    # through the workflow was refused UnknownPending, "nothing pending with id 'call-open'",
    # as if it had never been taken (its own tool step's is refused AlreadyAnswered).
    created: list[str] = []
    register_accounts(harness, created)
    harness.settings.policy = RulePolicy(tools={"create_account": "ask"})
    spec = (
        WorkflowBuilder("assisted", registry=harness.registry)
        .tool("create_account")
        .agent_step("open", greeter(harness, "create_account"))
        .tool_step("audit", "create_account", {"plan": "audit"})
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("create_account", {"plan": "team"}, id="call-open")),
        Reply.text("Opened."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "open one", scope=harness.scope)
        await pending_of(harness, run)
        await harness.client.approve(run, "call-open", scope=harness.scope)
        state = await waiting.state_when(
            harness.client,
            run,
            harness.scope,
            lambda s: [p.id for p in s.pending] == ["audit"],
            what="the audit step's approval",
        )
        assert state.step == "audit"
        with pytest.raises(Refused) as again:
            await harness.client.approve(run, "call-open", scope=harness.scope)
        await harness.client.approve(run, "audit", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert again.value.kind == "AlreadyAnswered", again.value
    said = str(again.value)
    assert f"'call-open' was already answered (forwarded to Run {run.workflow_id}-step1)" in said
    assert result.status is RunStatus.COMPLETED
    assert created == ["team", "audit"]


async def test_abort_during_an_agent_step_reaches_it(harness: Harness) -> None:
    started = asyncio.Event()

    @harness.registry.register
    async def wait_forever(seconds: int) -> str:
        """Wait a long time."""
        started.set()
        await asyncio.sleep(seconds)
        return "done"

    spec = (
        WorkflowBuilder("long", registry=harness.registry)
        .agent_step("work", greeter(harness, "wait_forever"))
        .tool("wait_forever")
        .tool_step("after", "wait_forever", {"seconds": 0})
        .build()
    )
    harness.fake.enqueue(Reply.tool_calls(ToolCall("wait_forever", {"seconds": 600})))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "work", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 20)
        await harness.client.abort(run, scope=harness.scope, reason="enough")
        result = await harness.client.result(run, scope=harness.scope)
        child = await harness.client.records(f"{run.workflow_id}-step1", scope=harness.scope)
    assert result.status is RunStatus.ABORTED
    assert "enough" in result.reason
    kinds = [r.kind for r in child.records]
    assert "abort_requested" in kinds
    assert child.records[-1].kind == "run_settled"
    assert "after" not in (result.outputs or {})


async def test_steer_reaches_the_running_agent_step_and_is_refused_between(
    harness: Harness,
) -> None:
    started = {"prepare": asyncio.Event(), "talk": asyncio.Event()}
    release = {"prepare": asyncio.Event(), "talk": asyncio.Event()}

    @harness.registry.register
    async def slow(step: str) -> str:
        """Take a while."""
        started[step].set()
        await release[step].wait()
        return f"{step} done"

    spec = (
        WorkflowBuilder("steered", registry=harness.registry)
        .tool("slow")
        .tool_step("prepare", "slow", {"step": "prepare"})
        .agent_step("talk", greeter(harness, "slow"))
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("slow", {"step": "talk"})),
        Reply.text("Guten Tag."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "hello", scope=harness.scope)
        await asyncio.wait_for(started["prepare"].wait(), 20)
        with pytest.raises(Refused) as refused:
            await harness.client.steer(run, "Answer in German.", scope=harness.scope)
        assert refused.value.kind == "NoStep"
        release["prepare"].set()
        await asyncio.wait_for(started["talk"].wait(), 20)  # the agent step's own call runs
        await harness.client.steer(run, "Answer in German.", scope=harness.scope)
        child = f"{run.workflow_id}-step2"

        async def steered() -> bool:
            records = (await harness.client.records(child, scope=harness.scope)).records
            return any(r.kind == "steer_received" for r in records)

        await waiting.eventually(
            steered, within=20.0, what="the steer message to reach the agent step"
        )
        release["talk"].set()
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    last = harness.fake.requests[-1]
    assert any(
        m["role"] == "user" and m["content"] == "Answer in German." for m in last["messages"]
    )


async def test_idempotent_dispatch_and_another_tenant(harness: Harness) -> None:
    created: list[str] = []
    register_accounts(harness, created)
    spec = (
        WorkflowBuilder("once", registry=harness.registry)
        .tool("create_account")
        .tool_step("create", "create_account", {"plan": "x"})
        .build()
    )
    async with harness.worker():
        first = await harness.client.dispatch(
            spec, "go", scope=harness.scope, idempotency_key="signup-1"
        )
        second = await harness.client.dispatch(
            spec, "go", scope=harness.scope, idempotency_key="signup-1"
        )
        assert first.workflow_id == second.workflow_id
        await harness.client.result(first, scope=harness.scope)
        other = Scope(tenant="globex")
        with pytest.raises(AccessDenied):
            await harness.client.status(first, scope=other)
        with pytest.raises(AccessDenied):
            await harness.client.abort(first, scope=other)
        records = (await harness.client.records(first, scope=harness.scope)).records
    assert created == ["x"]
    assert [r.step for r in records if isinstance(r, StepStarted)] == ["create"]


async def test_abort_during_a_tool_step_settles_the_workflow_aborted(harness: Harness) -> None:
    started = asyncio.Event()

    @harness.registry.register
    async def crawl(pages: int) -> str:
        """Crawl for a long time."""
        started.set()
        await asyncio.sleep(600)
        return "crawled"

    spec = (
        WorkflowBuilder("crawling", registry=harness.registry)
        .tool("crawl")
        .tool_step("crawl", "crawl", {"pages": 1000})
        .build()
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "crawl", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 20)
        await harness.client.abort(run, scope=harness.scope, reason="enough")
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.ABORTED
    assert "enough" in result.reason
    (finished,) = [r for r in records if isinstance(r, StepFinished)]
    assert (finished.step, finished.ok) == ("crawl", False)
    assert finished.error is not None and finished.error.startswith("aborted: ")


async def test_a_step_missing_an_http_tools_url_argument_is_refused_before_any_step_runs(
    harness: Harness,
) -> None:
    # From an audit: the Run failed at the refund step, after the account was created.
    created: list[str] = []
    register_accounts(harness, created)
    spec = (
        WorkflowBuilder("refunds", registry=harness.registry)
        .tool("create_account")
        .http_tool("refund", description="Refund.", url="http://127.0.0.1:9/orders/{order_id}")
        .tool_step("create", "create_account", {"plan": "pro"})
        .tool_step("refund", "refund", {"order": "7"})
        .build()
    )
    async with harness.worker():
        with pytest.raises(ValidationFailed, match=r"steps\[refund\]\.arguments: no 'order_id'"):
            await harness.client.dispatch(spec, "go", scope=harness.scope)
    assert created == []
