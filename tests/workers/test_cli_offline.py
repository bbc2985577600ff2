"""The ``psych`` command offline: ``psych dev --fake-model`` (the scripted support model, or a
script file), the model endpoint and its missing key said at start, and one console line
per expected failure (the traceback behind ``--verbose``). Real ``psych`` processes, but
for one in-process check: the fake model ``psych dev`` serves keeps no request bodies.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from psych_runtime.workers.cli._scripted_model import fake_model
from tests._ports import free_port
from tests.forking import aio

from .conftest import EXAMPLES, TOOLS_REF, Cli, read_until, spawn

PSYCH = str(Path(sys.executable).parent / "psych")
DEV_SERVER_LOG = re.compile(r"time=\S+ level=[A-Z]+ msg=")
"""A line the embedded Temporal dev server logs itself (``time=... level=ERROR msg=...``)."""


def psych_lines(console: str) -> list[str]:
    """The lines of ``psych dev``'s stderr that psych printed: the embedded dev server logs
    to the same stderr in its own format (it may log an internal error such as "unable to
    add metrics baggage to gRPC trailer" at any time)."""
    return [line for line in console.strip().splitlines() if not DEV_SERVER_LOG.match(line)]


def bare_env(**extra: str) -> dict[str, str]:
    """The environment of a fresh machine: no Temporal, psych or OpenAI settings."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PSYCH_", "OPENAI_"))
    }
    env.update(extra)
    return env


async def run_psych(cwd: Path, *argv: str, **env: str) -> tuple[int, str, str]:
    child = await aio.create_subprocess_exec(
        PSYCH, *argv, env=bare_env(**env), cwd=cwd, stdout=aio.PIPE, stderr=aio.PIPE
    )
    out, err = await asyncio.wait_for(child.communicate(), 90)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


async def stop(child: aio.Child) -> tuple[int, str, str]:
    child.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(child.communicate(), 30)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


def support_run(port: int, *extra: str) -> list[str]:
    return [
        "run",
        str(EXAMPLES / "support-agent.yaml"),
        "--tools",
        TOOLS_REF,
        "--address",
        f"127.0.0.1:{port}",
        "--tenant",
        "acme",
        *extra,
    ]


@pytest.mark.parametrize("scripted", [False, True])
def test_dev_fake_model_keeps_no_request_bodies(scripted: bool, tmp_path: Path) -> None:
    # `psych dev --fake-model` serves for as long as it runs: every body kept would grow it.
    script = None
    if scripted:
        script = tmp_path / "replies.yaml"
        script.write_text("replies:\n  - text: Hello.\n")
    model, _ = fake_model(None if script is None else str(script))
    assert model.record is False


async def test_dev_fake_model_serves_the_scripted_support_model(tmp_path: Path) -> None:
    port = free_port()
    argv = [PSYCH, "dev", "--fake-model", "--port", str(port), "--tools", TOOLS_REF]
    dev = await spawn(argv, bare_env(), tmp_path)
    assert dev.stdout is not None
    try:
        started = await read_until(dev.stdout, "Ctrl-C to stop")
        assert "model: the scripted support model (answers gpt-4o-mini) at http://127.0.0.1:" in (
            started
        )
        assert "policy " in started
        status, out, err = await run_psych(
            tmp_path, *support_run(port, "--input", "Please refund order 42, it arrived broken.")
        )
    finally:
        code, _, errors = await stop(dev)
    assert status == 0, out + err
    assert "tool call lookup_order -> ok" in out
    # Nothing serves the payments API here: the refund is an error the model reads.
    assert "tool call issue_refund -> error" in out
    assert "answer:       I could not refund order 42" in out
    assert code == 0, errors
    # The key is not needed and not asked for.
    assert "OPENAI_API_KEY" not in errors


async def test_dev_fake_model_script_answers_in_order_then_fails_at_once(
    tmp_path: Path,
) -> None:
    script = tmp_path / "replies.yaml"
    script.write_text(
        "replies:\n"
        "  - tool_calls: [{name: lookup_order, arguments: {order_id: '7'}}]\n"
        "  - text: Order 7 was delivered.\n"
    )
    port = free_port()
    argv = [PSYCH, "dev", "--fake-model", str(script), "--port", str(port), "--tools", TOOLS_REF]
    dev = await spawn(argv, bare_env(), tmp_path)
    assert dev.stdout is not None
    try:
        started = await read_until(dev.stdout, "Ctrl-C to stop")
        assert f"model: the fake model scripted by {script} (2 replies; answers gpt-4o-mini)" in (
            started
        )
        first = await run_psych(tmp_path, *support_run(port, "--input", "Where is order 7?"))
        second = await run_psych(tmp_path, *support_run(port, "--input", "And order 8?"))
    finally:
        code, _, errors = await stop(dev)
    assert first[0] == 0, first[2]
    assert "answer:       Order 7 was delivered." in first[1]
    # Used up: the next call fails not transient, so the Run fails at once.
    assert second[0] == 1
    assert f"the fake model's script {script} has no reply left (all 2 used)" in second[1]
    assert "model calls:  1 (1 failed)" in second[1]
    assert code == 0, errors


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("replies: []\n", "replies: List should have at least 1 item"),
        ("- {text: hi, colour: red}\n", "replies.0.colour: Extra inputs are not permitted"),
        ("- {error: {status: 200}}\n", "replies.0.error.status: Input should be greater than"),
        ("- {}\n", "replies.0: a reply needs text, tool_calls or error"),
        ("[unclosed\n", "cannot read the fake model's script"),
    ],
)
async def test_a_malformed_script_is_one_line_before_anything_starts(
    tmp_path: Path, text: str, expected: str
) -> None:
    script = tmp_path / "bad.yaml"
    script.write_text(text)
    status, out, err = await run_psych(
        tmp_path, "dev", "--fake-model", str(script), "--port", str(free_port())
    )
    assert status == 1
    assert err.startswith("psych: ") and expected in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Temporal dev server at" not in out


async def test_worker_says_which_endpoint_and_warns_of_a_missing_key(
    cli: Cli, tmp_path: Path
) -> None:
    argv = [PSYCH, "worker", "--address", cli.address, "--task-queue", cli.task_queue]
    child = await spawn(argv, bare_env(), tmp_path)
    assert child.stdout is not None
    try:
        started = await read_until(child.stdout, "Ctrl-C to stop")
    finally:
        code, _, errors = await stop(child)
    assert "model endpoint: https://api.openai.com/v1 (default; no key)" in started
    assert "policy " in started
    assert code == 0
    assert "psych: warning: OPENAI_API_KEY is unset and https://api.openai.com/v1" in errors
    assert "psych dev --fake-model" in errors


async def test_a_worker_without_the_model_role_says_so_and_warns_of_no_key(
    cli: Cli, tmp_path: Path
) -> None:
    # From an audit: a tools-only worker warned that OPENAI_API_KEY was unset, though it
    # never calls a model.
    argv = [PSYCH, "worker", "--address", cli.address, "--task-queue", cli.task_queue]
    child = await spawn([*argv, "--role", "tools"], bare_env(), tmp_path)
    assert child.stdout is not None
    try:
        started = await read_until(child.stdout, "Ctrl-C to stop")
    finally:
        code, _, errors = await stop(child)
    assert "model: no model calls on this worker (roles tools)" in started
    assert "model endpoint" not in started
    assert code == 0
    assert "warning" not in errors


async def test_a_local_endpoint_without_a_key_gets_no_warning(cli: Cli, tmp_path: Path) -> None:
    argv = [PSYCH, "worker", "--address", cli.address, "--task-queue", cli.task_queue]
    env = bare_env(OPENAI_BASE_URL=cli.fake.base_url)
    child = await spawn(argv, env, tmp_path)
    assert child.stdout is not None
    try:
        started = await read_until(child.stdout, "Ctrl-C to stop")
    finally:
        code, _, errors = await stop(child)
    assert f"model endpoint: {cli.fake.base_url} (OPENAI_BASE_URL; no key)" in started
    assert code == 0
    assert "warning" not in errors


RAISING_TOOLS = '''
from psych_runtime.specs import ToolRegistry

registry = ToolRegistry()


@registry.register
def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: The order's id.
    """
    raise ConnectionError(f"orders database unreachable for {order_id}")
'''


@pytest.mark.parametrize("verbose", [False, True])
async def test_expected_failures_are_one_console_line_each_unless_verbose(
    tmp_path: Path, verbose: bool
) -> None:
    tools = tmp_path / "raising_tools.py"
    tools.write_text(RAISING_TOOLS)
    script = tmp_path / "replies.yaml"
    script.write_text(
        "- tool_calls: [{name: lookup_order, arguments: {order_id: '7'}}]\n"
        "- text: The orders database is down.\n"
    )
    port = free_port()
    argv = [PSYCH, "dev", "--fake-model", str(script), "--port", str(port)]
    argv += ["--tools", f"{tools}:registry", *(["--verbose"] if verbose else [])]
    dev = await spawn(argv, bare_env(), tmp_path)
    assert dev.stdout is not None
    try:
        await read_until(dev.stdout, "Ctrl-C to stop")
        run = [
            "run",
            str(EXAMPLES / "support-agent.yaml"),
            "--tools",
            f"{tools}:registry",
            "--address",
            f"127.0.0.1:{port}",
            "--input",
            "Where is order 7?",
        ]
        status, out, err = await run_psych(tmp_path, *run)
    finally:
        code, _, console = await stop(dev)
    assert status == 0, err
    assert "tool call lookup_order -> error" in out
    assert code == 0
    failed = [line for line in console.splitlines() if "code tool lookup_order raised" in line]
    assert len(failed) == 1, console
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d warning: code tool lookup_order raised: ConnectionError: orders "
        r"database unreachable for 7 \[psych-default-\w+\]",
        failed[0],
    ), failed[0]
    assert ("Traceback (most recent call last)" in console) is verbose, console
    if not verbose:
        # The check is that psych itself prints this one line.
        assert len(psych_lines(console)) == 1, console


async def test_an_unresolvable_endpoint_is_one_line_and_fails_the_run_at_once(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = bare_env(OPENAI_BASE_URL="http://nonexistent.invalid/v1", OPENAI_API_KEY="sk-test")
    argv = [PSYCH, "dev", "--port", str(port), "--tools", TOOLS_REF]
    dev = await spawn(argv, env, tmp_path)
    assert dev.stdout is not None
    try:
        started = await read_until(dev.stdout, "Ctrl-C to stop")
        status, out, _ = await asyncio.wait_for(
            run_psych(tmp_path, *support_run(port, "--input", "Where is order 7?")), 30
        )
    finally:
        code, _, console = await stop(dev)
    assert "model endpoint: http://nonexistent.invalid/v1 (OPENAI_BASE_URL; key from " in started
    assert status == 1
    assert "model calls:  1 (1 failed)" in out
    assert code == 0
    lines = psych_lines(console)
    assert len(lines) == 1, console
    (line,) = lines
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d warning: model call failed \(not transient\): model gpt-4o-mini: "
        r"cannot resolve host 'nonexistent.invalid': .+ \[psych-acme-\w+\]",
        line,
    ), line
