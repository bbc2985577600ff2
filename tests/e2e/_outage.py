"""A Run through a Temporal server outage: the dev server stopped while a call is in
flight and started again on the same port and database (tests/e2e/test_outage.py,
test_model_outage.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentSpec, Scope, ToolRegistry
from psych_runtime.testing import FakeModel
from psych_runtime.workers import WorkerSettings, connect, run_worker, start_dev_server
from psych_runtime.workers._worker_checks import DEFAULT_OUTAGE_SECONDS
from psych_runtime.workflows import PsychClient, Record, RunResult
from tests._ports import free_port

SCOPE = Scope(tenant="acme")


async def through_an_outage(
    fake: FakeModel,
    tmp_path: Path,
    spec: AgentSpec,
    registry: ToolRegistry,
    *,
    in_flight: Callable[[], Awaitable[object]],
    outage: float,
    meanwhile: Callable[[], None] = lambda: None,
    settle_within: float = 120,
    outage_seconds: float = DEFAULT_OUTAGE_SECONDS,
) -> tuple[RunResult, list[Record]]:
    """Run ``spec`` to its end on a worker of the default settings but ``outage_seconds``:
    once ``in_flight()`` returns, the server stops, ``meanwhile()`` runs, and ``outage``
    seconds later the server starts again; the Run's result and records."""
    task_queue = f"outage-{uuid.uuid4().hex[:12]}"
    settings = WorkerSettings(
        task_queue=task_queue,
        outage_seconds=outage_seconds,
        registry=registry,
        blobs=LocalBlobStore(tmp_path / "blobs"),
        endpoints=ModelEndpoints(
            default=Endpoint(base_url=fake.base_url, api_key="outage-test-key")
        ),
    )
    db_file, port = str(tmp_path / "temporal.db"), free_port()
    server = await start_dev_server(db_file=db_file, port=port)
    try:
        temporal = await connect(f"127.0.0.1:{port}")
        client = PsychClient(
            temporal,
            store=FileVersionStore(tmp_path / "v"),
            task_queue=task_queue,
            registry=registry,
        )
        async with run_worker(temporal, settings):
            run = await client.dispatch(spec, "go", scope=SCOPE)
            await in_flight()
            await server.shutdown()
            meanwhile()
            await asyncio.sleep(outage)
            server = await start_dev_server(db_file=db_file, port=port)
            async with asyncio.timeout(settle_within):
                result = await client.result(run, scope=SCOPE)
            records = (await client.records(run, scope=SCOPE)).records
    finally:
        await server.shutdown()
    return result, list(records)
