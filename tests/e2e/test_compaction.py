"""Compaction end to end on a real dev server: the trigger, the summary the model sees
next, the cut moving forward, a failing summariser, the budgets counting it, and the
summariser's own system prompt (no per-turn context)."""

from __future__ import annotations

import dataclasses
import io
import time
from typing import Any

import pytest

from psych_runtime.activities import (
    SUMMARISER_PROMPT,
    ContextRequest,
    ContextSettings,
    ContextSource,
)
from psych_runtime.activities.blobs import LocalBlobStore, blob_key
from psych_runtime.activities.blobs._store import _stored_form
from psych_runtime.activities.contract import ChatMessage
from psych_runtime.activities.model import ModelPrice, TablePricing
from psych_runtime.activities.model._compaction import CUT_OFF_NOTE, SUMMARY_HEADER
from psych_runtime.specs import AgentBuilder, AgentSpec, WorkflowBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.testing import Usage as FakeUsage
from psych_runtime.workers.console import format_record, print_transcript, read_transcript
from psych_runtime.workflows import (
    CompactionApplied,
    CompactionFailed,
    ContextProvided,
    ModelCallFinished,
    RunStatus,
    ToolCallFinished,
)

from ._waiting import eventually
from .conftest import Harness

pytestmark = pytest.mark.e2e

SUMMARISER = "fake-other"
BIG = FakeUsage(input_tokens=300, output_tokens=5)
SMALL = FakeUsage(input_tokens=10, output_tokens=5)


def agent(harness: Harness, summariser: str | None = SUMMARISER, **limits: int) -> AgentSpec:
    @harness.registry.register
    def lookup_order(order_id: str) -> str:
        """Look up an order.

        Args:
            order_id: The order's id.
        """
        return f"order {order_id}: shipped"

    builder = (
        AgentBuilder("compactor", registry=harness.registry)
        .instructions("Help with orders.")
        .model("fake-model")
        .tool(lookup_order)
        .compaction(
            100,
            keep_recent_turns=1,
            model=summariser,
            max_summary_tokens=64,
            summary_instructions="Keep every order id.",
        )
    )
    if limits:
        builder = builder.limits(**limits)
    return builder.build()


def lookup(order_id: str, usage: FakeUsage) -> Reply:
    return Reply.tool_calls(ToolCall("lookup_order", {"order_id": order_id}), usage=usage)


def texts(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in request["messages"])


async def test_compaction_replaces_older_turns_and_the_cut_moves_forward(
    harness: Harness,
) -> None:
    harness.settings.pricing = TablePricing(
        {
            "fake-model": ModelPrice(input=1.0, output=1.0),
            SUMMARISER: ModelPrice(input=10.0, output=10.0),
        }
    )
    fake = harness.fake
    fake.enqueue(
        lookup("41", SMALL),  # turn 1: under the trigger
        lookup("42", BIG),  # turn 2: over it, so turn 1 is summarised before turn 3
        lookup("43", BIG),  # turn 3: over it again, so the cut moves to turn 3
        Reply.text("All three orders shipped.", usage=BIG),
    )
    fake.enqueue(
        Reply.text("Asked about orders; 41 shipped.", usage=FakeUsage(input_tokens=7)),
        Reply.text("Orders 41 and 42 shipped.", usage=FakeUsage(input_tokens=8)),
        model=SUMMARISER,
    )
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(agent(harness), "Status of my orders?", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        records = (await client.records(run, scope=harness.scope)).records
        report = await client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "All three orders shipped."

    applied = [r for r in records if isinstance(r, CompactionApplied)]
    assert [(r.turn, r.cut_turn) for r in applied] == [(2, 2), (3, 3)]
    # Turn 1 (input, call, result); then the first summary and turn 2 (call, result).
    assert [r.messages_replaced for r in applied] == [3, 3]
    assert [r.summary_preview for r in applied] == [
        "Asked about orders; 41 shipped.",
        "Orders 41 and 42 shipped.",
    ]
    assert [r.model for r in applied] == [SUMMARISER, SUMMARISER]
    assert applied[0].usage.input_tokens == 7 and applied[0].cost is not None
    assert report.compactions == tuple(applied)
    line = format_record(applied[0])
    assert line.startswith("  compacted before turn 2 with fake-other: 3 messages summarised")

    # Requests in order: turn 1, turn 2, summariser, turn 3, summariser, turn 4.
    models = [r["model"] for r in fake.requests]
    assert models == [
        "fake-model",
        "fake-model",
        SUMMARISER,
        "fake-model",
        SUMMARISER,
        "fake-model",
    ]
    first_summary, turn3, second_summary, turn4 = fake.requests[2:]
    assert first_summary["messages"][0]["content"] == (
        SUMMARISER_PROMPT + "\n\nKeep every order id."
    )
    assert first_summary["max_completion_tokens"] == 64
    assert "tools" not in first_summary
    assert "Status of my orders?" in texts(first_summary)
    # The model's next call sees the summary and the kept turn, not the replaced messages.
    assert turn3["messages"][1] == {
        "role": "user",
        "content": SUMMARY_HEADER + "Asked about orders; 41 shipped.",
    }
    assert "Status of my orders?" not in texts(turn3)
    assert "order 41: shipped" not in texts(turn3)
    assert "order 42: shipped" in texts(turn3)
    assert [m["role"] for m in turn3["messages"]] == ["system", "user", "assistant", "tool"]
    # The second summary covers the first one and turn 2; the cut never went back.
    assert "Asked about orders; 41 shipped." in texts(second_summary)
    assert "order 42: shipped" in texts(second_summary)
    assert turn4["messages"][1]["content"] == SUMMARY_HEADER + "Orders 41 and 42 shipped."
    assert "Asked about orders" not in texts(turn4)
    assert "order 42: shipped" not in texts(turn4)
    assert "order 43: shipped" in texts(turn4)

    # Replaced records stay in the log.
    finished = [r for r in records if isinstance(r, ModelCallFinished)]
    assert [r.turn for r in finished] == [1, 2, 3, 4]
    # The budgets count both summariser calls: 4 + 2 model calls, plus 3 tool calls.
    totals = result.totals
    assert (totals.model_calls, totals.tool_calls, totals.steps) == (6, 3, 9)
    assert totals.usage.input_tokens == 10 + 300 * 3 + 7 + 8
    assert totals.cost is not None
    summariser_cost = sum(r.cost or 0.0 for r in applied)
    model_cost = sum(r.cost or 0.0 for r in finished)
    assert totals.cost == pytest.approx(model_cost + summariser_cost)
    assert len(report.model_calls) == 4


async def test_the_transcript_shows_where_a_summary_replaced_the_conversation(
    harness: Harness,
) -> None:
    # The transcript is the conversation as the model saw it: from the compaction on, the
    # model saw the summary in place of the older turns, which the transcript must say
    # there, not show as if the model still saw them.
    fake = harness.fake
    fake.enqueue(
        lookup("41", SMALL),  # turn 1: under the trigger
        lookup("42", BIG),  # turn 2: over it, so turn 1 is summarised before turn 3
        Reply.text("Both orders shipped.", usage=SMALL),
    )
    fake.enqueue(Reply.text("Asked about orders; 41 shipped."), model=SUMMARISER)
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(agent(harness), "Status of my orders?", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        records = (await client.records(run, scope=harness.scope)).records
        transcript = await read_transcript(client, run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    (applied,) = [r for r in records if isinstance(r, CompactionApplied)]
    assert [(m.role, m.origin, m.turn) for m in transcript.messages] == [
        ("system", "system", 0),
        ("user", "input", 1),
        ("assistant", "model", 1),
        ("tool", "tool", 2),
        ("assistant", "model", 2),
        ("tool", "tool", 3),
        ("user", "compaction", 3),
        ("assistant", "model", 3),
    ]
    summary = transcript.messages[6]
    assert summary.content == "Asked about orders; 41 shipped."
    assert (summary.model, summary.result_ref, summary.exact) == (
        SUMMARISER,
        applied.summary_ref,
        False,
    )
    text, markdown = io.StringIO(), io.StringIO()
    print_transcript(transcript, text, markdown=False)
    print_transcript(transcript, markdown, markdown=True)
    note = (
        "(from turn 3 on, the model saw this summary in place of the 3 messages before "
        f"turn 2; the record keeps its start, the whole is stored as {applied.summary_ref})"
    )
    heading = "── user (the runtime's summary, by fake-other) ──"
    assert f"{heading}\n{note}\nAsked about orders; 41 shipped.\n" in text.getvalue()
    assert f"## {heading.strip('─ ')}\n\n*{note}*\n\nAsked about" in markdown.getvalue()
    # What the model was sent in turn 3 starts with the summary, as the note says.
    assert fake.requests[3]["messages"][1]["content"] == SUMMARY_HEADER + summary.content


async def test_a_failing_summariser_is_recorded_and_the_run_goes_on(harness: Harness) -> None:
    fake = harness.fake
    fake.enqueue(
        lookup("1", BIG),  # turn 1: over the trigger, but one turn is all there is to keep
        lookup("2", BIG),  # turn 2: the summariser fails
        lookup("3", BIG),  # turn 3: uncompacted; over the trigger again, now it works
        Reply.text("Done."),
    )
    fake.enqueue(
        Reply.error(400, message="summariser refused"),
        Reply.text("Orders 1 and 2 shipped."),
        model=SUMMARISER,
    )
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(agent(harness), "Check orders", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        records = (await client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED
    (failed,) = [r for r in records if isinstance(r, CompactionFailed)]
    assert (failed.turn, failed.model) == (2, SUMMARISER)
    assert "summariser refused" in failed.error
    assert format_record(failed).startswith("  compaction with fake-other failed: ")
    (applied,) = [r for r in records if isinstance(r, CompactionApplied)]
    assert (applied.turn, applied.cut_turn) == (3, 3)
    # Turn 3 saw the whole conversation; turn 4 the summary.
    turn3, turn4 = fake.requests[3], fake.requests[5]
    assert "Check orders" in texts(turn3) and "order 1: shipped" in texts(turn3)
    assert "Check orders" not in texts(turn4)
    assert turn4["messages"][1]["content"] == SUMMARY_HEADER + "Orders 1 and 2 shipped."
    # Both summariser calls count: 4 model calls, 2 summariser calls.
    assert result.totals.model_calls == 6


async def test_the_summariser_counts_toward_max_steps(harness: Harness) -> None:
    fake = harness.fake
    # No compaction.model: the summariser runs on the agent's model (third request).
    fake.enqueue(
        lookup("1", BIG), lookup("2", BIG), Reply.text("Order 1 shipped."), lookup("3", BIG)
    )
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(
            agent(harness, None, max_steps=6), "Check orders", scope=harness.scope
        )
        result = await client.result(run, scope=harness.scope)
        records = (await client.records(run, scope=harness.scope)).records
    # Steps: model, tool, model, tool, the summariser (5), model (6): turn 3's call is not
    # run, which it would have been had the summariser not counted.
    assert result.status is RunStatus.STOPPED
    assert result.reason == "max_steps: 6 steps taken"
    assert result.totals.steps == 6
    (applied,) = [r for r in records if isinstance(r, CompactionApplied)]
    assert applied.model == "fake-model"
    summariser = fake.requests[2]
    assert summariser["model"] == "fake-model"
    assert summariser["messages"][0]["content"].startswith(SUMMARISER_PROMPT)
    calls = [r for r in records if isinstance(r, ToolCallFinished)]
    assert [c.status for c in calls] == ["ok", "ok", "error"]
    assert "max_steps (6) is used up" in calls[2].content


async def test_an_abort_cancels_a_running_summariser(harness: Harness) -> None:
    fake = harness.fake
    fake.enqueue(lookup("1", BIG), lookup("2", BIG))
    fake.enqueue(Reply.stall(60, then=Reply.text("too late")), model=SUMMARISER)
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(agent(harness), "Check orders", scope=harness.scope)

        async def summarising() -> bool:
            return len(fake.requests) >= 3

        await eventually(summarising, 30, "the summariser call")
        aborted = time.monotonic()
        await client.abort(run, scope=harness.scope, reason="stop")
        result = await client.result(run, scope=harness.scope)
        # Cancelled, not waited out (the summariser would stall for 60 s).
        assert time.monotonic() - aborted < 30
        records = (await client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.ABORTED
    assert fake.requests[2]["model"] == SUMMARISER
    assert not [r for r in records if isinstance(r, CompactionApplied | CompactionFailed)]
    assert result.totals.model_calls == 3  # the cancelled summariser call counts


async def test_the_summariser_gets_no_per_turn_context(harness: Harness) -> None:
    asked: list[int] = []

    async def customer(request: ContextRequest) -> str:
        asked.append(request.turn)
        return "Customer record: gold plan."

    harness.settings = dataclasses.replace(
        harness.settings, context=ContextSettings(sources=(ContextSource("customer", customer),))
    )
    fake = harness.fake
    fake.enqueue(lookup("1", BIG), lookup("2", BIG), Reply.text("Done."))
    fake.enqueue(Reply.text("Order 1 shipped."), model=SUMMARISER)
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(agent(harness), "Check orders", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        records = (await client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    assert [r.turn for r in records if isinstance(r, CompactionApplied)] == [2]
    # Asked once per turn's call, and never for the summariser's.
    assert asked == [1, 2, 3]
    assert [r.turn for r in records if isinstance(r, ContextProvided)] == [1, 2, 3]
    summariser = fake.requests[2]
    assert summariser["model"] == SUMMARISER
    assert summariser["messages"][0]["content"] == (SUMMARISER_PROMPT + "\n\nKeep every order id.")
    assert all(
        "Customer record: gold plan." in r["messages"][0]["content"]
        for r in fake.requests
        if r["model"] != SUMMARISER
    )


async def test_an_empty_summary_is_recorded_and_its_cost_counted(harness: Harness) -> None:
    harness.settings.pricing = TablePricing(
        {
            "fake-model": ModelPrice(input=1.0, output=1.0),
            SUMMARISER: ModelPrice(input=10.0, output=10.0),
        }
    )
    fake = harness.fake
    fake.enqueue(lookup("1", BIG), lookup("2", BIG), Reply.text("Done.", usage=SMALL))
    # A summary of blanks (a reasoning model can also spend its whole output cap before
    # writing a word): no summary, but a paid answer.
    spent = FakeUsage(input_tokens=400, output_tokens=64)
    fake.enqueue(Reply.text("  ", usage=spent), model=SUMMARISER)
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(agent(harness), "Check orders", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        records = (await client.records(run, scope=harness.scope)).records
        report = await client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    (failed,) = [r for r in records if isinstance(r, CompactionFailed)]
    # The totals count what the unused answer cost, as a model call and a step.
    totals = result.totals
    assert (totals.model_calls, totals.steps) == (4, 6)
    assert totals.usage.input_tokens == 300 + 300 + 10 + 400
    assert totals.usage.output_tokens == 5 * 3 + 64
    finished = [r for r in records if isinstance(r, ModelCallFinished)]
    summary_cost = (400 + 64) * 10.0 / 1e6
    assert totals.cost == pytest.approx(sum(r.cost or 0.0 for r in finished) + summary_cost)
    assert failed.error.endswith(
        "returned an empty summary (finish reason stop, 400 in / 64 out tokens)"
    )
    assert report.compactions == (failed,)


async def test_the_summariser_leaves_room_within_a_workflows_max_steps(harness: Harness) -> None:
    # The workflow's max_steps (6) bounds its agent step's child, whose Spec allows 1000:
    # after turn 2 (5 steps) the summariser would take the 6th and turn 3's call a 7th.
    fake = harness.fake
    fake.enqueue(
        Reply.tool_calls(
            ToolCall("lookup_order", {"order_id": "1"}),
            ToolCall("lookup_order", {"order_id": "2"}),
            usage=BIG,
        ),
        lookup("3", BIG),
        Reply.text("All three shipped.", usage=SMALL),
    )
    fake.enqueue(Reply.text("Orders 1 and 2 shipped."), model=SUMMARISER)
    workflow = (
        WorkflowBuilder("bounded", registry=harness.registry)
        .agent_step("orders", agent(harness))
        .limits(max_steps=6)
        .build()
    )
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(workflow, "Orders 1, 2 and 3?", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        child = f"{run.workflow_id}-step1"
        records = (await client.records(child, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.totals.steps == 6
    assert result.outputs == {"orders": "All three shipped."}
    assert not [r for r in records if isinstance(r, CompactionApplied | CompactionFailed)]
    assert [r["model"] for r in fake.requests] == ["fake-model"] * 3


async def test_a_summary_cut_off_at_its_cap_says_so(harness: Harness) -> None:
    # From an audit: a summary the summariser ended for `length` (at max_summary_tokens)
    # was used as if whole, and nothing told the model or a reader of the records.
    fake = harness.fake
    fake.enqueue(lookup("1", BIG), lookup("2", BIG), Reply.text("Done."))
    fake.enqueue(Reply.text("Order 1 shipped, and order", cut_off=True), model=SUMMARISER)
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(agent(harness), "Check orders", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        records = (await client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    note = CUT_OFF_NOTE.format(cap=64)
    (applied,) = [r for r in records if isinstance(r, CompactionApplied)]
    assert applied.summary_preview == "Order 1 shipped, and order" + note
    # The model reads the summary with the note (the call after the summariser's).
    after = fake.requests[3]
    assert SUMMARY_HEADER + "Order 1 shipped, and order" + note in texts(after)


async def test_a_provider_that_reports_no_usage_still_compacts(harness: Harness) -> None:
    # The trigger compared the reported prompt tokens: with none reported (zero), a Run on
    # such a provider never compacted, however long its conversation grew. The model
    # activity now estimates the request's size for the trigger alone.
    harness.fake.reports_usage = False
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "41"})),
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
        Reply.text("Both shipped."),
    )
    harness.fake.enqueue(Reply.text("Asked about orders; 41 shipped."), model=SUMMARISER)
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(agent(harness), "Status of my orders?", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        records = (await client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    applied = [r for r in records if isinstance(r, CompactionApplied)]
    assert [(r.turn, r.cut_turn) for r in applied] == [(2, 2)]
    assert "Status of my orders?" not in texts(harness.fake.requests[-1])
    # An estimate steers the trigger only: nothing reported, nothing counted or billed.
    assert result.totals.usage.input_tokens == 0
    finished = [r for r in records if isinstance(r, ModelCallFinished)]
    assert all(r.usage.input_tokens == 0 for r in finished)


async def test_a_provider_that_reports_zero_prompt_tokens_still_compacts(
    harness: Harness,
) -> None:
    # A usage object (or a stream's usage chunk) whose prompt tokens are zero says as little
    # as none: no request is zero tokens. Such a Run never compacted either.
    zero = FakeUsage(input_tokens=0, output_tokens=5)
    harness.fake.enqueue(
        lookup("41", zero), lookup("42", zero), Reply.text("Both shipped.", usage=zero)
    )
    harness.fake.enqueue(
        Reply.text("Asked about orders; 41 shipped.", usage=zero), model=SUMMARISER
    )
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(agent(harness), "Status of my orders?", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        records = (await client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    applied = [r for r in records if isinstance(r, CompactionApplied)]
    # Before the fix: none (the trigger read the zero reported).
    assert [(r.turn, r.cut_turn) for r in applied] == [(2, 2)]
    # Nothing estimated is counted: the totals are what the provider reported.
    assert result.totals.usage.input_tokens == 0
    assert result.totals.usage.output_tokens > 0


async def test_a_summary_that_cannot_be_stored_is_recorded_and_its_cost_counted(
    harness: Harness,
) -> None:
    # The summariser answers (billed), then storing its summary fails: here a directory
    # stands where the summary's blob goes (a full or failing disk, an S3 outage, alike).
    fake = harness.fake
    fake.enqueue(lookup("1", BIG), lookup("2", BIG), Reply.text("Done.", usage=SMALL))
    said = "Orders 1 and 2 were looked up."
    fake.enqueue(
        Reply.text(said, usage=FakeUsage(input_tokens=400, output_tokens=9)), model=SUMMARISER
    )
    summary = ChatMessage(role="user", content=SUMMARY_HEADER + said)
    blobs = harness.home / "blobs"
    (blobs / blob_key(LocalBlobStore(blobs).ref_of(_stored_form(summary)))).mkdir(parents=True)
    client = harness.client
    async with harness.worker():
        run = await client.dispatch(agent(harness), "Check orders", scope=harness.scope)
        result = await client.result(run, scope=harness.scope)
        records = (await client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    (failed,) = [r for r in records if isinstance(r, CompactionFailed)]
    # The summariser's failure, as a model call's after its answer (the answer's cost in
    # its details), naming the blob by ref and the disk's errno, never the store's path.
    assert failed.error.startswith("ModelCallFailed: model fake-other: blob sha256:")
    assert failed.error.endswith("the local blob store failed (EISDIR: Is a directory)")
    assert str(blobs) not in failed.error
    # The answer was billed though no summary came of it: the totals count it.
    totals = result.totals
    assert totals.usage.input_tokens == 300 + 300 + 10 + 400
    assert totals.usage.output_tokens == 5 * 3 + 9
