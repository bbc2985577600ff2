"""A worker killed with SIGKILL in the middle of two WorkflowRuns; another worker finishes both.

One crash serves every test here (it costs a heartbeat timeout of real time). A worker in
its own process starts two workflows against loopback servers that hold their answers back:

- ``refund-flow``: a tool step ``refund`` (an HTTP POST, not safe to repeat), then a tool
  step ``notify``;
- ``tracking-flow``: a tool step ``lookup``, an agent step ``track`` whose agent calls an
  HTTP GET (safe to repeat), then a tool step ``confirm``.

Once the POST and the GET have both arrived the process is SIGKILLed and a worker in the
test process takes over the task queue. The POST must never be sent again, its call is
recorded UNKNOWN and the workflow stops at that step; the agent step's GET is sent again,
its child AgentRun resumes and completes, and so does its workflow.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.specs import AgentBuilder, RunFailed, Scope, WorkflowBuilder
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workflows import (
    PsychClient,
    Record,
    RunHandle,
    RunReport,
    RunResult,
    RunState,
    RunStatus,
    StepFinished,
    StepStarted,
    ToolCallFinished,
)
from psych_runtime.workflows.kernel._tool_calls import UNKNOWN_OUTCOME

from ._crash import doomed_worker
from ._http_server import CountingServer, refund_tool
from ._worker_proc import REGISTRY

pytestmark = pytest.mark.e2e

HELD_BACK = 5.0
"""Seconds the loopback APIs hold an answer: the call is in flight when the worker dies."""
SCOPE = Scope(tenant="acme")
TRACKED = '{"order_id": "42", "status": "in transit"}'


@dataclass
class Settled:
    run: RunHandle
    result: RunResult | RunFailed
    """The Run's result, or the RunFailed its result raised."""
    state: RunState
    report: RunReport
    records: tuple[Record, ...]
    child_records: tuple[Record, ...] = ()
    """The agent step's child Run's records (tracking-flow only)."""


@dataclass
class Crash:
    refund: Settled
    tracking: Settled
    refunds: CountingServer
    orders: CountingServer
    model_requests: list[dict[str, Any]]
    seconds: float
    """Wall time from the kill to both workflows settled."""


async def settle(client: PsychClient, run: RunHandle) -> RunResult | RunFailed:
    try:
        return await client.result(run, scope=SCOPE)
    except RunFailed as failed:
        return failed


@pytest.fixture(scope="module")
async def crash(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Crash]:
    home = tmp_path_factory.mktemp("workflow-crash")
    task_queue = f"wfcrash-{uuid.uuid4().hex[:12]}"
    refunds = CountingServer(delay=HELD_BACK).start()
    orders = CountingServer(respond=lambda seen: (200, TRACKED), delay=HELD_BACK).start()
    refund_flow = (
        WorkflowBuilder("refund-flow", registry=REGISTRY)
        .http_tool("refund", **refund_tool(refunds.url))
        .tool("lookup_order")
        .tool_step("refund", "refund", {"order_id": "42"})
        .tool_step("notify", "lookup_order", {"order_id": "42"})
        .build()
    )
    tracker = (
        AgentBuilder("tracker")
        .model("fake-model")
        .http_tool(
            "track",
            description="Where an order is.",
            url=orders.url + "/orders/{order_id}",
            method="GET",
        )
        .build()
    )
    tracking_flow = (
        WorkflowBuilder("tracking-flow", registry=REGISTRY)
        .tool("lookup_order")
        .tool_step("lookup", "lookup_order", {"order_id": "42"})
        .agent_step("track", tracker)
        .tool_step("confirm", "lookup_order", {"order_id": "43"})
        .build()
    )
    async with FakeModel(models=("fake-model",)) as fake:
        fake.enqueue(
            Reply.tool_calls(ToolCall("track", {"order_id": "42"}, id="call-track")),
            Reply.text("Order 42 is in transit."),
        )
        try:
            async with doomed_worker(dev_env.client, task_queue, home, fake.base_url) as doomed:
                client = doomed.psych
                refund_run = await client.dispatch(refund_flow, "Refund order 42", scope=SCOPE)
                tracking_run = await client.dispatch(tracking_flow, "Track order 42", scope=SCOPE)
                killed = await doomed.kill_when(lambda: bool(refunds.seen and orders.seen))
                orders.delay = 0.0  # the re-sent GET is answered at once

                async with doomed.survivor():
                    results = await asyncio.wait_for(
                        asyncio.gather(settle(client, refund_run), settle(client, tracking_run)),
                        timeout=60,
                    )
                    seconds = time.monotonic() - killed
                    settled: list[Settled] = []
                    for run, result in zip((refund_run, tracking_run), results, strict=True):
                        report = await client.report(run, scope=SCOPE)
                        child = next((s.run for s in report.steps if s.kind == "agent"), None)
                        settled.append(
                            Settled(
                                run=run,
                                result=result,
                                state=await client.status(run, scope=SCOPE),
                                report=report,
                                records=(await client.records(run, scope=SCOPE)).records,
                                child_records=(await client.records(child, scope=SCOPE)).records
                                if child is not None
                                else (),
                            )
                        )
        finally:
            refunds.stop()
            orders.stop()

        yield Crash(
            refund=settled[0],
            tracking=settled[1],
            refunds=refunds,
            orders=orders,
            model_requests=list(fake.requests),
            seconds=seconds,
        )


async def test_a_post_step_in_flight_is_never_resent_and_fails_the_workflow_unknown(
    crash: Crash,
) -> None:
    ran = crash.refund
    assert isinstance(ran.result, RunFailed), ran.result
    assert ran.result.reason.startswith("step 'refund' (tool) failed: unknown: ")
    assert UNKNOWN_OUTCOME in ran.result.reason
    assert ran.state.status is RunStatus.FAILED
    assert ran.state.reason == ran.result.reason
    # Sent once, by the worker that died; the survivor never sent it again.
    assert crash.refunds.count("POST", "/orders/42/refund") == 1
    assert len(crash.refunds.seen) == 1
    # The step's call (its id is the step's name) is recorded UNKNOWN.
    [call] = ran.report.tool_calls
    assert (call.call_id, call.tool, call.status) == ("refund", "refund", "unknown")
    assert call.result == UNKNOWN_OUTCOME
    finished = [(r.call_id, r.status) for r in ran.records if isinstance(r, ToolCallFinished)]
    assert finished == [("refund", "unknown")]
    # The workflow stopped at that step: `notify` never started.
    assert [r.step for r in ran.records if isinstance(r, StepStarted)] == ["refund"]
    steps = [(r.step, r.ok) for r in ran.records if isinstance(r, StepFinished)]
    assert steps == [("refund", False)]
    [step] = ran.report.steps
    assert step.ok is False and step.error is not None
    assert step.error.startswith("unknown: ")
    assert ran.records[-1].kind == "run_settled"
    assert ran.state.outputs in (None, {})


async def test_an_agent_step_in_flight_resumes_on_the_survivor_and_the_workflow_completes(
    crash: Crash,
) -> None:
    ran = crash.tracking
    assert isinstance(ran.result, RunResult), ran.result
    assert ran.result.status is RunStatus.COMPLETED, ran.result.reason
    assert ran.result.outputs == {
        "lookup": {"order_id": "42", "status": "delivered"},
        "track": "Order 42 is in transit.",
        "confirm": {"order_id": "43", "status": "delivered"},
    }
    # The GET was sent by the killed worker, then again by the survivor.
    assert crash.orders.count("GET", "/orders/42") == 2
    child = f"{ran.run.workflow_id}-step2"
    assert [(s.name, s.kind, s.ok, s.run) for s in ran.report.steps] == [
        ("lookup", "tool", True, None),
        ("track", "agent", True, child),
        ("confirm", "tool", True, None),
    ]
    # The child AgentRun's one call finished ok with the re-sent GET's answer, and its
    # second model call was told that answer.
    finished = [(r.call_id, r.status) for r in ran.child_records if isinstance(r, ToolCallFinished)]
    assert finished == [("call-track", "ok")]
    assert ran.child_records[-1].kind == "run_settled"
    assert len(crash.model_requests) == 2
    told = crash.model_requests[1]["messages"][-1]
    assert told["role"] == "tool" and told["tool_call_id"] == "call-track"
    assert "in transit" in told["content"]
    # The workflow's totals include its child's calls.
    assert ran.result.totals.model_calls == 2
    assert ran.result.totals.tool_calls == 3


async def test_workflow_recovery_takes_about_one_heartbeat_timeout(crash: Crash) -> None:
    # The HTTP activity's heartbeat timeout (10 s) notices the dead worker; the held
    # workflow tasks move on after the sticky queue's 1 s schedule-to-start timeout.
    assert crash.seconds < 20
