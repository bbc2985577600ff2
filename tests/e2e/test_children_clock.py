"""A parent's deadline clock runs while its child works: a subagent ``delegate`` waits for,
a spawned child ``wait_children`` waits for. Waiting on a working child is not waiting on a
person (until 12-06 it stopped the parent's clock, and a lead with a 2 s deadline answered
after its child's minutes of work)."""

from __future__ import annotations

from typing import Any

import pytest

from psych_runtime.specs import AgentBuilder, WorkflowBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from .conftest import Harness

pytestmark = pytest.mark.e2e


def _who(body: dict[str, Any]) -> str:
    """Which agent a model request is for: its instructions say."""
    return str(body["messages"][0]["content"]).split("You are ", 1)[1].split(".", 1)[0]


def _agent(name: str) -> AgentBuilder:
    return AgentBuilder(name).model("fake-model").instructions(f"You are {name}.")


async def test_a_subagents_work_runs_its_parents_deadline_clock(harness: Harness) -> None:
    worker = _agent("worker").limits(deadline_seconds=60).build()
    spec = (
        _agent("lead")
        .subagent("worker", "Works slowly, for tests only.", worker)
        .limits(deadline_seconds=2)
        .build()
    )
    lead_calls = 0

    def respond(body: dict[str, Any]) -> Reply:
        nonlocal lead_calls
        if _who(body) == "worker":  # 5 s of the child's work, past the lead's 2 s
            return Reply.stall(5.0, then=Reply.text("worked"))
        lead_calls += 1
        if lead_calls == 1:
            return Reply.tool_calls(ToolCall("delegate", {"agent": "worker", "task": "go"}))
        return Reply.text("done")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)

    assert result.status is RunStatus.FORCE_SETTLED, result.reason
    assert result.reason == "deadline: 2 s passed"
    assert lead_calls == 1  # no turn started after the deadline
    (child,) = report.children  # the child answered within the grace, and was taken
    assert child.status is RunStatus.COMPLETED


async def test_a_spawned_childs_work_runs_its_parents_deadline_clock(harness: Harness) -> None:
    spec = _agent("lead").spawn().limits(deadline_seconds=2).build()
    lead_calls = 0

    def respond(body: dict[str, Any]) -> Reply:
        nonlocal lead_calls
        if _who(body) != "lead":  # 5 s of the child's work, past the lead's 2 s
            return Reply.stall(5.0, then=Reply.text("worked"))
        lead_calls += 1
        if lead_calls == 1:
            instructions = "You are helper."
            arguments = {"name": "helper", "instructions": instructions, "task": "go"}
            return Reply.tool_calls(ToolCall("spawn", arguments))
        if lead_calls == 2:
            return Reply.tool_calls(ToolCall("wait_children", {}))
        return Reply.text("done")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)

    assert result.status is RunStatus.FORCE_SETTLED, result.reason
    assert result.reason == "deadline: 2 s passed"
    assert lead_calls == 2
    (child,) = report.children
    assert child.status is RunStatus.COMPLETED


async def test_a_workflows_clock_runs_while_its_steps_subagent_works(harness: Harness) -> None:
    # The step's lead waits on its subagent: it reports that wait to the workflow, and
    # whether it works beside it (its working child), so the workflow's clock runs too.
    worker = _agent("worker").limits(deadline_seconds=60).build()
    lead = (
        _agent("lead")
        .subagent("worker", "Works slowly, for tests only.", worker)
        .limits(deadline_seconds=60)
        .build()
    )
    after = _agent("after").build()  # never started: the deadline passed before it
    spec = (
        WorkflowBuilder("flow")
        .agent_step("ask", lead)
        .agent_step("then", after)
        .limits(deadline_seconds=2)
        .build()
    )
    lead_calls = 0

    def respond(body: dict[str, Any]) -> Reply:
        nonlocal lead_calls
        if _who(body) == "worker":  # 5 s of the grandchild's work, past the flow's 2 s
            return Reply.stall(5.0, then=Reply.text("worked"))
        if _who(body) == "after":
            return Reply.text("after")
        lead_calls += 1
        if lead_calls == 1:
            return Reply.tool_calls(ToolCall("delegate", {"agent": "worker", "task": "go"}))
        return Reply.text("done")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)

    assert result.status is RunStatus.FORCE_SETTLED, result.reason
    assert result.reason == "deadline: 2 s passed"
