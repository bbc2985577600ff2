"""``psych worker`` and ``psych dev`` as real child processes, stopped by signals."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import SERVING_GC_THRESHOLDS
from psych_runtime.workers._devserver import db_lock
from tests._ports import free_port
from tests.forking import aio

from .conftest import TOOLS_REF, Cli, psych, read_until, spawn

PSYCH = (sys.executable, "-m", "psych_runtime.workers.cli")


def script_lookup(cli: Cli) -> None:
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "7"})),
        Reply.text("Order 7 was delivered."),
    )


async def stop(child: aio.Child, signum: int) -> tuple[int, str, str]:
    child.send_signal(signum)
    # A child process starts (and stops) in a few seconds; on a machine loaded by a
    # whole parallel suite it has taken over 20.
    async with asyncio.timeout(90):
        out, err = await child.communicate()
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


async def test_worker_serves_runs_until_sigint(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    script_lookup(cli)
    # The server comes from Temporal's environment configuration, the wiring from PSYCH_*
    # (and --tools overrides PSYCH_TOOLS).
    env = cli.child_env(
        TEMPORAL_ADDRESS=cli.address,
        PSYCH_TASK_QUEUE=cli.task_queue,
        PSYCH_TOOLS="no_such_module:registry",
    )
    child = await spawn([*PSYCH, "worker", "--tools", TOOLS_REF], env, cli.home)
    assert child.stdout is not None
    try:
        started = await read_until(child.stdout, "Ctrl-C to stop")
        tq = cli.task_queue
        roles = f"workflows on {tq!r}, model on '{tq}-model', tools on '{tq}-tools'"
        assert f"worker polling {roles} at {cli.address}" in started
        status, out, err = await psych(capsys, *cli.run_args("--input", "Where is order 7?"))
        assert status == 0, out + err
        assert "answer:       Order 7 was delivered." in out
    finally:
        code, rest, errors = await stop(child, signal.SIGINT)
    assert code == 0, errors
    assert rest.strip() == "worker stopped"
    assert "Traceback" not in errors


GC_TOOLS = '''
import gc

from psych_runtime.specs import ToolRegistry

registry = ToolRegistry()


@registry.register(idempotent=True)
def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order by id.

    Args:
        order_id: The order's id, e.g. "42".
    """
    thresholds = " ".join(str(value) for value in gc.get_threshold())
    return {"thresholds": thresholds, "frozen": str(gc.get_freeze_count() > 0)}
'''


async def test_worker_tunes_its_collector_once_its_workers_are_built(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    # The worker's own lookup_order reports its process's collector to the model.
    tools = cli.home / "gc_tools.py"
    tools.write_text(GC_TOOLS)
    script_lookup(cli)
    env = cli.child_env(TEMPORAL_ADDRESS=cli.address, PSYCH_TASK_QUEUE=cli.task_queue)
    child = await spawn([*PSYCH, "worker", "--tools", f"{tools}:registry"], env, cli.home)
    assert child.stdout is not None
    try:
        await read_until(child.stdout, "Ctrl-C to stop")
        status, out, err = await psych(capsys, *cli.run_args("--input", "Where is order 7?"))
        assert status == 0, out + err
    finally:
        code, _, errors = await stop(child, signal.SIGINT)
    assert code == 0, errors
    shown = [
        message["content"]
        for message in cli.fake.requests[-1]["messages"]
        if message["role"] == "tool"
    ]
    thresholds = " ".join(str(value) for value in SERVING_GC_THRESHOLDS)
    assert shown == [f'{{"thresholds": "{thresholds}", "frozen": "True"}}']


SLOW_TOOLS = '''
import asyncio
import pathlib

from psych_runtime.specs import ToolRegistry

registry = ToolRegistry()
MARKS = pathlib.Path(__file__).parent


@registry.register(idempotent=True)
async def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order by id, slowly.

    Args:
        order_id: The order's id, e.g. "42".
    """
    print("lookup started", flush=True)  # on the worker's output, which the test reads
    await asyncio.sleep(3)
    (MARKS / "finished").write_text(order_id)
    return {"order_id": order_id, "status": "delivered"}
'''


async def test_a_stopping_worker_lets_its_running_tool_call_finish(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    # SIGTERM (a rolling deploy, a scale-down) cancelled every running call at once: the
    # model was told "WorkerShutdown: Worker is shutting down", where deploy/ promises a
    # stopping worker finishes its calls.
    tools = cli.home / "slow_tools.py"
    tools.write_text(SLOW_TOOLS)
    script_lookup(cli)
    env = cli.child_env(TEMPORAL_ADDRESS=cli.address, PSYCH_TASK_QUEUE=cli.task_queue)
    argv = [*PSYCH, "worker", "--tools", f"{tools}:registry"]
    first = await spawn(argv, env, cli.home)
    assert first.stdout is not None
    await read_until(first.stdout, "Ctrl-C to stop")
    run = asyncio.create_task(psych(capsys, *cli.run_args("--input", "Where is order 7?")))
    try:
        await read_until(first.stdout, "lookup started")
        code, _, errors = await stop(first, signal.SIGTERM)
        assert code == 0, errors
        assert (cli.home / "finished").read_text() == "7"  # finished before the exit
        second = await spawn(argv, env, cli.home)  # the Run's next turn
        assert second.stdout is not None
        try:
            await read_until(second.stdout, "Ctrl-C to stop")
            status, out, err = await asyncio.wait_for(run, 60)
        finally:
            await stop(second, signal.SIGTERM)
    finally:
        if first.returncode is None:
            first.kill()
            await first.wait()
    assert status == 0, out + err
    assert "tool call lookup_order -> ok" in out and "WorkerShutdown" not in out


async def test_the_shutdown_grace_is_the_operators_to_set(
    cli: Cli, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fixed at 30 s until 12-07; 0 now cancels running calls at once (a fleet that would
    # rather have them retried elsewhere than wait), and a bad value is refused at start.
    monkeypatch.setenv("PSYCH_SHUTDOWN_GRACE_SECONDS", "soon")
    status, _, err = await psych(capsys, "worker", "--tools", TOOLS_REF)
    assert status == 1
    assert err == "psych: PSYCH_SHUTDOWN_GRACE_SECONDS='soon' is not a number of seconds\n"
    monkeypatch.delenv("PSYCH_SHUTDOWN_GRACE_SECONDS")
    tools = cli.home / "slow_tools.py"
    tools.write_text(SLOW_TOOLS)
    script_lookup(cli)
    env = cli.child_env(TEMPORAL_ADDRESS=cli.address, PSYCH_TASK_QUEUE=cli.task_queue)
    argv = [*PSYCH, "worker", "--tools", f"{tools}:registry"]
    first = await spawn(argv, {**env, "PSYCH_SHUTDOWN_GRACE_SECONDS": "0"}, cli.home)
    assert first.stdout is not None
    await read_until(first.stdout, "Ctrl-C to stop")
    run = asyncio.create_task(psych(capsys, *cli.run_args("--input", "Where is order 7?")))
    try:
        await read_until(first.stdout, "lookup started")
        code, _, errors = await stop(first, signal.SIGTERM)
        assert code == 0, errors
        assert not (cli.home / "finished").exists()  # cancelled, not waited for
        second = await spawn(argv, env, cli.home)  # the lookup (safe to repeat) runs again
        assert second.stdout is not None
        try:
            await read_until(second.stdout, "lookup started")
            status, out, err = await asyncio.wait_for(run, 60)
        finally:
            await stop(second, signal.SIGTERM)
    finally:
        if first.returncode is None:
            first.kill()
            await first.wait()
    assert status == 0, out + err
    assert (cli.home / "finished").read_text() == "7"


async def test_dev_runs_a_server_and_a_worker_until_sigterm(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    script_lookup(cli)
    port = free_port()
    env = cli.child_env(PSYCH_TOOLS=TOOLS_REF)
    child = await spawn([*PSYCH, "dev", "--port", str(port)], env, cli.home)
    assert child.stdout is not None
    try:
        started = await read_until(child.stdout, "Ctrl-C to stop")
        assert f"Temporal dev server at 127.0.0.1:{port}\n" in started
        assert "worker polling workflows on 'psych', model on 'psych-model'" in started

        # A second dev server on the same port is refused instead of joining the first.
        status, _, err = await psych(capsys, "dev", "--port", str(port))
        assert status == 1
        assert err.startswith(f"psych: port {port} on 127.0.0.1 is in use")

        argv = [
            "run",
            str(cli.spec_file),
            "--input",
            "Where is order 7?",
            "--address",
            f"127.0.0.1:{port}",
            "--tools",
            TOOLS_REF,
            "--store",
            str(cli.home / "versions"),
        ]
        status, out, err = await psych(capsys, *argv)
        assert status == 0, out + err
        assert "on task queue 'psych'" in out and "settled completed: answered" in out
        assert "Traceback" not in err
    finally:
        code, rest, errors = await stop(child, signal.SIGTERM)
    assert code == 0, errors
    assert "worker and dev server stopped" in rest
    # Its server is gone with it.
    status, _, err = await psych(capsys, "list", "--address", f"127.0.0.1:{port}")
    assert status == 1 and "cannot connect" in err


async def test_dev_runs_unversioned_whatever_the_fleets_variables_say(cli: Cli) -> None:
    # With the fleet's PSYCH_DEPLOYMENT and PSYCH_BUILD_ID in the shell, its worker was
    # versioned, silently: no build of its fresh server is current, so no Run started.
    script_lookup(cli)
    port = free_port()
    env = cli.child_env(PSYCH_TOOLS=TOOLS_REF, PSYCH_DEPLOYMENT="fleet", PSYCH_BUILD_ID="b1")
    child = await spawn([*PSYCH, "dev", "--port", str(port)], env, cli.home)
    assert child.stdout is not None
    try:
        await read_until(child.stdout, "Ctrl-C to stop")
        argv = ["run", str(cli.spec_file), "--input", "Where is order 7?"]
        argv += ["--address", f"127.0.0.1:{port}", "--tools", TOOLS_REF]
        argv += ["--store", str(cli.home / "versions")]
        # A child of its own: a Run that never starts would hold `psych run` for ever.
        run = await spawn([*PSYCH, *argv], env, cli.home)
        try:
            out, err = await asyncio.wait_for(run.communicate(), 60)
        finally:
            if run.returncode is None:
                run.kill()
                await run.wait()
        assert run.returncode == 0, (out + err).decode()
        assert "settled completed: answered" in out.decode()
    finally:
        code, _, errors = await stop(child, signal.SIGTERM)
    assert code == 0, errors
    assert "PSYCH_DEPLOYMENT and PSYCH_BUILD_ID are ignored" in errors


async def test_dev_refuses_a_database_another_dev_server_holds(cli: Cli, tmp_path: Path) -> None:
    database = tmp_path / "state.sqlite"
    env = cli.child_env(PSYCH_TOOLS=TOOLS_REF)
    first = await spawn(
        [*PSYCH, "dev", "--port", str(free_port()), "--db", str(database)], env, cli.home
    )
    assert first.stdout is not None
    try:
        await read_until(first.stdout, "Ctrl-C to stop")
        # The same file by another spelling: a symlink to it.
        alias = tmp_path / "alias.sqlite"
        alias.symlink_to(database)
        second = await spawn(
            [*PSYCH, "dev", "--port", str(free_port()), "--db", str(alias)], env, cli.home
        )
        try:
            # Before the fix it started, and both servers wrote the one file.
            async with asyncio.timeout(60):
                out, err = await second.communicate()
        finally:
            if second.returncode is None:  # it started: stopped as a person would, with its server
                await stop(second, signal.SIGTERM)
        assert second.returncode == 1, out.decode() + err.decode()
        assert err.decode() == (
            f"psych: --db {alias} is in use by another running psych dev (it holds "
            f"{database}.psych-dev.lock); two dev servers on one database corrupt it: stop "
            "the other or give another file\n"
        )
    finally:
        code, _, errors = await stop(first, signal.SIGTERM)
    assert code == 0, errors
    with db_lock(database):  # released with its holder: nothing stale is left
        pass


async def test_sigterm_while_a_worker_starts_stops_it_as_ctrl_c_does(cli: Cli) -> None:
    # A server that takes the connection and never answers: the worker is connecting, in
    # its start-up, for as long as the test needs. SIGTERM there used to kill the process
    # (exit -15, and `psych dev` left the dev server it was starting running, ownerless).
    connected = asyncio.Event()
    held: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        connected.set()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        child = await spawn(
            [*PSYCH, "worker", "--address", f"127.0.0.1:{port}", "--task-queue", cli.task_queue],
            cli.child_env(),
            cli.home,
        )
        try:
            async with asyncio.timeout(90):
                await connected.wait()
        except TimeoutError:
            child.kill()
            raise
        code, out, err = await stop(child, signal.SIGTERM)
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    assert code == 130, (code, out, err)
    assert err == "psych: interrupted\n", err
    assert "Ctrl-C to stop" not in out
