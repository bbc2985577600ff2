"""``ask_question`` end to end: what a call with no question gets."""

from __future__ import annotations

import asyncio

import pytest

from psych_runtime.specs import AgentBuilder, Refused
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.console import format_report
from psych_runtime.workflows import (
    RESUME,
    Resumed,
    ResumeInput,
    RunStatus,
    Suspended,
    ToolCallFinished,
)

from ._waiting import is_suspended, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    "arguments",
    [{}, {"question": ""}, {"question": "   "}, {"question": ["Which", "order?"]}],
    ids=["missing", "empty", "blank", "not-text"],
)
async def test_a_call_without_a_question_is_told_so_and_does_not_suspend(
    harness: Harness, arguments: dict[str, object]
) -> None:
    # Before: each suspended the Run for a day on a question with no text ('' or the
    # list's repr), which a person could only guess at.
    asking = AgentBuilder("asker").model("fake-model").suspension(may_ask_questions=True).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", arguments, id="q1")),
        Reply.text("I will ask properly."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(asking, "refund my order", scope=harness.scope)
        async with asyncio.timeout(30):  # before the fix it waited a day
            result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    assert not any(isinstance(r, Suspended) for r in records)
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert finished.status == "error"
    told = harness.fake.requests[1]["messages"][-1]
    assert told["tool_call_id"] == "q1"
    assert "ask_question needs 'question'" in told["content"]


@pytest.mark.parametrize("text", ["", "  \n"], ids=["empty", "blank"])
async def test_a_blank_answer_is_refused_and_the_question_still_waits(
    harness: Harness, text: str
) -> None:
    # Before: it was taken ("answered"), the model was given the blank text as the
    # person's answer, and the question was gone.
    asking = AgentBuilder("asker").model("fake-model").suspension(may_ask_questions=True).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which order?"}, id="q1")),
        Reply.text("Order 42 it is."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(asking, "refund my order", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_suspended, what="the question")
        with pytest.raises(Refused, match="an answer needs answer text") as blank:
            await harness.client.answer(run, "q1", text, scope=harness.scope)
        assert blank.value.kind == "BadResume"
        state = await harness.client.status(run, scope=harness.scope)
        assert [(p.reason, p.id) for p in state.pending] == [("question", "q1")]
        await harness.client.answer(run, "q1", "42", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED
    assert [r.detail for r in records if isinstance(r, Resumed)] == ["42"]


async def test_the_report_gives_every_tool_call_its_duration_a_questions_too(
    harness: Harness,
) -> None:
    # Until 12-06 a built-in's call had no latency and nothing else in the report said how
    # long it took (a question waiting for a person, a delegation for its child Run).
    def lookup(order_id: str) -> str:
        """Look an order up.

        Args:
            order_id: the order.
        """
        return f"order {order_id}: delivered"

    asking = (
        AgentBuilder("asker", registry=harness.registry)
        .model("fake-model")
        .tool(lookup)
        .suspension(may_ask_questions=True)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which order?"}, id="q1")),
        Reply.tool_calls(ToolCall("lookup", {"order_id": "42"}, id="l1")),
        Reply.text("Order 42 is delivered."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(asking, "where is my order", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_suspended, what="the question")
        await harness.client.answer(run, "q1", "42", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    question, lookup_call = report.tool_calls
    (wait,) = report.suspensions
    assert question.latency is None and question.seconds is not None
    # The answer comes in a later workflow task than the question: the wait took time.
    assert wait.seconds is not None and question.seconds >= wait.seconds > 0
    assert lookup_call.latency is not None and lookup_call.seconds is not None
    assert lookup_call.seconds >= 0


async def test_a_waiting_runs_report_says_it_waits_and_has_its_totals_so_far(
    harness: Harness,
) -> None:
    # Until 12-06 the report of a Run waiting for an answer said "running" (psych report:
    # "status: running"), and its totals were None until the Run settled: a Run waiting
    # days could not say, in its report, what it had spent so far.
    asking = AgentBuilder("asker").model("fake-model").suspension(may_ask_questions=True).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which order?"}, id="q1")),
        Reply.text("Order 42 it is."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(asking, "refund my order", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_suspended, what="the question")
        waiting = await harness.client.report(run, scope=harness.scope)
        await harness.client.answer(run, "q1", "42", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        settled = await harness.client.report(run, scope=harness.scope)
    assert waiting.status is RunStatus.SUSPENDED
    assert waiting.totals is not None
    assert (waiting.totals.model_calls, waiting.totals.tool_calls) == (1, 1)
    assert waiting.totals.usage.output_tokens > 0
    shown = format_report(waiting)
    assert "status:       suspended" in shown and "so far" in shown
    assert settled.totals is not None and settled.totals.model_calls == 2
    assert "so far" not in format_report(settled)


@pytest.mark.parametrize("text", ["", " \t"], ids=["empty", "blank"])
async def test_a_blank_answer_by_signal_is_ignored_and_the_question_still_waits(
    harness: Harness, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A signal cannot be refused (an old client, or ``temporal workflow signal``): before,
    # the Run took it as the person's answer and the model was given the blank text.
    caplog.set_level("WARNING", logger="temporalio.workflow")
    asking = AgentBuilder("asker").model("fake-model").suspension(may_ask_questions=True).build()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which order?"}, id="q1")),
        Reply.text("Order 42 it is."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(asking, "refund my order", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_suspended, what="the question")
        handle = harness.env.client.get_workflow_handle(run.workflow_id)
        blank = ResumeInput(reason="question", id="q1", tenant=harness.scope.tenant, answer=text)
        await handle.signal(RESUME, blank)
        # The update comes after the signal in the Run's history: the signal was handled.
        await harness.client.answer(run, "q1", "42", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED
    assert [r.detail for r in records if isinstance(r, Resumed)] == ["42"]
    ignored = [r.getMessage() for r in caplog.records if "signal ignored" in r.getMessage()]
    assert any("'q1'" in line and "it is blank" in line for line in ignored), ignored
