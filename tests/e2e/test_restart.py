"""A suspended Run outlives its worker and its server, on the real dev server.

The Run's state is its history: a new worker replays it to the suspension, and a dev
server restarted on the same database file still holds it, so the approval that comes
after either restart runs the call once and the Run completes.
"""

from __future__ import annotations

import gc
import uuid
from pathlib import Path

import pytest

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder, AgentSpec, Scope, ToolRegistry
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers import WorkerSettings, run_worker, start_dev_server
from psych_runtime.workflows import (
    Pending,
    PsychClient,
    Resumed,
    RunHandle,
    RunStatus,
    Suspended,
    ToolCallFinished,
)
from tests._ports import free_port

from ._waiting import is_suspended, only_pending, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

SCOPE = Scope(tenant="acme", principal="tester")


async def suspended(client: PsychClient, run: RunHandle) -> Pending:
    """Wait until the Run is suspended on one item; return it."""
    state = await state_when(
        client, run, SCOPE, is_suspended, what="the Run to suspend", unsettled=True
    )
    return only_pending(state)


def orders_agent(registry: ToolRegistry, deleted: list[str]) -> AgentSpec:
    @registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    builder = AgentBuilder("orders", registry=registry).model("fake-model")
    return builder.tool("delete_order").build()


async def assert_completed_once(client: PsychClient, run: RunHandle, deleted: list[str]) -> None:
    result = await client.result(run, scope=SCOPE)
    records = (await client.records(run, scope=SCOPE)).records
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "Deleted order 42."
    assert deleted == ["42"]  # approved after the restart, run exactly once
    assert [r.pending.id for r in records if isinstance(r, Suspended)] == ["call-del"]
    assert [(r.by, r.outcome) for r in records if isinstance(r, Resumed)] == [
        ("tester", "approved")
    ]
    finished = [(r.call_id, r.status) for r in records if isinstance(r, ToolCallFinished)]
    assert finished == [("call-del", "ok")]


async def test_suspended_run_survives_a_worker_restart(harness: Harness) -> None:
    deleted: list[str] = []
    spec = orders_agent(harness.registry, deleted)
    harness.settings.policy = RulePolicy(destructive="ask")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"}, id="call-del")),
        Reply.text("Deleted order 42."),
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "delete 42", scope=SCOPE)
        pending = await suspended(harness.client, run)
    assert pending.id == "call-del"
    # The stopped worker's cached copy of the Run is garbage now; collect it here, as the
    # interpreter would at some later point, so whatever its teardown does happens here.
    gc.collect()

    # No worker (so no query could be answered): listing still shows the Run waiting.
    listed = await harness.client.list(scope=SCOPE, status=RunStatus.SUSPENDED)
    assert [s.suspension for s in listed if s.workflow_id == run.workflow_id] == ["approval"]

    async with harness.worker():
        await harness.client.approve(run, "call-del", scope=SCOPE)
        await assert_completed_once(harness.client, run, deleted)
    assert len(harness.fake.requests) == 2


async def test_suspended_run_survives_a_dev_server_restart(
    fake: FakeModel, registry: ToolRegistry, tmp_path: Path
) -> None:
    deleted: list[str] = []
    spec = orders_agent(registry, deleted)
    task_queue = f"restart-{uuid.uuid4().hex[:12]}"
    settings = WorkerSettings(
        task_queue=task_queue,
        registry=registry,
        blobs=LocalBlobStore(tmp_path / "blobs"),
        endpoints=ModelEndpoints(default=Endpoint(base_url=fake.base_url, api_key="test-key")),
        policy=RulePolicy(destructive="ask"),
    )
    store = FileVersionStore(tmp_path / "versions")
    db_file = str(tmp_path / "temporal.db")
    port = free_port()
    fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"}, id="call-del")),
        Reply.text("Deleted order 42."),
    )

    env = await start_dev_server(db_file=db_file, port=port)
    try:
        client = PsychClient(env.client, store=store, task_queue=task_queue, registry=registry)
        async with run_worker(env.client, settings):
            run = await client.dispatch(spec, "delete 42", scope=SCOPE)
            pending = await suspended(client, run)
        assert pending.id == "call-del"
        gc.collect()  # as above: the stopped worker's copy of the Run is torn down here
    finally:
        await env.shutdown()

    # Same database file, same port: a new server process, a new client and worker.
    env = await start_dev_server(db_file=db_file, port=port)
    try:
        client = PsychClient(env.client, store=store, task_queue=task_queue, registry=registry)
        # The search attributes were registered again on the existing namespace, and the
        # Run's survived: listing (no worker needed) finds it suspended on the approval.
        listed = await client.list(scope=SCOPE, status=RunStatus.SUSPENDED)
        assert [(s.workflow_id, s.suspension) for s in listed] == [(run.workflow_id, "approval")]
        async with run_worker(env.client, settings):
            # A new worker replays the Run to its suspension: same item, same expiry.
            (summary,) = await client.list(scope=SCOPE, suspended=True)
            assert summary.pending == (pending,)
            approved = await client.approve(run, "call-del", scope=SCOPE)
            assert approved.outcome == "approved"
            await assert_completed_once(client, run, deleted)
    finally:
        await env.shutdown()
    assert len(fake.requests) == 2
