"""Continue-as-new end to end: a low threshold forces a chain of executions, and every
reader still sees one Run (one workflow id, one gapless ``seq``, whole-chain totals)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from psych_runtime.activities.contract import Usage
from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, AgentSpec
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers.cli import main
from psych_runtime.workflows import (
    RunAdmitted,
    RunContinued,
    RunHandle,
    RunReport,
    RunSettled,
    RunStatus,
    SteerReceived,
    ToolCallFinished,
)

from ._waiting import all_records, is_waiting, state_when
from .conftest import MODELS, Harness

pytestmark = pytest.mark.e2e

EVERY_TURN = 1
"""A threshold every execution is past at once: the Run continues at each turn boundary."""


def orders_agent(harness: Harness, deleted: list[str]) -> AgentSpec:
    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    @harness.registry.register
    async def slow_lookup(term: str) -> str:
        """Look a term up, slowly."""
        await asyncio.sleep(0.5)
        return f"{term} = 42"

    harness.settings.policy = RulePolicy(destructive="ask")
    return (
        AgentBuilder("orders", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .tool("slow_lookup")
        .build()
    )


async def waiting_on(harness: Harness, run: RunHandle, call_id: str) -> None:
    await state_when(
        harness.client,
        run,
        harness.scope,
        lambda s: is_waiting(s) and s.pending[0].id == call_id,
        what=f"the Run to wait on {call_id}",
        unsettled=True,
    )


def usage_sum(report: RunReport) -> Usage:
    usages = [call.usage for call in report.model_calls if call.usage is not None]
    return Usage(**{name: sum(getattr(u, name) for u in usages) for name in Usage.model_fields})


async def test_continues_after_an_approval_keeping_steer_and_follow_up(
    harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("slow_lookup", {"term": "x"}, id="c0"),
            ToolCall("delete_order", {"order_id": "42"}, id="c1"),
        ),
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "43"}, id="c2")),
        Reply.text("Deleted both."),
        Reply.text("Follow-up answered."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            spec, "delete 42 and 43", scope=harness.scope, continue_after_events=EVERY_TURN
        )
        # The threshold passes while the approval is pending: the Run waits it out.
        await waiting_on(harness, run, "c1")
        await harness.client.steer(run, "steer-text", scope=harness.scope)
        await harness.client.steer(run, "follow-text", scope=harness.scope, mode="follow_up")
        await harness.client.approve(run, "c1", scope=harness.scope)
        # The next turn's approval is the continued execution's: reached by workflow id.
        await waiting_on(harness, run, "c2")
        state = await harness.client.status(run, scope=harness.scope)
        assert state.turn == 2
        await harness.client.approve(run, "c2", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        state = await harness.client.status(run, scope=harness.scope)
        streamed = [r.seq async for r in harness.client.stream(run, scope=harness.scope, after=3)]
        # psych report (the CLI) reads the chain through the same client.
        address = harness.env.client.service_client.config.target_host
        capsys.readouterr()
        cli = ["report", run.workflow_id, "--address", address, "--tenant", "acme", "--json"]
        status = await asyncio.to_thread(main, cli)
        cli_report = json.loads(capsys.readouterr().out)
        current = (
            await harness.client.temporal.get_workflow_handle(run.workflow_id).describe()
        ).run_id
    assert result.status is RunStatus.COMPLETED
    assert result.answer == "Follow-up answered."
    assert deleted == ["42", "43"]

    # One gapless seq across the chain; admitted once, continued at every boundary after.
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    assert state.last_seq == len(records)
    assert sum(isinstance(r, RunAdmitted) for r in records) == 1
    continued = [r for r in records if isinstance(r, RunContinued)]
    assert [c.execution for c in continued] == [2, 3, 4]
    assert len({c.previous_run_id for c in continued} | {current}) == 4
    assert isinstance(records[-1], RunSettled)
    # The first cut came only after the approved call (the boundary after it settled).
    c1_done = next(r for r in records if isinstance(r, ToolCallFinished) and r.call_id == "c1")
    assert continued[0].seq == c1_done.seq + 1
    assert all(c.history_length > 0 and c.history_size > 0 for c in continued)

    # The steer and the follow-up crossed the cut: none lost.
    assert [r.mode for r in records if isinstance(r, SteerReceived)] == ["steer", "follow_up"]
    second = harness.fake.requests[1]["messages"]
    assert any(m.get("content") == "steer-text" for m in second)
    assert {m.get("tool_call_id") for m in second if m["role"] == "tool"} >= {"c0", "c1"}
    fourth = harness.fake.requests[3]["messages"]
    assert fourth[-1]["content"] == "follow-text"

    assert streamed == list(range(4, len(records) + 1))
    assert status == 0
    assert [c["call_id"] for c in cli_report["tool_calls"]] == ["c0", "c1", "c2"]

    # The report shows every call of every execution, and totals that add up.
    assert [c.call_id for c in report.tool_calls] == ["c0", "c1", "c2"]
    assert [c.status for c in report.tool_calls] == ["ok", "ok", "ok"]
    assert len(report.model_calls) == 4
    assert report.totals is not None
    assert report.totals == state.totals == result.totals
    assert report.totals.turns == 4
    assert report.totals.model_calls == 4
    assert report.totals.tool_calls == 3
    assert report.totals.usage == usage_sum(report)

    # The deadline clock ran while slow_lookup ran (beside the pending approval) and was
    # carried on, never restarted.
    assert continued[0].deadline_used >= 0.5
    used = [c.deadline_used for c in continued]
    assert used == sorted(used)


@pytest.fixture
def threaded_model(harness: Harness) -> Iterator[FakeModel]:
    """The worker's fake model served from its own thread, for a responder that blocks: on
    the test's loop (``harness.fake``) it would stall the worker and the test alike."""
    with FakeModel(models=MODELS) as model:
        endpoint = Endpoint(base_url=model.base_url, api_key="test-key")
        harness.settings.endpoints = ModelEndpoints(default=endpoint)
        yield model


async def test_continues_after_a_subagent_then_aborts_by_workflow_id(
    harness: Harness, threaded_model: FakeModel
) -> None:
    deleted: list[str] = []
    orders_agent(harness, deleted)  # registers delete_order and the approval policy
    researcher = AgentBuilder("researcher", registry=harness.registry).model("fake-model").build()
    spec = (
        AgentBuilder("lead", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .subagent("researcher", "Finds facts and reports them back.", researcher)
        .build()
    )
    child_running = threading.Event()
    release = threading.Event()

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        if "delegate" not in tools:  # the researcher, held while the lead is past the bar
            child_running.set()
            release.wait(15)
            return Reply.text("x is 42")
        if messages[-1]["role"] == "user":
            return Reply.tool_calls(
                ToolCall("delegate", {"agent": "researcher", "task": "what is x?"}, id="d1")
            )
        return Reply.tool_calls(ToolCall("delete_order", {"order_id": "7"}, id="c9"))

    threaded_model.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(
            spec, "find x", scope=harness.scope, continue_after_events=EVERY_TURN
        )
        assert await asyncio.to_thread(child_running.wait, 15)
        # Past the threshold with a child running: the lead does not continue yet.
        held = await all_records(harness.client, run, harness.scope)
        assert not any(isinstance(r, RunContinued) for r in held)
        release.set()
        await waiting_on(harness, run, "c9")
        await harness.client.abort(run, scope=harness.scope, reason="enough")
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.ABORTED
    assert deleted == []
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    (continued,) = [r for r in records if isinstance(r, RunContinued)]
    delegated = next(r for r in records if isinstance(r, ToolCallFinished) and r.call_id == "d1")
    assert delegated.content == "x is 42"
    # The child finished in the first execution; the Run continued at the next boundary.
    assert continued.seq == delegated.seq + 1
    assert [c.call_id for c in report.tool_calls] == ["d1", "c9"]
    assert report.tool_calls[0].status == "ok"
    assert report.status is RunStatus.ABORTED


async def test_the_deadline_clock_runs_on_across_the_cut(harness: Harness) -> None:
    @harness.registry.register
    async def nap() -> str:
        """Take two seconds."""
        await asyncio.sleep(2.0)
        return "rested"

    spec = (
        AgentBuilder("napper", registry=harness.registry)
        .model("fake-model")
        .tool("nap")
        .limits(deadline_seconds=3.0)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("nap", {}, id="n1")),
        Reply.tool_calls(ToolCall("nap", {}, id="n2")),
        Reply.text("Rested twice."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            spec, "nap twice", scope=harness.scope, continue_after_events=EVERY_TURN
        )
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)
    # Two naps are 4 s of work against a 3 s deadline: a clock restarted at the cut would
    # have let the Run answer.
    (continued,) = [r for r in records if isinstance(r, RunContinued)]
    assert continued.deadline_used >= 2.0
    assert result.status is RunStatus.FORCE_SETTLED
    assert result.reason.startswith("deadline: 3 s")
    finished = [r.call_id for r in records if isinstance(r, ToolCallFinished)]
    assert finished == ["n1", "n2"]
