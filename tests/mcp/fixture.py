"""Start the scriptable MCP server (``tests.mcp.server``) in its own process, for tests.

``start_mcp_server(transport)`` returns an ``McpTestServer`` once the server listens; its
methods read the server's control surface. ``mcp_http_server`` and ``mcp_sse_server`` are
pytest fixtures (re-exported by ``tests/conftest.py``): one server process per test module,
reset before each test.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import httpx
import pytest

from tests.forking.client import ForkedProcess, spawn

REPO = Path(__file__).resolve().parents[2]
Transport = Literal["streamable-http", "sse"]
START_TIMEOUT = 30.0
"""Seconds a server may take to print its port: importing the SDK and uvicorn on a busy
2-core machine takes a few."""
STOP_TIMEOUT = 5.0


@dataclass
class McpTestServer:
    """A running ``tests.mcp.server`` process and its control surface."""

    transport: Transport
    """``streamable-http`` or ``sse``."""
    port: int
    """The loopback port it listens on."""
    process: ForkedProcess
    log: IO[bytes]
    """The process's stderr, kept for the failure message of a test that needs it."""
    _control: httpx.Client = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._control = httpx.Client(base_url=self.base_url, timeout=10.0)

    @property
    def pid(self) -> int:
        """The server process's id (a test may signal it, e.g. to play an outage)."""
        return self.process.pid

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The MCP endpoint a client connects to: ``/mcp`` or ``/sse`` by transport."""
        return self.base_url + ("/sse" if self.transport == "sse" else "/mcp")

    def state(self) -> dict[str, Any]:
        """Everything ``/control/state`` reports (see ``tests.mcp.server``)."""
        response = self._control.get("/control/state")
        response.raise_for_status()
        state: dict[str, Any] = response.json()
        return state

    def calls(self, tool: str) -> int:
        """How many ``tools/call`` requests named ``tool`` reached the server."""
        count: int = self.state()["calls"].get(tool, 0)
        return count

    def bearers(self) -> dict[str, list[str]]:
        """The bearer tokens seen, per MCP session id."""
        bearers: dict[str, list[str]] = self.state()["bearers"]
        return bearers

    def cancellations(self) -> list[dict[str, str | None]]:
        """Every ``notifications/cancelled`` received: ``request_id``, ``reason``, ``tool``
        (``slow`` when it named a ``slow`` call still running)."""
        cancellations: list[dict[str, str | None]] = self.state()["cancellations"]
        return cancellations

    def interrupted(self) -> list[str]:
        """Tools whose running call the server abandoned because the client cancelled it."""
        interrupted: list[str] = self.state()["interrupted"]
        return interrupted

    def meta_keys(self) -> dict[str, list[str]]:
        """Per JSON-RPC method, the keys the requests' ``_meta`` carried."""
        meta: dict[str, list[str]] = self.state()["meta"]
        return meta

    def add_tool(self, name: str) -> int:
        """Register a tool ``name`` (it echoes ``text``) and send ``tools/list_changed`` to
        every open session; return how many sessions were told."""
        response = self._control.post("/control/add_tool", content=json.dumps({"name": name}))
        response.raise_for_status()
        notified: int = response.json()["notified"]
        return notified

    def garble(self) -> int:
        """Write an event no client can read on every open event stream of a GET (SSE's
        ``/sse``); return on how many."""
        response = self._control.post("/control/garble")
        response.raise_for_status()
        garbled: int = response.json()["garbled"]
        return garbled

    def refuse(self, *methods: str, status: int = 503, location: str | None = None) -> None:
        """Answer 503 (or ``status``, with ``location`` as its ``Location`` when given) to
        every MCP POST carrying one of ``methods`` (none: end it)."""
        asked: dict[str, object] = {"methods": list(methods), "status": status}
        if location is not None:
            asked["location"] = location
        body = json.dumps(asked)
        self._control.post("/control/refuse", content=body).raise_for_status()

    def reset(self) -> None:
        """Forget calls, bearers, cancellations and added tools."""
        self._control.post("/control/reset").raise_for_status()

    def stderr(self) -> str:
        """What the server wrote to stderr so far."""
        return server_stderr(self.log)

    def stop(self) -> None:
        """Stop this server's own process (SIGTERM, SIGKILL after a grace period)."""
        self._control.close()
        stop_process(self.process, self.log)


def server_stderr(log: IO[bytes]) -> str:
    """What a server process wrote to its stderr log so far."""
    log.flush()
    return Path(log.name).read_text(errors="replace")


def stop_process(process: ForkedProcess, log: IO[bytes]) -> None:
    """Stop a server's own process (SIGTERM, SIGKILL after a grace period), then close and
    remove its stderr log."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(STOP_TIMEOUT)
    if process.stdout is not None:
        process.stdout.close()
    log.close()
    Path(log.name).unlink(missing_ok=True)


def start_mcp_server(
    transport: Transport,
    *,
    filler: int = 0,
    require_bearer: bool = False,
    json_response: bool = False,
    resumable: bool = False,
) -> McpTestServer:
    """Start ``tests.mcp.server`` on 127.0.0.1 and a free port; return once it listens.

    Args:
        transport: ``streamable-http`` (``/mcp``) or ``sse`` (``/sse``).
        filler: How many ``filler_NNN`` tools with long descriptions to add.
        require_bearer: Answer 401 to MCP requests without a bearer token.
        json_response: Answer streamable HTTP POSTs with a JSON body (read whole, so bounded
            by the egress policy's ``max_response_bytes``), not an event stream.
        resumable: Keep events so a client resumes a dropped event stream (streamable
            HTTP), and offer ``dropped(seconds)``, which drops its own.

    The caller stops it with ``stop()``.
    """
    args = ["--transport", transport]
    args += ["--filler", str(filler)]
    if require_bearer:
        args.append("--require-bearer")
    if json_response:
        args.append("--json-response")
    if resumable:
        args.append("--resumable")
    log = tempfile.NamedTemporaryFile(prefix="mcp-server-", suffix=".log", delete=False)  # noqa: SIM115
    process = spawn("tests.mcp.server", args, stderr=log)
    try:
        port = _read_port(process, Path(log.name))
    except BaseException:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(STOP_TIMEOUT)
        log.close()
        raise
    return McpTestServer(transport=transport, port=port, process=process, log=log)


def _read_port(process: ForkedProcess, log: Path) -> int:
    assert process.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(left):
                break
            line = process.stdout.readline().decode()
            if not line:
                break
            if line.startswith("port "):
                return int(line.split()[1])
    raise RuntimeError(
        f"the MCP test server did not start (exit code {process.poll()}): {log.read_text()}"
    )


@pytest.fixture(scope="module")
def _mcp_http_process() -> Iterator[McpTestServer]:
    server = start_mcp_server("streamable-http")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def _mcp_sse_process() -> Iterator[McpTestServer]:
    server = start_mcp_server("sse")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mcp_http_server(_mcp_http_process: McpTestServer) -> McpTestServer:
    """The module's streamable-HTTP test server, reset for this test."""
    _mcp_http_process.reset()
    return _mcp_http_process


@pytest.fixture
def mcp_sse_server(_mcp_sse_process: McpTestServer) -> McpTestServer:
    """The module's SSE test server, reset for this test."""
    _mcp_sse_process.reset()
    return _mcp_sse_process
