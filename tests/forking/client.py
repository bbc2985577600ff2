"""Processes forked by this pytest process's fork host (``tests.forking._host``).

``command(argv)`` reads a command line the host can run: ``python -m MODULE ...``,
``python SCRIPT ...`` or ``SCRIPT ...`` (a script run by this interpreter, as the ``psych``
console script is), each also behind ``SIGINT_IGNORED``. ``popen`` starts one and returns a
``ForkedProcess`` (``subprocess.Popen``'s interface as the MCP fixtures use it), ``run`` runs
one to its end as ``subprocess.run`` does; ``tests.forking.aio`` has the asyncio interface.

A process is the command's own (its ``pid`` is signalled as any process's); its exit status
comes from the host, whose child it is, once the pidfd the host opened for it is readable.
One host per pytest process, started on first use; ``stop_host`` (a session fixture's
finalizer, ``tests/conftest.py``) stops it, killing the children no test stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]
SIGINT_IGNORED = (
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])",
)
"""Prefix of a ``python ARGS...`` command line that runs it with SIGINT ignored from its
start, as a non-interactive shell starts a background job (``psych serve &`` in a script):
the disposition is inherited across exec, so Python installs no handler of its own."""
_STATUS_RETRY_SECONDS = 0.01
_HOST_ENV = dict(os.environ)
"""The host's environment: this process's as it started, not as a test that happens to
start the host has patched it (a PYTHONPATH set then would have every child executed)."""


@dataclass(frozen=True)
class Command:
    """A command line as the host runs it."""

    kind: str  # "module" or "script"
    target: str  # the module's name, or the script's path
    argv: list[str]  # what follows it
    interpreter: str
    command: list[str]  # the whole command line, for the host's exec
    sigint_ignored: bool


def _shebang(path: str) -> str | None:
    try:
        with open(path, "rb") as script:
            first = script.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    return first[2:].decode().strip()


def command(argv: Sequence[str]) -> Command:
    """``argv`` read as the host runs it; a ValueError naming it if the host cannot."""
    argv = [os.fspath(a) for a in argv]
    ignored = False
    if argv[:3] == list(SIGINT_IGNORED):
        ignored, rest = True, [sys.executable, *argv[3:]]
    else:
        rest = argv
    if len(rest) >= 3 and rest[0] == sys.executable and rest[1] == "-m":
        return Command("module", rest[2], rest[3:], rest[0], argv, ignored)
    if len(rest) >= 2 and rest[0] == sys.executable and not rest[1].startswith("-"):
        return Command("script", rest[1], rest[2:], rest[0], argv, ignored)
    interpreter = _shebang(rest[0]) if rest else None
    same = interpreter is not None and os.path.realpath(interpreter) == os.path.realpath(
        sys.executable
    )
    if same and not ignored and interpreter is not None:
        return Command("script", rest[0], rest[1:], interpreter, argv, ignored)
    raise ValueError(
        f"the fork host runs `{sys.executable} -m MODULE`, `{sys.executable} SCRIPT` or a "
        f"script of that interpreter, not {argv!r}"
    )


class _Host:
    def __init__(self, preload: Sequence[str] = ()) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._socket = ours
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.forking._host", str(theirs.fileno()), *preload],
            cwd=REPO,
            env=_HOST_ENV,
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        theirs.close()

    def _exited(self, err: object) -> RuntimeError:
        return RuntimeError(
            f"the fork host exited ({self.process.poll()}), and its children with it: {err}"
        )

    def ask(self, request: dict[str, Any], fds: Sequence[int] = ()) -> tuple[dict[str, Any], int]:
        """The host's answer to ``request``, and the descriptor it sent (or -1)."""
        data = json.dumps(request).encode()
        with self._lock:
            try:
                if fds:
                    socket.send_fds(self._socket, [data], list(fds))
                else:
                    self._socket.send(data)
                answer, got, _, _ = socket.recv_fds(self._socket, 1 << 16, 1)
            except OSError as err:  # its end closed: EPIPE, ECONNRESET
                raise self._exited(err) from err
        if not answer:
            raise self._exited("its socket closed")
        reply: dict[str, Any] = json.loads(answer)
        if "error" in reply:
            for fd in got:
                os.close(fd)
            raise RuntimeError(f"the fork host refused {request.get('command')}: {reply['error']}")
        return reply, got[0] if got else -1

    def status(self, pid: int) -> int | None:
        code: int | None = self.ask({"op": "status", "pid": pid})[0]["status"]
        return code

    def ended(self, pid: int) -> int:
        """The status of ``pid``, which has exited (its pidfd is readable)."""
        while (code := self.status(pid)) is None:  # the host's SIGCHLD is on its way
            time.sleep(_STATUS_RETRY_SECONDS)
        return code

    def spawn(
        self,
        cmd: Command,
        stdio: Sequence[int],
        env: Mapping[str, str] | None,
        cwd: str | os.PathLike[str] | None,
    ) -> tuple[int, int]:
        """Start ``cmd`` with ``stdio`` as descriptors 0-2: (its pid, its pidfd)."""
        where = os.fspath(cwd) if cwd is not None else os.getcwd()
        if not os.path.isdir(where):
            raise FileNotFoundError(f"no such directory: {where!r}")
        request = {
            "op": "spawn",
            "kind": cmd.kind,
            "target": cmd.target,
            "argv": cmd.argv,
            "interpreter": cmd.interpreter,
            "command": cmd.command,
            "sigint_ignored": cmd.sigint_ignored,
            "cwd": os.path.abspath(where),
            "env": dict(os.environ if env is None else env),
        }
        reply, pidfd = self.ask(request, stdio)
        return reply["pid"], pidfd

    def stop(self) -> None:
        self._socket.close()  # the host kills and reaps what still runs, then exits
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


_host: _Host | None = None
_host_lock = threading.Lock()


def the_host() -> _Host:
    global _host
    with _host_lock:
        if _host is None or _host.process.poll() is not None:
            _host = _Host()
        return _host


def stop_host() -> None:
    """Stop this process's fork host, if one was started (and its children still running)."""
    global _host
    with _host_lock:
        host, _host = _host, None
    if host is not None:
        host.stop()


def exited(pidfd: int, timeout: float | None) -> bool:
    """Whether the process of ``pidfd`` exited, waiting up to ``timeout`` seconds."""
    readable, _, _ = select.select([pidfd], [], [], timeout)
    return bool(readable)


def signal_pidfd(pidfd: int, signum: int) -> None:
    """Send ``signum`` to the process of ``pidfd``, if it still runs (as Popen does)."""
    if exited(pidfd, 0):
        return
    with contextlib.suppress(ProcessLookupError):  # it exited just now
        signal.pidfd_send_signal(pidfd, signum)


class ForkedProcess:
    """A forked process: ``Popen``'s interface as far as the fixtures use it."""

    def __init__(self, host: _Host, pid: int, pidfd: int, stdout: IO[bytes] | None) -> None:
        self._host = host
        self.pid = pid
        self._pidfd = pidfd
        self.stdout = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and exited(self._pidfd, 0):
            self.returncode = self._host.ended(self.pid)
            os.close(self._pidfd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout or 0.0)
            exited(self._pidfd, left)
        return code

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            signal_pidfd(self._pidfd, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def spawn(module: str, argv: list[str], *, stderr: IO[bytes]) -> ForkedProcess:
    """Run ``python -m module *argv`` (in the repository, with this process's environment),
    forked from the host: its stdout a pipe (``ForkedProcess.stdout``), its stderr
    ``stderr``, its stdin /dev/null."""
    host = the_host()
    read_end, write_end = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        cmd = command([sys.executable, "-m", module, *argv])
        pid, pidfd = host.spawn(cmd, [null, write_end, stderr.fileno()], None, REPO)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
        os.close(null)
    return ForkedProcess(host, pid, pidfd, os.fdopen(read_end, "rb"))


def _drain(fd: int, into: list[bytes]) -> None:
    with os.fdopen(fd, "rb") as stream:
        into.append(stream.read())


def _feed(fd: int, data: bytes) -> None:
    try:
        with contextlib.suppress(BrokenPipeError):  # it exited without reading it all
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def run(
    args: Sequence[str | os.PathLike[str]],
    *,
    input: bytes | str | None = None,
    capture_output: bool = False,
    text: bool = False,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` of a command the host runs (``command``), forked from it."""
    cmd = command([os.fspath(a) for a in args])
    theirs: list[int] = [0, 1, 2]
    ours: list[int] = []
    pipes = [input is not None, capture_output, capture_output]
    for index, piped in enumerate(pipes):
        if piped:
            read_end, write_end = os.pipe()
            theirs[index], mine = (read_end, write_end) if index == 0 else (write_end, read_end)
            ours.append(mine)
    host = the_host()
    try:
        pid, pidfd = host.spawn(cmd, theirs, env, cwd)
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:
        for index, piped in enumerate(pipes):
            if piped:
                os.close(theirs[index])
    process = ForkedProcess(host, pid, pidfd, None)
    out: list[bytes] = []
    err: list[bytes] = []
    workers: list[threading.Thread] = []
    mine_fds = iter(ours)
    if input is not None:
        data = input.encode() if isinstance(input, str) else input
        workers.append(threading.Thread(target=_feed, args=(next(mine_fds), data)))
    if capture_output:
        workers.append(threading.Thread(target=_drain, args=(next(mine_fds), out)))
        workers.append(threading.Thread(target=_drain, args=(next(mine_fds), err)))
    for worker in workers:
        worker.start()
    try:
        code = process.wait(timeout)
    except subprocess.TimeoutExpired as expired:
        process.kill()
        process.wait()
        for worker in workers:
            worker.join()
        raise subprocess.TimeoutExpired(
            cmd.command, timeout or 0.0, b"".join(out), b"".join(err)
        ) from expired
    for worker in workers:
        worker.join()
    stdout: Any = out[0] if out else None
    stderr: Any = err[0] if err else None
    if text:
        stdout = None if stdout is None else _text(stdout)
        stderr = None if stderr is None else _text(stderr)
    return subprocess.CompletedProcess(cmd.command, code, stdout, stderr)


def _text(data: bytes) -> str:
    """As ``subprocess`` decodes in text mode: the locale's encoding, universal newlines."""
    import locale

    decoded = data.decode(locale.getpreferredencoding(False))
    return decoded.replace("\r\n", "\n").replace("\r", "\n")
