"""A workflow's outputs are bounded (docs/guides/workflows.md): a step whose output would take
them past ``MAX_OUTPUTS_BYTES`` fails the Run, naming the step, the size and the bound, with
the step's call and output recorded. From a reproduced defect: outputs adding up past
Temporal's payload limit (2 MiB) made the server refuse the Run's completion, and the Run
stayed RUNNING, its workflow task failing again and again, never settled."""

from __future__ import annotations

import asyncio

import pytest

from psych_runtime.specs import AgentBuilder, RunFailed, WorkflowBuilder
from psych_runtime.testing import Reply
from psych_runtime.workflows import RunContinued, RunStatus, StepFinished
from psych_runtime.workflows.runs._step_output import MAX_OUTPUTS_BYTES

from ._waiting import all_records
from .conftest import Harness

pytestmark = pytest.mark.e2e

BIG = 400_000
"""One tool output's characters: under the 512 KiB a tool result is shown whole up to; two
fit the bound, three pass it."""
ESSAY = 700_000
"""An agent step's answer: with one tool output, past the bound."""
SHOWN_INLINE = 1_000_000
"""``large_result_bytes`` over ``BIG``: the results are shown inline, outputs whole."""
SETTLES_WITHIN = 15
"""Seconds for the Run's result: a Run past the payload limit would never settle."""


def _register_big(harness: Harness) -> None:
    @harness.registry.register
    def big(letter: str) -> str:
        """Say a lot."""
        return letter * BIG


async def test_tool_steps_past_the_bound_fail_the_run_naming_the_step(harness: Harness) -> None:
    _register_big(harness)
    builder = WorkflowBuilder("long-texts", registry=harness.registry).tool("big")
    for step in ("first", "second", "third", "fourth"):
        builder = builder.tool_step(step, "big", {"letter": step[0]})
    spec = builder.limits(large_result_bytes=SHOWN_INLINE).build()
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        async with asyncio.timeout(SETTLES_WITHIN):
            with pytest.raises(RunFailed) as failed:
                await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    reason = str(failed.value)
    assert "step 'third' (tool) failed: output too large" in reason
    assert f"past their bound of {MAX_OUTPUTS_BYTES} bytes" in reason
    assert f"its {BIG + 2} bytes" in reason  # a JSON string: quoted
    assert "large_result_bytes" in reason  # what to do
    assert report.status is RunStatus.FAILED and report.reason == reason
    # The Run stopped there; the step that passed the bound is recorded failed with its
    # output, and its call as it finished.
    assert [(s.name, s.ok) for s in report.steps] == [
        ("first", True),
        ("second", True),
        ("third", False),
    ]
    assert report.steps[2].output == "t" * BIG
    assert report.steps[2].error is not None and "output too large" in report.steps[2].error
    assert [(c.call_id, c.status, c.result) for c in report.tool_calls] == [
        ("first", "ok", "f" * BIG),
        ("second", "ok", "s" * BIG),
        ("third", "ok", "t" * BIG),
    ]
    assert report.outputs == {"first": "f" * BIG, "second": "s" * BIG}


async def test_an_agent_step_past_the_bound_fails_the_run_naming_the_step(
    harness: Harness,
) -> None:
    _register_big(harness)
    writer = AgentBuilder("writer", registry=harness.registry).model("fake-model").build()
    spec = (
        WorkflowBuilder("long-answer", registry=harness.registry)
        .tool("big")
        .tool_step("notes", "big", {"letter": "n"})
        .agent_step("essay", writer)
        .limits(large_result_bytes=SHOWN_INLINE)
        .build()
    )
    harness.fake.enqueue(Reply.text("e" * ESSAY, chunk_size=ESSAY))
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        async with asyncio.timeout(SETTLES_WITHIN):
            with pytest.raises(RunFailed, match=r"step 'essay' \(agent\) failed: output too large"):
                await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    (notes, essay) = report.steps
    assert notes.ok and not essay.ok
    # The child Run completed; the workflow could not keep its answer.
    assert essay.status is RunStatus.COMPLETED and essay.output == "e" * ESSAY
    assert essay.child is not None and essay.child.answer == "e" * ESSAY
    assert report.outputs == {"notes": "n" * BIG}


async def test_the_bound_counts_the_outputs_a_continued_run_carries(harness: Harness) -> None:
    _register_big(harness)
    spec = (
        WorkflowBuilder("carried-texts", registry=harness.registry)
        .tool("big")
        .tool_step("first", "big", {"letter": "f"})
        .tool_step("second", "big", {"letter": "s"})
        .tool_step("third", "big", {"letter": "t"})
        .limits(large_result_bytes=SHOWN_INLINE)
        .build()
    )
    async with harness.worker():
        # A threshold every execution is past at once: it continues between the steps.
        run = await harness.client.dispatch(
            spec, "go", scope=harness.scope, continue_after_events=1
        )
        async with asyncio.timeout(SETTLES_WITHIN):
            with pytest.raises(RunFailed, match=r"step 'third' \(tool\) failed: output too large"):
                await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)
    # The third step ran in an execution the earlier outputs were carried to.
    assert [r for r in records if isinstance(r, RunContinued)]
    finished = [(r.step, r.ok) for r in records if isinstance(r, StepFinished)]
    assert finished == [("first", True), ("second", True), ("third", False)]
