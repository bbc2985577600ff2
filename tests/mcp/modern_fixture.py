"""Start ``tests.mcp.modern_server`` (an MCP server of the 2026-07-28 protocol only) in its
own process, for tests. ``start_modern_server()`` returns once it listens; the caller stops
it with ``stop()``."""

from __future__ import annotations

import os
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import httpx

from tests.forking.client import ForkedProcess, spawn
from tests.mcp.fixture import STOP_TIMEOUT, _read_port, server_stderr, stop_process


@dataclass
class ModernMcpServer:
    """A running ``tests.mcp.modern_server`` process and its control surface."""

    port: int
    process: ForkedProcess
    log: IO[bytes]
    _control: httpx.Client = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._control = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10.0)

    @property
    def url(self) -> str:
        """The MCP endpoint (streamable HTTP)."""
        return f"http://127.0.0.1:{self.port}/mcp"

    def state(self) -> dict[str, Any]:
        """What the server saw (``tests/mcp/modern_server.py``, "Control surface")."""
        response = self._control.get("/control/state")
        response.raise_for_status()
        state: dict[str, Any] = response.json()
        return state

    def reset(self) -> None:
        """Forget what the server saw."""
        self._control.post("/control/reset").raise_for_status()

    def mismatch(self, calls: int = 1) -> None:
        """Refuse the next ``calls`` ``tools/call`` requests with ``HEADER_MISMATCH``
        (the tool does not run)."""
        self._control.post("/control/mismatch", json={"calls": calls}).raise_for_status()

    def fault_lists(self, *, passing: int = 0, failing: int = 0, delay: float = 0.0) -> None:
        """After ``passing`` more ``tools/list`` requests, fail the next ``failing``;
        delay every one ``delay`` seconds (until ``reset``)."""
        fault = {"pass": passing, "fail": failing, "delay_seconds": delay}
        self._control.post("/control/lists", json=fault).raise_for_status()

    def stderr(self) -> str:
        """What the server wrote to stderr so far."""
        return server_stderr(self.log)

    def stop(self) -> None:
        """Stop this server's own process (SIGTERM, SIGKILL after a grace period)."""
        self._control.close()
        stop_process(self.process, self.log)


def start_modern_server(
    *, list_ttl_ms: int | None = None, list_scope: Literal["public", "private"] | None = None
) -> ModernMcpServer:
    """Start the server on 127.0.0.1 and a free port; return once it listens.

    Args:
        list_ttl_ms: ``ttlMs`` of its ``tools/list`` results (None: the SDK's default, 0).
        list_scope: ``cacheScope`` of its ``tools/list`` results (None: ``private``).
    """
    args: list[str] = []
    if list_ttl_ms is not None:
        args += ["--list-ttl-ms", str(list_ttl_ms)]
    if list_scope is not None:
        args += ["--list-scope", list_scope]
    log = tempfile.NamedTemporaryFile(prefix="mcp-modern-", suffix=".log", delete=False)  # noqa: SIM115
    process = spawn("tests.mcp.modern_server", args, stderr=log)
    try:
        port = _read_port(process, Path(log.name))
    except BaseException:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(STOP_TIMEOUT)
        log.close()
        raise
    return ModernMcpServer(port=port, process=process, log=log)
