"""The asyncio face of ``tests.forking.client``: ``create_subprocess_exec`` as asyncio's,
for the command lines the fork host runs (``client.command``), returning a ``Process`` with
what the tests use of ``asyncio.subprocess.Process``: ``pid``, ``returncode`` (set once the
loop sees the child's pidfd readable), ``stdin``/``stdout``/``stderr``, ``wait``,
``communicate``, ``send_signal``, ``terminate``, ``kill``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping
from typing import IO, Any

from .client import _STATUS_RETRY_SECONDS, _Host, command, signal_pidfd, the_host

PIPE = subprocess.PIPE
STDOUT = subprocess.STDOUT
DEVNULL = subprocess.DEVNULL
_LIMIT = 2**16  # asyncio.streams' default


class Process:
    """A forked process driven from an event loop."""

    def __init__(self, host: _Host, pid: int, pidfd: int) -> None:
        self._host = host
        self.pid = pid
        self._pidfd = pidfd
        self._loop = asyncio.get_running_loop()
        self._exit: asyncio.Future[int] = self._loop.create_future()
        self.returncode: int | None = None
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self._loop.add_reader(pidfd, self._exited)

    def __repr__(self) -> str:
        return f"<forked Process {self.pid}>"

    def _exited(self) -> None:
        self._loop.remove_reader(self._pidfd)
        code = self._host.status(self.pid)
        if code is None:  # the host's SIGCHLD is on its way
            self._loop.call_later(_STATUS_RETRY_SECONDS, self._loop.add_reader, self._pidfd,
                                  self._exited)  # fmt: skip
            return
        self.returncode = code
        os.close(self._pidfd)
        if not self._exit.done():
            self._exit.set_result(code)

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    def send_signal(self, signum: int) -> None:
        if self.returncode is not None:
            return
        signal_pidfd(self._pidfd, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def _feed(self, data: bytes | None) -> None:
        if self.stdin is None or data is None:
            return
        self.stdin.write(data)
        # It may exit without reading it all, as asyncio's allows.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await self.stdin.drain()
        self.stdin.close()

    async def _read(self, stream: asyncio.StreamReader | None) -> bytes | None:
        if stream is None:
            return None
        return await stream.read()

    async def communicate(self, input: bytes | None = None) -> tuple[Any, Any]:
        _, out, err = await asyncio.gather(
            self._feed(input), self._read(self.stdout), self._read(self.stderr)
        )
        await self.wait()
        return out, err


def _fd(spec: int | IO[Any] | None, own: int) -> int:
    if spec is None:
        return own
    if isinstance(spec, int):
        return spec
    return spec.fileno()


async def create_subprocess_exec(
    program: str | os.PathLike[str],
    *args: str | os.PathLike[str],
    stdin: int | IO[Any] | None = None,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    limit: int = _LIMIT,
) -> Process:
    """``asyncio.create_subprocess_exec`` of a command the host runs, forked from it."""
    cmd = command([os.fspath(program), *(os.fspath(a) for a in args)])
    loop = asyncio.get_running_loop()
    closing: list[int] = []  # their ends and /dev/null, closed once the host has them
    ours: dict[int, int] = {}
    theirs: list[int] = []
    for index, spec in enumerate((stdin, stdout, stderr)):
        if spec == PIPE:
            read_end, write_end = os.pipe()
            mine, child = (write_end, read_end) if index == 0 else (read_end, write_end)
            ours[index] = mine
            closing.append(child)
        elif spec == DEVNULL:
            child = os.open(os.devnull, os.O_RDWR)
            closing.append(child)
        elif spec == STDOUT and index == 2:
            child = theirs[1]
        else:
            child = _fd(spec, index)
        theirs.append(child)
    host = the_host()
    try:
        pid, pidfd = host.spawn(cmd, theirs, env, cwd)
    except BaseException:
        for fd in ours.values():
            os.close(fd)
        raise
    finally:
        for fd in closing:
            os.close(fd)
    process = Process(host, pid, pidfd)
    if 0 in ours:
        protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader(limit=limit, loop=loop))
        transport, _ = await loop.connect_write_pipe(lambda: protocol, os.fdopen(ours[0], "wb", 0))
        process.stdin = asyncio.StreamWriter(transport, protocol, None, loop)
    for index in (1, 2):
        if index in ours:
            reader = asyncio.StreamReader(limit=limit, loop=loop)
            await loop.connect_read_pipe(
                lambda reader=reader: asyncio.StreamReaderProtocol(reader, loop=loop),  # type: ignore[misc]
                os.fdopen(ours[index], "rb", 0),
            )
            setattr(process, "stdout" if index == 1 else "stderr", reader)
    return process


Child = asyncio.subprocess.Process | Process
"""A child process either way: executed (asyncio's) or forked (this module's)."""

__all__ = ["DEVNULL", "PIPE", "STDOUT", "Child", "Process", "create_subprocess_exec"]
