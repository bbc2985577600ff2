"""A process forked by the host (``tests.forking``) is what the real command's process would
be, as far as the tests look: ``sys.path[0]`` and ``sys.argv`` per run mode, signal
dispositions, stdin, exit statuses, a child of its own; the real command executed where an
interpreter start-up setting differs; no fork while the host has a second thread."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.forking import aio
from tests.forking.client import REPO, SIGINT_IGNORED, _Host, command, run

PROBE = (sys.executable, "-m", "tests.forking.probe")
PROBE_FILE = REPO / "tests" / "forking" / "probe.py"


async def _info(argv: list[str], *, forked: bool, cwd: Path = REPO, **env: str) -> dict[str, Any]:
    start = aio.create_subprocess_exec if forked else asyncio.create_subprocess_exec
    child = await start(
        *argv, "info", cwd=cwd, env={**os.environ, **env}, stdout=aio.PIPE, stderr=aio.PIPE
    )
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == 0, err.decode()
    info: dict[str, Any] = json.loads(out)
    return info


def _script(tmp_path: Path) -> Path:
    script = tmp_path / "bin" / "probe-script"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\n{PROBE_FILE.read_text()}")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize(
    "mode", ["module", "module elsewhere", "script", "python script", "sigint ignored"]
)
async def test_a_forked_process_is_set_up_as_the_real_one(mode: str, tmp_path: Path) -> None:
    # The worker stack imported already (it was forked), and otherwise as executed.
    (tmp_path / "forkprobe.py").write_text(PROBE_FILE.read_text())  # importable from there
    argv = {
        "module": list(PROBE),
        "module elsewhere": [sys.executable, "-m", "forkprobe"],
        "script": [str(_script(tmp_path))],
        "python script": [sys.executable, str(PROBE_FILE)],
        "sigint ignored": [*SIGINT_IGNORED, "-m", "tests.forking.probe"],
    }[mode]
    cwd = tmp_path if mode == "module elsewhere" else REPO
    forked = await _info(argv, forked=True, cwd=cwd)
    real = await _info(argv, forked=False, cwd=cwd)
    assert (forked.pop("forked"), real.pop("forked")) == (True, False)
    assert forked == real
    expected = {
        "module elsewhere": tmp_path,
        "script": tmp_path / "bin",
        "python script": PROBE_FILE.parent,
    }
    assert forked["path0"] == str(expected.get(mode, REPO))
    ignored = str(signal.SIG_IGN) if mode == "sigint ignored" else "default_int_handler"
    assert forked["signals"]["SIGINT"] == ignored
    assert forked["blocked"] == []


async def test_a_python_setting_the_host_did_not_start_with_is_executed() -> None:
    # PYTHONPATH is read at start: a fork would not have it on sys.path.
    elsewhere = str(REPO / "no-such-dir")
    info = await _info(list(PROBE), forked=True, PYTHONPATH=elsewhere)
    assert info["forked"] is False
    assert elsewhere in info["path"]


async def test_a_terminal_on_its_stdout_is_executed() -> None:
    # Python line-buffers a terminal's stream from its start: a fork's stdout would not be.
    ours, theirs = pty.openpty()
    try:
        child = await aio.create_subprocess_exec(*PROBE, "info", cwd=REPO, stdout=theirs)
        os.close(theirs)
        assert await asyncio.wait_for(child.wait(), 60) == 0
        with os.fdopen(ours, "rb", closefd=False) as terminal:
            info = json.loads(terminal.readline())
    finally:
        os.close(ours)
    assert info["forked"] is False


def test_run_gives_stdin_and_takes_the_output() -> None:
    done = run([*PROBE, "stdin"], input="to upper", capture_output=True, text=True, cwd=REPO)
    assert (done.returncode, done.stdout, done.stderr) == (0, "TO UPPER", "")


@pytest.mark.parametrize(
    ("argv", "status", "err"),
    [
        (["exit", "7"], 7, ""),
        (["no-such"], 1, "probe: no such WHAT: 'no-such'\n"),
        (["child"], 0, ""),
    ],
)
async def test_exit_statuses_are_the_real_ones(argv: list[str], status: int, err: str) -> None:
    child = await aio.create_subprocess_exec(*PROBE, *argv, cwd=REPO, stdout=aio.PIPE,
                                             stderr=aio.PIPE)  # fmt: skip
    out, errors = await asyncio.wait_for(child.communicate(), 60)
    assert (child.returncode, errors.decode()) == (status, err)
    if argv == ["child"]:  # a child of its own, reaped by it (SIGCHLD is not the host's)
        assert out == b"child 3\n"


@pytest.mark.parametrize(
    ("prefix", "signum", "status"),
    [
        ((), signal.SIGTERM, -signal.SIGTERM),
        ((), signal.SIGINT, -signal.SIGINT),  # KeyboardInterrupt, then killed by SIGINT
        (SIGINT_IGNORED, signal.SIGINT, None),
    ],
)
async def test_signals_end_it_as_the_real_one(
    prefix: tuple[str, ...], signum: int, status: int | None
) -> None:
    argv = [*prefix, *(PROBE[1:] if prefix else PROBE), "wait"]
    child = await aio.create_subprocess_exec(*argv, cwd=REPO, stdout=aio.PIPE, stderr=aio.PIPE)
    assert child.stdout is not None
    assert await asyncio.wait_for(child.stdout.readline(), 60) == b"ready\n"
    child.send_signal(signum)
    if status is None:  # ignored: still running a while later
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(child.wait(), 1)
        child.terminate()
        status = -signal.SIGTERM
    await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == status


def test_a_host_with_a_second_thread_refuses_to_fork() -> None:
    host = _Host(preload=["tests.forking._threaded"])
    try:
        with pytest.raises(RuntimeError, match="the fork host has 2 threads"):
            host.spawn(command([*PROBE, "info"]), [0, 1, 2], None, REPO)
    finally:
        host.stop()


def test_a_command_the_host_cannot_run_is_named() -> None:
    with pytest.raises(ValueError, match="not \\['/bin/true'\\]"):
        command(["/bin/true"])
