"""A final answer the model cut at its output limit completes the Run saying so."""

from __future__ import annotations

import pytest

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply
from psych_runtime.workflows import RunSettled, RunStatus

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
