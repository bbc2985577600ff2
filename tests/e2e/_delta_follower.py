"""A follower of a Run's records and deltas in its own process.

    python -m tests.e2e._delta_follower TARGET TASK_QUEUE

connects to the Temporal server at TARGET, prints ``ready``, reads one workflow id from
standard input, then prints each item ``PsychClient.stream(..., deltas=True)`` yields as one
JSON line until the Run settles. ``spawn_follower`` starts it from a test.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import Scope
from psych_runtime.workers import connect
from psych_runtime.workflows import PsychClient
from tests.forking import aio

READY = "ready"
REPO = Path(__file__).resolve().parents[2]
SCOPE = Scope(tenant="acme", principal="tester")


async def main(target: str, task_queue: str) -> None:
    client = PsychClient(
        await connect(target, codec=None),
        store=FileVersionStore(Path(tempfile.mkdtemp())),
        task_queue=task_queue,
    )
    print(READY, flush=True)
    workflow_id = (await asyncio.to_thread(sys.stdin.readline)).strip()
    async for item in client.stream(workflow_id, scope=SCOPE, deltas=True):
        print(item.model_dump_json(), flush=True)


async def spawn_follower(target: str, task_queue: str) -> aio.Process:
    """Start a follower process (forked from the fork host, ``tests.forking``); return once
    it is connected (give it the workflow id on its standard input, then read its standard
    output to the end)."""
    proc = await aio.create_subprocess_exec(
        sys.executable,
        "-m",
        __name__,
        target,
        task_queue,
        cwd=REPO,
        stdin=aio.PIPE,
        stdout=aio.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        if line.decode().strip() != READY:
            raise RuntimeError(f"the follower process did not start: it said {line!r}")
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    return proc


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))
