"""A model call that failed after its answer came (billed by the provider) shows in the
report with that answer's usage and cost, which the Run's totals count: the report's model
calls account for the totals.

Before, the failed call's report (and its ``model_call_failed`` record) had no usage or
cost, while the totals counted them: a Run that spent money on a call showed no call that
spent it.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from psych_runtime.activities import ModelPrice, TablePricing
from psych_runtime.specs import AgentBuilder, RunFailed
from psych_runtime.testing import Reply, Usage
from psych_runtime.workers.console import format_record
from psych_runtime.workers.console._live import RunProgress
from psych_runtime.workflows import ModelCallFailed, RunStatus

from .conftest import Harness

pytestmark = pytest.mark.e2e

# Under the answer bound as text, past it as the result's JSON (each quote is escaped): the
# provider answered (and billed), then the activity refused to return the answer.
TOO_LARGE_AS_JSON = '"' * 1_000_000


async def test_a_billed_answer_that_failed_its_call_shows_its_usage_and_cost(
    harness: Harness,
) -> None:
    harness.settings.pricing = TablePricing({"fake-model": ModelPrice(input=1.0, output=2.0)})
    billed = Usage(input_tokens=1000, output_tokens=500)
    harness.fake.enqueue(Reply.text(TOO_LARGE_AS_JSON, usage=billed, chunk_size=250_000))
    spec = AgentBuilder("talker").model("fake-model").build()
    async with harness.worker():
        run = await harness.client.dispatch(spec, "Talk", scope=harness.scope)
        with pytest.raises(RunFailed, match="response too large"):
            await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
        records = (await harness.client.records(run, scope=harness.scope)).records
        report = await harness.client.report(run, scope=harness.scope)
    assert report.status is RunStatus.FAILED, report.reason
    expected_cost = (1000 * 1.0 + 500 * 2.0) / 1_000_000
    assert report.totals is not None and report.totals.cost == pytest.approx(expected_cost)
    (failed,) = [r for r in records if isinstance(r, ModelCallFailed)]
    assert failed.usage is not None and failed.usage.input_tokens == 1000
    assert failed.cost == pytest.approx(expected_cost)
    assert format_record(failed).endswith("[billed 1000 in / 500 out tokens]")
    (call,) = report.model_calls
    assert call.ok is False
    assert call.usage is not None
    assert (call.usage.input_tokens, call.usage.output_tokens) == (1000, 500)
    assert call.cost == pytest.approx(expected_cost)
    assert sum(c.cost or 0.0 for c in report.model_calls) == pytest.approx(report.totals.cost)
    # `psych follow`'s live status line ("tokens and cost so far") counts it as the totals
    # do: before, it counted finished calls only, and showed 0 tokens for this Run.
    progress = RunProgress()
    for record in records:
        progress.add(record)
    assert report.totals.usage is not None
    assert (progress.input_tokens, progress.output_tokens) == (
        report.totals.usage.input_tokens,
        report.totals.usage.output_tokens,
    )
    assert progress.cost == pytest.approx(report.totals.cost)
    assert "1000 in / 500 out tokens" in progress.status_line(datetime.now(UTC)).plain
