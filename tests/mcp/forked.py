"""Start an MCP test server's process cheaply: forked from a host that imported the SDK once
(``tests.mcp._fork_host``), not a fresh interpreter that imports it again (~1.2 s of CPU a
server, ~190 servers a suite run).

``spawn(module, argv, stderr=...)`` returns a ``ForkedProcess``: the server's own process
(its ``pid`` is signalled as any process's), with the part of ``subprocess.Popen``'s
interface the fixtures use (``stdout`` a pipe, ``poll``, ``wait``, ``returncode``). Its exit
status comes from the host, whose child it is. One host per pytest process, started on the
first spawn; ``stop_host`` (a session fixture's finalizer, ``tests/conftest.py``) stops it,
killing the children no test stopped.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]
_POLL_SECONDS = 0.02


class _Host:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._socket = ours
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.mcp._fork_host", str(theirs.fileno())],
            cwd=REPO,
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        theirs.close()

    def ask(self, request: dict[str, Any], fds: list[int] | None = None) -> dict[str, Any]:
        data = json.dumps(request).encode()
        with self._lock:
            try:
                if fds:
                    socket.send_fds(self._socket, [data], fds)
                else:
                    self._socket.send(data)
                answer = self._socket.recv(1 << 16)
            except OSError as err:  # its end closed: EPIPE, ECONNRESET
                raise RuntimeError(
                    f"the MCP servers' fork host exited ({self.process.poll()}), and its "
                    f"servers with it: {err}"
                ) from err
        if not answer:
            raise RuntimeError(
                f"the MCP servers' fork host exited ({self.process.poll()}), and its servers "
                "with it"
            )
        reply: dict[str, Any] = json.loads(answer)
        return reply

    def stop(self) -> None:
        self._socket.close()  # the host kills and reaps what still runs, then exits
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


_host: _Host | None = None
_host_lock = threading.Lock()


def _the_host() -> _Host:
    global _host
    with _host_lock:
        if _host is None or _host.process.poll() is not None:
            _host = _Host()
        return _host


def stop_host() -> None:
    """Stop this process's fork host, if one was started (and the servers still running)."""
    global _host
    with _host_lock:
        host, _host = _host, None
    if host is not None:
        host.stop()


class ForkedProcess:
    """A test server's process, forked by the host: ``Popen``'s interface as far as the
    fixtures use it."""

    def __init__(self, host: _Host, pid: int, stdout: IO[bytes]) -> None:
        self._host = host
        self.pid = pid
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._host.ask({"op": "status", "pid": self.pid})["status"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout or 0.0)
            time.sleep(_POLL_SECONDS)
        return code


def spawn(module: str, argv: list[str], *, stderr: IO[bytes]) -> ForkedProcess:
    """Run ``python -m module *argv`` (in the repository, with this process's environment),
    forked from the host: its stdout a pipe (``ForkedProcess.stdout``), its stderr
    ``stderr``."""
    host = _the_host()
    read_end, write_end = os.pipe()
    try:
        request = {
            "op": "spawn",
            "module": module,
            "argv": argv,
            "cwd": str(REPO),
            "env": dict(os.environ),
        }
        pid = host.ask(request, [write_end, stderr.fileno()])["pid"]
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return ForkedProcess(host, pid, os.fdopen(read_end, "rb"))
