"""``psych worker`` and ``psych dev``: long-running processes stopped by SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator

from psych_runtime.activities import policy_description, policy_digest, role_task_queue
from psych_runtime.specs import PsychError
from psych_runtime.workers._cli_runs import temporal_client, temporal_target
from psych_runtime.workers._devserver import start_dev_server
from psych_runtime.workers._health import Health, metrics_runtime, port_from, serve_health
from psych_runtime.workers._worker import (
    WorkerSettings,
    describe_policy,
    run_worker,
    run_workers,
)


@contextlib.contextmanager
def stop_on_signal() -> Iterator[asyncio.Event]:
    """An event set when the process receives SIGINT or SIGTERM, for the block's duration.

    Entered before the "Ctrl-C to stop" line is printed: a signal sent as soon as that
    line is read must stop the process cleanly, not interrupt it.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        loop.add_signal_handler(signum, stop.set)
    try:
        yield stop
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)


def settings_from(args: argparse.Namespace) -> WorkerSettings:
    """``WorkerSettings.from_env`` with the command line's overrides applied.

    ``--ask`` (all of them) replaces ``PSYCH_ASK``; ``--ask-destructive`` sets
    ``PSYCH_ASK_DESTRUCTIVE``.
    """
    environ = dict(os.environ)
    if args.tools:
        environ["PSYCH_TOOLS"] = args.tools
    if args.task_queue:
        environ["PSYCH_TASK_QUEUE"] = args.task_queue
    if args.ask:
        environ["PSYCH_ASK"] = ",".join(args.ask)
    if args.ask_destructive:
        environ["PSYCH_ASK_DESTRUCTIVE"] = "1"
    overrides = {
        "PSYCH_ROLES": ",".join(getattr(args, "role", None) or []),
        "PSYCH_MAX_WORKFLOW_TASKS": getattr(args, "max_workflow_tasks", None),
        "PSYCH_MAX_MODEL_CALLS": getattr(args, "max_model_calls", None),
        "PSYCH_MAX_TOOL_CALLS": getattr(args, "max_tool_calls", None),
        "PSYCH_DEPLOYMENT": getattr(args, "deployment", None),
        "PSYCH_BUILD_ID": getattr(args, "build_id", None),
    }
    environ.update({name: str(value) for name, value in overrides.items() if value})
    return WorkerSettings.from_env(environ)


def _queues(settings: WorkerSettings) -> str:
    return ", ".join(
        f"{role} on {role_task_queue(settings.task_queue, role)!r}" for role in settings.roles
    )


def _print_policy(settings: WorkerSettings) -> None:
    # One line: what the worker's policy is (the digest its identity carries, which other
    # workers of the queue compare), and what waits for a person under it.
    policy = settings.policy
    line = f"policy {policy_digest(policy)}: {policy_description(policy)}"
    asked = describe_policy(policy)
    if asked:
        line += f"; approval needed for: {asked} (psych list --suspended; psych approve)"
    print(line)


async def _worker(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    health_port = port_from(args.health_port, os.environ, "PSYCH_HEALTH_PORT")
    metrics_port = port_from(args.metrics_port, os.environ, "PSYCH_METRICS_PORT")
    options = {} if metrics_port is None else {"runtime": metrics_runtime(metrics_port)}
    client = await temporal_client(args, **options)
    async with run_workers(client, settings) as workers, contextlib.AsyncExitStack() as probes:
        if health_port is not None:
            health = Health(client, lambda: workers)
            await probes.enter_async_context(serve_health(health, health_port))
        with stop_on_signal() as stop:
            _print_policy(settings)
            if settings.deployment is not None:
                print(
                    f"deployment {settings.deployment.deployment_name}, build "
                    f"{settings.deployment.build_id} (Runs pinned to it; psych deploy promote)"
                )
            for port, what in ((health_port, "/livez and /readyz"), (metrics_port, "/metrics")):
                if port is not None:
                    print(f"{what} on http://0.0.0.0:{port}")
            print(
                f"worker polling {_queues(settings)} at {temporal_target(args)} "
                f"(namespace {client.namespace}); Ctrl-C to stop",
                flush=True,
            )
            await stop.wait()
    print("worker stopped", flush=True)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a psych worker until SIGINT or SIGTERM."""
    return asyncio.run(_worker(args))


async def _dev(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    ui_port = args.ui_port if args.ui_port is not None else args.port + 1000
    try:
        env = await start_dev_server(
            port=args.port, ui=args.ui, ui_port=ui_port if args.ui else None, db_file=args.db
        )
    except RuntimeError as err:
        raise PsychError(
            f"cannot start the Temporal dev server on port {args.port}: {err}"
        ) from err
    try:
        async with run_worker(env.client, settings):
            with stop_on_signal() as stop:
                print(f"Temporal dev server at {env.client.service_client.config.target_host}")
                if args.ui:
                    print(f"Temporal UI at http://127.0.0.1:{ui_port}")
                _print_policy(settings)
                print(f"worker polling {_queues(settings)}; Ctrl-C to stop", flush=True)
                await stop.wait()
    finally:
        await env.shutdown()
    print("worker and dev server stopped", flush=True)
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    """Run the embedded Temporal dev server and a worker until SIGINT or SIGTERM."""
    return asyncio.run(_dev(args))


def add_serve_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    connection: argparse.ArgumentParser,
) -> None:
    """Add ``worker`` and ``dev`` to ``psych``."""
    wiring = argparse.ArgumentParser(add_help=False)
    wiring.add_argument(
        "--tools",
        help="ToolRegistry of the code tools, module:attribute or file.py:attribute "
        "(overrides PSYCH_TOOLS)",
    )
    wiring.add_argument(
        "--task-queue", help="the task queue to poll (overrides PSYCH_TASK_QUEUE, default psych)"
    )
    wiring.add_argument(
        "--ask",
        action="append",
        metavar="TOOL_PATTERN",
        help="a person must approve each call of this tool before it runs: a name, or a "
        "prefix ending in '*' (repeatable; replaces PSYCH_ASK, comma-separated patterns)",
    )
    wiring.add_argument(
        "--ask-destructive",
        action="store_true",
        help="a person must approve each call of a tool registered destructive=True "
        "(env PSYCH_ASK_DESTRUCTIVE=1)",
    )

    worker = commands.add_parser(
        "worker",
        parents=[connection, wiring],
        help="run a worker against a Temporal server",
        description="Run a psych worker until SIGINT/SIGTERM. The server comes from "
        "TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS* (or --address/"
        "--namespace); the wiring from PSYCH_TOOLS, PSYCH_TASK_QUEUE, PSYCH_BLOB_URL or "
        "PSYCH_BLOB_DIR, "
        "OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_STREAM; which tool calls wait for a "
        "person's approval from PSYCH_ASK and PSYCH_ASK_DESTRUCTIVE (or --ask/--ask-destructive).",
    )
    worker.add_argument(
        "--role",
        action="append",
        choices=["workflows", "model", "tools", "all"],
        help="what this worker runs, each role on its own task queue: workflows on the base "
        "queue, model calls on <base>-model, tools on <base>-tools (repeatable; replaces "
        "PSYCH_ROLES, comma-separated; default all)",
    )
    worker.add_argument(
        "--max-workflow-tasks",
        type=int,
        help="workflow tasks at once, workflows role (env PSYCH_MAX_WORKFLOW_TASKS, default 100)",
    )
    worker.add_argument(
        "--max-model-calls",
        type=int,
        help="model calls at once, model role (env PSYCH_MAX_MODEL_CALLS, default 100)",
    )
    worker.add_argument(
        "--max-tool-calls",
        type=int,
        help="tool calls at once, tools role (env PSYCH_MAX_TOOL_CALLS, default 100)",
    )
    worker.add_argument(
        "--deployment",
        help="Worker Versioning: the Worker Deployment this worker belongs to (env "
        "PSYCH_DEPLOYMENT; with --build-id; default unversioned)",
    )
    worker.add_argument(
        "--build-id", help="Worker Versioning: this worker's build (env PSYCH_BUILD_ID)"
    )
    worker.add_argument(
        "--health-port",
        type=int,
        help="serve /livez and /readyz on this port (env PSYCH_HEALTH_PORT; default off)",
    )
    worker.add_argument(
        "--metrics-port",
        type=int,
        help="serve the SDK's Prometheus metrics at /metrics on this port "
        "(env PSYCH_METRICS_PORT; default off)",
    )
    worker.set_defaults(func=cmd_worker)

    dev = commands.add_parser(
        "dev",
        parents=[wiring],
        help="run a local Temporal dev server and a worker",
        description="Start the embedded Temporal dev server and a worker in this process; "
        "stop both on SIGINT/SIGTERM.",
    )
    dev.add_argument("--port", type=int, default=7233, help="the server's port (default 7233)")
    dev.add_argument("--ui", action="store_true", help="also serve the Temporal web UI")
    dev.add_argument("--ui-port", type=int, help="the UI's port (default: --port + 1000)")
    dev.add_argument("--db", metavar="FILE", help="keep the server's state in this SQLite file")
    dev.set_defaults(func=cmd_dev)
