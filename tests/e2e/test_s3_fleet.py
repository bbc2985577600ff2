"""A Run served by two `psych worker` processes that share no directory, only an S3 bucket.

Each worker runs in its own temporary directory (its working directory and HOME) with
``PSYCH_BLOB_URL`` naming one bucket on a loopback S3 server (moto, in its own process).
Worker A takes the Run's first model call, whose tool call waits for approval; A is then
stopped, worker B starts, the call is approved, and B runs the tool and the second model
call, which reads the conversation A stored. Without a shared blob store B's model call
could not resolve A's conversation and the Run would fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities.contract import MODEL_CALL, TOOL_RUN_CODE
from psych_runtime.activities.versions import FileVersionStore, S3VersionStore
from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workflows import ChildSpawned, PsychClient, RunStatus
from tests._s3_server import S3_ENV, S3Server, s3_server
from tests.forking import aio

from ._waiting import is_suspended, state_when
from ._worker_proc import REGISTRY, REPO

pytestmark = pytest.mark.e2e

SCOPE = Scope(tenant="acme", principal="ops")
READY = "Ctrl-C to stop"
STARTS_WITHIN = 90
"""Seconds a `psych worker` may take to start polling on a loaded machine."""


@pytest.fixture(scope="module")
async def s3() -> AsyncIterator[S3Server]:
    async with s3_server() as server:
        yield server


async def start_worker(home: Path, env: dict[str, str]) -> aio.Process:
    """``psych worker`` in ``home`` (made already) with ``env``, forked from the fork host
    (``tests.forking``); return once it polls.

    Its output goes to ``home/worker.log`` (a pipe nobody reads while the test waits
    could fill up and stall the worker).
    """
    psych = Path(sys.executable).parent / "psych"
    log = home / "worker.log"
    with log.open("wb") as out:
        proc = await aio.create_subprocess_exec(
            str(psych),
            "worker",
            cwd=home,
            env={**env, "HOME": str(home)},
            stdout=out,
            stderr=aio.STDOUT,
        )
    try:
        for _ in range(STARTS_WITHIN * 5):
            if READY in log.read_text(errors="replace"):
                return proc
            if proc.returncode is not None:
                break
            await asyncio.sleep(0.2)
        raise RuntimeError(f"psych worker did not start: {log.read_text(errors='replace')}")
    except BaseException:
        await stop_worker(proc)
        raise


async def stop_worker(proc: aio.Process) -> None:
    """SIGTERM the worker (SIGKILL after 30 s) and reap it."""
    if proc.returncode is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=30)
        except TimeoutError:
            os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()


def fleet_env(
    dev_env: WorkflowEnvironment, blob_url: str, task_queue: str, model_url: str
) -> dict[str, str]:
    """The environment of a `psych worker` of a fleet whose blobs are in ``blob_url``."""
    return {
        "PATH": os.environ["PATH"],
        # The test process's interpreter settings (where it imports psych from, its
        # locale, PYTHON*): the workers start as it did (and fork, not execute: see
        # tests/forking/_host.py).
        **{k: v for k, v in os.environ.items() if k.startswith(("PYTHON", "LC_")) or k == "LANG"},
        **S3_ENV,
        "PSYCH_BLOB_URL": blob_url,
        "PSYCH_TOOLS": f"{REPO / 'tests' / 'e2e' / '_worker_proc.py'}:REGISTRY",
        "PSYCH_TASK_QUEUE": task_queue,
        "PSYCH_OUTAGE_SECONDS": "0",
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": dev_env.client.namespace,
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "test-key",
    }


async def test_a_run_completes_across_two_workers_that_share_only_an_s3_bucket(
    dev_env: WorkflowEnvironment, s3: S3Server, tmp_path: Path
) -> None:
    bucket = await s3.new_bucket(versioned=False)
    task_queue = f"s3-fleet-{uuid.uuid4().hex[:12]}"
    async with FakeModel(models=("fake-model",)) as fake:
        fake.enqueue(
            Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"}, id="call-1")),
            Reply.text("Order 42 was delivered."),
        )
        env = {
            **fleet_env(dev_env, s3.url(bucket, "fleet"), task_queue, fake.base_url),
            "PSYCH_ASK": "lookup_order",
        }
        client = PsychClient(
            dev_env.client,
            store=FileVersionStore(tmp_path / "versions"),
            task_queue=task_queue,
            registry=REGISTRY,
        )
        spec = (
            AgentBuilder("orders", registry=REGISTRY)
            .model("fake-model")
            .tool("lookup_order")
            .build()
        )
        for home in ("worker-a", "worker-b"):
            (tmp_path / home).mkdir()
        first = await start_worker(tmp_path / "worker-a", env)
        second: aio.Process | None = None
        try:
            run = await client.dispatch(spec, "Where is order 42?", scope=SCOPE)
            state = await state_when(
                client, run, SCOPE, is_suspended, what="the approval", within=60
            )
            assert [p.id for p in state.pending] == ["call-1"]
            await stop_worker(first)
            second = await start_worker(tmp_path / "worker-b", env)
            await client.approve(run, "call-1", scope=SCOPE)
            result = await asyncio.wait_for(client.result(run, scope=SCOPE), timeout=90)
        finally:
            await stop_worker(first)
            if second is not None:
                await stop_worker(second)
    assert result.status is RunStatus.COMPLETED
    assert result.answer == "Order 42 was delivered."

    # Who ran what: each activity's start event names the worker (its pid) that took it.
    history = await dev_env.client.get_workflow_handle(run.workflow_id).fetch_history()
    scheduled = {
        event.event_id: event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    ran_by = [
        (
            scheduled[event.activity_task_started_event_attributes.scheduled_event_id],
            event.activity_task_started_event_attributes.identity,
        )
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    by_a = [name for name, who in ran_by if who.startswith(f"{first.pid}@")]
    by_b = [name for name, who in ran_by if second is not None and who.startswith(f"{second.pid}@")]
    assert MODEL_CALL in by_a and TOOL_RUN_CODE not in by_a
    assert TOOL_RUN_CODE in by_b and MODEL_CALL in by_b
    assert len(fake.requests) == 2

    # Nothing went to either worker's directory; everything is in the bucket.
    for home in ("worker-a", "worker-b"):
        assert not (tmp_path / home / ".psych" / "blobs").exists()
    async with s3.client() as s3_client:
        listed = await s3_client.list_objects_v2(Bucket=bucket, Prefix="fleet/")
    keys = [item["Key"] for item in listed.get("Contents", [])]
    assert keys and all(key.startswith("fleet/") for key in keys)


LEAD = "You lead."


async def test_a_spawned_childs_version_is_published_to_the_fleets_bucket(
    dev_env: WorkflowEnvironment, s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26, item 2: with ``PSYCH_STORE`` naming the bucket, the Version a worker
    publishes for a spawned child lands there, where a client with no shared directory
    reads it, and nothing is written to the worker's own directory."""
    for name, value in S3_ENV.items():  # the client's own store reads the bucket too
        monkeypatch.setenv(name, value)
    bucket = await s3.new_bucket(versioned=False)
    store_url = s3.url(bucket, "store")
    task_queue = f"s3-spawn-{uuid.uuid4().hex[:12]}"

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = messages[-1]
        if LEAD not in messages[0]["content"]:  # the child
            return Reply.text("x is 42")
        if last["role"] == "user":
            arguments = {"name": "finder", "instructions": "You find x.", "task": "what is x?"}
            return Reply.tool_calls(ToolCall("spawn", arguments))
        if last["content"].startswith('{"child"'):
            return Reply.tool_calls(ToolCall("wait_children", {}))
        (ending,) = json.loads(last["content"])
        return Reply.text(f"lead: {ending['answer']}")

    async with FakeModel(models=("fake-model",)) as fake:
        fake.responder = respond
        env = {
            **fleet_env(dev_env, s3.url(bucket, "blobs"), task_queue, fake.base_url),
            "PSYCH_STORE": store_url,
        }
        versions = S3VersionStore.from_url(store_url)
        client = PsychClient(dev_env.client, store=versions, task_queue=task_queue)
        spec = AgentBuilder("spawner").model("fake-model").instructions(LEAD).spawn().build()
        (tmp_path / "worker").mkdir()
        worker = await start_worker(tmp_path / "worker", env)
        try:
            run = await client.dispatch(spec, "find x", scope=SCOPE)
            result = await asyncio.wait_for(client.result(run, scope=SCOPE), timeout=120)
            records = (await client.records(run, scope=SCOPE, limit=5000)).records
        finally:
            await stop_worker(worker)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "lead: x is 42"
    [spawned] = [r for r in records if isinstance(r, ChildSpawned)]
    # The client reads the child's Version from the bucket: the worker published it there.
    child = versions.get(spawned.version_hash)
    assert (child.spec.kind, child.spec.name) == ("agent", "finder")
    assert sorted(versions.hashes()) == sorted({run.version_hash, spawned.version_hash})
    assert not (tmp_path / "worker" / ".psych" / "versions").exists()
