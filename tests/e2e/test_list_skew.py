"""A paged listing keeps to Temporal's clock, not the client's: a client whose clock is
an hour ahead of the server's or behind it lists a Run that continued as new before the
listing (twice) once, and one that continues as new between its pages too (a clock ahead left
the second out, one behind listed the first again). The client's clock is shifted where
the listing could read it; the Runs are real, on the session dev server."""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo

import pytest

from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows.client import _cursor, _listing

from ._listing import approval_agent, started_runs
from ._waiting import eventually, is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


def skewed(by: timedelta) -> type[datetime]:
    """``datetime`` whose ``now`` is ``by`` off the machine's clock."""

    class Skewed(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Skewed:
            now = datetime.now(tz) + by
            return cls.fromtimestamp(now.timestamp(), tz)

    return Skewed


@pytest.mark.parametrize(
    "skew", [timedelta(hours=1), -timedelta(hours=1)], ids=["client-ahead", "client-behind"]
)
async def test_a_listing_keeps_to_temporals_clock_whatever_the_clients_says(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, skew: timedelta
) -> None:
    agent, spec = approval_agent(harness, "skew")
    harness.client.publish(spec.build())
    scope = harness.scope
    harness.fake.enqueue(
        *(
            Reply.tool_calls(ToolCall("delete_order", {"order_id": str(n)}, id=f"c{n}"))
            for n in (1, 2, 3, 4)
        )
    )
    async with harness.worker():
        run = await harness.client.dispatch(
            spec.build(), "delete four", scope=scope, continue_after_events=1
        )
        executions = f"WorkflowId = '{run.workflow_id}'"

        async def went_on(times: int) -> None:
            call_id = f"c{times + 1}"
            await state_when(
                harness.client,
                run,
                scope,
                lambda s: is_waiting(s) and s.pending[0].id == call_id,
                what=f"the Run to wait on {call_id}",
            )

            async def continued() -> bool:
                query = f"{executions} AND ExecutionStatus = 'ContinuedAsNew'"
                return (await harness.env.client.count_workflows(query)).count == times

            await eventually(continued, what=f"{times} continued execution(s) in visibility")

        await went_on(0)
        try:
            # Twice before the listing starts (its executions closed ContinuedAsNew: the
            # listing starts after the later of the two, newest close first)...
            for times in (1, 2):
                await harness.client.approve(run, f"c{times}", scope=scope)
                await went_on(times)
            async with started_runs(harness, scope.tenant, agent, 2, first=3) as newer:
                for module in (_listing, _cursor):
                    monkeypatch.setattr(module, "datetime", skewed(skew))
                first = await harness.client.list_page(scope=scope, agent=agent, limit=1)
                assert [r.workflow_id for r in first.runs] == [newer[1]]
                assert first.next_cursor is not None
                # ... and once between the pages.
                await harness.client.approve(run, "c3", scope=scope)
                await went_on(3)
                rest = await harness.client.list_page(
                    scope=scope, agent=agent, limit=10, cursor=first.next_cursor
                )
                assert [r.workflow_id for r in rest.runs] == [newer[0], run.workflow_id]
                whole = await harness.client.list(scope=scope, agent=agent)
                assert [r.workflow_id for r in whole] == [run.workflow_id, *newer[::-1]]
        finally:
            await harness.env.client.get_workflow_handle(run.workflow_id).terminate("test over")
