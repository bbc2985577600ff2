"""An expiry settles the Run at once (patch ``psych-expiry-ends-waits``), also when another
call of its turn was still executing at the expiry and suspends only after it."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, ExternalWait, Refused
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, SuspensionExpired

from ._waiting import all_records, eventually, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


async def test_an_expiry_ends_a_wait_begun_after_it_by_a_call_of_its_turn(
    harness: Harness,
) -> None:
    released = asyncio.Event()

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        return f"order {order_id} deleted"

    @harness.registry.register
    async def request_payment(order_id: str) -> ExternalWait:
        """Ask the payment provider to charge an order; it calls back when done."""
        await released.wait()
        return ExternalWait(token=f"pay-{order_id}", message="waiting for the webhook")

    harness.settings = dataclasses.replace(harness.settings, policy=RulePolicy(destructive="ask"))
    spec = (
        AgentBuilder("orders", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .tool("request_payment")
        .suspension(approval_expires_seconds=1, external_expires_seconds=3600)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("delete_order", {"order_id": "1"}, id="c-del"),
            ToolCall("request_payment", {"order_id": "2"}, id="c-pay"),
        ),
        Reply.text("never asked for"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 1, charge 2", scope=harness.scope)

        async def expired() -> bool:
            records = await all_records(harness.client, run, harness.scope)
            return any(isinstance(r, SuspensionExpired) for r in records)

        # The approval expires while request_payment still runs (no other wait is held).
        await eventually(expired, what="the approval's expiry")
        released.set()
        # The payment call now returns its wait: the Run, ABANDONED by the expiry, must not
        # hold it (for external_expires_seconds) but settle.
        state = await state_when(
            harness.client,
            run,
            harness.scope,
            lambda s: s.status.terminal or any(p.id == "pay-2" for p in s.pending),
            what="the Run to settle or to wait on pay-2",
        )
    assert state.status is RunStatus.ABANDONED, (state.status, state.pending)
    assert state.reason is not None
    assert state.reason.startswith("suspension_expired: approval c-del was not answered")


async def test_answering_a_wait_an_expiry_ended_says_it_expired(harness: Harness) -> None:
    """The approval expires while a question of the same turn waits and another call still
    runs: the expiry ends the question's wait, but the Run settles only once the call is
    done. An answer to the question meanwhile is refused as expired, naming the wait whose
    expiry ended it (before: "nothing pending with id 'q1'")."""
    released = asyncio.Event()

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        return f"order {order_id} deleted"

    @harness.registry.register
    async def export_orders() -> str:
        """Export every order (slow)."""
        await released.wait()
        return "exported"

    harness.settings = dataclasses.replace(harness.settings, policy=RulePolicy(destructive="ask"))
    spec = (
        AgentBuilder("orders", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .tool("export_orders")
        .suspension(
            may_ask_questions=True, approval_expires_seconds=1, question_expires_seconds=3600
        )
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(
            ToolCall("delete_order", {"order_id": "1"}, id="c-del"),
            ToolCall("ask_question", {"question": "Which export format?"}, id="q1"),
            ToolCall("export_orders", {}, id="c-exp"),
        ),
        Reply.text("never asked for"),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 1, export all", scope=harness.scope)

        async def expired() -> bool:
            records = await all_records(harness.client, run, harness.scope)
            return any(isinstance(r, SuspensionExpired) for r in records)

        await eventually(expired, what="the approval's expiry")
        with pytest.raises(Refused) as refused:
            await harness.client.answer(run, "q1", "CSV", scope=harness.scope)
        state = await harness.client.status(run, scope=harness.scope)
        released.set()
        result = await harness.client.result(run, scope=harness.scope)
    assert not state.status.terminal, state.status  # the answer came before the Run settled
    assert refused.value.kind == "Expired", refused.value
    assert "'q1' ended unanswered: approval c-del expired" in str(refused.value)
    assert result.status is RunStatus.ABANDONED
