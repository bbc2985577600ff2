"""The client-side modules the workflows package imports are passed through the workflow
sandbox: a Run's sandbox shares them instead of executing them again (issue 15, item 2: they
were 40 % of creating each Run's workflow instance)."""

from __future__ import annotations

import uuid

from temporalio import workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from psych_runtime.workflows.client import _client, _client_actions, _report


@workflow.defn(sandboxed=True)
class ProbeModules:
    """Reports the id of each module as the sandbox sees it."""

    @workflow.run
    async def run(self) -> list[int]:
        # This test module is imported again inside the sandbox: its module-level imports
        # are the sandbox's view of those modules.
        return [id(_client), id(_client_actions), id(_report)]


async def test_a_runs_sandbox_shares_the_client_and_report_modules(
    dev_env: WorkflowEnvironment,
) -> None:
    # Imported here, not at the top: this module is imported again inside the sandbox,
    # which must not import the worker package (its codec's cryptography is not allowed).
    from psych_runtime.workers._plugin import _sandboxed_runner

    task_queue = f"passthrough-{uuid.uuid4().hex[:8]}"
    async with Worker(
        dev_env.client,
        task_queue=task_queue,
        workflows=[ProbeModules],
        workflow_runner=_sandboxed_runner(None),
    ):
        seen = await dev_env.client.execute_workflow(
            ProbeModules.run, id=f"probe-{uuid.uuid4().hex}", task_queue=task_queue
        )
    assert seen == [id(_client), id(_client_actions), id(_report)]
