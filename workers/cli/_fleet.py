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
    outcomes: list[ReplayOutcome] = []
    files = history_files(Path(path) for path in args.histories)
    outcomes += await replay((load_history(path), str(path)) for path in files)
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


def add_fleet_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    connection: argparse.ArgumentParser,
) -> None:
    """Add ``replay`` and ``deploy promote`` to ``psych``."""
    replay_cmd = commands.add_parser(
        "replay",
        parents=[connection],
        help="replay Run histories against the installed workflow code",
        description="Replay histories (JSON files as `temporal workflow show --output json` "
        "writes them, directories of them, and/or the newest Runs of a namespace with --last) "
        "against the installed AgentRun and WorkflowRun. Prints one line per Run; exits 1 "
        "when any no longer replays, naming the Run and the event.",
    )
    replay_cmd.add_argument("histories", nargs="*", help="history .json files or directories")
    replay_cmd.add_argument(
        "--last",
        type=int,
        metavar="N",
        help="also replay the newest N Runs of each workflow type from the server",
    )
    replay_cmd.add_argument(
        "--type",
        action="append",
        choices=WORKFLOW_TYPES,
        help="with --last, only this workflow type (repeatable; default both)",
    )
    replay_cmd.set_defaults(func=cmd_replay)

    deploy = commands.add_parser("deploy", help="Worker Versioning: roll out a build")
    actions = deploy.add_subparsers(dest="action", required=True)
    promote_cmd = actions.add_parser(
        "promote",
        parents=[connection],
        help="make a build the current version of its Worker Deployment",
        description="New Runs start on the promoted build; Runs pinned to an older build "
        "finish on it, so keep its workers until they drain.",
    )
    promote_cmd.add_argument("--deployment", help="the deployment name (env PSYCH_DEPLOYMENT)")
    promote_cmd.add_argument("--build-id", help="the build to promote (env PSYCH_BUILD_ID)")
    promote_cmd.set_defaults(func=cmd_promote)
