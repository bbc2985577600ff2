"""What ``psych`` prints on a terminal and through a pipe: the real executable in a
pseudo-terminal (``pty``) and piped, against the session dev server with a real worker."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import re
import signal
import struct
import sys
import termios
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from psych_runtime.testing import Reply, ToolCall

from .conftest import Cli, psych

PSYCH_SCRIPT = str(Path(sys.executable).with_name("psych"))
RUN_LINE = re.compile(r"^Run (psych-\w+-\w+) on task queue", re.MULTILINE)
SGR = re.compile(r"\x1b\[([0-9;]*)m")
ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[=>]")
TERMINAL_VARIABLES = ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


def colours(text: str) -> list[str]:
    """The colour parameters of the SGR escapes in ``text`` (foreground or background)."""
    found = []
    for params in SGR.findall(text):
        numbers = [int(p) for p in params.split(";") if p]
        index = 0
        while index < len(numbers):
            number = numbers[index]
            if number in (38, 48):  # 38;5;N or 38;2;R;G;B
                found.append(params)
                break
            if 30 <= number <= 37 or 40 <= number <= 47 or 90 <= number <= 107:
                found.append(params)
                break
            index += 1
    return found


def plain(text: str) -> str:
    """``text`` without escapes and carriage returns, as a person reads the terminal."""
    return ESCAPE.sub("", text).replace("\r", "")


def terminal_env(cli: Cli, **extra: str) -> dict[str, str]:
    """The child's environment: the fixture's, with no terminal setting inherited."""
    env = {k: v for k, v in cli.child_env().items() if k not in TERMINAL_VARIABLES}
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    env["TERM"] = "xterm-256color"
    env.update(extra)
    return env


@dataclass
class InTerminal:
    """A ``psych`` process whose standard output is a pseudo-terminal."""

    process: asyncio.subprocess.Process
    master: int
    output: bytearray = field(default_factory=bytearray)
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    def text(self) -> str:
        return self.output.decode(errors="replace")

    async def read_until(self, pattern: str, within: float = 30) -> str:
        """The terminal's text (escapes removed) once it shows ``pattern`` (a regex)."""
        async with asyncio.timeout(within):
            while not re.search(pattern, plain(self.text())):
                if self.closed.is_set():
                    raise AssertionError(f"ended before {pattern!r}:\n{plain(self.text())}")
                await asyncio.sleep(0.05)
        return plain(self.text())

    async def finish(self, within: float = 60) -> tuple[int, str, str]:
        """Wait for the exit: (status, raw terminal output, standard error)."""
        assert self.process.stderr is not None
        async with asyncio.timeout(within):
            err = await self.process.stderr.read()
            status = await self.process.wait()
            await self.closed.wait()
        return status, self.text(), err.decode()


@contextlib.asynccontextmanager
async def in_terminal(
    argv: Sequence[str], env: Mapping[str, str], *, columns: int = 120
) -> AsyncIterator[InTerminal]:
    """Run ``psych argv`` with a pseudo-terminal ``columns`` wide as standard output
    (standard error stays a pipe, so what goes wrong is kept apart)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    process = await asyncio.create_subprocess_exec(
        PSYCH_SCRIPT,
        *argv,
        stdin=slave,
        stdout=slave,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
    )
    os.close(slave)
    shown = InTerminal(process=process, master=master)
    loop = asyncio.get_running_loop()

    def readable() -> None:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            data = b""
        if data:
            shown.output.extend(data)
        else:
            loop.remove_reader(master)
            shown.closed.set()

    loop.add_reader(master, readable)
    try:
        yield shown
    finally:
        loop.remove_reader(master)
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.close(master)


async def piped(argv: Sequence[str], env: Mapping[str, str]) -> tuple[int, str, str]:
    """Run ``psych argv`` with standard output and error piped."""
    process = await asyncio.create_subprocess_exec(
        PSYCH_SCRIPT,
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def script_refund(cli: Cli) -> None:
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
        Reply.tool_calls(ToolCall("issue_refund", {"order_id": "42", "reason": "broken"})),
        Reply.text("I refunded order 42."),
    )


async def completed_run(cli: Cli, capsys: pytest.CaptureFixture[str], tenant: str) -> str:
    """A completed Run of the support agent for ``tenant``, listed by visibility already."""
    script_refund(cli)
    status, out, err = await psych(
        capsys, *cli.run_args("--input", "Refund order 42", tenant=tenant)
    )
    assert status == 0, err
    found = RUN_LINE.search(out)
    assert found is not None, out
    workflow_id = found.group(1)
    for _ in range(80):
        status, out, _ = await psych(capsys, "list", *cli.args(tenant=tenant))
        if workflow_id in out:
            return workflow_id
        await asyncio.sleep(0.25)
    raise AssertionError(f"{workflow_id} never listed")


def fresh_tenant() -> str:
    return f"render{uuid.uuid4().hex[:8]}"


async def test_colour_on_a_terminal_only_and_tables_fit_its_width(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    who = fresh_tenant()
    async with cli.worker():
        workflow_id = await completed_run(cli, capsys, who)
        env = terminal_env(cli)
        listing = ["list", *cli.args(tenant=who)]
        report = ["report", workflow_id, *cli.args(tenant=who)]
        async with in_terminal(listing, env, columns=72) as shown:
            status, raw, err = await shown.finish()
        async with in_terminal(report, env, columns=72) as shown:
            report_status, report_raw, report_err = await shown.finish()
        piped_status, piped_out, piped_err = await piped(listing, env)
        piped_report_status, piped_report, _ = await piped(report, env)

    assert (status, err) == (0, ""), raw
    assert colours(raw), f"no colour on a terminal:\n{raw!r}"
    lines = plain(raw).splitlines()
    assert lines[0].split() == ["RUN", "ID", "AGENT", "STATUS", "STARTED"]
    # The id may fold within its column, never be cut: its pieces make it whole.
    assert workflow_id in "".join(line.split()[0] for line in lines[1:] if line.strip())
    assert "completed" in plain(raw)
    assert max(len(line) for line in lines) <= 72, plain(raw)

    assert (report_status, report_err) == (0, ""), report_raw
    assert colours(report_raw)
    report_lines = plain(report_raw).splitlines()
    assert max(len(line) for line in report_lines) <= 72, plain(report_raw)
    assert any(re.fullmatch(r"status +completed", line.strip()) for line in report_lines)
    assert any(
        line.startswith("answer") and "I refunded order 42." in line for line in report_lines
    )

    # Through a pipe: the plain columns of before, not one escape.
    assert (piped_status, piped_err) == (0, "")
    assert "\x1b" not in piped_out and "\x1b" not in piped_report
    header, row = piped_out.splitlines()
    assert header.split() == ["RUN", "ID", "AGENT", "STATUS", "STARTED"]
    assert row.split()[:3] == [workflow_id, "support", "completed"]
    assert piped_report_status == 0
    assert "status:       completed\n" in piped_report
    assert "answer:       I refunded order 42.\n" in piped_report


async def test_no_color_keeps_colours_off_the_terminal_and_force_color_adds_them_to_a_pipe(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    who = fresh_tenant()
    async with cli.worker():
        workflow_id = await completed_run(cli, capsys, who)
        report = ["report", workflow_id, *cli.args(tenant=who)]
        async with in_terminal(report, terminal_env(cli, NO_COLOR="1")) as shown:
            status, raw, err = await shown.finish()
        forced = await piped(report, terminal_env(cli, FORCE_COLOR="1"))
        both = await piped(report, terminal_env(cli, FORCE_COLOR="1", NO_COLOR="1"))
    assert (status, err) == (0, "")
    assert colours(raw) == [], raw
    assert re.search(r"status +completed", plain(raw))
    assert forced[0] == 0 and colours(forced[1]), forced
    assert both[0] == 0 and colours(both[1]) == [] and "completed" in both[1]


async def test_list_into_head_and_into_a_closed_pipe_ends_quietly(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    who = fresh_tenant()
    async with cli.worker():
        workflow_id = await completed_run(cli, capsys, who)
        env = terminal_env(cli)
        listing = " ".join(["list", *cli.args(tenant=who)])
        report = " ".join(["report", workflow_id, *cli.args(tenant=who)])
        follow = " ".join(["follow", workflow_id, *cli.args(tenant=who)])
        # As a user types it: the shell's pipeline status is psych's (pipefail).
        head = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            f"set -o pipefail; {PSYCH_SCRIPT} {listing} | head -1",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        head_out, head_err = await head.communicate()
        # A reader that is gone before psych writes (`| true`): the write must fail.
        closed = []
        for command in (listing, report, follow):
            child = await asyncio.create_subprocess_exec(
                "bash",
                "-c",
                f"{PSYCH_SCRIPT} {command} | true; echo ${{PIPESTATUS[0]}} >&2",
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
            closed.append(await child.communicate())
    assert head_err == b""
    assert head.returncode in (0, 128 + signal.SIGPIPE)
    assert head_out.decode().split() == ["RUN", "ID", "AGENT", "STATUS", "STARTED"]
    for out, err in closed:
        # Killed by SIGPIPE, as `seq 1000000 | true` is: status 141, nothing on stderr.
        assert (out, err) == (b"", f"{128 + signal.SIGPIPE}\n".encode())


LONG_ANSWER = "\n".join(
    f"Line {n}: order 42 was refunded in full, and here is more detail about it." for n in range(6)
)


async def test_full_shows_long_model_text_whole(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    async with cli.worker():
        cli.fake.enqueue(Reply.text(LONG_ANSWER))
        status, short_out, err = await psych(capsys, *cli.run_args("--input", "hi"))
        assert status == 0, err
        cli.fake.enqueue(Reply.text(LONG_ANSWER))
        status, full_out, err = await psych(capsys, *cli.run_args("--input", "hi", "--full"))
        assert status == 0, err
    shortened = next(line for line in short_out.splitlines() if "-> text '" in line)
    assert "'Line 0: order 42" in shortened and "...' [" in shortened
    assert "Line 5" not in short_out[: short_out.index("settled completed")]
    records = full_out[: full_out.index("settled completed")]
    call = next(i for i, line in enumerate(records.splitlines()) if "-> text [" in line)
    below = records.splitlines()[call + 1 : call + 7]
    assert below == ["      " + line for line in LONG_ANSWER.splitlines()], full_out
