"""A finished tool call survives a Temporal server outage of a minute (issue: hardening).

The call is running when the server stops; it finishes while the server is away; the
server comes back on the same database 61 s later. With psych's defaults (heartbeat timeout
of ``outage_seconds`` + margin, the worker's client retrying that long, heartbeats never
held back more than 5 s) the worker reports the result once the server is back, and the
Run records it ``ok`` instead of ``unknown``: the call ran once and the model got its
result.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder, Scope, ToolRegistry
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers import WorkerSettings, connect, run_worker, start_dev_server
from psych_runtime.workers._worker_checks import DEFAULT_OUTAGE_SECONDS
from psych_runtime.workflows import PsychClient, RunStatus, ToolCallFinished
from tests._ports import free_port

pytestmark = pytest.mark.e2e

SCOPE = Scope(tenant="acme")
OUTAGE = DEFAULT_OUTAGE_SECONDS + 1.0


@pytest.mark.timeout(240)
async def test_a_call_that_finished_during_a_minute_long_outage_is_not_unknown(
    fake: FakeModel, tmp_path: Path
) -> None:
    registry = ToolRegistry()
    started, release = asyncio.Event(), asyncio.Event()
    charged: list[str] = []

    @registry.register
    async def charge(order_id: str) -> str:
        """Charge an order (not safe to repeat)."""
        started.set()
        await release.wait()
        charged.append(order_id)
        return f"charged {order_id}"

    spec = AgentBuilder("biller", registry=registry).model("fake-model").tool("charge").build()
    fake.enqueue(Reply.tool_calls(ToolCall("charge", {"order_id": "7"})), Reply.text("Done."))
    task_queue = f"outage-{uuid.uuid4().hex[:12]}"
    settings = WorkerSettings(
        task_queue=task_queue,
        registry=registry,
        blobs=LocalBlobStore(tmp_path / "blobs"),
        endpoints=ModelEndpoints(default=Endpoint(base_url=fake.base_url, api_key="k")),
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
            run = await client.dispatch(spec, "charge order 7", scope=SCOPE)
            await asyncio.wait_for(started.wait(), 20)
            await server.shutdown()
            release.set()  # the call finishes while nobody can hear of it
            await asyncio.sleep(OUTAGE)
            server = await start_dev_server(db_file=db_file, port=port)
            async with asyncio.timeout(60):
                result = await client.result(run, scope=SCOPE)
            records = (await client.records(run, scope=SCOPE)).records
    finally:
        await server.shutdown()
    assert result.status is RunStatus.COMPLETED, result.reason
    assert charged == ["7"]
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert (finished.status, finished.content) == ("ok", "charged 7")
    assert len(fake.requests) == 2  # the model was told the result, not "unknown"
