"""Runs for the listing tests, started cheaply: on a queue no worker polls, with the
search attributes psych sets, and in visibility before the test reads it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from ._waiting import eventually
from .conftest import Harness


@asynccontextmanager
async def started_runs(
    harness: Harness, tenant: str, agent: str, count: int
) -> AsyncIterator[list[str]]:
    """``count`` Runs of ``agent`` started cheaply (on a queue no worker polls, with the
    attributes psych sets), in visibility before the block; their workflow ids."""
    attributes = TypedSearchAttributes(
        [
            SearchAttributePair(SearchAttributeKey.for_keyword("PsychTenant"), tenant),
            SearchAttributePair(SearchAttributeKey.for_keyword("PsychAgent"), agent),
            SearchAttributePair(SearchAttributeKey.for_keyword("PsychStatus"), "running"),
        ]
    )
    handles: list[WorkflowHandle[Any, Any]] = []
    try:
        for index in range(count):
            handles.append(
                await harness.env.client.start_workflow(
                    "AgentRun",
                    id=f"psych-{tenant}-{agent}-{index}",
                    task_queue=f"nobody-{agent}",
                    search_attributes=attributes,
                )
            )

        async def indexed() -> bool:
            query = f"PsychTenant = '{tenant}' AND PsychAgent = '{agent}'"
            return (await harness.env.client.count_workflows(query)).count == count

        await eventually(indexed, what=f"visibility to hold the {count} Runs of {agent}")
        yield [handle.id for handle in handles]
    finally:
        for handle in handles:
            await handle.terminate("test over")
