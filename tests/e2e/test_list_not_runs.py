"""A workflow that carries a tenant's ``PsychTenant`` (and psych's other attributes) but
whose id is not a psych Run's (``psych-<tenant>-<run id>``: started by hand, or by another
system) is left out of the tenant's listing, which says so in a warning naming it, and
pages on past it: a page made only of such workflows neither ends the listing nor repeats.
Through ``PsychClient`` and ``GET /v1/runs``, on the session dev server."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from temporalio import workflow
from temporalio.client import WorkflowHandle
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

import psych_runtime.workflows.client._listing as listing
from psych_runtime.specs import Scope
from psych_runtime.workflows import PsychClient

from ._listing import started_runs
from ._serve import ACME, served
from ._waiting import eventually
from .conftest import Harness

pytestmark = pytest.mark.e2e

LOGGER = "psych_runtime.workflows.client._listing"


def _attributes(tenant: str, agent: str) -> TypedSearchAttributes:
    """The attributes psych sets on a running Run of ``agent``."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(SearchAttributeKey.for_keyword("PsychTenant"), tenant),
            SearchAttributePair(SearchAttributeKey.for_keyword("PsychAgent"), agent),
            SearchAttributePair(SearchAttributeKey.for_keyword("PsychStatus"), "running"),
        ]
    )


@asynccontextmanager
async def strays(harness: Harness, tenant: str, agent: str, count: int) -> AsyncIterator[list[str]]:
    """``count`` workflows with the attributes of ``tenant``'s Runs of ``agent`` but ids
    that name no psych Run, on a queue no worker polls, in visibility before the block
    (``agent``'s Runs started before them counted in); their ids, oldest first."""
    handles: list[WorkflowHandle[Any, Any]] = []
    query = f"PsychTenant = '{tenant}' AND PsychAgent = '{agent}'"
    before = (await harness.env.client.count_workflows(query)).count
    try:
        for index in range(count):
            handles.append(
                await harness.env.client.start_workflow(
                    "AgentRun",
                    id=f"by-hand-{agent}-{index}",
                    task_queue=f"nobody-{agent}",
                    search_attributes=_attributes(tenant, agent),
                )
            )

        async def indexed() -> bool:
            return (await harness.env.client.count_workflows(query)).count == before + count

        await eventually(indexed, what=f"visibility to hold {count} workflows by hand")
        yield [handle.id for handle in handles]
    finally:
        for handle in handles:
            await handle.terminate("test over")


async def pages(client: PsychClient, scope: Scope, agent: str, limit: int) -> list[list[str]]:
    """Every page of ``agent``'s Runs (``list_page``, ``limit`` a page): their ids."""
    walked: list[list[str]] = []
    cursor: str | None = None
    for _ in range(20):  # far more pages than the test's Runs and workflows: no loop
        page = await client.list_page(scope=scope, agent=agent, limit=limit, cursor=cursor)
        walked.append([run.workflow_id for run in page.runs])
        cursor = page.next_cursor
        if cursor is None:
            return walked
    raise AssertionError(f"the listing did not end: {walked}")


async def test_a_workflow_that_is_no_run_is_left_out_and_said(
    harness: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = harness.scope
    agent = f"stray{uuid.uuid4().hex[:8]}"
    async with (
        started_runs(harness, scope.tenant, agent, 2) as own,
        # Newer: the head of the listing (newest first).
        strays(harness, scope.tenant, agent, 4) as hand,
        served(harness) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            listed = await harness.client.list(scope=scope, agent=agent)
        assert [run.workflow_id for run in listed] == own[::-1]
        # The operator is told how many, and which (the newest three).
        named = ", ".join(repr(workflow_id) for workflow_id in hand[:0:-1])
        assert (
            f"4 workflow(s) carry tenant 'acme''s PsychTenant but are not psych Runs (their "
            f"ids are not psych-<tenant>-<run id>: started by hand, or by another system?): "
            f"{named} and 1 more; left out of its listing"
        ) in caplog.messages
        # Paged: every Run once, in order; the workflows take no place of theirs.
        assert await pages(harness.client, scope, agent, 1) == [[own[1]], [own[0]]]
        answer = await http.get(f"/v1/runs?agent={agent}", headers=ACME)
        assert answer.status_code == 200, answer.text
        assert [run["workflow_id"] for run in answer.json()["runs"]] == own[::-1]
        assert answer.json()["next_cursor"] is None
        # A visibility count counts them (they match its query), as the docs say.
        assert await harness.client.count(scope=scope, agent=agent) == 6

        # Past the bound of rows read past, a page ends short, with a cursor that reads
        # on: a page made only of such workflows does not end the listing.
        monkeypatch.setattr(listing, "FOREIGN_MAX", 3)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            first = await harness.client.list_page(scope=scope, agent=agent, limit=1)
        assert first.runs == ()
        assert first.next_cursor is not None
        assert caplog.messages[-1].endswith(
            "left out of its listing; the listing ended short at 0 of up to 1"
        )
        assert await pages(harness.client, scope, agent, 1) == [[], [own[1]], [own[0]]]
        walked: list[list[str]] = []
        cursor: str | None = ""
        while cursor is not None and len(walked) < 20:
            got = await http.get(f"/v1/runs?agent={agent}&limit=1{cursor}", headers=ACME)
            assert got.status_code == 200, got.text
            walked.append([run["workflow_id"] for run in got.json()["runs"]])
            after = got.json()["next_cursor"]
            cursor = None if after is None else f"&cursor={after}"
        assert walked == [[], [own[1]], [own[0]]]


@workflow.defn(name="ContinuesOnce")
class ContinuesOnce:
    """Continues as new once, then waits until terminated."""

    @workflow.run
    async def run(self, continued: bool) -> None:
        if not continued:
            workflow.continue_as_new(True)
        await workflow.wait_condition(lambda: False)


async def test_a_workflow_that_is_no_run_and_continued_as_new_breaks_no_listing(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # A listing starts past the tenant's last execution that continued as new: it reads
    # those too, and one of a workflow that is no psych Run is read past as well.
    tenant = f"t{uuid.uuid4().hex[:10]}"
    scope = Scope(tenant=tenant, principal="tester")
    agent = f"stray{uuid.uuid4().hex[:8]}"
    queue = f"continues-{agent}"
    async with (
        started_runs(harness, tenant, agent, 1) as own,
        Worker(
            harness.env.client,
            task_queue=queue,
            workflows=[ContinuesOnce],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ),
    ):
        stray = await harness.env.client.start_workflow(
            ContinuesOnce.run,
            False,
            id=f"by-hand-{agent}",
            task_queue=queue,
            search_attributes=_attributes(tenant, agent),
            execution_timeout=timedelta(minutes=5),
        )
        try:

            async def continued() -> bool:
                query = f"PsychTenant = '{tenant}' AND ExecutionStatus = 'ContinuedAsNew'"
                return (await harness.env.client.count_workflows(query)).count == 1

            await eventually(continued, what="the workflow by hand to continue as new")
            with caplog.at_level(logging.WARNING, logger=LOGGER):
                listed = await harness.client.list(scope=scope)
                first = await harness.client.list_page(scope=scope, limit=1)
        finally:
            await stray.terminate("test over")
    assert [run.workflow_id for run in listed] == own
    assert [run.workflow_id for run in first.runs] == own
    assert any(f"'by-hand-{agent}'" in message for message in caplog.messages)
