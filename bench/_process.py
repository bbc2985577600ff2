"""This process and the dev server process: their output streams, CPU time and CPUs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from temporalio.testing import WorkflowEnvironment

from psych_runtime.workers import exit_process, start_dev_server

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_T = TypeVar("_T")

TERMINATED = 128 + signal.SIGTERM
"""The exit status of a benchmark stopped by SIGTERM, as a shell reports a process it
killed."""


def run_until_terminated(main: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(main)``, with SIGTERM cancelling ``main`` rather than killing the
    process: its ``async with`` blocks close, so the dev servers it started (the SDK spawns
    each as a child process) and its worker processes are stopped, not orphaned.

    Raises:
        SystemExit: ``TERMINATED``, once ``main`` has unwound after a SIGTERM.
    """
    terminated = False

    async def guarded() -> _T:
        nonlocal terminated
        task = asyncio.current_task()
        assert task is not None  # inside asyncio.run

        def stop() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop)
        try:
            return await main
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        result = asyncio.run(guarded())
    except asyncio.CancelledError:
        if not terminated:
            raise
    if terminated:  # also when ``main`` swallowed the cancellation: it did not finish
        print("benchmark stopped by SIGTERM", file=sys.stderr)
        raise SystemExit(TERMINATED)
    return result


def exit_after(main: Callable[[], int]) -> NoReturn:
    """A benchmark's last line: ``main()``'s status, or its ``SystemExit``'s (argparse's,
    ``TERMINATED``), 130 after Ctrl-C, or 1 after a traceback, through ``exit_process``: a
    ``SystemExit`` left to the interpreter finalizes it, and the SDK's threads can abort
    that (exit 134 instead of 143 after a SIGTERM; temporalio/sdk-python#300).
    """
    try:
        status = main()
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            status = done.code or 0
        else:  # as the interpreter does: printed, status 1
            print(done.code, file=sys.stderr)
            status = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        status = 128 + signal.SIGINT
    except Exception:
        traceback.print_exc()
        status = 1
    exit_process(status & 0xFF)


@contextlib.contextmanager
def _redirected_fds(target: int, fds: tuple[int, ...]) -> Iterator[None]:
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(fd) for fd in fds]
    try:
        for fd in fds:
            os.dup2(target, fd)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip(fds, saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


@contextlib.asynccontextmanager
async def dev_server(
    *, fast_dispatch: bool, metrics_port: int | None = None
) -> AsyncIterator[WorkflowEnvironment]:
    """A fresh in-memory dev server (psych's ``start_dev_server``) for the block
    (``metrics_port``: serving its own Prometheus metrics there).

    Its stdout and stderr go to /dev/null (fds 1 and 2 are pointed there while it is
    spawned, and it inherits them), so its banner stays out of the benchmark's tables.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        with _redirected_fds(devnull, (1, 2)):
            env = await start_dev_server(fast_dispatch=fast_dispatch, metrics_port=metrics_port)
    finally:
        os.close(devnull)
    try:
        yield env
    finally:
        await env.shutdown()


@dataclass
class Captured:
    """What was written to fds 1 and 2 inside ``captured_output``."""

    text: str = ""

    def count(self, needle: str) -> int:
        """Lines containing ``needle``."""
        return sum(needle in line for line in self.text.splitlines())


@contextlib.contextmanager
def captured_output() -> Iterator[Captured]:
    """Capture fds 1 and 2: the SDK core's Rust logger writes to them, not through Python."""
    captured = Captured()
    with tempfile.TemporaryFile() as sink:
        try:
            with _redirected_fds(sink.fileno(), (1, 2)):
                yield captured
        finally:
            sink.seek(0)
            captured.text = sink.read().decode(errors="replace")


@dataclass(frozen=True)
class CpuMark:
    """CPU seconds used so far by this process and by its child processes (the server)."""

    process_s: float
    server_s: float


def _children() -> list[int]:
    pids: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        pids += [int(pid) for pid in task.read_text().split()]
    return pids


def stat_cpu_seconds(stat: Path) -> float | None:
    """CPU seconds (user + system) in a ``/proc/<pid>/stat`` or ``/proc/<pid>/task/<tid>/stat``
    file; None when it is gone (the process or thread ended)."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # utime and stime are fields 14 and 15 of the stat file (12 and 13 after the name).
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _cpu_of(pid: int) -> float:
    return stat_cpu_seconds(Path(f"/proc/{pid}/stat")) or 0.0


def cpu_mark() -> CpuMark:
    """CPU used so far (the server's part needs Linux /proc; 0 elsewhere)."""
    times = os.times()
    return CpuMark(
        process_s=times.user + times.system,
        server_s=sum(_cpu_of(pid) for pid in _children()),
    )


@dataclass(frozen=True)
class Split:
    """The CPUs of ``split_cores``."""

    server_cpu: int
    process_cpu: int


def _pin(pids: list[int], cpus: set[int]) -> None:
    """Every thread of ``pids`` onto ``cpus`` (a thread that ended meanwhile is skipped)."""
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(task.name), cpus)


@contextlib.contextmanager
def split_cores() -> Iterator[Split | None]:
    """For the block, the dev server (this process's child processes) on one CPU and this
    process (its workers, the fake model, the driver) on another, as when the server runs
    on machines of its own; then every thread of both back on the CPUs this process had.

    Sharing the CPUs, the server and the worker take CPU from each other, so a kind of
    Run that asks less of the server gains less from it than when the server has its own.
    Yields None, and pins nothing, with fewer than two CPUs or no ``sched_setaffinity``
    (not Linux).
    """
    if not hasattr(os, "sched_setaffinity"):
        yield None
        return
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        yield None
        return
    first, second = sorted(cpus)[:2]
    split = Split(server_cpu=first, process_cpu=second)
    servers = _children()
    _pin(servers, {first})
    _pin([os.getpid()], {second})
    try:
        yield split
    finally:
        _pin([*servers, os.getpid()], set(cpus))
