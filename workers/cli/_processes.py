"""``psych worker`` and ``psych dev``: long-running processes stopped by SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import os
import re
import signal
import sys
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from psych_runtime.activities import (
    Endpoint,
    ModelEndpoints,
    policy_description,
    policy_digest,
    role_task_queue,
)
from psych_runtime.activities.contract import MODEL_ROLE
from psych_runtime.activities.egress import LOOPBACK
from psych_runtime.specs import PsychError, SpecError
from psych_runtime.testing import FakeModel
from psych_runtime.workers._client import with_codec
from psych_runtime.workers._devserver import db_lock, start_dev_server
from psych_runtime.workers._environment import describe_policy, seconds_from
from psych_runtime.workers._gc import tune_gc_for_serving
from psych_runtime.workers._telemetry import telemetry_from_env
from psych_runtime.workers._worker import (
    WorkerSettings,
    bound_hooks,
    run_worker,
    run_workers,
)
from psych_runtime.workers.cli._logging import console_logging
from psych_runtime.workers.cli._parser_serving import SCRIPTED_SUPPORT
from psych_runtime.workers.cli._runs import temporal_client, temporal_target
from psych_runtime.workers.cli._scripted_model import fake_model
from psych_runtime.workers.cli._stores import closing_stores
from psych_runtime.workers.codec import codec_from_env
from psych_runtime.workers.fleet import (
    Health,
    check_listen_ports,
    metrics_runtime,
    port_from,
    serve_health,
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


async def _terminable(command: Coroutine[Any, Any, int]) -> int:
    """``command``, whose start-up SIGTERM interrupts as Ctrl-C does.

    Until the command enters ``stop_on_signal``, SIGTERM had its default action: the
    process died at once (exit 143), leaving the dev server it was starting running with
    no owner, on its port and its ``--db`` file (whose lock died with the process, so the
    next ``psych dev --db`` would start a second server on it). Here SIGTERM cancels the
    start-up, so what was started is stopped, and the command ends as on Ctrl-C
    ("psych: interrupted", 130).
    """
    if threading.current_thread() is not threading.main_thread():
        # Signals reach the main thread only (asyncio.Runner skips its SIGINT handler
        # likewise): `main` called from another thread has none to handle.
        return await command
    task = asyncio.current_task()
    assert task is not None
    terminated: list[bool] = []

    def terminate() -> None:
        terminated.append(True)
        task.cancel()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, terminate)
    try:
        return await command
    except asyncio.CancelledError:
        if terminated:
            raise _Terminated from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


SHUTDOWN_GRACE = timedelta(seconds=30)
"""How long a stopping ``psych worker`` (SIGTERM: a deploy, a scale-down) lets its running
calls finish before cancelling them, unless ``PSYCH_SHUTDOWN_GRACE_SECONDS`` says (0: at
once; a call safe to repeat then runs again on another worker). Before 12-06 there was
none, the SDK's default, and the model read each running call's WorkerShutdown as the
tool's error (deploy/'s grace periods count the 30 s)."""

SHUTDOWN_GRACE_ENV = "PSYCH_SHUTDOWN_GRACE_SECONDS"


class _Terminated(Exception):
    """SIGTERM arrived while the command started (``_terminable``)."""


def _until_stopped(command: Coroutine[Any, Any, int]) -> int:
    try:
        return asyncio.run(_terminable(command))
    except _Terminated:
        raise KeyboardInterrupt from None


_FLAGS = {
    "PSYCH_TOOLS": ("--tools", "tools"),
    "PSYCH_TASK_QUEUE": ("--task-queue", "task_queue"),
    "PSYCH_ASK": ("--ask", "ask"),
    "PSYCH_ROLES": ("--role", "role"),
    "PSYCH_MAX_WORKFLOW_TASKS": ("--max-workflow-tasks", "max_workflow_tasks"),
    "PSYCH_MAX_MODEL_CALLS": ("--max-model-calls", "max_model_calls"),
    "PSYCH_MAX_TOOL_CALLS": ("--max-tool-calls", "max_tool_calls"),
    "PSYCH_DEPLOYMENT": ("--deployment", "deployment"),
    "PSYCH_BUILD_ID": ("--build-id", "build_id"),
    "PSYCH_LIVE_LISTEN": ("--live-listen", "live_listen"),
    "PSYCH_LIVE_URL": ("--live-url", "live_url"),
}
"""The worker flags that stand for a ``PSYCH_*`` variable: (flag, its ``args`` name)."""


def _as_given(message: str, given: Mapping[str, str]) -> str:
    """``message`` of ``WorkerSettings.from_env`` naming the flag, not the variable, for
    each variable ``given`` set from a flag: the person typed ``--max-model-calls 0``, and
    set no ``PSYCH_MAX_MODEL_CALLS``. (The settings read one environment, so flags are
    passed on as variables; the names are put back here rather than threaded through
    every parser of a ``PSYCH_*`` value.)"""
    for name in given:
        flag = _FLAGS[name][0]
        message = message.replace(f"{flag}/{name}", flag)  # "--deployment/PSYCH_DEPLOYMENT"
        message = re.sub(rf"\b{name}=", f"{flag} ", message)
        message = re.sub(rf"\b{name}\b", flag, message)
    return message


def _listed(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else [value]


def settings_from(args: argparse.Namespace) -> WorkerSettings:
    """``WorkerSettings.from_env`` with the command line's overrides applied.

    ``--ask`` (all of them) replaces ``PSYCH_ASK``; ``--ask-destructive`` sets
    ``PSYCH_ASK_DESTRUCTIVE``.
    """
    for flag, attribute in _FLAGS.values():
        given = getattr(args, attribute, None)
        if any(isinstance(value, str) and not value.strip() for value in _listed(given)):
            # `--task-queue "$QUEUE"` with QUEUE unset joined the default fleet, `--ask
            # "$TOOL"` ran with nothing asked: an empty value was taken for no flag.
            raise SpecError(f"{flag}: an empty value (give one, or leave {flag} out)")
    environ = dict(os.environ)
    if args.ask_destructive:
        environ["PSYCH_ASK_DESTRUCTIVE"] = "1"
    values: dict[str, object] = {
        name: getattr(args, attribute, None) for name, (_, attribute) in _FLAGS.items()
    }
    values["PSYCH_ASK"] = ",".join(args.ask or [])
    values["PSYCH_ROLES"] = ",".join(getattr(args, "role", None) or [])
    # A flag given is passed on as given (0 too, which the settings then refuse, rather
    # than running with the default); an empty list (of roles, patterns) is no flag.
    given = {name: str(value) for name, value in values.items() if value not in (None, "")}
    environ.update(given)
    try:
        settings = WorkerSettings.from_env(environ)
    except SpecError as err:
        raise SpecError(_as_given(str(err), given)) from err
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
    one on loopback (a local model server) often needs none, so it gets no warning. A
    worker without the model role makes no model call: it says so, and nothing of a key.
    """
    default = settings.endpoints.default
    if MODEL_ROLE not in settings.roles:
        print(f"model: no model calls on this worker (roles {', '.join(settings.roles)})")
        return
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


def fake_model_of(args: argparse.Namespace) -> tuple[FakeModel, str] | None:
    """The (stopped) fake model ``--fake-model`` asks for, its script read now, so a bad
    one is refused before any server starts; None without the option."""
    if args.fake_model is None:
        return None
    return fake_model(None if args.fake_model == SCRIPTED_SUPPORT else args.fake_model)


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
    console_logging(verbose=args.verbose, quiet=args.quiet)
    settings = settings_from(args)  # a bad --tools, --ask or script fails before connecting
    # The stores it built from the environment (S3's hold connections), closed once its
    # workers have stopped, or when it fails.
    async with closing_stores(settings.blobs, settings.tokens, settings.versions):
        await _work(args, settings)
    print("worker stopped", flush=True)
    return 0


async def _work(args: argparse.Namespace, settings: WorkerSettings) -> None:
    """``psych worker``'s workers (and probes) with ``settings``, until SIGINT or SIGTERM."""
    fake = fake_model_of(args)
    health_port = port_from(args.health_port, os.environ, "PSYCH_HEALTH_PORT")
    metrics_port = port_from(args.metrics_port, os.environ, "PSYCH_METRICS_PORT")
    check_listen_ports(
        {
            "--health-port" if args.health_port is not None else "PSYCH_HEALTH_PORT": health_port,
            "--metrics-port" if args.metrics_port is not None else "PSYCH_METRICS_PORT": (
                metrics_port
            ),
        }
    )
    grace = seconds_from(SHUTDOWN_GRACE_ENV, os.environ, SHUTDOWN_GRACE.total_seconds())
    options = {} if metrics_port is None else {"runtime": metrics_runtime(metrics_port)}
    client = await temporal_client(args, **options)
    async with (
        model_wiring(fake, settings) as (settings, serving),
        run_workers(
            client, settings, graceful_shutdown_timeout=timedelta(seconds=grace)
        ) as workers,
        contextlib.AsyncExitStack() as probes,
    ):
        if health_port is not None:
            health = Health(client, lambda: workers)
            await probes.enter_async_context(serve_health(health, health_port))
        tune_gc_for_serving()  # the start-up heap is built: out of the collector's sight
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


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a psych worker until SIGINT or SIGTERM."""
    return _until_stopped(_worker(args))


async def _dev(args: argparse.Namespace) -> int:
    console_logging(verbose=args.verbose, quiet=args.quiet)
    settings = settings_from(args)  # a bad --tools, --ask or script fails before the server
    # The OTEL_* variables, as `psych worker` reads them when it connects: the dev server's
    # client is not connected through `connect`, and its worker adds the plugins itself.
    telemetry_from_env()
    if settings.deployment is not None:
        # Its fresh server has no current build, so a versioned worker would start no Run.
        print(
            "psych: warning: PSYCH_DEPLOYMENT and PSYCH_BUILD_ID are ignored: psych dev runs "
            "an unversioned worker (Worker Versioning is `psych worker`'s)",
            file=sys.stderr,
        )
        settings = dataclasses.replace(settings, deployment=None)
    # The embedded setup serves its tools and MCP servers on loopback: the operator's own.
    settings = dataclasses.replace(settings, egress=settings.egress.allowing(*LOOPBACK))
    fake = fake_model_of(args)
    ui_port = args.ui_port if args.ui_port is not None else args.port + 1000
    if args.ui and ui_port > 65535:
        raise PsychError(f"--port {args.port} + 1000 is no port for the UI: give --ui-port")
    with db_lock(args.db) if args.db is not None else contextlib.nullcontext():
        # As `psych worker`, it closes the stores it built from the environment.
        async with closing_stores(settings.blobs, settings.tokens, settings.versions):
            return await _dev_on(args, settings, fake, ui_port)


async def _dev_on(
    args: argparse.Namespace,
    settings: WorkerSettings,
    fake: tuple[FakeModel, str] | None,
    ui_port: int,
) -> int:
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
            tune_gc_for_serving()
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
    return _until_stopped(_dev(args))
