"""The embedded dev server's options that are not exercised elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import sqlite3
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio import workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from psych_runtime.specs import PsychError
from psych_runtime.workers import _devserver, start_dev_server, start_time_skipping_server
from tests._ports import free_port


async def test_a_metrics_port_serves_the_servers_own_counters() -> None:
    port = free_port()
    env = await start_dev_server(metrics_port=port)
    try:
        await env.client.count_workflows()
        async with httpx.AsyncClient() as http:
            response = await http.get(f"http://127.0.0.1:{port}/metrics")
    finally:
        await env.shutdown()
    assert response.status_code == 200
    lines = response.text.splitlines()
    assert any(
        line.startswith("service_requests{") and 'operation="CountWorkflowExecutions"' in line
        for line in lines
    )


async def test_each_task_queue_is_one_partition() -> None:
    port = free_port()
    env = await start_dev_server(metrics_port=port)
    task_queue = f"one_{os.urandom(4).hex()}"  # metrics spell "-" as "_"
    try:
        async with Worker(
            env.client,
            task_queue=task_queue,
            workflows=[Echo],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            await env.client.execute_workflow(
                Echo.run, id=f"echo-{task_queue}", task_queue=task_queue
            )
        async with httpx.AsyncClient() as http:
            response = await http.get(f"http://127.0.0.1:{port}/metrics")
    finally:
        await env.shutdown()
    partitions = {
        match.group(1)
        for line in response.text.splitlines()
        if f'taskqueue="{task_queue}"' in line
        and (match := re.search(r'partition="(\d+)"', line)) is not None
    }
    # Four by default: the queue loaded four times over, its tasks forwarded between them.
    assert partitions == {"0"}


async def test_a_database_written_with_four_partitions_keeps_its_backlog(
    tmp_path: Path,
) -> None:
    """``psych dev --db`` on a database an earlier psych wrote (the server's default of four
    partitions): workflow tasks queued in any of them, with no worker, still run."""
    db_file = str(tmp_path / "dev.db")
    earlier = await WorkflowEnvironment.start_local(
        namespace="default",
        ip="127.0.0.1",
        port=free_port(),
        dev_server_existing_path=_devserver.temporal_binary(),
        dev_server_database_filename=db_file,
        dev_server_log_level="error",
    )
    ids = [f"queued-{n}" for n in range(8)]  # all in partition 0 by chance: 1 in 65,536
    try:
        for workflow_id in ids:
            await earlier.client.start_workflow(Echo.run, id=workflow_id, task_queue="queued")
    finally:
        await earlier.shutdown()
    env = await start_dev_server(db_file=db_file)
    try:
        async with Worker(
            env.client,
            task_queue="queued",
            workflows=[Echo],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            async with asyncio.timeout(60):
                results = [await env.client.get_workflow_handle(i).result() for i in ids]
    finally:
        await env.shutdown()
    assert results == ["echo"] * len(ids)


@workflow.defn(name="Echo")
class Echo:
    @workflow.run
    async def run(self) -> str:
        return "echo"


def test_only_a_server_whose_state_starts_empty_reads_one_partition(tmp_path: Path) -> None:
    database = tmp_path / "temporal.db"
    assert _devserver.partition_args(None) == _devserver.ONE_PARTITION_ARGS
    assert _devserver.partition_args(str(database)) == _devserver.ONE_PARTITION_ARGS
    database.write_bytes(b"")
    assert _devserver.partition_args(str(database)) == _devserver.ONE_WRITE_PARTITION_ARGS


_OLD_SERVER_ARGS = [
    # The history service deletes the transfer tasks it handed to matching each second (30 s
    # by default): a restart must not hand the same tasks to matching again (it would
    # write them to partition 0, hiding the backlog the test is about).
    "--dynamic-config-value",
    'history.transferProcessorUpdateAckInterval="1s"',
]


def _scraped(text: str, family: str, operation: str) -> int:
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith(family + "{") and f'operation="{operation}"' in line
    )


async def _backlog_in_four_partitions(database: Path, task_queue: str, ids: list[str]) -> None:
    """Runs started on ``task_queue`` of a server of the default 4 partitions with no
    worker, the server stopped once nothing but its task queues' backlog holds them."""
    for attempt in range(5):
        metrics = free_port()
        env = await WorkflowEnvironment.start_local(
            ip="127.0.0.1",
            port=free_port(),
            dev_server_existing_path=_devserver.temporal_binary(),
            dev_server_database_filename=str(database),
            dev_server_log_level="error",
            dev_server_extra_args=[*_OLD_SERVER_ARGS, "--metrics-port", str(metrics)],
        )
        try:
            if attempt == 0:
                for workflow_id in ids:
                    await env.client.start_workflow(Echo.run, id=workflow_id, task_queue=task_queue)
            async with httpx.AsyncClient() as http:
                for _ in range(600):  # its tasks handed over, then deleted once
                    text = (await http.get(f"http://127.0.0.1:{metrics}/metrics")).text
                    if _scraped(text, "persistence_requests", "RangeCompleteTransferTasks"):
                        break
                    await asyncio.sleep(0.1)
        finally:
            await env.shutdown()
        # Read-write, as the next server opens it: the stopped server may leave a hot
        # journal, which a read-only connection cannot roll back ("attempt to write a
        # readonly database", a fresh-clone CI run).
        with contextlib.closing(sqlite3.connect(database)) as db:
            pending = [row[0] for row in db.execute("SELECT data FROM transfer_tasks")]
            backlog = [row[0] for row in db.execute("SELECT task_queue_id FROM tasks")]
        if not any(workflow_id.encode() in data for data in pending for workflow_id in ids):
            # Partitions 1-3 are /_sys/<queue>/<n>; 12 tasks all in partition 0: 4**-12.
            assert any(f"/_sys/{task_queue}/".encode() in queue for queue in backlog)
            return
    raise AssertionError("the server kept its transfer tasks over five starts")


async def test_a_database_made_with_four_partitions_dispatches_its_backlog(
    tmp_path: Path,
) -> None:
    """A database a server of 4 partitions made (psych before it kept one, ``temporal
    server start-dev``) holds in partitions 1-3 the tasks of Runs started while no worker
    polled: psych's server on it dispatches them (one that read partition 0 only never
    did: 2 to 4 of 12 Runs ran)."""
    database = tmp_path / "temporal.db"
    task_queue = f"backlog-{os.urandom(4).hex()}"
    ids = [f"{task_queue}-{i}" for i in range(12)]
    await _backlog_in_four_partitions(database, task_queue, ids)
    env = await start_dev_server(db_file=str(database))
    try:
        async with Worker(
            env.client,
            task_queue=task_queue,
            workflows=[Echo],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            results = [
                asyncio.ensure_future(env.client.get_workflow_handle(workflow_id).result())
                for workflow_id in ids
            ]
            done, waiting = await asyncio.wait(results, timeout=60)
            for result in waiting:
                result.cancel()
            assert not waiting, f"{len(waiting)} of {len(ids)} Runs never dispatched"
            assert [result.result() for result in done] == ["echo"] * len(ids)
    finally:
        await env.shutdown()


async def test_a_taken_metrics_port_is_refused_before_the_server_starts() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(PsychError, match=rf"port {port} on 127.0.0.1 is in use"):
            await start_dev_server(metrics_port=port)


def _ephemeral_low() -> int:
    text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text(encoding="ascii")
    return int(text.split()[0])


def test_a_free_port_is_below_the_ephemeral_range_and_free() -> None:
    low = _ephemeral_low()
    for _ in range(20):
        port = free_port()
        assert 10000 <= port < low
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))  # raises if it was not free


async def test_the_server_gets_a_port_no_port_0_bind_can_take() -> None:
    env = await start_dev_server()
    try:
        port = int(env.client.service_client.config.target_host.rsplit(":", 1)[1])
        assert port < _ephemeral_low()
        await env.client.count_workflows()
    finally:
        await env.shutdown()


@pytest.mark.parametrize(
    ("ephemeral", "low", "high"),
    [
        ((32768, 60999), 10000, 32767),  # Linux's default: below it
        ((49152, 65535), 10000, 32767),  # macOS's: below Linux's too
        ((1024, 60999), 61000, 65535),  # no room below: above it
        ((10500, 65000), 10000, 65535),  # little room either side: both
    ],
)
def test_a_free_port_is_outside_any_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch, ephemeral: tuple[int, int], low: int, high: int
) -> None:
    monkeypatch.setattr(_devserver, "_ephemeral_range", lambda: ephemeral)
    for _ in range(20):
        port = free_port()
        assert low <= port <= high
        assert not ephemeral[0] <= port <= ephemeral[1]


def test_with_no_port_outside_the_ephemeral_range_the_kernel_picks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_devserver, "_ephemeral_range", lambda: (1024, 65535))
    port = free_port()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))


def _children() -> set[int]:
    """This process's child processes, zombies included."""
    pids: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        pids |= {int(pid) for pid in task.read_text().split()}
    return pids


def _start(server: str, port: int) -> Coroutine[Any, Any, WorkflowEnvironment]:
    if server == "dev":
        return start_dev_server(port=port)
    return start_time_skipping_server()


@pytest.mark.parametrize("server", ["dev", "time-skipping"])
@pytest.mark.parametrize("delay", [0.0, 0.02, 0.05, 0.1])
async def test_a_start_cancelled_midway_leaves_no_server_behind(server: str, delay: float) -> None:
    before = _children()
    port = free_port()
    starting = asyncio.create_task(_start(server, port))
    await asyncio.sleep(delay)
    starting.cancel()
    try:
        env = await starting
    except asyncio.CancelledError:
        pass
    else:  # it was up before the cancel: stopped as usual
        await env.shutdown()
    assert _children() - before == set()  # neither running nor a zombie
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
