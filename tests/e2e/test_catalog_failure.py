"""A Run whose catalogue fails settles FAILED like any other failure.

A Spec's code tool the worker's registry lacks fails ``psych.tool.catalog`` with
``ToolNotRegistered``. On a Run on one queue the catalogue is a local activity, whose
failure reaches the workflow as the activity's own error: until the patch
``psych-catalog-failure-settles`` it failed the workflow directly, so the Run had no
``run_settled`` record, its state and ``PsychClient.list`` said running, a follower saw
nothing end and the report showed a running Run.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from psych_runtime.specs import (
    AgentBuilder,
    AgentSpec,
    RunFailed,
    ToolRegistry,
    WorkflowBuilder,
    WorkflowSpec,
)
from psych_runtime.workers._worker import run_worker
from psych_runtime.workflows import PsychClient, Record, RunSettled, RunStatus

from .conftest import Harness

pytestmark = pytest.mark.e2e

MISSING = "code tool 'lookup_order' is not registered"


def _lookup_order(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}"


@pytest.mark.parametrize("kind", ["agent", "workflow"])
@pytest.mark.parametrize("roles_apart", [False, True], ids=["one-queue", "roles-apart"])
async def test_a_catalogue_that_fails_settles_the_run_failed(
    harness: Harness, kind: str, roles_apart: bool
) -> None:
    harness.registry.register(_lookup_order, name="lookup_order")
    spec: AgentSpec | WorkflowSpec
    if kind == "agent":
        agent = AgentBuilder("lost", registry=harness.registry).model("fake-model")
        spec = agent.tool("lookup_order").build()
    else:
        spec = (
            WorkflowBuilder("lost", registry=harness.registry)
            .tool("lookup_order")
            .tool_step("look", "lookup_order", {"order_id": "42"})
            .build()
        )
    client = PsychClient(
        harness.env.client,
        store=harness.client.store,
        task_queue=harness.settings.task_queue,
        registry=harness.registry,
        roles_apart=roles_apart,
    )
    # The worker's registry lacks the tool the client knows.
    settings = dataclasses.replace(harness.settings, registry=ToolRegistry())
    async with run_worker(harness.env.client, settings):
        run = await client.dispatch(spec, "Find order 42", scope=harness.scope)
        with pytest.raises(RunFailed) as failed:
            await client.result(run, scope=harness.scope)
        followed = await asyncio.wait_for(_followed(client, run.workflow_id, harness), timeout=30)
        report = await client.report(run, scope=harness.scope)
        listed = await client.list(scope=harness.scope)

    assert failed.value.args[0].startswith(f"tools: ToolNotRegistered: {MISSING}")
    settled = followed[-1]
    assert isinstance(settled, RunSettled), [r.kind for r in followed]
    assert settled.status is RunStatus.FAILED
    assert settled.reason == failed.value.args[0]
    assert report.status is RunStatus.FAILED
    assert report.reason == failed.value.args[0]
    (summary,) = [s for s in listed if s.workflow_id == run.workflow_id]
    assert summary.status == RunStatus.FAILED.value


async def _followed(client: PsychClient, workflow_id: str, harness: Harness) -> list[Record]:
    return [record async for record in client.stream(workflow_id, scope=harness.scope)]
