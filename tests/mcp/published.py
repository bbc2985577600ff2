"""A published MCP server from PyPI, nobody here wrote, started on loopback for tests.

The server is ``mcp-server-time`` (the MCP project's reference time server: tools
``get_current_time`` and ``convert_time``, no network needed). It speaks stdio only, so
``fastmcp run`` (a published proxy) serves it over streamable HTTP or SSE: the proxy starts
the time server as its child and forwards every request. Both are in the dev extras.

``start_published_mcp_server(transport)`` returns once the proxy listens; ``stop()`` ends
the proxy and its child (they run in a process group of their own, started here).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.mcp.fixture import START_TIMEOUT, STOP_TIMEOUT, Transport

TOOLS = ("convert_time", "get_current_time")
"""The tools ``mcp-server-time`` offers."""

# uvicorn logs the port it bound (the proxy is asked for port 0) on this line.
LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


@dataclass
class PublishedMcpServer:
    """A running proxy in front of ``mcp-server-time``."""

    transport: Transport
    port: int
    process: subprocess.Popen[bytes]
    workdir: Path
    """Holds the proxy's configuration and its log; removed by ``stop()``."""

    @property
    def pid(self) -> int:
        """The proxy's process id (also its process group's)."""
        return self.process.pid

    @property
    def url(self) -> str:
        """The MCP endpoint: ``/mcp`` or ``/sse`` by transport."""
        path = "/sse" if self.transport == "sse" else "/mcp"
        return f"http://127.0.0.1:{self.port}{path}"

    def log(self) -> str:
        """What the proxy and the time server wrote to stderr so far."""
        return (self.workdir / "stderr.log").read_text(errors="replace")

    def stop(self) -> None:
        """End the proxy and the time server it started (SIGTERM, then SIGKILL)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(STOP_TIMEOUT)
        _kill_group_leftovers(self.process.pid)
        for path in self.workdir.iterdir():
            path.unlink()
        self.workdir.rmdir()


def _kill_group_leftovers(pgid: int) -> None:
    # The time server exits when its stdin closes; should it outlive the proxy, it is still
    # in the group this module created, and nothing else is.
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return


def start_published_mcp_server(transport: Transport = "streamable-http") -> PublishedMcpServer:
    """Start ``mcp-server-time`` behind ``fastmcp run`` on 127.0.0.1 and a free port.

    Args:
        transport: ``streamable-http`` (``/mcp``) or ``sse`` (``/sse``).

    Raises:
        RuntimeError: The proxy did not report its port in time (its log is in the message).
    """
    proxy = Path(sys.executable).with_name("fastmcp")
    if not proxy.exists():
        raise RuntimeError(f"{proxy} is missing: the dev extras install fastmcp (make setup)")
    workdir = Path(tempfile.mkdtemp(prefix="published-mcp-"))
    config = workdir / "mcp.json"
    time_args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
    time_server = {"command": sys.executable, "args": time_args}
    config.write_text(json.dumps({"mcpServers": {"time": time_server}}))
    command = [str(proxy), "run", str(config), "--transport", transport]
    command += ["--host", "127.0.0.1", "--port", "0", "--no-banner", "--log-level", "INFO"]
    stderr_path = workdir / "stderr.log"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    server = PublishedMcpServer(transport=transport, port=0, process=process, workdir=workdir)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        if match := LISTENING.search(server.log()):
            server.port = int(match.group(1))
            return server
        time.sleep(0.05)
    log = server.log()
    server.stop()
    raise RuntimeError(f"fastmcp did not start (exit code {process.poll()}): {log}")
