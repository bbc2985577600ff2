"""``psych worker --health-port --metrics-port``: probes and the SDK's Prometheus metrics."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities import LocalBlobStore
from psych_runtime.testing import FakeModel
from psych_runtime.workers import WorkerSettings, connect, run_worker, start_dev_server
from psych_runtime.workers.fleet import Health, serve_health
from tests._ports import free_port

from ._role_proc import spawn_role, stop
from ._waiting import eventually


async def test_health_endpoints_and_metrics_answer(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    health, metrics = free_port(), free_port()
    target = dev_env.client.service_client.config.target_host
    async with FakeModel(models=("fake-model",)) as fake:
        proc = await spawn_role(
            target,
            f"health-{uuid.uuid4().hex[:12]}",
            ("all",),
            tmp_path / "blobs",
            fake.base_url,
            extra_env={"PSYCH_HEALTH_PORT": str(health)},
            extra_args=("--metrics-port", str(metrics)),
        )
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                base = f"http://127.0.0.1:{health}"
                live = await http.get(f"{base}/livez")
                unknown = await http.get(f"{base}/nope")
                readiness: list[httpx.Response] = []

                async def is_ready() -> bool:
                    # The Workers start polling just after the process says it polls.
                    readiness.append(await http.get(f"{base}/readyz"))
                    return readiness[-1].status_code == 200

                await eventually(is_ready, within=10, what="/readyz to answer 200")
                ready = readiness[-1]
                scraped: list[str] = []

                async def has_worker_metrics() -> bool:
                    answer = await http.get(f"http://127.0.0.1:{metrics}/metrics")
                    scraped.append(answer.text)
                    return answer.status_code == 200 and "temporal_" in answer.text

                await eventually(has_worker_metrics, within=20, what="the SDK's metrics")
        finally:
            await stop(proc)
    assert (live.status_code, live.text) == (200, "ok\n")
    assert (ready.status_code, ready.text) == (200, "ok\n")
    assert unknown.status_code == 404
    assert "# TYPE" in scraped[-1]


async def test_probes_fail_once_a_worker_has_stopped(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    settings = WorkerSettings(
        task_queue=f"health-{uuid.uuid4().hex[:12]}", blobs=LocalBlobStore(tmp_path)
    )
    async with run_worker(dev_env.client, settings) as worker:
        running = Health(dev_env.client, lambda: [worker])
        assert running.live()
        await eventually(running.ready, within=10, what="the worker to be ready")
    port = free_port()
    health = Health(dev_env.client, lambda: [worker])
    async with serve_health(health, port), httpx.AsyncClient(timeout=10) as http:
        live = await http.get(f"http://127.0.0.1:{port}/livez")
        ready = await http.get(f"http://127.0.0.1:{port}/readyz")
    assert (live.status_code, ready.status_code) == (503, 503)


async def test_readiness_is_503_while_the_temporal_server_is_away(tmp_path: Path) -> None:
    # A private server, stopped under a running worker: the probe answers "not ready"
    # (the orchestrator takes the pod out of service) rather than dropping the connection.
    server = await start_dev_server(port=free_port())
    stopped = False
    try:
        client = await connect(server.client.service_client.config.target_host)
        settings = WorkerSettings(
            task_queue=f"health-{uuid.uuid4().hex[:12]}", blobs=LocalBlobStore(tmp_path)
        )
        async with run_worker(client, settings) as worker:
            health = Health(client, lambda: [worker])
            await eventually(health.ready, within=10, what="the worker to be ready")
            await server.shutdown()
            stopped = True
            port = free_port()
            async with serve_health(health, port), httpx.AsyncClient(timeout=10) as http:
                ready = await http.get(f"http://127.0.0.1:{port}/readyz")
                live = await http.get(f"http://127.0.0.1:{port}/livez")
    finally:
        if not stopped:
            await server.shutdown()
    assert (ready.status_code, ready.text) == (503, "not ok\n")
    assert live.status_code == 200
