"""How a Run that waits for an approval ends when it is cancelled: what its records, report
and search attributes say of the call that never ran."""

from __future__ import annotations

import pytest
from temporalio.common import SearchAttributeKey

from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, ToolCallFinished

from ._waiting import eventually
from .conftest import Harness
from .test_suspensions import orders_agent, suspended

pytestmark = pytest.mark.e2e

STATUS = SearchAttributeKey.for_keyword("PsychStatus")
SUSPENSION = SearchAttributeKey.for_keyword("PsychSuspension")


async def test_a_call_cancelled_while_it_waits_for_approval_is_recorded_not_run(
    harness: Harness,
) -> None:
    # Before: its tool_call_finished said UNKNOWN ("the Run was cancelled before this call
    # reported"), as for a call that may have run: an operator had to go and check whether
    # the order was deleted.
    deleted: list[str] = []
    spec = orders_agent(harness, deleted)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "1"}, id="c1")), Reply.text("ok")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 1", scope=harness.scope)
        await suspended(harness, run)
        handle = harness.env.client.get_workflow_handle(run.workflow_id)
        await handle.cancel()

        async def settled() -> bool:
            return (await harness.client.status(run, scope=harness.scope)).status.terminal

        await eventually(settled, what="the Run to settle")
        records = (await harness.client.records(run, scope=harness.scope)).records
        report = await harness.client.report(run, scope=harness.scope)
        attributes = (await handle.describe()).typed_search_attributes
    assert deleted == []
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert (finished.call_id, finished.status) == ("c1", "aborted")
    assert finished.content.startswith("not run: it was waiting for approval")
    assert report.status is RunStatus.ABORTED
    assert report.tool_calls[0].status == "aborted"
    (wait,) = report.suspensions
    assert (wait.pending.id, wait.outcome) == ("c1", None)
    assert attributes.get(STATUS) == "aborted"
    assert attributes.get(SUSPENSION) is None
