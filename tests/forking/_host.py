"""The fork host of ``tests.forking.client``: imports the MCP test servers and every
``psych`` command's module once, then forks one child per process a test starts. Run as
``python -m tests.forking._host FD [MODULE...]`` by ``tests.forking.client`` alone (MODULE:
more to import first), never imported by tests.

A child is a whole process that runs its command as the interpreter would have: a module as
``python -m`` does (``runpy``, ``sys.path[0]`` its working directory), a script (the
``psych`` console script) as ``python SCRIPT`` does (``sys.path[0]`` its directory), with
the requester's argv, environment, working directory and stdin/stdout/stderr (passed as
descriptors); fresh ``sys.std*`` objects; SIGINT handled (or ignored, when the requester's
was) and SIGTERM/SIGCHLD default, SIGPIPE/SIGXFSZ ignored as Python leaves them; and it ends
as the interpreter would: non-daemon threads joined, atexit handlers run, streams flushed
(120 when that fails), an uncaught KeyboardInterrupt re-raised as SIGINT. What was fixed at
interpreter start and that the request changes (a ``PYTHON*``, ``LANG``/``LC_*``/``TZ``
variable, a terminal on a standard descriptor, another interpreter) cannot be emulated:
that child ``execve``s the real command line instead (same pid, only not cheap).

Forking is sound only with one thread: a request that finds more (``/proc/self/task``,
which counts a Rust runtime's threads too) is refused, loudly.

Protocol on the inherited ``SOCK_SEQPACKET`` socket ``FD``, one JSON object a message:
``{"op": "spawn", "kind": "module"|"script", "target", "argv", "interpreter", "command",
"cwd", "env", "sigint_ignored"}`` with three descriptors (stdin, stdout, stderr), answered
``{"pid": N}`` with a pidfd of the child (readable once it exits), or ``{"error": "..."}``;
``{"op": "status", "pid": N}``, answered ``{"status": S}`` (None while it runs, else as
``Popen.returncode``). The socket closed, the host kills the children still running
(SIGKILL), reaps them and exits; the host killed, its children are too
(``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import importlib
import io
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import traceback
import types
from importlib.machinery import SourceFileLoader
from typing import Any

SERVERS = (
    "tests.mcp.server",
    "tests.mcp.consent_server",
    "tests.mcp.oauth_server",
    "tests.mcp.modern_server",
)
CLI = "psych_runtime.workers.cli"
_PR_SET_PDEATHSIG = 1
"""prctl(2)'s option: the signal the calling process gets when its parent exits."""
_ended: dict[int, int] = {}
_running: set[int] = set()
_STARTED_WITH: dict[str, str] = {}
"""The variables read at interpreter start, as this host started with them."""


def _read_at_start(name: str) -> bool:
    return name.startswith(("PYTHON", "LC_")) or name in ("LANG", "TZ")


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
    """Be killed when the host exits, however it does (SIGKILL, the OOM killer): a child
    it leaves would run on after the session, and nothing could reap or stop it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the host exited before the line above
        os._exit(1)


def _exec_because(request: dict[str, Any]) -> str | None:
    """Why this child cannot be the forked host (so must exec), or None."""
    env: dict[str, str] = request["env"]
    for name in sorted({*env, *_STARTED_WITH}):
        if _read_at_start(name) and env.get(name) != _STARTED_WITH.get(name):
            return f"{name} differs"
    for fd in (0, 1, 2):
        if os.isatty(fd):
            return f"descriptor {fd} is a terminal"
    if os.path.realpath(request["interpreter"]) != os.path.realpath(sys.executable):
        return "another interpreter"
    return None


def _exec(request: dict[str, Any]) -> None:
    """Become the real command, as ``subprocess`` would have started it."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    command: list[str] = request["command"]
    os.execvpe(command[0], command, request["env"])


def _fresh_stdio() -> None:
    """``sys.stdin/stdout/stderr`` made anew on descriptors 0-2 as the interpreter makes
    them at start (the host's were made on its own: a seekable /dev/null, say)."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        old: io.TextIOWrapper = getattr(sys, name)
        write_through = old.write_through
        unbuffered = write_through and mode == "w"
        # Not closed here: the process's standard stream from now on (closefd=False).
        buffered = open(fd, mode + "b", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
        stream = io.TextIOWrapper(
            buffered,
            encoding=old.encoding,
            errors=old.errors,
            newline="\n",
            line_buffering=fd == 2 and not write_through,
            write_through=write_through,
        )
        stream.mode = mode  # type: ignore[misc]
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _as_interpreter(request: dict[str, Any]) -> None:
    """``sys`` as the interpreter sets it up for this command line."""
    interpreter: str = request["interpreter"]
    sys.executable = interpreter
    sys.orig_argv = [interpreter, *request["command"][1:]]
    if request["kind"] == "module":
        sys.path[0] = os.getcwd()
    else:
        sys.path[0] = os.path.dirname(os.path.realpath(request["target"]))
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if here not in sys.path:  # then the test packages this host imported are not there
        for name in [n for n in sys.modules if n == "tests" or n.startswith("tests.")]:
            del sys.modules[name]
    tempfile.tempdir = None  # read from TMPDIR again


def _run(request: dict[str, Any]) -> None:
    if request["kind"] == "module":
        sys.argv = [request["target"], *request["argv"]]
        __import__("runpy")._run_module_as_main(request["target"])
        return
    path: str = request["target"]
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__loader__ = SourceFileLoader("__main__", path)
    main.__builtins__ = __builtins__  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    sys.argv = [path, *request["argv"]]
    with open(path, "rb") as source:
        code = compile(source.read(), path, "exec")
    exec(code, main.__dict__)


def _finish(status: int) -> int:
    """What ``Py_FinalizeEx`` does that shows: threads joined, atexit, streams flushed."""
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if not stream.closed:
                stream.flush()
        except Exception:
            status = 120
    return status


def _child(host: socket.socket, parent: int, request: dict[str, Any], fds: list[int]) -> None:
    status = 1
    interrupted = False
    try:
        host.close()
        _die_with(parent)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        os.chdir(request["cwd"])
        if _exec_because(request) is not None:
            _exec(request)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        ignored = request["sigint_ignored"]
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())  # SIGCHLD was held for the fork
        os.environ.clear()
        os.environ.update(request["env"])
        _fresh_stdio()
        _as_interpreter(request)
        try:
            _run(request)
            status = 0
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                status = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)  # as the interpreter prints it
        except KeyboardInterrupt:
            traceback.print_exc()
            interrupted = True
        except BaseException:
            traceback.print_exc()
        status = _finish(status)
        if interrupted:  # as the interpreter ends on one: killed by SIGINT
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(status & 0xFF)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _preload(extra: list[str]) -> None:
    for module in [*extra, *SERVERS, CLI]:
        importlib.import_module(module)
    # psych imports a command's module only when that command runs (cli/_lazy.py): the
    # children would import the Temporal SDK again.
    parser = importlib.import_module(f"{CLI}._parser").build_parser()
    for name in sorted(_command_modules(parser)):
        importlib.import_module(name)


def _command_modules(parser: argparse.ArgumentParser) -> set[str]:
    """The module of every command ``parser`` (and its subcommands) names."""
    found: set[str] = set()
    func = parser.get_default("func")
    if func is not None:
        found.add(func.__module__)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _command_modules(sub)
    return found


def _spawn(host: socket.socket, parent: int, request: dict[str, Any], fds: list[int]) -> None:
    threads = _threads()
    if threads != 1:
        for fd in fds:
            os.close(fd)
        error = f"the fork host has {threads} threads, and forks only with one"
        host.send(json.dumps({"error": error}).encode())
        return
    # SIGCHLD held until the child is recorded: one that ends at once is reaped after, not
    # before, its pid is taken as new (and its pidfd opened).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    pid = os.fork()
    if pid == 0:
        _child(host, parent, request, fds)
    pidfd = os.pidfd_open(pid)
    # Past pid_max the kernel hands out pids again: an earlier child's, reaped, may be
    # this one's, whose status that is not.
    _ended.pop(pid, None)
    _running.add(pid)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
    for fd in fds:
        os.close(fd)
    socket.send_fds(host, [json.dumps({"pid": pid}).encode()], [pidfd])
    os.close(pidfd)


def main() -> None:
    host = socket.socket(fileno=int(sys.argv[1]))
    parent = os.getpid()
    _STARTED_WITH.update({k: v for k, v in os.environ.items() if _read_at_start(k)})
    _preload(sys.argv[2:])
    signal.signal(signal.SIGCHLD, _reap)
    while True:
        message, fds, _, _ = socket.recv_fds(host, 1 << 20, 3)
        if not message:
            break
        request = json.loads(message)
        if request["op"] == "spawn":
            _spawn(host, parent, request, fds)
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
