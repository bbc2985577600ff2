"""Psych on the time-skipping test server: its wiring, and waiting for a Run there."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.testservice.v1 import LockTimeSkippingRequest, UnlockTimeSkippingRequest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import Scope, ToolRegistry
from psych_runtime.testing import FakeModel
from psych_runtime.workers import WorkerSettings
from psych_runtime.workflows import PsychClient, Record, RunAdmitted, RunHandle, RunSettled


@dataclass
class Wiring:
    """A fake model, a client and a worker's settings on one fresh task queue."""

    client: PsychClient
    fake: FakeModel
    settings: WorkerSettings


@asynccontextmanager
async def wiring(
    env: WorkflowEnvironment, home: Path, registry: ToolRegistry, queue_prefix: str
) -> AsyncIterator[Wiring]:
    """Wire psych to the test server ``env``, its files under ``home``; the caller runs the
    worker (``run_worker(env.client, wired.settings)``) once its tools are registered.

    The client starts Runs without search attributes: the test server has no custom ones.

    Args:
        env: The time-skipping test server.
        home: Where the blobs and Versions are kept.
        registry: The tools, shared by the client and the worker.
        queue_prefix: The start of the task queue's name (the rest is random).
    """
    task_queue = f"{queue_prefix}-{uuid.uuid4().hex[:12]}"
    async with FakeModel() as fake:
        settings = WorkerSettings(
            task_queue=task_queue,
            registry=registry,
            blobs=LocalBlobStore(home / "blobs"),
            # Not "k": the key is redacted wherever a model sends it back, delegate's "task"
            # argument included, and a delegation without a task starts no child.
            endpoints=ModelEndpoints(
                default=Endpoint(base_url=fake.base_url, api_key="time-skipping-key")
            ),
        )
        client = PsychClient(
            env.client,
            store=FileVersionStore(home / "versions"),
            task_queue=task_queue,
            registry=registry,
            search_attributes=False,
        )
        yield Wiring(client, fake, settings)


def server_seconds(records: tuple[Record, ...]) -> float:
    """Server-clock seconds from a Run's admission to its settling, by its records."""
    admitted = next(r for r in records if isinstance(r, RunAdmitted))
    settled = next(r for r in records if isinstance(r, RunSettled))
    return (settled.at - admitted.at).total_seconds()


async def until_settled(
    env: WorkflowEnvironment,
    client: PsychClient,
    run: RunHandle,
    scope: Scope,
) -> None:
    """Let the test server's clock run ahead until the Run settles.

    The environment unlocks the clock only while a handle returned by ``start_workflow`` is
    awaited, and PsychClient waits on a handle it makes from the workflow id; so this
    unlocks it with the test service calls the SDK itself uses, and polls the Run's state.
    (Waiting in ``PsychClient.result`` also fails after 20 s there: the test server ends
    its history long poll without the continuation token a real server sends.)
    """
    service = env.client.test_service
    await service.unlock_time_skipping(UnlockTimeSkippingRequest())
    try:
        while True:
            if (await client.status(run, scope=scope)).status.terminal:
                return
            await asyncio.sleep(0.1)
    finally:
        await service.lock_time_skipping(LockTimeSkippingRequest())
