"""A psych worker in its own process, so a test can SIGKILL it mid-call.

    python -m tests.e2e._worker_proc TARGET TASK_QUEUE BLOB_DIR MODEL_BASE_URL

connects to the Temporal server at TARGET with ``workers.connect``, runs ``run_worker`` on
TASK_QUEUE with the blob directory and model endpoint given and the code tools of
``REGISTRY`` below, prints ``ready`` once it polls, and runs until killed. ``spawn`` starts
it from a test. The test process imports ``REGISTRY`` too, so what it publishes names
exactly the tools this worker has.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psych_runtime.activities import McpSettings
from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.mcp import parse_oauth_issuers
from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import ToolRegistry
from psych_runtime.workers import WorkerSettings, connect, run_worker

if TYPE_CHECKING:
    from tests.forking import aio

READY = "ready"
REPO = Path(__file__).resolve().parents[2]

REGISTRY = ToolRegistry()


@REGISTRY.register
def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: The order's id.
    """
    return {"order_id": order_id, "status": "delivered"}


@REGISTRY.register
async def wait_for_courier(minutes: int) -> str:
    """Wait until the courier confirms (the confirmation never comes in tests).

    Args:
        minutes: How long to wait.
    """
    await asyncio.sleep(minutes * 60)
    return "confirmed"


def oauth_settings(blob_dir: Path) -> dict[str, Any]:
    """The OAuth part of the worker's settings, the same in the process and its survivor:
    tokens beside the blobs, issuers from ``PSYCH_MCP_OAUTH_ISSUERS`` (none when unset)."""
    issuers = parse_oauth_issuers(os.environ.get("PSYCH_MCP_OAUTH_ISSUERS", ""))
    return {
        "tokens": LocalTokenStore(blob_dir.parent / "tokens"),
        "mcp": McpSettings(oauth_issuers=issuers),
    }


def _tally(path: str) -> int:
    """Append a line to the file at ``path``; how many lines it has now (runs so far)."""
    with Path(path).open("a") as file:
        file.write("ran\n")
    return len(Path(path).read_text().splitlines())


@REGISTRY.register(idempotent=True, read_only=True, local_seconds=10.0)
async def count_stock(tally: str, hold: float) -> str:
    """Count the warehouse's stock (each run appends a line to ``tally``).

    Args:
        tally: The file each run of the tool appends a line to.
        hold: Seconds the first run takes; a later run answers at once.
    """
    if _tally(tally) == 1:
        await asyncio.sleep(hold)
    return "12 in stock"


@REGISTRY.register
async def ship_parcel(tally: str, hold: float) -> str:
    """Ship a parcel (each run appends a line to ``tally``).

    Args:
        tally: The file each run of the tool appends a line to.
        hold: Seconds the run takes.
    """
    _tally(tally)
    await asyncio.sleep(hold)
    return "shipped"


STICKY_TIMEOUT = timedelta(seconds=1)
"""How long the server holds a workflow task for this worker's sticky cache before giving it
to any worker on the task queue (the SDK default is 10 s). Killed, this worker never takes
it, so a shorter hold only makes crash tests faster; the hand-over itself is the same."""


async def main(target: str, task_queue: str, blob_dir: str, model_base_url: str) -> None:
    client = await connect(target)
    settings = WorkerSettings(
        task_queue=task_queue,
        registry=REGISTRY,
        blobs=LocalBlobStore(blob_dir),
        endpoints=ModelEndpoints(default=Endpoint(base_url=model_base_url, api_key="test-key")),
        # No server outage to survive here: a killed worker's calls not safe to repeat are
        # settled after the default 10 s heartbeat timeout instead of outage + margin.
        outage_seconds=0,
        # Beside the blobs, where the crash rig's PsychClient publishes (spawned children).
        versions=FileVersionStore(Path(blob_dir).parent / "versions"),
        **oauth_settings(Path(blob_dir)),
    )
    async with run_worker(client, settings, sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT):
        print(READY, flush=True)
        await asyncio.Event().wait()


async def spawn(target: str, task_queue: str, blob_dir: Path, model_base_url: str) -> aio.Process:
    """Start this worker in a child process (forked from the fork host, ``tests.forking``:
    its own process, without a fresh interpreter's imports); return once it polls.

    The caller kills it by its pid (``os.kill(proc.pid, SIGKILL)``) when done.
    """
    # Here, not at the top: a ``psych worker`` loads this file as its tools
    # (tests/e2e/test_s3_fleet.py), where ``tests`` is no package on its path.
    from tests.forking import aio

    proc = await aio.create_subprocess_exec(
        sys.executable,
        "-m",
        __name__,
        target,
        task_queue,
        str(blob_dir),
        model_base_url,
        cwd=REPO,
        stdout=aio.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        if line.decode().strip() != READY:
            raise RuntimeError(f"the worker process did not start: it said {line!r}")
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    return proc


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
