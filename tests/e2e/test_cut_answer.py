"""A final answer the model cut at its output limit completes the Run saying so; a Run
that stops keeping one, and a workflow whose step's output is one, say so too."""

from __future__ import annotations

import asyncio

import pytest

from psych_runtime.specs import AgentBuilder, WorkflowBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunContinued, RunSettled, RunStatus, answer_cut_short

from ._waiting import all_records
from .conftest import Harness

pytestmark = pytest.mark.e2e


async def test_a_cut_final_answer_names_the_cut_in_the_runs_reason(harness: Harness) -> None:
    spec = AgentBuilder("explainer").model("fake-model").instructions("Explain.").build()
    harness.fake.enqueue(
        Reply.text("The three steps are: first, open the", cut_off=True),
        Reply.text("Done."),
    )
    async with harness.worker():
        cut = await harness.client.dispatch(spec, "How?", scope=harness.scope)
        result = await harness.client.result(cut, scope=harness.scope)
        whole = await harness.client.dispatch(spec, "And then?", scope=harness.scope)
        after = await harness.client.result(whole, scope=harness.scope)
        records = await harness.client.records(cut, scope=harness.scope)
    # Completed, the cut text kept as the answer, and the reason saying it is cut.
    assert result.status is RunStatus.COMPLETED
    assert result.answer == "The three steps are: first, open the"
    assert result.reason.startswith("answered, cut short: the model stopped at its output")
    assert "max_output_tokens" in result.reason
    settled = [r for r in records.records if isinstance(r, RunSettled)]
    assert settled[-1].reason == result.reason
    # A whole answer completes as before.
    assert (after.status, after.reason, after.answer) == (RunStatus.COMPLETED, "answered", "Done.")


CUT = "cut short: the model stopped at its output token limit"


async def test_a_cut_answer_kept_by_a_stopped_run_is_named_in_its_reason(
    harness: Harness,
) -> None:
    # A follow-up comes while the first turn's tool runs; the second (last) turn's answer is
    # cut: no turn is left for the follow-up, so the Run stops keeping the cut answer, and
    # its reason names the cut beside the bound. It said only "max_turns" before.
    gate, started = asyncio.Event(), asyncio.Event()

    @harness.registry.register
    async def price(item: str) -> str:
        """Price an item."""
        started.set()
        await gate.wait()
        return f"{item}: 11 EUR"

    spec = (
        AgentBuilder("pricer", registry=harness.registry)
        .model("fake-model")
        .tool("price")
        .limits(max_turns=2)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("price", {"item": "book"})),
        Reply.text("The book costs 11 EUR and ships", cut_off=True),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Price of the book?", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 30)
        await harness.client.steer(run, "And shipping?", scope=harness.scope, mode="follow_up")
        gate.set()
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.STOPPED
    assert result.answer == "The book costs 11 EUR and ships"
    assert result.reason.startswith(f"max_turns: 2 turns taken; the answer kept was {CUT}")
    assert "max_output_tokens" in result.reason
    assert result.reason.endswith(
        "1 message sent during the Run not delivered (run_settled.undelivered)"
    )
    assert answer_cut_short(result.reason)


async def test_a_workflow_names_its_steps_whose_answer_was_cut(harness: Harness) -> None:
    # The cut answer stays the step's output (its agent's Run completed with it) and the
    # next step reads it, but the workflow's reason names the step, as the agent's Run's
    # reason names its cut; a nested workflow holding one is named too. Before, the
    # workflow completed "completed: N steps" and nothing above the step's child said so.
    nested = (
        WorkflowBuilder("nested_notes")
        .agent_step("note", AgentBuilder("noter").model("fake-model").build())
        .build()
    )
    spec = (
        WorkflowBuilder("drafting")
        .agent_step("draft", AgentBuilder("drafter").model("fake-model").build())
        .agent_step("review", AgentBuilder("reviewer").model("fake-model").build())
        .workflow_step("notes", nested)
        .build()
    )
    whole = (
        WorkflowBuilder("drafting_whole")
        .agent_step("draft", AgentBuilder("drafter").model("fake-model").build())
        .build()
    )
    harness.fake.enqueue(
        Reply.text("Dear Ada, your order", cut_off=True),
        Reply.text("The draft stops short."),
        Reply.text("Note: the draft", cut_off=True),
        Reply.text("Dear Ada, your order ships today."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Write to Ada", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        second = await harness.client.dispatch(whole, "Write to Ada", scope=harness.scope)
        after = await harness.client.result(second, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED
    assert result.outputs is not None
    assert result.outputs["draft"] == "Dear Ada, your order"
    assert result.outputs["review"] == "The draft stops short."
    assert result.reason == (
        f"completed: 3 steps; the outputs of steps 'draft', 'notes' were {CUT} "
        "(finish_reason length; raise the model's max_output_tokens)"
    )
    assert answer_cut_short(result.reason)
    # A workflow whose answers are whole completes as before.
    assert (after.status, after.reason) == (RunStatus.COMPLETED, "completed: 1 steps")
    assert not answer_cut_short(after.reason)


async def test_a_continued_workflow_still_names_a_step_cut_before(harness: Harness) -> None:
    # The cut step ran in the first execution; the Run continues as new between each two
    # steps (a threshold it is past at once), and its reason still names the step: the
    # steps so named are carried (``RunCarry.cut_steps``).
    spec = (
        WorkflowBuilder("drafting_long")
        .agent_step("draft", AgentBuilder("drafter").model("fake-model").build())
        .agent_step("review", AgentBuilder("reviewer").model("fake-model").build())
        .build()
    )
    harness.fake.enqueue(
        Reply.text("Dear Ada, your order", cut_off=True), Reply.text("The draft stops short.")
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            spec, "Write to Ada", scope=harness.scope, continue_after_events=1
        )
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)
    assert any(isinstance(r, RunContinued) for r in records)
    assert result.status is RunStatus.COMPLETED
    assert result.reason.startswith(f"completed: 2 steps; the output of step 'draft' was {CUT}")


async def test_a_workflow_that_ends_otherwise_names_its_cut_steps_too(harness: Harness) -> None:
    # A workflow aborted (or past its deadline) after a step whose answer was cut still
    # returns that step's output: its reason names the cut step, as a completed one's does.
    # Before, only "completed: N steps" named it: an aborted one said only the abort's text.
    started = asyncio.Event()

    @harness.registry.register
    async def settle_books() -> str:
        """Settle the books (cannot be interrupted)."""
        started.set()
        await asyncio.sleep(1.5)
        return "settled"

    spec = (
        WorkflowBuilder("drafting_aborted", registry=harness.registry)
        .tool("settle_books", interruptible=False)
        .agent_step("draft", AgentBuilder("drafter").model("fake-model").build())
        .tool_step("settle", "settle_books", {})
        .build()
    )
    harness.fake.enqueue(Reply.text("Dear Ada, your order", cut_off=True))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Write to Ada", scope=harness.scope)
        await asyncio.wait_for(started.wait(), 30)
        await harness.client.abort(run, scope=harness.scope, reason="stop now")
        result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.ABORTED, result.reason
    assert result.outputs == {"draft": "Dear Ada, your order", "settle": "settled"}
    said = "aborted by tester: stop now; the output of step 'draft' was"
    assert result.reason.startswith(f"{said} {CUT}"), result.reason
    assert answer_cut_short(result.reason)
