"""What the offline examples share: a Temporal dev server, a psych worker and the scriptable
fake model, all on loopback, all stopped on the way out.

Each example (``approval.py``, ``mcp_tools.py``, ``workflow.py``, ``subagents.py``) scripts
what the model says with ``psych_runtime.testing`` replies, publishes its Spec, dispatches
one Run and prints its records and report as ``psych run`` does. No model key and no
network are needed: set nothing, run ``python examples/<name>.py``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from psych_runtime.activities import (
    Endpoint,
    EnvSecretResolver,
    FileVersionStore,
    LocalBlobStore,
    ModelEndpoints,
    Policy,
    RulePolicy,
)
from psych_runtime.activities.egress import LOOPBACK, EgressSettings
from psych_runtime.specs import AgentSpec, Scope, ToolRegistry, WorkflowSpec, spec_from_yaml
from psych_runtime.testing import FakeModel, Reply
from psych_runtime.workers import WorkerSettings, follow_run, run_worker, start_dev_server
from psych_runtime.workflows import PsychClient, RunHandle, RunReport, RunStatus

HERE = Path(__file__).resolve().parent
MODEL = "gpt-4o-mini"
"""The model every example Spec names; the fake model answers it."""
TASK_QUEUE = "psych-examples"
SCOPE = Scope(tenant="examples")


def load(name: str) -> AgentSpec | WorkflowSpec:
    """The Spec file ``name`` beside this module."""
    return spec_from_yaml((HERE / name).read_bytes(), source=name)


@contextmanager
def _stdout_to_devnull() -> Iterator[None]:
    """The dev server prints a banner on the standard output it inherits: not ours."""
    sys.stdout.flush()
    saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


@asynccontextmanager
async def offline(
    *replies: Reply,
    registry: ToolRegistry | None = None,
    policy: Policy | None = None,
) -> AsyncIterator[PsychClient]:
    """A client of a dev server whose worker's model answers ``replies``, in order.

    Args:
        replies: what the model says, one reply per model call (every agent of the Run
            shares the queue: a subagent's calls take their turn as they come).
        registry: the code tools the worker runs.
        policy: which tool calls wait for a person (default: none).
    """
    with _stdout_to_devnull():
        env = await start_dev_server()
    try:
        async with AsyncExitStack() as stack:
            fake = await stack.enter_async_context(FakeModel(models=(MODEL,)))
            fake.enqueue(*replies)
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="psych-ex-")))
            settings = WorkerSettings(
                task_queue=TASK_QUEUE,
                registry=registry or ToolRegistry(),
                blobs=LocalBlobStore(home / "blobs"),
                endpoints=ModelEndpoints(default=Endpoint(fake.base_url, "offline-key")),
                secrets=EnvSecretResolver(),
                policy=policy or RulePolicy(),
                # The examples' own servers (an MCP server) are on loopback, which a Spec
                # may reach only when the operator allows it.
                egress=EgressSettings().allowing(*LOOPBACK),
            )
            await stack.enter_async_context(run_worker(env.client, settings))
            yield PsychClient(
                env.client,
                store=FileVersionStore(home / "versions"),
                task_queue=TASK_QUEUE,
                registry=registry,
            )
    finally:
        await env.shutdown()


async def run(
    client: PsychClient,
    spec: AgentSpec | WorkflowSpec,
    message: str,
    watch: Callable[[RunHandle], Callable[[Any], Awaitable[None]]] | None = None,
) -> RunReport:
    """Publish ``spec``, dispatch ``message`` to it, print its records and its report.

    ``watch(run)`` gives what is called with each record as it is printed (an operator's
    part: approving what the Run waits on)."""
    version = client.publish(spec)
    print(f"published {spec.kind} {spec.name} {version.hash}")
    print(f"input: {message}\n", flush=True)
    handle = await client.dispatch(version, message, scope=SCOPE)
    on_record = None if watch is None else watch(handle)
    return await follow_run(client, handle, scope=SCOPE, on_record=on_record)


def status(report: RunReport) -> int:
    """The example's exit status: 0 when its Run completed."""
    return 0 if report.status == RunStatus.COMPLETED else 1
