"""Health of a ``psych worker`` over HTTP, and the SDK's metrics in Prometheus format.

Both are off unless a port is given (``--health-port``/``PSYCH_HEALTH_PORT``,
``--metrics-port``/``PSYCH_METRICS_PORT``): a worker started by hand on a laptop binds no
port, a fleet's orchestrator asks for them. Both bind every interface (``0.0.0.0``), since
probes and scrapes come from outside the container.

- ``GET /livez``: 200 until a Temporal Worker of the process has stopped (its poll loop
  failed for good, or it shut down), then 503, so the orchestrator restarts the process.
- ``GET /readyz``: 200 when every Worker has started polling and the Temporal server
  answers its health check; 503 otherwise (starting, stopping, or the server
  unreachable).

The metrics endpoint (``/metrics``) is served by the SDK's own Rust runtime
(``PrometheusConfig``), with Temporal's worker metrics (task slots, poll and
schedule-to-start latencies, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RPCError
from temporalio.worker import Worker

from psych_runtime.specs import SpecError

BIND_HOST = "0.0.0.0"  # probes and scrapes reach a container from outside
SERVER_CHECK_SECONDS = 2.0
"""How long readiness waits for the Temporal server's health check."""


def port_from(value: int | None, env: Mapping[str, str], name: str) -> int | None:
    """A port from the command line, else the variable ``name`` (None: off).

    Raises:
        SpecError: not a port number (1 to 65535).
    """
    text = str(value) if value is not None else env.get(name, "").strip()
    if not text:
        return None
    try:
        port = int(text)
    except ValueError:
        raise SpecError(f"{name}={text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise SpecError(f"{name}={text!r} must be a port from 1 to 65535")
    return port


def check_listen_ports(ports: Mapping[str, int | None]) -> None:
    """Refuse, before anything starts, ports (each named by where it was given) that are
    the same or that this host cannot listen on (``0.0.0.0``): the health server failed
    with a traceback once the workers were polling, the metrics one before connecting.

    Raises:
        SpecError: naming the port, where it was given and why.
    """
    seen: dict[int, str] = {}
    for where, port in ports.items():
        if port is None:
            continue
        if port in seen:
            raise SpecError(f"{seen[port]} and {where} are both port {port}: give two ports")
        seen[port] = where
        with socket.socket() as probe:
            # As the servers bind: a port left in TIME_WAIT counts as free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((BIND_HOST, port))
            except OSError as err:
                raise SpecError(
                    f"{where} {port}: cannot listen on {BIND_HOST}:{port}: {err.strerror}"
                ) from None


def metrics_runtime(port: int) -> Runtime:
    """A Temporal runtime serving the SDK's metrics at ``http://0.0.0.0:<port>/metrics``;
    connect the worker's client with it (``connect(runtime=...)``)."""
    return Runtime(
        telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"{BIND_HOST}:{port}"))
    )


class Health:
    """What the probes answer, from the running Workers and the client's server."""

    def __init__(self, client: Client, workers: Callable[[], Sequence[Worker]]) -> None:
        """Probe ``client``'s server and the Workers ``workers()`` returns at each request."""
        self._client = client
        self._workers = workers

    def live(self) -> bool:
        """No Worker has stopped (one still starting counts as live)."""
        workers = self._workers()
        return bool(workers) and not any(worker.is_shutdown for worker in workers)

    async def ready(self) -> bool:
        """Every Worker has started and the server answers its health check in time."""
        workers = self._workers()
        if not workers or not all(worker.is_running for worker in workers):
            return False
        return await server_ready(self._client)


async def server_ready(client: Client) -> bool:
    """Whether ``client``'s Temporal server answers its health check within
    ``SERVER_CHECK_SECONDS`` (what readiness needs of it: a worker's, ``psych serve``'s)."""
    try:
        return await asyncio.wait_for(client.service_client.check_health(), SERVER_CHECK_SECONDS)
    except (TimeoutError, RPCError, RuntimeError):
        # An unreachable server (the SDK's RPCError: "tcp connect error", unavailable) is
        # what readiness reports, not an error of the probe.
        return False


@contextlib.asynccontextmanager
async def serve_health(health: Health, port: int) -> AsyncIterator[asyncio.Server]:
    """Answer ``/livez`` and ``/readyz`` on ``0.0.0.0:<port>`` for the block's duration."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            # Headers are read and ignored; the probes need none.
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request.decode("latin-1").split()
            path = parts[1] if len(parts) > 1 else ""
            if path == "/livez":
                ok: bool | None = health.live()
            elif path == "/readyz":
                ok = await health.ready()
            else:
                ok = None
            status, body = (
                ("404 Not Found", "unknown path: /livez or /readyz\n")
                if ok is None
                else ("200 OK", "ok\n")
                if ok
                else ("503 Service Unavailable", "not ok\n")
            )
            data = body.encode()
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                + data
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass  # a client that sends nothing or hangs up gets no answer
        finally:
            writer.close()

    server = await asyncio.start_server(answer, BIND_HOST, port)
    try:
        yield server
    finally:
        server.close()
        await server.wait_closed()
