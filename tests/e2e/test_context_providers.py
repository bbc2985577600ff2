"""Pre-turn context providers end to end on a real dev server (issue 11 item 5).

Providers run inside the model activity: within the budget, the lowest priority dropped,
a failing one (its own ``CancelledError`` too) and a slow one skipped and recorded, the
block in that call's system prompt only, never in the conversation, and recorded by
reference.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json

import pytest

from psych_runtime.activities import (
    ContextRequest,
    ContextSettings,
    ContextSource,
    estimate_tokens,
)
from psych_runtime.activities.contract import MODEL_CALL
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import follow_run, format_report
from psych_runtime.workers.console import print_transcript, read_transcript
from psych_runtime.workflows import ContextProvided, RunStatus

from .conftest import Harness

pytestmark = pytest.mark.e2e

CUSTOMER = "Customer record: Ada Lovelace, plan gold, 3 open orders."
POLICY = "Refund policy: " + "refunds within 30 days of delivery are always allowed. " * 4


def lookup_order(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: The order's id.
    """
    return f"order {order_id}: delivered"


async def test_providers_fit_the_budget_and_never_enter_the_conversation(
    harness: Harness,
) -> None:
    asked: list[ContextRequest] = []

    async def customer(request: ContextRequest) -> str | None:
        asked.append(request)
        return CUSTOMER if request.turn == 1 else None

    async def policy(request: ContextRequest) -> str:
        return POLICY

    async def big(request: ContextRequest) -> str:
        return "B" * 4000

    async def broken(request: ContextRequest) -> str:
        raise RuntimeError("crm is down")

    async def slow(request: ContextRequest) -> str:
        await asyncio.sleep(10)
        return "too late"

    harness.settings = dataclasses.replace(
        harness.settings,
        context=ContextSettings(
            sources=(
                ContextSource("big", big, priority=1),
                ContextSource("customer", customer, priority=10),
                ContextSource("policy", policy, priority=5, max_tokens=20),
                ContextSource("broken", broken, priority=8),
                ContextSource("slow", slow, priority=9, timeout_seconds=0.3),
            ),
            budget_tokens=200,
        ),
    )
    harness.registry.register(lookup_order)
    spec = (
        AgentBuilder("support", registry=harness.registry)
        .instructions("Help with orders.")
        .model("fake-model")
        .tool("lookup_order")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
        Reply.text("Order 42 was delivered."),
    )
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(spec, "Where is order 42?", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        report = await client.report(run, scope=harness.scope)
        records = [r async for r in client.stream(run, scope=harness.scope)]
        printed = io.StringIO()
        await follow_run(client, run, scope=harness.scope, out=printed)
        transcript = await read_transcript(client, run, scope=harness.scope)

    assert result.status is RunStatus.COMPLETED  # failing providers never fail the call

    # The transcript says which blocks each call's system prompt held (their text is
    # stored by reference), before that call's answer; the chat form leaves them out.
    assert [(m.role, m.origin, m.turn) for m in transcript.messages] == [
        ("system", "system", 0),
        ("user", "input", 1),
        ("system", "context", 1),
        ("assistant", "model", 1),
        ("tool", "tool", 2),
        ("system", "context", 2),
        ("assistant", "model", 2),
    ]
    turn1 = transcript.messages[2]
    assert turn1.content == (
        f"customer: {estimate_tokens(CUSTOMER)} tokens\npolicy: 20 tokens (cut to its max_tokens)"
    )
    assert [m["role"] for m in transcript.chat_messages()] == [
        "system", "user", "assistant", "tool", "assistant",
    ]  # fmt: skip
    shown = io.StringIO()
    print_transcript(transcript, shown, markdown=False)
    assert (
        "── system (per-turn context of turn 1) ──\n(turn 1's system prompt also held "
        "these context providers' blocks, for that call only; their text is stored by "
        "reference, not in the records)\ncustomer:"
    ) in shown.getvalue()

    # The first call's system prompt: the Run's own, then the kept blocks by priority.
    first, second = harness.fake.requests
    cut = POLICY[: 20 * 4].strip()
    system = first["messages"][0]["content"]
    assert system == f"Help with orders.\n\n{CUSTOMER}\n\n{cut}"
    assert "BBBB" not in json.dumps(first)
    # The next call: the customer block is gone (its provider gave nothing), and no
    # message of the conversation holds it.
    assert second["messages"][0]["content"] == f"Help with orders.\n\n{cut}"
    assert CUSTOMER not in json.dumps(second["messages"][1:])
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]

    # Each provider was asked with the Run's scope, id, turn and the call's new messages.
    assert [(r.run_id, r.turn, r.scope.tenant) for r in asked] == [
        (run.run_id, 1, "acme"),
        (run.run_id, 2, "acme"),
    ]
    assert [m.content for m in asked[0].messages] == ["Where is order 42?"]
    assert [m.role for m in asked[1].messages] == ["tool"]
    assert "delivered" in asked[1].messages[0].content

    provided = [r for r in records if isinstance(r, ContextProvided)]
    assert [p.turn for p in provided] == [1, 2]
    one = provided[0]
    assert [(s.provider, s.tokens, s.truncated) for s in one.shown] == [
        ("customer", estimate_tokens(CUSTOMER), False),
        ("policy", estimate_tokens(cut), True),
    ]
    assert sum(s.tokens for s in one.shown) <= one.budget_tokens == 200
    skipped = {s.provider: s for s in one.skipped}
    assert {name: s.reason for name, s in skipped.items()} == {
        "broken": "failed",
        "slow": "timeout",
        "big": "over_budget",
    }
    assert "RuntimeError: crm is down" in skipped["broken"].detail
    assert skipped["big"].tokens == 1000
    # Shown by reference: each ref holds the block as the model saw it.
    blobs = harness.settings.blobs
    assert [(await blobs.get(s.ref)).decode() for s in one.shown] == [CUSTOMER, cut]
    assert [s.provider for s in provided[1].shown] == ["policy"]

    assert [c.turn for c in report.context] == [1, 2]
    assert report.context[0].shown == one.shown
    text = format_report(report)
    assert "context:      3 block(s) over 2 call(s), 6 skipped" in text
    assert "turn 1: broken failed: RuntimeError: crm is down" in text
    line = f"context: customer {estimate_tokens(CUSTOMER)} tokens, policy 20 tokens (cut) of 200"
    assert line + "; skipped broken failed, slow timeout, big over budget" in printed.getvalue()


async def _nothing(request: ContextRequest) -> str | None:
    return None


@pytest.mark.parametrize(
    "sources",
    [(), (ContextSource("quiet", _nothing), ContextSource("empty", _nothing))],
    ids=["no providers", "providers giving nothing"],
)
async def test_without_context_the_result_and_the_records_carry_none(
    harness: Harness, sources: tuple[ContextSource, ...]
) -> None:
    harness.settings = dataclasses.replace(harness.settings, context=ContextSettings(sources))
    harness.fake.enqueue(Reply.text("hi"))
    async with harness.worker():
        run = await harness.client.dispatch(
            AgentBuilder("plain").model("fake-model").build(), "hi", scope=harness.scope
        )
        await harness.client.result(run, scope=harness.scope)
        records = [r async for r in harness.client.stream(run, scope=harness.scope)]
    assert not [r for r in records if isinstance(r, ContextProvided)]
    # The model call's result as the history holds it: no context field at all.
    history = await harness.env.client.get_workflow_handle(run.workflow_id).fetch_history()
    model_calls = {
        event.event_id
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
        and event.activity_task_scheduled_event_attributes.activity_type.name == MODEL_CALL
    }
    calls = [
        json.loads(event.activity_task_completed_event_attributes.result.payloads[0].data)
        for event in history.events
        if event.HasField("activity_task_completed_event_attributes")
        and event.activity_task_completed_event_attributes.scheduled_event_id in model_calls
    ]
    assert len(calls) == 1
    assert calls[0]["text"] == "hi" and "context" not in calls[0]


async def test_a_providers_own_cancelled_error_skips_it_not_the_call(harness: Harness) -> None:
    # A provider awaiting a task someone cancelled raises CancelledError, which is no
    # Exception: it failed the model call as transient, retried until the budget ran out.
    async def crm(request: ContextRequest) -> str:
        lookup = asyncio.ensure_future(asyncio.Event().wait())
        lookup.cancel()
        await lookup
        return "never"

    harness.settings = dataclasses.replace(
        harness.settings, context=ContextSettings((ContextSource("crm", crm),))
    )
    harness.fake.enqueue(Reply.text("hi"))
    async with harness.worker():
        run = await harness.client.dispatch(
            AgentBuilder("plain").model("fake-model").build(), "hi", scope=harness.scope
        )
        result = await harness.client.result(run, scope=harness.scope)
        records = [r async for r in harness.client.stream(run, scope=harness.scope)]
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "hi" and result.totals.model_calls == 1
    (provided,) = [r for r in records if isinstance(r, ContextProvided)]
    assert [(s.provider, s.reason) for s in provided.skipped] == [("crm", "failed")]
