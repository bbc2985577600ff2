"""A versioned psych worker (every role) in its own process, of build A or of a build B
whose workflow code differs, for the Worker Versioning test.

    python -m tests.e2e._versioned_worker TARGET TASK_QUEUE BLOB_DIR MODEL_BASE_URL \
        DEPLOYMENT BUILD_ID VARIANT

``VARIANT`` ``b`` registers ``_build_b.AgentRunB`` (AgentRun with a patch marker first).
Calls of ``lookup_order`` wait for approval, so a Run can be suspended on one build while
another is promoted. Prints ``ready`` once it
polls, and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.workers import WorkerSettings, connect, run_worker
from psych_runtime.workers._environment import ask_policy
from psych_runtime.workers.fleet import deployment_version
from psych_runtime.workflows import AgentRun, WorkflowRun

from ._build_b import AgentRunB
from ._worker_proc import READY, REGISTRY


async def main(
    target: str,
    task_queue: str,
    blob_dir: str,
    model_base_url: str,
    deployment: str,
    build_id: str,
    variant: str,
) -> None:
    client = await connect(target)
    settings = WorkerSettings(
        task_queue=task_queue,
        registry=REGISTRY,
        blobs=LocalBlobStore(blob_dir),
        endpoints=ModelEndpoints(default=Endpoint(base_url=model_base_url, api_key="test-key")),
        policy=ask_policy(["lookup_order"]),
        deployment=deployment_version(deployment, build_id),
        outage_seconds=0,
    )
    workflows = [AgentRunB if variant == "b" else AgentRun, WorkflowRun]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with run_worker(client, settings, workflows=workflows):
        print(READY, flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:8]))
