"""Runs for the listing tests, started cheaply: on a queue no worker polls, with the
search attributes psych sets, and in visibility before the test reads it; and the agent
whose Runs wait on an approval (``approval_agent``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder

from ._waiting import eventually
from .conftest import Harness


def approval_agent(harness: Harness, prefix: str) -> tuple[str, AgentBuilder]:
    """A fresh agent (its name ``prefix`` and a random suffix, so listings by agent see only
    this test's Runs) whose one tool, ``delete_order``, waits on an approval."""

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        return f"order {order_id} deleted"

    harness.settings.policy = RulePolicy(destructive="ask")
    agent = f"{prefix}{uuid.uuid4().hex[:8]}"
    builder = AgentBuilder(agent, registry=harness.registry).model("fake-model")
    return agent, builder.tool("delete_order")


@asynccontextmanager
async def started_runs(
    harness: Harness,
    tenant: str,
    agent: str,
    count: int,
    shown: Sequence[tuple[str, str | None]] = (),
    first: int = 0,
) -> AsyncIterator[list[str]]:
    """``count`` Runs of ``agent`` started cheaply (on a queue no worker polls, with the
    attributes psych sets), in visibility before the block; their workflow ids.
    ``shown``: the status and suspension reasons (``PsychStatus``, ``PsychSuspension``)
    each Run's attributes hold, one per Run (empty: running, all of them). ``first``: the
    number of the first (the ``first`` before it, started earlier, are still there)."""
    shown = shown or [("running", None)] * count
    if len(shown) != count:
        raise ValueError(f"shown: one (status, suspension) per Run ({count}), not {len(shown)}")
    handles: list[WorkflowHandle[Any, Any]] = []
    try:
        for index, (status, suspension) in enumerate(shown, start=first):
            attributes = [
                SearchAttributePair(SearchAttributeKey.for_keyword("PsychTenant"), tenant),
                SearchAttributePair(SearchAttributeKey.for_keyword("PsychAgent"), agent),
                SearchAttributePair(SearchAttributeKey.for_keyword("PsychStatus"), status),
            ]
            if suspension is not None:
                key = SearchAttributeKey.for_keyword("PsychSuspension")
                attributes.append(SearchAttributePair(key, suspension))
            handles.append(
                await harness.env.client.start_workflow(
                    "AgentRun",
                    id=f"psych-{tenant}-{agent}-{index}",
                    task_queue=f"nobody-{agent}",
                    search_attributes=TypedSearchAttributes(attributes),
                )
            )

        async def indexed() -> bool:
            query = f"PsychTenant = '{tenant}' AND PsychAgent = '{agent}'"
            return (await harness.env.client.count_workflows(query)).count == first + count

        await eventually(indexed, what=f"visibility to hold {first + count} Runs of {agent}")
        yield [handle.id for handle in handles]
    finally:
        for handle in handles:
            await handle.terminate("test over")
