"""``psych worker --role ...`` in its own process, as an operator starts one per role.

``spawn_role`` runs ``python -m psych_runtime.workers.cli`` in the repository (forked from
the fork host, ``tests.forking``: its own process, without a fresh interpreter's imports)
against the test's dev server, with the code tools of ``_worker_proc.REGISTRY``, the blob
directory and the (fake) model endpoint given through the environment, and returns once it
polls. The caller stops it by its pid
(``stop``: SIGTERM, or SIGKILL to crash it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.forking import aio

from ._worker_proc import REPO

PSYCH = (sys.executable, "-m", "psych_runtime.workers.cli")
READY_PREFIX = "worker polling "


async def spawn_role(
    target: str,
    task_queue: str,
    roles: tuple[str, ...],
    blob_dir: Path,
    model_base_url: str,
    *,
    extra_args: tuple[str, ...] = (),
    extra_env: Mapping[str, str] | None = None,
) -> aio.Process:
    """Start ``psych worker`` with ``roles`` on the fleet ``task_queue``; return once its
    "worker polling" line is printed (it polls then)."""
    env = {
        **os.environ,
        "PSYCH_TOOLS": "tests.e2e._worker_proc:REGISTRY",
        "PSYCH_BLOB_DIR": str(blob_dir),
        "PSYCH_OUTAGE_SECONDS": "0",
        "OPENAI_BASE_URL": model_base_url,
        "OPENAI_API_KEY": "test-key",
        **(extra_env or {}),
    }
    args = [*PSYCH, "worker", "--address", target, "--task-queue", task_queue]
    for role in roles:
        args += ["--role", role]
    # The working directory is sys.path[0]: the tools' module imports from there.
    proc = await aio.create_subprocess_exec(*args, *extra_args, cwd=REPO, env=env, stdout=aio.PIPE)
    said: list[str] = []
    try:
        assert proc.stdout is not None
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), timeout=60)).decode()
            if not line:
                raise RuntimeError(f"psych worker {roles} exited before polling: {said!r}")
            said.append(line)
            if line.startswith(READY_PREFIX):
                return proc
    except BaseException:
        await stop(proc, signal.SIGKILL)
        raise


async def stop(proc: aio.Child, signum: int = signal.SIGTERM) -> None:
    """Stop the worker (if it still runs) and wait for it."""
    if proc.returncode is None:
        os.kill(proc.pid, signum)
    await proc.wait()
