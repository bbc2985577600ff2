"""The fork host of ``tests.mcp.forked``: imports the MCP test servers once, then forks one
child per server a test starts. Run as ``python -m tests.mcp._fork_host FD`` by
``tests.mcp.forked`` alone, never imported by tests.

A test server's process spends ~1.2 s of CPU importing the MCP SDK before it listens (its
pydantic models are built at import), and the suite starts ~190 of them: minutes of CPU on
two cores. Here the SDK is imported once; each child is a whole process that runs its
module as ``python -m`` would (``runpy``, as ``__main__``) with the requester's argv,
environment, working directory, stdout and stderr (passed as descriptors), and ends the way
that process would (atexit handlers run, then its exit status).

Protocol on the inherited ``SOCK_SEQPACKET`` socket ``FD``, one JSON object a message:
``{"op": "spawn", "module", "argv", "cwd", "env"}`` with two descriptors (stdout, stderr),
answered ``{"pid": N}``; ``{"op": "status", "pid": N}``, answered ``{"status": S}`` (None
while it runs, else as ``Popen.returncode``: ``-signal`` when a signal ended it). The socket
closed, the host kills the children still running (SIGKILL), reaps them and exits; the host
killed, its children are too (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import json
import os
import runpy
import signal
import socket
import sys
import traceback
from typing import Any

SERVERS = (
    "tests.mcp.server",
    "tests.mcp.consent_server",
    "tests.mcp.oauth_server",
    "tests.mcp.modern_server",
)
_PR_SET_PDEATHSIG = 1
"""prctl(2)'s option: the signal the calling process gets when its parent exits."""
_ended: dict[int, int] = {}
_running: set[int] = set()


def _reap(*_: object) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _running.discard(pid)
        _ended[pid] = os.waitstatus_to_exitcode(status)


def _die_with(parent: int) -> None:
    """Be killed when the host exits, however it does (SIGKILL, the OOM killer): a server
    it leaves would listen on after the session, and nothing could reap or stop it (its
    status is the host's to read)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the host exited before the line above
        os._exit(1)


def _child(host: socket.socket, parent: int, request: dict[str, Any], out: int, err: int) -> None:
    code: object = 1
    try:
        host.close()
        _die_with(parent)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})  # held by the fork
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [request["module"], *request["argv"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    except BaseException:
        traceback.print_exc()
    finally:
        atexit._run_exitfuncs()
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)  # as the interpreter prints sys.exit("text")
            code = 1
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code or 0)


def main() -> None:
    host = socket.socket(fileno=int(sys.argv[1]))
    parent = os.getpid()
    for module in SERVERS:
        importlib.import_module(module)
    signal.signal(signal.SIGCHLD, _reap)
    while True:
        message, fds, _, _ = socket.recv_fds(host, 1 << 20, 2)
        if not message:
            break
        request = json.loads(message)
        if request["op"] == "spawn":
            out, err = fds
            # SIGCHLD held until the child is recorded: one that ends at once is reaped
            # after, not before, its pid is taken as new.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
            pid = os.fork()
            if pid == 0:
                _child(host, parent, request, out, err)
            # Past pid_max (32768 by default) the kernel hands out pids again: an earlier
            # child's, reaped, may be this one's, whose status that is not.
            _ended.pop(pid, None)
            _running.add(pid)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            os.close(out)
            os.close(err)
            host.send(json.dumps({"pid": pid}).encode())
        else:
            _reap()
            host.send(json.dumps({"status": _ended.get(request["pid"])}).encode())
    for pid in list(_running):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for pid in list(_running):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
