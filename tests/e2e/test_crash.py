"""A worker killed with SIGKILL mid-tool-call; another worker finishes the Runs.

One crash serves both tests (it costs a heartbeat timeout of real time): a worker in its
own process starts two Runs, one calling a POST tool (not safe to repeat) and one calling a
GET tool (safe to repeat), against loopback servers that hold their answers back. Once both
requests have arrived the process is SIGKILLed, and a worker in the test process takes over
the task queue. The POST must never be sent again and is recorded UNKNOWN, the model being
told so; the GET is sent again and its result used.
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

from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workflows import RunReport, RunResult, RunStatus
from psych_runtime.workflows.kernel._tool_calls import UNKNOWN_OUTCOME

from ._crash import doomed_worker
from ._http_server import CountingServer, refund_tool

pytestmark = pytest.mark.e2e

HELD_BACK = 5.0
"""Seconds the loopback APIs hold an answer: the call is in flight when the worker dies."""


@dataclass
class Ran:
    result: RunResult
    report: RunReport
    model_requests: list[dict[str, Any]]
    """What the fake model received for this Run, in order."""


@dataclass
class Crash:
    post: Ran
    get: Ran
    refunds: CountingServer
    orders: CountingServer
    seconds: float
    """Wall time from the kill to both Runs settled."""


@pytest.fixture(scope="module")
async def crash(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Crash]:
    home = tmp_path_factory.mktemp("crash")
    task_queue = f"crash-{uuid.uuid4().hex[:12]}"
    scope = Scope(tenant="acme")
    refunds = CountingServer(delay=HELD_BACK).start()
    orders = CountingServer(
        respond=lambda seen: (200, '{"order_id": "42", "status": "in transit"}'),
        delay=HELD_BACK,
    ).start()
    refunder = (
        AgentBuilder("refunder")
        .model("fake-model")
        .http_tool("refund", **refund_tool(refunds.url))
        .build()
    )
    tracker = (
        AgentBuilder("tracker")
        .model("fake-other")
        .http_tool(
            "track",
            description="Where an order is.",
            url=orders.url + "/orders/{order_id}",
            method="GET",
        )
        .build()
    )
    async with FakeModel(models=("fake-model", "fake-other")) as fake:
        fake.enqueue(
            Reply.tool_calls(ToolCall("refund", {"order_id": "42"})),
            Reply.text("I could not confirm the refund; please check."),
            model="fake-model",
        )
        fake.enqueue(
            Reply.tool_calls(ToolCall("track", {"order_id": "42"})),
            Reply.text("Order 42 is in transit."),
            model="fake-other",
        )
        try:
            async with doomed_worker(dev_env.client, task_queue, home, fake.base_url) as doomed:
                client = doomed.psych
                post_run = await client.dispatch(refunder, "Refund order 42", scope=scope)
                get_run = await client.dispatch(tracker, "Where is order 42?", scope=scope)
                killed = await doomed.kill_when(lambda: bool(refunds.seen and orders.seen))
                orders.delay = 0.0  # the re-sent GET is answered at once

                async with doomed.survivor():
                    results = await asyncio.wait_for(
                        asyncio.gather(
                            client.result(post_run, scope=scope),
                            client.result(get_run, scope=scope),
                        ),
                        timeout=60,
                    )
                    seconds = time.monotonic() - killed
                    reports = [await client.report(run, scope=scope) for run in (post_run, get_run)]
        finally:
            refunds.stop()
            orders.stop()

        def sent_to(model: str) -> list[dict[str, Any]]:
            return [r for r in fake.requests if r["model"] == model]

        yield Crash(
            post=Ran(results[0], reports[0], sent_to("fake-model")),
            get=Ran(results[1], reports[1], sent_to("fake-other")),
            refunds=refunds,
            orders=orders,
            seconds=seconds,
        )


async def test_post_in_flight_is_never_resent_and_recorded_unknown(crash: Crash) -> None:
    post = crash.post
    assert post.result.status is RunStatus.COMPLETED
    assert post.result.answer == "I could not confirm the refund; please check."
    assert crash.refunds.count("POST", "/orders/42/refund") == 1
    assert len(crash.refunds.seen) == 1
    [call] = post.report.tool_calls
    assert call.tool == "refund"
    assert call.status == "unknown"
    assert call.result == UNKNOWN_OUTCOME
    # The surviving worker's model call told the model the outcome is unknown.
    assert len(post.model_requests) == 2
    told = post.model_requests[1]["messages"][-1]
    assert told["role"] == "tool"
    assert told["content"] == UNKNOWN_OUTCOME
    assert told["tool_call_id"] == call.call_id


async def test_get_in_flight_is_rerun_on_the_surviving_worker(crash: Crash) -> None:
    get = crash.get
    assert get.result.status is RunStatus.COMPLETED
    assert get.result.answer == "Order 42 is in transit."
    # Sent by the killed worker, then again by the survivor.
    assert crash.orders.count("GET", "/orders/42") == 2
    [call] = get.report.tool_calls
    assert call.tool == "track"
    assert call.status == "ok"
    assert "in transit" in (call.result or "")
    told = get.model_requests[1]["messages"][-1]
    assert told["role"] == "tool"
    assert "in transit" in told["content"]


async def test_recovery_takes_about_one_heartbeat_timeout(crash: Crash) -> None:
    # The heartbeat timeout (10 s) notices the dead worker; the workflow tasks held for its
    # sticky cache move on after its 1 s schedule-to-start timeout.
    assert crash.seconds < 20
