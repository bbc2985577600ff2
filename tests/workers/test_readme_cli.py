"""The docs' ``psych`` walkthroughs, followed command by command as a new user would: the
commands are read out of the pages themselves and run as real ``psych`` processes, in a
fresh directory, with no model key and no Temporal, psych or OpenAI settings, against the
``psych dev --fake-model`` the page starts (on a free port instead of 7233).

Two of them: docs/getting-started.md, "The `psych` command" (dev, then validate, publish,
run, list, status, report), and docs/guides/approvals.md (dev again with ``--ask
issue_refund``, a Run that waits, ``list --suspended``, ``approve``).
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import sys
from pathlib import Path

import pytest

from psych_runtime.workers.cli._parser import build_parser
from tests._ports import free_port

from .conftest import ROOT, read_until

BIN = Path(sys.executable).parent
RUN_LINE = re.compile(r"^Run (psych-acme-\w+) on task queue", re.MULTILINE)
# The error the model reads for the refund when the worker has no payments-api-key.
REFUND_ERROR = "issue_refund: credential 'payments-api-key' is not available"
# The commands that talk to the Temporal server: the test's dev server is on another port.
CONNECTING = {"run", "list", "status", "report", "follow", "approve", "deny", "answer"}


def section(page: str, title: str) -> str:
    """The section of ``docs/<page>`` under the heading ``<title>`` (``# `` for the page's
    own title, else ``## ``), up to the next ``## `` heading."""
    text = (ROOT / "docs" / page).read_text()
    start = 0 if text.startswith(f"# {title}\n") else text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def sh_blocks(text: str) -> list[list[list[str]]]:
    """Each ```sh block of ``text`` as its commands, each split as the shell would."""
    blocks = []
    for body in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        joined = body.replace("\\\n", " ")
        commands = [shlex.split(line, comments=True) for line in joined.splitlines()]
        blocks.append([command for command in commands if command])
    return blocks


def fresh_env() -> dict[str, str]:
    """A new user's shell after `source .venv/bin/activate`: psych on PATH, nothing set."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PSYCH_", "OPENAI_"))
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def localized(command: list[str], port: int, run_id: str | None) -> list[str]:
    """``command`` pointed at this test's server, with the Run id it was shown."""
    assert command[0] == "psych", command
    words = [run_id if word == "psych-acme-<id>" and run_id else word for word in command]
    assert "psych-acme-<id>" not in words, f"no Run id yet for {command}"
    if words[1] == "dev":
        return [*words, "--port", str(port)]
    if words[1] in CONNECTING:
        return [*words, "--address", f"127.0.0.1:{port}"]
    return words


async def start(command: list[str], cwd: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        env=fresh_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def run(command: list[str], cwd: Path) -> tuple[int, str, str]:
    child = await start(command, cwd)
    out, err = await asyncio.wait_for(child.communicate(), 120)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


async def stop(dev: asyncio.subprocess.Process) -> None:
    dev.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(dev.communicate(), 30)
    assert dev.returncode == 0, err.decode()


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "a.yaml"],
        ["publish", "a.yaml"],
        ["run", "a.yaml", "--input", "hi"],
        ["worker"],
        ["dev"],
        ["serve"],
    ],
)
@pytest.mark.parametrize("flag", ["--tools", "--registry"])
def test_every_command_takes_the_tools_as_tools_and_the_old_registry(
    argv: list[str], flag: str
) -> None:
    args = build_parser().parse_args([*argv, flag, "examples/tools.py:registry"])
    assert args.tools == "examples/tools.py:registry"


@pytest.mark.timeout(400)  # two dev servers and a dozen psych processes on a loaded machine
async def test_the_psych_section_and_the_approvals_section_run_as_written(
    tmp_path: Path,
) -> None:
    # A fresh checkout's working directory: the examples, and nothing psych wrote yet.
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    port = free_port()

    # --- docs/getting-started.md, "The `psych` command" ----------------------------------
    first, commands = sh_blocks(section("getting-started.md", "The `psych` command"))[:2]
    assert [command[:3] for command in first] == [["psych", "dev", "--fake-model"]]
    assert [command[1] for command in commands] == [
        "validate",
        "publish",
        "run",
        "list",
        "status",
        "report",
    ]
    section_text = section("getting-started.md", "The `psych` command")
    dev = await start(localized(first[0], port, None), tmp_path)
    assert dev.stdout is not None
    run_id: str | None = None
    try:
        started = await read_until(dev.stdout, "Ctrl-C to stop")
        assert "model: the scripted support model" in started
        for command in commands:
            status, out, err = await run(localized(command, port, run_id), tmp_path)
            assert status == 0, f"{shlex.join(command)} exited {status}:\n{out}\n{err}"
            verb = command[1]
            if verb in ("validate", "publish"):
                # The page says both warn that this shell's egress refuses the tool's URL.
                assert "egress refused: http://127.0.0.1:8765/" in err, err
            if verb == "validate":
                assert out == "examples/support-agent.yaml: valid\n"
            elif verb == "publish":
                assert out.startswith("sha256:") and " agent support " in out
            elif verb == "run":
                found = RUN_LINE.search(out)
                assert found is not None, out
                run_id = found.group(1)
                assert "settled completed: answered" in out
                assert "answer:       I could not refund order 42" in out
                # The refund's error, as the page quotes it.
                assert REFUND_ERROR in out
                assert REFUND_ERROR in " ".join(section_text.split())
            elif verb == "list":
                assert run_id is not None and run_id in out
                assert "completed" in out
            else:  # status, report
                assert run_id is not None and run_id in out
                assert re.search(r"^status:\s+completed$", out, re.MULTILINE), out
    finally:
        await stop(dev)

    # --- docs/guides/approvals.md --------------------------------------------------------
    approvals = section("guides/approvals.md", "Approvals, questions, aborts and steering")
    asking, waiting, answering = sh_blocks(approvals)[:3]
    assert [command[:2] for command in asking] == [["psych", "dev"]]
    assert "--ask" in asking[0] and "--fake-model" in asking[0]
    assert [command[1] for command in waiting] == ["run"]
    assert [command[1] for command in answering] == ["list", "approve"]
    port = free_port()
    dev = await start(localized(asking[0], port, None), tmp_path)
    assert dev.stdout is not None
    try:
        started = await read_until(dev.stdout, "Ctrl-C to stop")
        assert "approval needed for: issue_refund" in started
        follower = await start(localized(waiting[0], port, None), tmp_path)
        assert follower.stdout is not None
        shown = await read_until(follower.stdout, "suspended")
        found = RUN_LINE.search(shown)
        assert found is not None, shown
        run_id = found.group(1)
        status, listed, err = await run(localized(answering[0], port, run_id), tmp_path)
        assert status == 0, err
        assert run_id in listed
        assert "approval call_2: waiting for approval of issue_refund(" in listed
        status, approved, err = await run(localized(answering[1], port, run_id), tmp_path)
        assert status == 0, err
        assert approved.startswith(f"{run_id}: approval call_2 approved")
        rest, err_bytes = await asyncio.wait_for(follower.communicate(), 60)
        assert follower.returncode == 0, err_bytes.decode()
        followed = shown + rest.decode()
        assert "approved by" in followed
        assert "settled completed: answered" in followed
    finally:
        await stop(dev)
