"""Kill a worker process mid-call and let a worker in the test process take over.

The crash tests share this rig: ``doomed_worker`` starts a worker in its own process
(``_worker_proc``) on a task queue; the test dispatches its Runs, ``DoomedWorker.kill_when``
SIGKILLs the process once the calls it waits for are in flight, and
``DoomedWorker.survivor`` runs a worker with the same tools, blobs and model endpoint in the
test process, which finishes the Runs.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.workers import WorkerSettings, run_worker
from psych_runtime.workflows import PsychClient
from tests.forking import aio

from ._waiting import eventually
from ._worker_proc import REGISTRY, oauth_settings, spawn

IN_FLIGHT_WITHIN = 30.0
"""Wall seconds the doomed worker has to get its calls in flight."""


@dataclass
class DoomedWorker:
    """A worker process on ``task_queue``, to be killed mid-call, and a PsychClient of it."""

    client: Client
    psych: PsychClient
    """Dispatches to and reads the Runs on ``task_queue``, with ``REGISTRY``'s tools."""
    task_queue: str
    blob_dir: Path
    model_base_url: str
    proc: aio.Process

    async def kill_when(self, in_flight: Callable[[], bool]) -> float:
        """SIGKILL the process once ``in_flight()`` holds; the monotonic time it died.

        Args:
            in_flight: Whether the calls the test wants cut off have all arrived.
        """

        async def arrived() -> bool:
            return in_flight()

        await eventually(arrived, within=IN_FLIGHT_WITHIN, what="the requests to be in flight")
        os.kill(self.proc.pid, signal.SIGKILL)
        await self.proc.wait()
        return time.monotonic()

    def survivor(self) -> AbstractAsyncContextManager[Worker]:
        """Run a worker in the test process on the same task queue, tools, blobs and model.

        Like the process's, it has no server outage to survive (``outage_seconds=0``).
        """
        settings = WorkerSettings(
            task_queue=self.task_queue,
            registry=REGISTRY,
            blobs=LocalBlobStore(self.blob_dir),
            endpoints=ModelEndpoints(
                default=Endpoint(base_url=self.model_base_url, api_key="test-key")
            ),
            outage_seconds=0,
            versions=FileVersionStore(self.blob_dir.parent / "versions"),
            **oauth_settings(self.blob_dir),
        )
        return run_worker(self.client, settings)


@asynccontextmanager
async def doomed_worker(
    client: Client, task_queue: str, home: Path, model_base_url: str
) -> AsyncIterator[DoomedWorker]:
    """Start the worker process; on leaving, kill it if the test has not.

    Args:
        client: A client of the dev server both workers poll.
        task_queue: The task queue of the Runs under test.
        home: Where the Versions and the blobs both workers share are kept.
        model_base_url: The (fake) model endpoint both workers call.
    """
    psych = PsychClient(
        client, store=FileVersionStore(home / "versions"), task_queue=task_queue, registry=REGISTRY
    )
    blob_dir = home / "blobs"
    target = client.service_client.config.target_host
    proc = await spawn(target, task_queue, blob_dir, model_base_url)
    try:
        yield DoomedWorker(client, psych, task_queue, blob_dir, model_base_url, proc)
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()
