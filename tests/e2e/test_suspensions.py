"""Suspend, resume and interrupt end to end on a real dev server."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import (
    AccessDenied,
    AgentBuilder,
    AgentSpec,
    ExternalWait,
    PsychError,
    Refused,
    RunFailed,
    Scope,
)
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.console import format_report
from psych_runtime.workflows import (
    NextRunStarted,
    Resumed,
    RunHandle,
    RunSettled,
    RunState,
    RunStatus,
    RunSummary,
    SteerReceived,
    Suspended,
    ToolCallFinished,
    ToolCallStarted,
    Undelivered,
)

from ._waiting import eventually, is_suspended, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


async def suspended(harness: Harness, run: RunHandle) -> RunState:
    return await state_when(
        harness.client, run, harness.scope, is_suspended, what="the Run to suspend"
    )


def orders_agent(harness: Harness, deleted: list[str]) -> AgentSpec:
    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    harness.settings.policy = RulePolicy(destructive="ask")
    return (
        AgentBuilder("orders", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .build()
    )


async def test_approval_granted_runs_the_call(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"}, id="call-del")),
        Reply.text("Deleted."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 42", scope=harness.scope)
        state = await suspended(harness, run)
        (pending,) = state.pending
        assert pending.reason == "approval"
        assert pending.id == "call-del"
        assert pending.tool == "delete_order"
        assert json.loads(pending.arguments) == {"order_id": "42"}
        assert deleted == []  # nothing ran while waiting
        mine: list[RunSummary] = []

        async def visible() -> bool:  # visibility lags the Run's own state under load
            listed = await harness.client.list(scope=harness.scope, suspended=True)
            mine[:] = [s for s in listed if s.workflow_id == run.workflow_id]
            return bool(mine)

        await eventually(visible, what="the suspended Run to be listed")
        assert mine[0].suspension == "approval"
        assert mine[0].pending[0].expires_at == pending.expires_at

        approved = await harness.client.approve(run, "call-del", scope=harness.scope)
        assert approved.outcome == "approved"
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert deleted == ["42"]
    resumed = [r for r in records if isinstance(r, Resumed)]
    assert [(r.by, r.outcome) for r in resumed] == [("tester", "approved")]
    (waited,) = [r for r in records if isinstance(r, Suspended)]
    # The report shows the wait and its resume (it had neither).
    (wait,) = report.suspensions
    assert (wait.pending, wait.suspended_at) == (pending, waited.at)
    assert (wait.outcome, wait.by, wait.ended_at) == ("approved", "tester", resumed[0].at)
    assert wait.seconds == (resumed[0].at - waited.at).total_seconds() > 0


async def test_approval_denied_settles_the_call_rejected(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "7"}, id="c1")),
        Reply.text("I did not delete it."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 7", scope=harness.scope)
        await suspended(harness, run)
        await harness.client.deny(run, "c1", scope=harness.scope, note="keep it")
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert deleted == []
    assert report.tool_calls[0].status == "rejected"
    (wait,) = report.suspensions
    assert (wait.pending.id, wait.outcome, wait.by, wait.detail) == (
        "c1",
        "rejected",
        "tester",
        "keep it",
    )
    told = harness.fake.requests[1]["messages"][-1]["content"]
    assert "rejected" in told
    assert "keep it" in told


async def test_policy_denial_reaches_the_model_without_suspending(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.settings.policy = RulePolicy(tools={"delete_*": "deny"})
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "7"})), Reply.text("Refused.")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 7", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert deleted == []
    assert report.tool_calls[0].status == "denied"
    assert "policy does not allow" in harness.fake.requests[1]["messages"][-1]["content"]


async def test_duplicate_and_concurrent_approvals_make_one_decision(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "9"}, id="c9")), Reply.text("ok")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 9", scope=harness.scope)
        await suspended(harness, run)
        outcomes = await asyncio.gather(
            harness.client.approve(run, "c9", scope=harness.scope),
            harness.client.deny(run, "c9", scope=harness.scope),
            harness.client.approve(run, "c9", scope=harness.scope),
            return_exceptions=True,
        )
        decided = [o for o in outcomes if not isinstance(o, BaseException)]
        refused = [o for o in outcomes if isinstance(o, Refused)]
        assert len(decided) == 1
        assert len(refused) == 2
        await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
        with pytest.raises(Refused, match="settled completed"):
            await harness.client.approve(run, "c9", scope=harness.scope)
    assert len([r for r in records if isinstance(r, Resumed)]) == 1
    assert deleted == (["9"] if decided[0].outcome == "approved" else [])


async def test_a_request_sent_again_under_its_id_is_applied_once(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "7"}, id="c7")), Reply.text("ok")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 7", scope=harness.scope)
        await suspended(harness, run)
        for _ in range(2):  # a steer sent twice under one id is one message
            await harness.client.steer(run, "be brief", scope=harness.scope, idempotency_key="s-1")
        first = await harness.client.approve(run, "c7", scope=harness.scope, idempotency_key="a-1")
        # The same request again: its first outcome, not "already answered".
        again = await harness.client.approve(run, "c7", scope=harness.scope, idempotency_key="a-1")
        # The same key on another kind of update names another request.
        with pytest.raises(Refused, match="'c7' was already answered"):
            await harness.client.deny(run, "c7", scope=harness.scope, idempotency_key="s-1")
        # The same key for another request of the same kind is refused, not answered.
        with pytest.raises(PsychError, match="key 'a-1' already approved approval 'c7'"):
            await harness.client.deny(run, "c7", scope=harness.scope, idempotency_key="a-1")
        with pytest.raises(ValueError, match="1 to 256"):
            await harness.client.approve(run, "c7", scope=harness.scope, idempotency_key="")
        await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
        # Even once the Run has settled, Temporal keeps the outcome under its id.
        after = await harness.client.approve(run, "c7", scope=harness.scope, idempotency_key="a-1")
    assert again == first == after
    assert first.outcome == "approved"
    assert deleted == ["7"]
    assert len([r for r in records if isinstance(r, Resumed)]) == 1
    assert [r.message for r in records if isinstance(r, SteerReceived)] == ["be brief"]


async def test_two_calls_under_one_id_suspend_once_and_the_run_settles(
    harness: Harness,
) -> None:
    # Before: both waited under "dup"; the approval released one, the other waited unseen
    # (nothing pending, status running) until its expiry, which then failed the task.
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("delete_order", {"order_id": "1"}, id="dup"),
            ToolCall("delete_order", {"order_id": "2"}, id="dup"),
        ),
        Reply.text("Deleted order 1 only."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 1 and 2", scope=harness.scope)
        state = await suspended(harness, run)
        (pending,) = state.pending
        assert json.loads(pending.arguments) == {"order_id": "1"}
        await harness.client.approve(run, "dup", scope=harness.scope)
        async with asyncio.timeout(30):
            result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    assert deleted == ["1"]
    finished = [r for r in records if isinstance(r, ToolCallFinished)]
    assert sorted(r.status for r in finished) == ["error", "ok"]
    told = [m["content"] for m in harness.fake.requests[1]["messages"] if m["role"] == "tool"]
    assert "an earlier call of this turn has the same id 'dup'" in told[1]


async def test_resume_refusals_name_what_is_wrong(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "1"}, id="c1")), Reply.text("ok")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 1", scope=harness.scope)
        await suspended(harness, run)
        with pytest.raises(Refused, match="nothing pending with id 'nope'"):
            await harness.client.approve(run, "nope", scope=harness.scope)
        with pytest.raises(Refused, match="waits for approval, not question"):
            await harness.client.answer(run, "c1", "yes", scope=harness.scope)
        with pytest.raises(AccessDenied):
            await harness.client.approve(run, "c1", scope=Scope(tenant="globex"))
        await harness.client.approve(run, "c1", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)


async def test_a_second_answer_and_a_run_waiting_for_nothing_are_refused_as_such(
    harness: Harness,
) -> None:
    # Before: both were "nothing pending with id ..." (UnknownPending), as for an id no
    # item ever had.
    deleted: list[str] = []
    orders_agent(harness, deleted)
    counting = asyncio.Event()

    @harness.registry.register(read_only=True)
    async def count_orders() -> str:
        """Count the orders."""
        await counting.wait()
        return "2 orders"

    spec = (
        AgentBuilder("orders", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .tool("count_orders")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "1"}, id="c1")),
        Reply.tool_calls(ToolCall("count_orders", {}, id="n1")),
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "2"}, id="c2")),
        Reply.text("ok"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 1 and 2", scope=harness.scope)
        await suspended(harness, run)
        await harness.client.approve(run, "c1", scope=harness.scope)

        async def counting_started() -> bool:
            records = (await harness.client.records(run, scope=harness.scope)).records
            return any(isinstance(r, ToolCallStarted) and r.call_id == "n1" for r in records)

        await eventually(counting_started, what="count_orders to start")
        with pytest.raises(Refused, match="not suspended: it waits for nothing") as idle:
            await harness.client.approve(run, "c2", scope=harness.scope)
        assert idle.value.kind == "NotSuspended"
        counting.set()
        state = await suspended(harness, run)
        assert [item.id for item in state.pending] == ["c2"]
        with pytest.raises(Refused, match="'c1' was already answered") as again:
            await harness.client.deny(run, "c1", scope=harness.scope)
        assert again.value.kind == "AlreadyAnswered"
        with pytest.raises(Refused, match=r"nothing pending with id 'c3' \(pending: c2\)"):
            await harness.client.approve(run, "c3", scope=harness.scope)
        await harness.client.approve(run, "c2", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert deleted == ["1", "2"]


async def test_question_answered_and_not_offered_unless_allowed(harness: Harness) -> None:
    asking = AgentBuilder("asker").model("fake-model").suspension(may_ask_questions=True).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which order?"}, id="q1")),
        Reply.text("Order 42 it is."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(asking, "refund my order", scope=harness.scope)
        state = await suspended(harness, run)
        assert state.pending[0].reason == "question"
        assert state.pending[0].question == "Which order?"
        await harness.client.answer(run, "q1", "42", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.answer == "Order 42 it is."
    tools = [t["function"]["name"] for t in harness.fake.requests[0]["tools"]]
    assert "ask_question" in tools
    assert harness.fake.requests[1]["messages"][-1] == {
        "role": "tool",
        "content": "42",
        "tool_call_id": "q1",
    }

    silent = AgentBuilder("silent").model("fake-model").build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "?"})), Reply.text("fine")
    )
    async with harness.worker():
        run = await harness.client.dispatch(silent, "hi", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    offered = [t["function"]["name"] for t in harness.fake.requests[2].get("tools", [])]
    assert "ask_question" not in offered
    assert "unknown tool 'ask_question'" in harness.fake.requests[3]["messages"][-1]["content"]


async def test_external_wait_completed_by_token(harness: Harness) -> None:
    @harness.registry.register
    def request_payment(order_id: str) -> ExternalWait:
        """Ask the payment provider to charge an order; it calls back when done."""
        return ExternalWait(token=f"pay-{order_id}", message="waiting for the payment webhook")

    spec = (
        AgentBuilder("payer", registry=harness.registry)
        .model("fake-model")
        .tool("request_payment")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("request_payment", {"order_id": "42"}, id="p1")),
        Reply.text("Paid."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "charge 42", scope=harness.scope)
        state = await suspended(harness, run)
        assert state.pending[0].reason == "external"
        assert state.pending[0].id == "pay-42"
        assert state.pending[0].question == "waiting for the payment webhook"
        done = await harness.client.complete(
            run, "pay-42", {"paid": True, "amount": 19.9}, scope=harness.scope
        )
        assert done.outcome == "completed"
        result = await harness.client.result(run, scope=harness.scope)
    assert result.answer == "Paid."
    told = harness.fake.requests[1]["messages"][-1]
    assert told["tool_call_id"] == "p1"
    assert json.loads(told["content"]) == {"paid": True, "amount": 19.9}


async def test_abort_cancels_interruptible_and_waits_for_the_rest(harness: Harness) -> None:
    cancelled: list[str] = []
    finished: list[str] = []
    started = asyncio.Event()

    @harness.registry.register
    async def slow_search(query: str) -> str:
        """Search slowly."""
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(query)
            raise
        return "found"

    @harness.registry.register
    async def slow_write(record: str) -> str:
        """Write a record, which must not be cut off halfway."""
        await asyncio.sleep(1.5)
        finished.append(record)
        return "written"

    spec = (
        AgentBuilder("worker", registry=harness.registry)
        .model("fake-model")
        .tool("slow_search")
        .tool("slow_write", interruptible=False)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("slow_search", {"query": "q"}, id="s1"),
            ToolCall("slow_write", {"record": "r"}, id="w1"),
        )
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 10)
        await harness.client.abort(run, scope=harness.scope, reason="user pressed stop")
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)

        async def search_was_cancelled() -> bool:
            return cancelled == ["q"]

        await eventually(search_was_cancelled, what="the search's server-side cancellation")
    assert result.status is RunStatus.ABORTED
    assert "user pressed stop" in result.reason
    statuses = {c.tool: (c.status, c.result) for c in report.tool_calls}
    assert statuses["slow_search"][0] == "aborted"
    assert statuses["slow_write"] == ("ok", "written")
    assert finished == ["r"]
    assert len(harness.fake.requests) == 1  # no model call after the abort


async def test_abort_while_suspended_settles_aborted(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(Reply.tool_calls(ToolCall("delete_order", {"order_id": "3"})))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 3", scope=harness.scope)
        await suspended(harness, run)
        await harness.client.abort(run, scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        with pytest.raises(Refused, match="settled aborted"):
            await harness.client.abort(run, scope=harness.scope)
    assert result.status is RunStatus.ABORTED
    assert deleted == []


def gated_tool(harness: Harness, gate: asyncio.Event, started: asyncio.Event) -> None:
    @harness.registry.register
    async def fetch(item: str) -> str:
        """Fetch an item."""
        started.set()
        await gate.wait()
        return f"{item}: 12 USD"


async def test_steer_and_follow_up_change_what_the_model_sees(harness: Harness) -> None:
    gate, started = asyncio.Event(), asyncio.Event()
    gated_tool(harness, gate, started)
    spec = AgentBuilder("shop", registry=harness.registry).model("fake-model").tool("fetch").build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("fetch", {"item": "book"}, id="f1")),
        Reply.text("The book is 11 EUR."),
        Reply.text("Shipping is free."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "price of the book?", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 10)
        await harness.client.steer(run, "answer in EUR", scope=harness.scope)
        await harness.client.steer(
            run, "and what about shipping?", scope=harness.scope, mode="follow_up"
        )
        gate.set()
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.answer == "Shipping is free."
    second = harness.fake.requests[1]["messages"]
    assert [m["role"] for m in second[-2:]] == ["tool", "user"]
    assert second[-1]["content"] == "answer in EUR"
    third = harness.fake.requests[2]["messages"]
    assert third[-1] == {"role": "user", "content": "and what about shipping?"}
    steered = [(r.mode, r.message) for r in records if isinstance(r, SteerReceived)]
    assert steered == [("steer", "answer in EUR"), ("follow_up", "and what about shipping?")]


async def test_input_queued_when_a_limit_stops_the_run_is_listed_undelivered(
    harness: Harness,
) -> None:
    # The last allowed turn's tool runs while a follow-up and a steer come: the Run stops
    # at max_turns and no model reads them. Before, they were recorded received and then
    # nothing said they were never delivered.
    gate, started = asyncio.Event(), asyncio.Event()
    gated_tool(harness, gate, started)
    spec = (
        AgentBuilder("shop", registry=harness.registry)
        .model("fake-model")
        .tool("fetch")
        .limits(max_turns=1)
        .build()
    )
    harness.fake.enqueue(Reply.tool_calls(ToolCall("fetch", {"item": "book"})))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "price of the book?", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 10)
        await harness.client.steer(run, "and shipping?", scope=harness.scope, mode="follow_up")
        await harness.client.steer(run, "answer in EUR", scope=harness.scope)
        gate.set()
        result = await harness.client.result(run, scope=harness.scope)
        settled = (await harness.client.records(run, scope=harness.scope)).records[-1]
        report = await harness.client.report(run, scope=harness.scope)
    expected = (
        Undelivered(mode="steer", message="answer in EUR"),
        Undelivered(mode="follow_up", message="and shipping?"),
    )
    assert result.status is RunStatus.STOPPED
    assert result.reason == (
        "max_turns: 1 turns taken; 2 messages sent during the Run not delivered "
        "(run_settled.undelivered)"
    )
    assert isinstance(settled, RunSettled)
    assert settled.undelivered == expected
    assert report.undelivered == expected
    assert "\nundelivered:  follow_up: and shipping?\n" in format_report(report)
    assert len(harness.fake.requests) == 1


async def test_the_last_allowed_turn_keeps_its_answer_when_a_follow_up_comes(
    harness: Harness,
) -> None:
    # The only allowed turn answers while a follow-up arrives: no turn is left for it, so
    # the Run stops with that answer and lists the follow-up. Before, the answer was lost.
    spec = (
        AgentBuilder("shop", registry=harness.registry)
        .model("fake-model")
        .limits(max_turns=1)
        .build()
    )
    harness.fake.enqueue(Reply.text("The book is 11 EUR.", chunk_size=4, chunk_seconds=0.3))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "price of the book?", scope=harness.scope)
        for _ in range(200):
            if harness.fake.requests:
                break
            await asyncio.sleep(0.05)
        await harness.client.steer(run, "and shipping?", scope=harness.scope, mode="follow_up")
        result = await harness.client.result(run, scope=harness.scope)
        settled = (await harness.client.records(run, scope=harness.scope)).records[-1]
    assert result.status is RunStatus.STOPPED
    assert result.answer == "The book is 11 EUR."
    assert result.reason == (
        "max_turns: 1 turns taken; 1 message sent during the Run not delivered "
        "(run_settled.undelivered)"
    )
    assert isinstance(settled, RunSettled)
    assert settled.answer == "The book is 11 EUR."
    assert settled.undelivered == (Undelivered(mode="follow_up", message="and shipping?"),)
    assert len(harness.fake.requests) == 1


async def test_a_steer_sent_into_a_call_that_never_answers_is_listed_undelivered(
    harness: Harness,
) -> None:
    # The steer is taken into the next model call, which fails (400): no model answered
    # it, so the settled Run lists it. One that a call answered is delivered, not listed.
    gate, started = asyncio.Event(), asyncio.Event()
    gated_tool(harness, gate, started)
    spec = AgentBuilder("shop", registry=harness.registry).model("fake-model").tool("fetch").build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("fetch", {"item": "book"})),
        Reply.error(400, message="bad request"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "price of the book?", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 10)
        await harness.client.steer(run, "answer in EUR", scope=harness.scope)
        gate.set()
        with pytest.raises(RunFailed, match="model_error") as failed:
            await harness.client.result(run, scope=harness.scope)
        settled = (await harness.client.records(run, scope=harness.scope)).records[-1]
    assert str(failed.value).endswith(
        "1 message sent during the Run not delivered (run_settled.undelivered)"
    )
    assert isinstance(settled, RunSettled)
    assert settled.undelivered == (Undelivered(mode="steer", message="answer in EUR"),)
    assert harness.fake.requests[1]["messages"][-1]["content"] == "answer in EUR"


async def test_next_run_starts_a_new_run_with_the_message(harness: Harness) -> None:
    gate, started = asyncio.Event(), asyncio.Event()
    gated_tool(harness, gate, started)
    spec = (
        AgentBuilder("shop2", registry=harness.registry).model("fake-model").tool("fetch").build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("fetch", {"item": "pen"})),
        Reply.text("The pen is 12 USD."),
        Reply.text("Your cart is empty."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "price of the pen?", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 10)
        await harness.client.steer(run, "what is in my cart?", scope=harness.scope, mode="next_run")
        gate.set()
        first = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
        (started_next,) = [r for r in records if isinstance(r, NextRunStarted)]
        second = await harness.client.result(started_next.workflow_id, scope=harness.scope)
        report = await harness.client.report(started_next.workflow_id, scope=harness.scope)
    assert first.answer == "The pen is 12 USD."
    assert second.answer == "Your cart is empty."
    assert report.input == ("what is in my cart?",)
    assert report.version_hash == run.version_hash


async def test_delegate_runs_a_subagent_as_a_child_run(harness: Harness) -> None:
    @harness.registry.register
    def lookup(term: str) -> str:
        """Look a term up."""
        return f"{term} = 42"

    @harness.registry.register
    def wipe() -> str:
        """Wipe everything (only the researcher asks for it; the lead may not grant it)."""
        return "wiped"

    researcher = (
        AgentBuilder("researcher", registry=harness.registry)
        .model("fake-model")
        .tool("lookup")
        .tool("wipe")
        .build()
    )
    spec = (
        AgentBuilder("lead", registry=harness.registry)
        .model("fake-model")
        .tool("lookup")
        .subagent("researcher", "Finds facts with the lookup tool.", researcher)
        .build()
    )
    gate = asyncio.Event()

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        if "delegate" in tools:  # the lead
            if messages[-1]["role"] == "user":
                return Reply.tool_calls(
                    ToolCall("delegate", {"agent": "researcher", "task": "what is x?"})
                )
            return Reply.text(f"lead: {messages[-1]['content']}")
        if messages[-1]["role"] == "user":  # the researcher
            return Reply.tool_calls(ToolCall("lookup", {"term": "x"}))
        return Reply.text(messages[-1]["content"]) if gate.is_set() else Reply.error(503)

    harness.fake.responder = respond
    async with harness.worker():
        run = await harness.client.dispatch(spec, "find x", scope=harness.scope)
        state = await suspended(harness, run)
        (pending,) = state.pending
        assert pending.reason == "children"
        assert pending.tool == "delegate"
        child_state = await harness.client.status(pending.id, scope=harness.scope)
        assert child_state.agent == "researcher"
        gate.set()
        result = await harness.client.result(run, scope=harness.scope)
        child = await harness.client.report(pending.id, scope=harness.scope)
    assert result.answer == "lead: x = 42"
    assert child.input == ("what is x?",)
    assert [c.tool for c in child.tool_calls] == ["lookup"]
    assert child.status is RunStatus.COMPLETED
    # The child's tools are its request narrowed to the parent's: no wipe.
    child_calls = [r for r in harness.fake.requests if "delegate" not in str(r.get("tools"))]
    offered = {t["function"]["name"] for t in child_calls[0]["tools"]}
    assert offered == {"lookup", "read_tool_output"}


async def test_list_suspended_shows_every_run_even_one_no_worker_answers_for(
    harness: Harness,
) -> None:
    # A suspended Run whose workers are all gone cannot answer the state query; listing
    # must still show it (saying why its items are missing) and every other Run.
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "5"}, id="c5")), Reply.text("ok")
    )
    orphan = await harness.env.client.start_workflow(
        "AgentRun",
        id=f"psych-acme-orphan{harness.settings.task_queue}",
        task_queue=f"nobody-{harness.settings.task_queue}",
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(SearchAttributeKey.for_keyword("PsychTenant"), "acme"),
                SearchAttributePair(SearchAttributeKey.for_keyword("PsychStatus"), "suspended"),
            ]
        ),
    )
    try:
        async with harness.worker():
            run = await harness.client.dispatch(spec, "delete 5", scope=harness.scope)
            await suspended(harness, run)

            async def both_listed() -> bool:
                listed = await harness.client.list(scope=harness.scope, suspended=True)
                ids = {s.workflow_id for s in listed}
                return {run.workflow_id, orphan.id} <= ids

            await eventually(both_listed, what="both Runs to be listed")
            listed = {
                s.workflow_id: s
                for s in await harness.client.list(scope=harness.scope, suspended=True)
            }
            mine, lost = listed[run.workflow_id], listed[orphan.id]
            assert [item.id for item in mine.pending] == ["c5"] and mine.unreadable is None
            assert lost.pending == () and lost.unreadable is not None
            assert lost.unreadable.startswith("no worker ")
            await harness.client.approve(run, "c5", scope=harness.scope)
            await harness.client.result(run, scope=harness.scope)
    finally:
        await orphan.terminate("test over")
    assert deleted == ["5"]


async def test_a_listing_shows_no_run_whose_id_names_another_tenant(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # What a visibility store matching the tenant loosely would answer: a Run of globex's
    # whose tenant attribute says acme. Listing trusts the workflow id, not the attribute,
    # and the foreign Run does not take the place of acme's own.
    def start(workflow_id: str) -> Any:
        return harness.env.client.start_workflow(
            "AgentRun",
            id=workflow_id,
            task_queue=f"nobody-{harness.settings.task_queue}",
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(SearchAttributeKey.for_keyword("PsychTenant"), "acme")]
            ),
        )

    own = await start(f"psych-acme-own{harness.settings.task_queue}")
    foreign = await start(f"psych-globex-x{harness.settings.task_queue}")  # the newer
    try:

        async def visible() -> bool:
            query = f"PsychTenant = 'acme' AND WorkflowId IN ('{own.id}', '{foreign.id}')"
            return len([e async for e in harness.env.client.list_workflows(query)]) == 2

        await eventually(visible, what="both Runs in visibility")
        with caplog.at_level(logging.WARNING, logger="psych_runtime.workflows.client._listing"):
            listed = await harness.client.list(scope=harness.scope)
        first = await harness.client.list(scope=harness.scope, limit=1)
    finally:
        for handle in (own, foreign):
            await handle.terminate("test over")
    assert foreign.id not in {s.workflow_id for s in listed}
    assert [s.workflow_id for s in first] == [own.id]
    # The operator is told the store matches the tenant loosely.
    assert "answered 1 Run(s) of other tenants to a listing of tenant 'acme'" in caplog.text
