"""``psych worker`` and ``psych dev``: long-running processes stopped by SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit

from temporalio import activity, workflow

from psych_runtime.activities import (
    Endpoint,
    ModelEndpoints,
    policy_description,
    policy_digest,
    role_task_queue,
)
from psych_runtime.activities.egress import LOOPBACK
from psych_runtime.specs import PsychError
from psych_runtime.testing import FakeModel
from psych_runtime.workers._client import with_codec
from psych_runtime.workers._devserver import start_dev_server
from psych_runtime.workers._environment import describe_policy
from psych_runtime.workers._worker import (
    WorkerSettings,
    bound_hooks,
    run_worker,
    run_workers,
)
from psych_runtime.workers.cli._hooks import add_settings_arguments
from psych_runtime.workers.cli._runs import temporal_client, temporal_target
from psych_runtime.workers.cli._scripted_model import fake_model
from psych_runtime.workers.codec import codec_from_env
from psych_runtime.workers.fleet import Health, metrics_runtime, port_from, serve_health


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


class ConsoleFormatter(logging.Formatter):
    """One line per log record: time, level, message and the Run it concerns.

    Expected failures (a model endpoint down, a tool raising) are logged with their
    exception; on a console that meant a traceback per failed call, hundreds of lines for
    one unreachable endpoint. Without ``verbose`` the exception is one clause of the line
    (its type and message); with it the traceback follows the line.
    """

    def __init__(self, *, verbose: bool) -> None:
        super().__init__()
        self.verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line (plus its traceback when verbose)."""
        time = self.formatTime(record, "%H:%M:%S")
        line = f"{time} {record.levelname.lower()}: {record.getMessage()}"
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            line += (
                f": {type(error).__name__}: {error}" if str(error) else f": {type(error).__name__}"
            )
        context = getattr(record, "temporal_activity", None) or getattr(
            record, "temporal_workflow", None
        )
        if isinstance(context, dict) and context.get("workflow_id"):
            line += f" [{context['workflow_id']}]"
        if error is not None and self.verbose and record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def console_logging(*, verbose: bool) -> None:
    """Log to standard error one line per record (``ConsoleFormatter``), for this process.

    The Run's id moves from the message (where the SDK appends its whole context dict) to
    the line's end. ``verbose`` adds tracebacks and the SDK's debug records, among them
    the tracebacks of failures it logs at debug level (a model call's, which the workflow
    handles).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ConsoleFormatter(verbose=verbose))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    for name in ("temporalio", "psych_runtime"):
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.NOTSET)
    activity.logger.activity_info_on_message = False
    workflow.logger.workflow_info_on_message = False


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
        "PSYCH_LIVE_LISTEN": getattr(args, "live_listen", None),
        "PSYCH_LIVE_URL": getattr(args, "live_url", None),
    }
    environ.update({name: str(value) for name, value in overrides.items() if value})
    settings = WorkerSettings.from_env(environ)
    if getattr(args, "settings", None) is not None:
        settings = dataclasses.replace(settings, settings_file=args.settings)
    if getattr(args, "trust_project_settings", False):
        settings = dataclasses.replace(settings, trust_project_settings=True)
    # Bound here, so an untrusted module or a bad settings file stops the command before
    # it connects or starts a server (the worker binds the same files again: pure).
    bound_hooks(settings)
    return settings


def _on_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _print_endpoint(settings: WorkerSettings, serving: str | None) -> None:
    """One line: which endpoint serves the models; a warning when it lacks a needed key.

    A server elsewhere than this machine is taken to need a key (OpenAI's API, a gateway);
    one on loopback (a local model server) often needs none, so it gets no warning.
    """
    default = settings.endpoints.default
    if serving is not None:
        print(f"model: {serving}")
        return
    if default is None:
        print("model: no endpoint configured (every model call fails)")
        return
    from_env = "OPENAI_BASE_URL" if os.environ.get("OPENAI_BASE_URL") else "default"
    key = "key from OPENAI_API_KEY" if default.api_key else "no key"
    stream = "" if default.stream else ", no streaming (OPENAI_STREAM=0)"
    print(f"model endpoint: {default.base_url} ({from_env}; {key}{stream})")
    if default.api_key is None and not _on_loopback(default.base_url):
        print(
            f"psych: warning: OPENAI_API_KEY is unset and {default.base_url} is not on this "
            "machine, so model calls will likely be refused (401); set it, or point "
            "OPENAI_BASE_URL at your endpoint, or serve the scripted model: psych dev --fake-model",
            file=sys.stderr,
        )


@contextlib.asynccontextmanager
async def model_wiring(
    fake: tuple[FakeModel, str] | None, settings: WorkerSettings
) -> AsyncIterator[tuple[WorkerSettings, str | None]]:
    """The settings with the fake model (from ``fake_model_of``) serving every model while
    the block runs, and what serves them; without one, the settings as they are."""
    if fake is None:
        yield settings, None
        return
    model, serving = fake
    async with model:
        # The fake model needs no key; none is sent, so a real key never reaches it.
        endpoints = ModelEndpoints(default=Endpoint(model.base_url))
        yield dataclasses.replace(settings, endpoints=endpoints), f"{serving} at {model.base_url}"


_SCRIPTED = ""
"""``--fake-model`` given without a file: the scripted support model (no file has no name)."""


def fake_model_of(args: argparse.Namespace) -> tuple[FakeModel, str] | None:
    """The (stopped) fake model ``--fake-model`` asks for, its script read now, so a bad
    one is refused before any server starts; None without the option."""
    if args.fake_model is None:
        return None
    return fake_model(None if args.fake_model == _SCRIPTED else args.fake_model)


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
    console_logging(verbose=args.verbose)
    settings = settings_from(args)  # a bad --tools, --ask or script fails before connecting
    fake = fake_model_of(args)
    health_port = port_from(args.health_port, os.environ, "PSYCH_HEALTH_PORT")
    metrics_port = port_from(args.metrics_port, os.environ, "PSYCH_METRICS_PORT")
    options = {} if metrics_port is None else {"runtime": metrics_runtime(metrics_port)}
    client = await temporal_client(args, **options)
    async with (
        model_wiring(fake, settings) as (settings, serving),
        run_workers(client, settings) as workers,
        contextlib.AsyncExitStack() as probes,
    ):
        if health_port is not None:
            health = Health(client, lambda: workers)
            await probes.enter_async_context(serve_health(health, health_port))
        with stop_on_signal() as stop:
            _print_endpoint(settings, serving)
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
    console_logging(verbose=args.verbose)
    settings = settings_from(args)  # a bad --tools, --ask or script fails before the server
    # The embedded setup serves its tools and MCP servers on loopback: the operator's own.
    settings = dataclasses.replace(settings, egress=settings.egress.allowing(*LOOPBACK))
    fake = fake_model_of(args)
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
        # The keys (PSYCH_CODEC_KEYS / PSYCH_CODEC_KEY_FILE) reach the worker as they reach
        # every psych command's client: otherwise `psych run` would encrypt for a worker
        # that cannot decrypt.
        async with (
            model_wiring(fake, settings) as (settings, serving),
            run_worker(with_codec(env.client, codec_from_env()), settings),
        ):
            with stop_on_signal() as stop:
                print(f"Temporal dev server at {env.client.service_client.config.target_host}")
                if args.ui:
                    print(f"Temporal UI at http://127.0.0.1:{ui_port}")
                _print_endpoint(settings, serving)
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


def add_process_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    connection: argparse.ArgumentParser,
) -> None:
    """Add ``worker`` and ``dev`` to ``psych``."""
    wiring = argparse.ArgumentParser(add_help=False)
    wiring.add_argument(
        "--tools",
        "--registry",  # validate's and publish's old name, accepted everywhere
        dest="tools",
        help="ToolRegistry of the code tools, module:attribute or file.py:attribute "
        "(overrides PSYCH_TOOLS; --registry is the same)",
    )
    wiring.add_argument(
        "--fake-model",
        nargs="?",
        const=_SCRIPTED,
        metavar="SCRIPT",
        help="serve the models from a fake model on loopback instead of OPENAI_BASE_URL: "
        "alone, the scripted support model the demo uses; with SCRIPT, a .json/.yaml file "
        "of replies answered in order (see workers/README.md)",
    )
    wiring.add_argument(
        "--verbose",
        action="store_true",
        help="log tracebacks and the SDK's debug records (default: one line per failure)",
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
    add_settings_arguments(wiring)
    wiring.add_argument(
        "--live-listen",
        metavar="HOST:PORT",
        help="where the model calls' deltas are served to followers (env PSYCH_LIVE_LISTEN; "
        "default 127.0.0.1:0, loopback on any free port; 'off': none)",
    )
    wiring.add_argument(
        "--live-url",
        metavar="URL",
        help="the base URL followers on other machines reach --live-listen at, e.g. "
        "http://10.0.0.5:7280 (env PSYCH_LIVE_URL; default derived from --live-listen)",
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
