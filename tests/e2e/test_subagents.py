"""Subagents end to end on a real dev server: totals roll up with a line per child, one
depth rule at publish and at run time, tools by definition, typed endings."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowFailureError

from psych_runtime.activities.model import ModelPrice, TablePricing
from psych_runtime.specs import (
    AgentBuilder,
    AgentSpec,
    Version,
    WorkflowBuilder,
    validate,
    version_hash,
)
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.console import format_report
from psych_runtime.workflows import (
    AGENT_RUN,
    AgentRunInput,
    RunHandle,
    RunReport,
    RunStatus,
    SuspensionReason,
    workflow_id_for,
)

from ._http_server import CountingServer
from ._waiting import eventually
from .conftest import Harness

pytestmark = pytest.mark.e2e

PRICES = TablePricing({"fake-model": ModelPrice(input=1.0, output=2.0)})


def _agent(harness: Harness, name: str, model: str = "fake-model") -> AgentBuilder:
    return (
        AgentBuilder(name, registry=harness.registry).model(model).instructions(f"You are {name}.")
    )


def _who(body: dict[str, Any]) -> str:
    """Which agent a model request is for: its instructions say."""
    return str(body["messages"][0]["content"]).split("You are ", 1)[1].split(".", 1)[0]


def _tool_results(harness: Harness, agent: str) -> list[str]:
    """Every tool result the fake model was shown in ``agent``'s requests, in order."""
    seen: list[str] = []
    for body in harness.fake.requests:
        if _who(body) != agent:
            continue
        for message in body["messages"]:
            if message["role"] == "tool" and message["content"] not in seen:
                seen.append(message["content"])
    return seen


async def _unpublished(harness: Harness, spec: AgentSpec, run_id: str, message: str) -> RunHandle:
    """Start a Version that skipped publishing (so the validator never saw it) as a Run."""
    version = Version(hash=version_hash(spec), spec=spec, published_at="2026-01-01T00:00:00Z")
    workflow_id = workflow_id_for(harness.scope.tenant, run_id)
    await harness.env.client.start_workflow(
        AGENT_RUN,
        AgentRunInput(run_id=run_id, version=version, scope=harness.scope, messages=(message,)),
        id=workflow_id,
        task_queue=harness.settings.task_queue,
    )
    return RunHandle(workflow_id, run_id, harness.scope.tenant, spec.name, version.hash)


async def test_every_childs_totals_roll_up_with_a_line_per_child(harness: Harness) -> None:
    @harness.registry.register
    def lookup(term: str) -> str:
        """Look a term up."""
        return f"{term} = 42"

    harness.settings.pricing = PRICES
    done = _agent(harness, "done").tool("lookup").build()
    broken = _agent(harness, "broken").tool("lookup").build()
    stopped = _agent(harness, "stopped").tool("lookup").limits(max_turns=1).build()
    lead = _agent(harness, "lead").tool("lookup")
    for sub in (done, broken, stopped):
        lead = lead.subagent(sub.name, f"The {sub.name} subagent, for tests only.", sub)
    spec = lead.build()

    def respond(body: dict[str, Any]) -> Reply:
        who, last = _who(body), body["messages"][-1]
        if who == "lead":
            if last["role"] == "user":
                return Reply.tool_calls(
                    *(
                        ToolCall("delegate", {"agent": name, "task": "x?"}, id=f"d-{name}")
                        for name in ("done", "broken", "stopped")
                    )
                )
            return Reply.text("lead is done")
        if last["role"] == "user":
            return Reply.tool_calls(ToolCall("lookup", {"term": who}))
        if who == "broken":
            return Reply.error(400, message="the broken subagent's model refuses")
        return Reply.text(f"{who} answers: {last['content']}")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        children = {
            child.agent: await harness.client.report(child.run, scope=harness.scope)
            for child in report.children
        }
    assert result.status is RunStatus.COMPLETED
    lines = {child.agent: child for child in report.children}
    assert {name: line.status for name, line in lines.items()} == {
        "done": RunStatus.COMPLETED,
        "broken": RunStatus.FAILED,
        "stopped": RunStatus.STOPPED,
    }
    for name, line in lines.items():  # each line holds the child's own settled totals
        assert line.totals == children[name].totals
        assert line.via == "delegate" and line.run == children[name].workflow_id
    # A FAILED child's spending counts too: its answered call and its refused one.
    assert lines["broken"].totals.model_calls == 2
    assert lines["broken"].totals.tool_calls == 1

    own_calls = [call for call in report.model_calls if call.ok]
    totals = report.totals
    assert totals is not None
    assert totals.model_calls == len(report.model_calls) + sum(
        c.totals.model_calls for c in lines.values()
    )
    assert totals.tool_calls == 3 + sum(c.totals.tool_calls for c in lines.values())
    own_input = sum(call.usage.input_tokens for call in own_calls if call.usage)
    child_input = sum(c.totals.usage.input_tokens for c in lines.values())
    assert totals.usage.input_tokens == own_input + child_input > own_input
    own_cost = sum(call.cost or 0.0 for call in own_calls)
    child_cost = sum(c.totals.cost or 0.0 for c in lines.values())
    assert totals.cost is not None and child_cost > 0
    assert math.isclose(totals.cost, own_cost + child_cost)

    # What the lead's model read: the answer as text, any other ending typed.
    results = _tool_results(harness, "lead")
    assert "done answers: done = 42" in results
    endings = {json.loads(text)["agent"]: json.loads(text) for text in results if text[0] == "{"}
    assert endings["broken"]["status"] == "failed"
    assert "refuses" in endings["broken"]["reason"]
    assert endings["broken"]["run"] == lines["broken"].run
    assert endings["stopped"] == {
        "status": "stopped",
        "reason": "max_turns: 1 turns taken",
        "run": lines["stopped"].run,
        "agent": "stopped",
    }
    statuses = {call.call_id: call.status for call in report.tool_calls}
    assert statuses == {"d-done": "ok", "d-broken": "error", "d-stopped": "error"}
    shown = format_report(report)
    for line in report.children:
        assert f"{line.run} ({line.agent}, delegate) {line.status}" in shown
    # Each wait on a child ends when its call does (no resume is recorded for it): it was
    # left open, "unanswered when the Run settled".
    waits = {wait.pending.call_id: wait for wait in report.suspensions}
    assert sorted(waits) == ["d-broken", "d-done", "d-stopped"]
    for wait in waits.values():
        assert wait.pending.reason is SuspensionReason.CHILDREN
        assert wait.outcome == "children_ended" and wait.ended_at is not None
    assert "unanswered" not in shown and "children ended after" in shown


async def test_a_childs_unknown_cost_leaves_the_parents_unknown(harness: Harness) -> None:
    harness.settings.pricing = PRICES
    helper = _agent(harness, "helper", model="fake-other").build()  # no price for it
    spec = (
        _agent(harness, "lead")
        .subagent("helper", "Helps the lead, for tests only.", helper)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "helper", "task": "hi"})),
        Reply.text("hello"),
        Reply.text("the helper said hello"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert all(call.cost is not None for call in report.model_calls)  # the lead's are priced
    (child,) = report.children
    assert child.totals.cost is None and child.totals.model_calls == 1
    assert report.totals is not None
    assert report.totals.cost is None  # never the lead's own cost shown as the whole
    assert report.totals.model_calls == 3
    assert "cost unknown" in format_report(report)


async def test_a_child_whose_only_call_was_refused_leaves_the_parents_cost_known(
    harness: Harness,
) -> None:
    # Until 12-06 a Run that no call answered kept the cost None, which a parent took for
    # "some price unknown": one refused subagent made the lead's whole cost unknown, where
    # a refused call of the lead's own left it known.
    harness.settings.pricing = PRICES
    helper = _agent(harness, "helper").build()
    spec = (
        _agent(harness, "lead")
        .subagent("helper", "Helps the lead, for tests only.", helper)
        .build()
    )

    def respond(body: dict[str, Any]) -> Reply:
        if _who(body) == "helper":
            return Reply.error(400, message="the helper's model refuses")
        if body["messages"][-1]["role"] == "user":
            return Reply.tool_calls(ToolCall("delegate", {"agent": "helper", "task": "hi"}))
        return Reply.text("the helper failed")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    (child,) = report.children
    assert child.status is RunStatus.FAILED and child.totals.model_calls == 1
    assert child.totals.cost == 0.0  # no call answered: nothing spent, and that is known
    own = [call.cost for call in report.model_calls]
    assert len(own) == 2 and None not in own
    assert report.totals is not None and report.totals.cost is not None
    assert math.isclose(report.totals.cost, sum(cost or 0.0 for cost in own))
    assert "cost unknown" not in format_report(report)


def _chain(harness: Harness, caps: tuple[int, int, int]) -> AgentSpec:
    leaf = _agent(harness, "leaf").limits(max_delegation_depth=caps[2]).build()
    mid = (
        _agent(harness, "mid")
        .limits(max_delegation_depth=caps[1])
        .subagent("leaf", "The deepest subagent, for tests only.", leaf)
        .build()
    )
    return (
        _agent(harness, "root")
        .limits(max_delegation_depth=caps[0])
        .subagent("mid", "The middle subagent, for tests only.", mid)
        .build()
    )


def _delegating(harness: Harness) -> None:
    def respond(body: dict[str, Any]) -> Reply:
        who, last = _who(body), body["messages"][-1]
        if who == "leaf":
            return Reply.text("leaf found it")
        if last["role"] == "user":
            target = "mid" if who == "root" else "leaf"
            return Reply.tool_calls(ToolCall("delegate", {"agent": target, "task": "find it"}))
        return Reply.text(f"{who} heard: {last['content']}")

    harness.fake.responder = respond


async def _start_input(harness: Harness, workflow_id: str) -> dict[str, Any]:
    history = await harness.env.client.get_workflow_handle(workflow_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    payload: Payload = started.input.payloads[0]
    decoded: dict[str, Any] = json.loads(payload.data)
    return decoded


async def test_a_tree_the_validator_accepts_runs_to_its_deepest_subagent(
    harness: Harness,
) -> None:
    spec = _chain(harness, (2, 2, 2))
    assert validate(spec) == []
    _delegating(harness)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)  # publishes
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        (mid,) = report.children
        mid_report: RunReport = await harness.client.report(mid.run, scope=harness.scope)
        (leaf,) = mid_report.children
        leaf_input = await _start_input(harness, leaf.run)
    assert result.answer == "root heard: mid heard: leaf found it"
    assert leaf.status is RunStatus.COMPLETED and leaf.agent == "leaf"
    # Depth is absolute and the chain is inherited: the leaf runs at 2 below root and mid.
    assert leaf_input["depth"] == 2
    assert leaf_input["depth_caps"] == [["root", 2], ["mid", 2]]
    # The leaf's model call rolled up twice: into mid's totals, then into root's.
    assert report.totals is not None and report.totals.model_calls == 5


async def test_a_tree_the_validator_refuses_is_refused_at_run_time_with_its_words(
    harness: Harness,
) -> None:
    spec = _chain(harness, (1, 3, 3))  # root allows depth 1; the leaf would be at 2
    (problem,) = validate(spec)
    assert problem.path == "subagents[mid].spec.subagents[leaf]"
    _delegating(harness)
    async with harness.worker():
        run = await _unpublished(harness, spec, "refused-depth", "go")
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        (mid,) = report.children
        mid_report = await harness.client.report(mid.run, scope=harness.scope)
    assert mid_report.children == ()  # no leaf Run was started
    (refused,) = mid_report.tool_calls
    assert (refused.tool, refused.status, refused.result) == ("delegate", "error", problem.message)
    assert _tool_results(harness, "mid") == [problem.message]  # what mid's model read
    assert result.answer == f"root heard: mid heard: {problem.message}"
    assert not any(_who(body) == "leaf" for body in harness.fake.requests)


async def test_a_child_http_tool_with_the_parents_name_and_another_url_is_refused(
    harness: Harness,
) -> None:
    ours, theirs = CountingServer().start(), CountingServer().start()
    try:
        child = (
            _agent(harness, "child")
            .http_tool("orders", description="Orders.", url=f"{theirs.url}/orders")
            .build()
        )
        spec = (
            _agent(harness, "lead")
            .http_tool("orders", description="Orders.", url=f"{ours.url}/orders")
            .subagent("child", "A child with its own orders tool.", child)
            .build()
        )
        (problem,) = validate(spec)
        assert problem.path == "subagents[child].spec.tools[orders]"
        assert "'orders'" in problem.message and "not the same definition" in problem.message

        def respond(body: dict[str, Any]) -> Reply:
            who, last = _who(body), body["messages"][-1]
            if last["role"] == "user":
                if who == "lead":
                    return Reply.tool_calls(ToolCall("delegate", {"agent": "child", "task": "go"}))
                return Reply.tool_calls(ToolCall("orders", {}))  # tries it anyway
            return Reply.text(f"{who}: {last['content']}")

        harness.fake.responder = respond
        async with harness.worker():
            run = await _unpublished(harness, spec, "other-url", "go")
            await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
            (line,) = report.children
            child_report = await harness.client.report(line.run, scope=harness.scope)
    finally:
        ours.stop()
        theirs.stop()
    assert theirs.seen == [] and ours.seen == []
    (left,) = child_report.left_out
    assert (left.what, left.name, left.reason) == ("tool", "orders", problem.message)
    child_bodies = [body for body in harness.fake.requests if _who(body) == "child"]
    offered = {tool["function"]["name"] for tool in child_bodies[0].get("tools", [])}
    assert "orders" not in offered
    (call,) = child_report.tool_calls
    assert call.tool == "orders" and call.status == "error"
    assert f"left out:     tool 'orders': {problem.message}" in format_report(child_report)


async def test_a_workflow_steps_agent_delegates_within_its_own_depth(harness: Harness) -> None:
    # The validator takes a step's agent as the root of its chain (depth 0): with a cap of 1
    # its subagent runs at depth 1, so the WorkflowRun must start the step at its own depth.
    leaf = _agent(harness, "mid").build()
    step = (
        _agent(harness, "root")
        .limits(max_delegation_depth=1)
        .subagent("mid", "The only subagent, for tests only.", leaf)
        .build()
    )
    spec = WorkflowBuilder("flow", registry=harness.registry).agent_step("ask", step).build()
    assert validate(spec) == []
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "mid", "task": "find it"})),
        Reply.text("found"),
        Reply.text("root heard: found"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.outputs == {"ask": "root heard: found"}
    (step_report,) = report.steps
    assert step_report.child is not None
    (child,) = step_report.child.children
    assert child.status is RunStatus.COMPLETED
    assert report.totals is not None and report.totals.model_calls == 3


async def test_an_aborted_parent_aborts_its_child_and_takes_its_totals(harness: Harness) -> None:
    calls: list[str] = []
    spec = _slow_worker(harness, calls).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "worker", "task": "go"})),
        Reply.tool_calls(ToolCall("slow", {"what": "x"})),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)

        async def started() -> bool:
            return calls == ["x"]

        await eventually(started, what="the child's slow call")
        await harness.client.abort(run, scope=harness.scope, reason="enough")
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        child_report = await harness.client.report(report.children[0].run, scope=harness.scope)
    assert result.status is RunStatus.ABORTED
    why = f"aborted by parent Run {run.workflow_id}: aborted by tester: enough"
    assert report.children[0].reason == why
    _took_the_child(report, child_report, why)


def _slow_worker(harness: Harness, calls: list[str]) -> AgentBuilder:
    """A lead whose subagent ``worker`` runs ``slow``, which takes a minute."""

    @harness.registry.register
    async def slow(what: str) -> str:
        """Take a long time."""
        calls.append(what)
        await asyncio.sleep(60)
        return "never"

    harness.settings.pricing = PRICES
    worker = _agent(harness, "worker").tool("slow").build()
    return (
        _agent(harness, "lead")
        .tool("slow")  # a child may only use its parent's tools
        .subagent("worker", "Works slowly, for tests only.", worker)
    )


def _took_the_child(report: RunReport, child_report: RunReport, why: str) -> None:
    """The lead aborted its child (not cancelled nor terminated it): the child's slow call
    was cancelled, it settled ABORTED with its totals, and the lead recorded its ending
    and took them."""
    (child,) = report.children
    assert child.status is RunStatus.ABORTED and why in child.reason
    assert [c.status for c in child_report.tool_calls] == ["aborted"]
    assert child.totals == child_report.totals and child.totals.model_calls == 1
    (own,) = report.model_calls
    assert report.totals is not None and report.totals.model_calls == 2
    assert own.cost is not None and child.totals.cost is not None
    assert report.totals.cost is not None
    assert math.isclose(report.totals.cost, own.cost + child.totals.cost)


async def test_a_cancelled_parent_aborts_its_child_and_takes_its_totals(
    harness: Harness,
) -> None:
    # Its workflow cancelled while delegate waited, the lead left its child to the close
    # policy (terminated): no child_settled, the lead's totals short of the child's model
    # call, and its cost still looked known.
    calls: list[str] = []
    spec = _slow_worker(harness, calls).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delegate", {"agent": "worker", "task": "go"})),
        Reply.tool_calls(ToolCall("slow", {"what": "x"})),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)

        async def started() -> bool:
            return calls == ["x"]

        await eventually(started, what="the child's slow call")
        handle = harness.client.temporal.get_workflow_handle(run.workflow_id)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        child_report = await harness.client.report(report.children[0].run, scope=harness.scope)
    assert result.status is RunStatus.ABORTED
    assert result.reason.startswith("cancelled")
    _took_the_child(
        report, child_report, f"aborted by parent Run {run.workflow_id}: cancelled: the workflow"
    )
    assert result.totals == report.totals


async def test_a_parent_past_its_deadline_aborts_its_child_and_takes_its_totals(
    harness: Harness,
) -> None:
    # Past its deadline and grace (its own slow call keeps its clock running while it
    # waits for the child), the lead was force-settled without its child's totals.
    calls: list[str] = []
    spec = _slow_worker(harness, calls).limits(deadline_seconds=1).build()
    harness.fake.responder = lambda body: (
        Reply.tool_calls(
            ToolCall("delegate", {"agent": "worker", "task": "go"}),
            ToolCall("slow", {"what": "own"}),
        )
        if _who(body) == "lead"
        else Reply.tool_calls(ToolCall("slow", {"what": "child"}))
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        child_report = await harness.client.report(report.children[0].run, scope=harness.scope)
    assert result.status is RunStatus.FORCE_SETTLED
    _took_the_child(report, child_report, "deadline: 1 s and 30 s grace passed")
    assert result.totals == report.totals


async def test_a_subagent_gets_only_the_a2a_peers_its_parent_has(harness: Harness) -> None:
    # The child names a required peer the lead lacks (its port refuses connections): before
    # the narrowing the child tried to fetch the card and failed as unreachable.
    child = AgentSpec.model_validate(
        {
            "name": "booker",
            "instructions": "You are booker.",
            "model": {"model": "fake-model"},
            "a2a_peers": [{"name": "travel", "url": "http://127.0.0.1:9/"}],
        }
    )
    spec = _agent(harness, "lead").subagent("booker", "Books trips with the peer.", child).build()
    assert validate(spec) == []  # a peer the parent lacks is narrowed away, as a tool is

    def respond(body: dict[str, Any]) -> Reply:
        who, last = _who(body), body["messages"][-1]
        if who == "lead" and last["role"] == "user":
            return Reply.tool_calls(ToolCall("delegate", {"agent": "booker", "task": "book"}))
        return Reply.text(f"{who}: {last['content']}")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        (line,) = report.children
        child_report = await harness.client.report(line.run, scope=harness.scope)
    assert result.answer == "lead: booker: book"
    assert child_report.status is RunStatus.COMPLETED
    (left,) = child_report.left_out
    assert (left.what, left.name) == ("a2a_peer", "travel")
    assert left.reason == "A2A peer 'travel' is not one of the parent's A2A peers, so the " + (
        "subagent may not use it"
    )


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"agent": "helper"}, "delegate needs a task"),
        ({"agent": "helper", "task": "  "}, "delegate needs a task"),
        ({"agent": "helper", "task": ["x"]}, "delegate needs a task"),
        ({"task": "x"}, "delegate needs agent: the name of one of your subagents (helper)"),
    ],
)
async def test_a_delegation_without_an_agent_or_a_task_starts_no_child(
    harness: Harness, arguments: dict[str, Any], problem: str
) -> None:
    child = _agent(harness, "helper").build()
    spec = _agent(harness, "lead").subagent("helper", "Helps with anything at all.", child).build()

    def respond(body: dict[str, Any]) -> Reply:
        who, last = _who(body), body["messages"][-1]
        if who == "lead" and last["role"] == "user":
            return Reply.tool_calls(ToolCall("delegate", arguments))
        return Reply.text(f"{who}: {last['content']}")

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert report.children == ()
    assert [_who(body) for body in harness.fake.requests] == ["lead", "lead"]
    (call,) = report.tool_calls
    assert call.status == "error" and (call.result or "").startswith(problem)
