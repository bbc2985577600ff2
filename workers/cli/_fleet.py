"""``psych replay`` and ``psych deploy promote``: checking and rolling out a build."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

from temporalio.client import WorkflowHistory

from psych_runtime.specs import PsychError
from psych_runtime.workers.cli._runs import temporal_client
from psych_runtime.workers.fleet import (
    WORKFLOW_TYPES,
    ReplayOutcome,
    deployment_version,
    history_files,
    load_history,
    promote,
    recent_histories,
    replay,
)


async def _replay(args: argparse.Namespace) -> int:
    if not args.histories and args.last is None:
        raise PsychError("nothing to replay: give history files or directories, or --last N")
    if args.type and args.last is None:
        # It was ignored: `replay FILE --type WorkflowRun` replayed the AgentRun of FILE.
        raise PsychError("--type chooses among the newest Runs of --last N; give --last too")
    outcomes: list[ReplayOutcome] = []
    files = history_files(Path(path) for path in args.histories)
    # Every file is read and checked before the first is replayed: a file that is not a
    # history is one line naming it, not a traceback after minutes of replaying the others.
    loaded = [(load_history(path), str(path)) for path in files]
    outcomes += await replay(loaded)
    if args.last is not None:
        client = await temporal_client(args)
        source = f"namespace {client.namespace}"

        async def fetched() -> AsyncIterator[tuple[WorkflowHistory, str]]:
            async for history in recent_histories(client, args.last, args.type or WORKFLOW_TYPES):
                yield history, source

        outcomes += await replay(fetched())
    failed = [outcome for outcome in outcomes if outcome.failure is not None]
    for outcome in outcomes:
        if outcome.failure is None:
            print(f"ok {outcome.run} ({outcome.source})")
        else:
            print(f"FAILED {outcome.run} ({outcome.source}): {outcome.failure}")
    print(f"replayed {len(outcomes)} histories: {len(failed)} failed", flush=True)
    return 1 if failed else 0


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay histories against the installed workflows; exit 1 if any fails."""
    return asyncio.run(_replay(args))


async def _promote(args: argparse.Namespace) -> int:
    version = deployment_version(
        args.deployment or os.environ.get("PSYCH_DEPLOYMENT"),
        args.build_id or os.environ.get("PSYCH_BUILD_ID"),
    )
    if version is None:
        raise PsychError("give --deployment and --build-id (or PSYCH_DEPLOYMENT, PSYCH_BUILD_ID)")
    client = await temporal_client(args)
    await promote(client, version, identity=f"psych@{socket.gethostname()}:{os.getpid()}")
    print(
        f"build {version.build_id} is the current version of deployment "
        f"{version.deployment_name}: new Runs start on it; Runs pinned to other builds "
        "finish where they started"
    )
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    """Make a build the current version of its Worker Deployment."""
    return asyncio.run(_promote(args))
