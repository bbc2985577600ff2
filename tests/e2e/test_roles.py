"""Worker roles: a process per role runs a Run, a killed model worker is replaced, a Run
waiting on a queue nobody polls says so in ``psych status``, and a Run not dispatched with
``roles_apart`` by a fleet of role ``all`` keeps every activity on its own queue (eager
dispatch), and a fleet running roles apart routes a Run to the role queues whatever its
client said."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities import LocalBlobStore
from psych_runtime.activities.contract import MODEL_CALL, TOOL_CATALOG, TOOL_RUN_CODE
from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import FakeModel, Reply, ToolCall
from psych_runtime.workers import WorkerSettings, run_worker
from psych_runtime.workers.cli import main
from psych_runtime.workers.cli._parser import build_parser
from psych_runtime.workers.cli._runs import roles_apart_of
from psych_runtime.workflows import PsychClient, RunStatus
from psych_runtime.workflows.kernel._activity_calls import ROLES_APART_PATCH
from tests.forking import aio

from ._role_proc import spawn_role, stop
from ._waiting import eventually
from ._worker_proc import REGISTRY

SCOPE = Scope(tenant="acme", principal="tester")


def order_agent() -> AgentBuilder:
    return AgentBuilder("orders", registry=REGISTRY).model("fake-model").tool("lookup_order")


@contextlib.asynccontextmanager
async def role_processes(
    client: Client, task_queue: str, home: Path, model_url: str, *groups: tuple[str, ...]
) -> AsyncIterator[list[aio.Process]]:
    """One ``psych worker`` process per group of roles, stopped on leaving."""
    target = client.service_client.config.target_host
    procs: list[aio.Process] = []
    try:
        for roles in groups:
            procs.append(await spawn_role(target, task_queue, roles, home / "blobs", model_url))
        yield procs
    finally:
        for proc in procs:
            await stop(proc)


def psych_client(
    client: Client, task_queue: str, home: Path, *, roles_apart: bool = True
) -> PsychClient:
    """A client of a fleet whose roles run apart (the processes of these tests), unless
    ``roles_apart`` is False."""
    return PsychClient(
        client,
        store=FileVersionStore(home / "versions"),
        task_queue=task_queue,
        registry=REGISTRY,
        roles_apart=roles_apart,
    )


async def scheduled_queues(client: Client, workflow_id: str) -> dict[str, set[str]]:
    """Activity type -> the task queues its activities were scheduled on."""
    queues: dict[str, set[str]] = {}
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            queues.setdefault(attrs.activity_type.name, set()).add(attrs.task_queue.name)
    return queues


@pytest.mark.parametrize("told", [True, False], ids=["client-told", "client-told-nothing"])
async def test_a_run_completes_with_a_process_per_role(
    dev_env: WorkflowEnvironment, tmp_path: Path, told: bool
) -> None:
    """``psych worker`` processes of one role each. A client told the fleet runs roles apart
    dispatches a Run that says so; a client given no option (``PsychClient()``'s default)
    still gets the role queues: the fleet decides (issue 26, item 2), and the Run records it
    as the ``psych-roles-apart`` marker at its start."""
    task_queue = f"roles-{uuid.uuid4().hex[:12]}"
    tally = tmp_path / "stock.tally"
    async with FakeModel(models=("fake-model",)) as fake:
        # count_stock is registered quick and safe to repeat (local_seconds): with roles
        # apart it still runs on the tools role, never where the workflow task runs.
        fake.enqueue(
            Reply.tool_calls(
                ToolCall("lookup_order", {"order_id": "42"}),
                ToolCall("count_stock", {"tally": str(tally), "hold": 0}),
            ),
            Reply.text("Order 42 was delivered."),
        )
        async with role_processes(
            dev_env.client,
            task_queue,
            tmp_path,
            fake.base_url,
            ("workflows",),
            ("model",),
            ("tools",),
        ):
            psych = psych_client(dev_env.client, task_queue, tmp_path, roles_apart=told)
            spec = order_agent().tool("count_stock").build()
            run = await psych.dispatch(spec, "Where is 42?", scope=SCOPE)
            result = await asyncio.wait_for(psych.result(run, scope=SCOPE), timeout=60)
    assert result.status is RunStatus.COMPLETED
    assert result.answer == "Order 42 was delivered."
    queues = await scheduled_queues(dev_env.client, run.workflow_id)
    assert queues[MODEL_CALL] == {f"{task_queue}-model"}
    assert queues[TOOL_RUN_CODE] == {f"{task_queue}-tools"}
    assert queues[TOOL_CATALOG] == {f"{task_queue}-tools"}
    history = await dev_env.client.get_workflow_handle(run.workflow_id).fetch_history()
    tools_runs = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ].count(TOOL_RUN_CODE)
    assert tools_runs == 2  # both calls, the local tool's too
    assert len(tally.read_text().splitlines()) == 1
    assert not [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    patches = [
        json.loads(e.marker_recorded_event_attributes.details["patch-data"].payloads[0].data)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]
    # Every new Run asks the newest start patch (kernel/_patches.py) after the fleet's answer.
    fleet = [] if told else [ROLES_APART_PATCH]
    assert [patch["id"] for patch in patches] == [*fleet, "psych-unpermitted-told"]


@pytest.mark.timeout(300)
async def test_killing_the_model_worker_mid_call_and_starting_another_completes_the_run(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    task_queue = f"roles-{uuid.uuid4().hex[:12]}"
    target = dev_env.client.service_client.config.target_host
    async with FakeModel(models=("fake-model",)) as fake:
        # The first call hangs until its worker is gone; the Run's retry gets the answer.
        fake.enqueue(Reply.stall(600), Reply.text("answered after the crash"))
        async with role_processes(
            dev_env.client, task_queue, tmp_path, fake.base_url, ("workflows", "tools")
        ):
            doomed = await spawn_role(
                target, task_queue, ("model",), tmp_path / "blobs", fake.base_url
            )
            try:
                psych = psych_client(dev_env.client, task_queue, tmp_path)
                run = await psych.dispatch(order_agent().build(), "hello", scope=SCOPE)

                async def in_flight() -> bool:
                    return len(fake.requests) == 1

                await eventually(in_flight, within=30, what="the model call to be in flight")
            finally:
                await stop(doomed, signal.SIGKILL)
            replacement = await spawn_role(
                target, task_queue, ("model",), tmp_path / "blobs", fake.base_url
            )
            try:
                # The call is lost after its heartbeat timeout: the workflows role's outage
                # tolerance (PSYCH_OUTAGE_SECONDS=0 here) plus the 10 s margin.
                result = await asyncio.wait_for(psych.result(run, scope=SCOPE), timeout=180)
            finally:
                await stop(replacement)
    assert result.status is RunStatus.COMPLETED
    assert result.answer == "answered after the crash"
    assert len(fake.requests) == 2


async def test_a_run_whose_tools_queue_has_no_poller_says_so_in_psych_status(
    dev_env: WorkflowEnvironment, tmp_path: Path, capsys: object
) -> None:
    task_queue = f"roles-{uuid.uuid4().hex[:12]}"
    target = dev_env.client.service_client.config.target_host
    async with FakeModel(models=("fake-model",)) as fake:
        settings = WorkerSettings(
            task_queue=task_queue,
            roles=("workflows", "model"),
            registry=REGISTRY,
            blobs=LocalBlobStore(tmp_path / "blobs"),
            endpoints=ModelEndpoints(default=Endpoint(base_url=fake.base_url, api_key="k")),
        )
        async with run_worker(dev_env.client, settings):
            psych = psych_client(dev_env.client, task_queue, tmp_path)
            run = await psych.dispatch(order_agent().build(), "hello", scope=SCOPE)
            said = io.StringIO()

            async def reported() -> bool:
                err = io.StringIO()
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    status = await asyncio.to_thread(
                        main, ["status", run.workflow_id, "--tenant", "acme", "--address", target]
                    )
                assert status == 0, err.getvalue()
                said.write(err.getvalue())
                return "waiting for a worker of role tools" in err.getvalue()

            await eventually(reported, within=10, what="psych status to name the tools role")
    line = next(line for line in said.getvalue().splitlines() if "role tools" in line)
    assert f"on queue {task_queue}-tools" in line
    assert f"psych worker --role tools --task-queue {task_queue}" in line
    assert "role model" not in said.getvalue()


async def test_a_run_not_dispatched_roles_apart_schedules_every_activity_on_its_own_queue(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    task_queue = f"roles-{uuid.uuid4().hex[:12]}"
    async with FakeModel(models=("fake-model",)) as fake:
        fake.enqueue(
            Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
            Reply.text("Order 42 was delivered."),
        )
        settings = WorkerSettings(
            task_queue=task_queue,
            registry=REGISTRY,
            blobs=LocalBlobStore(tmp_path / "blobs"),
            endpoints=ModelEndpoints(default=Endpoint(base_url=fake.base_url, api_key="k")),
        )
        assert settings.roles == ("workflows", "model", "tools")
        async with run_worker(dev_env.client, settings):
            psych = psych_client(dev_env.client, task_queue, tmp_path, roles_apart=False)
            run = await psych.dispatch(order_agent().build(), "Where is 42?", scope=SCOPE)
            result = await asyncio.wait_for(psych.result(run, scope=SCOPE), timeout=60)
    assert result.status is RunStatus.COMPLETED
    queues = await scheduled_queues(dev_env.client, run.workflow_id)
    # The catalogue is a local activity on one queue (no task of its own to route).
    assert queues == {
        MODEL_CALL: {task_queue},
        TOOL_RUN_CODE: {task_queue},
    }
    history = await dev_env.client.get_workflow_handle(run.workflow_id).fetch_history()
    local = [
        e.marker_recorded_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    assert len(local) == 1
    assert TOOL_CATALOG.encode() in local[0].details["data"].payloads[0].data


def test_psych_run_routes_by_role_only_when_told(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["run", "agent.yaml", "--input", "hi"]
    monkeypatch.delenv("PSYCH_ROLES_APART", raising=False)
    assert roles_apart_of(build_parser().parse_args(argv)) is False
    assert roles_apart_of(build_parser().parse_args([*argv, "--roles-apart"])) is True
    monkeypatch.setenv("PSYCH_ROLES_APART", "1")
    assert roles_apart_of(build_parser().parse_args(argv)) is True


async def test_a_child_run_inherits_roles_apart_from_its_parent(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    task_queue = f"roles-{uuid.uuid4().hex[:12]}"
    researcher = (
        AgentBuilder("researcher", registry=REGISTRY).model("fake-model").tool("lookup_order")
    ).build()
    lead = (
        order_agent()
        .subagent("researcher", "Looks orders up and reports their status.", researcher)
        .build()
    )
    async with FakeModel(models=("fake-model",)) as fake:
        fake.enqueue(
            Reply.tool_calls(ToolCall("delegate", {"agent": "researcher", "task": "42?"})),
            Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),  # the child
            Reply.text("Order 42 is delivered."),  # the child's answer
            Reply.text("The researcher says order 42 is delivered."),  # the lead
        )
        settings = WorkerSettings(
            task_queue=task_queue,
            registry=REGISTRY,
            blobs=LocalBlobStore(tmp_path / "blobs"),
            # Not "k": the key is redacted wherever a model sends it back, delegate's "task"
            # argument included, and a delegation without a task starts no child.
            endpoints=ModelEndpoints(
                default=Endpoint(base_url=fake.base_url, api_key="roles-test-key")
            ),
        )
        async with run_worker(dev_env.client, settings):
            psych = psych_client(dev_env.client, task_queue, tmp_path, roles_apart=True)
            run = await psych.dispatch(lead, "Where is order 42?", scope=SCOPE)
            result = await asyncio.wait_for(psych.result(run, scope=SCOPE), timeout=60)
    assert result.status is RunStatus.COMPLETED
    children = [
        event.start_child_workflow_execution_initiated_event_attributes.workflow_id
        async for event in dev_env.client.get_workflow_handle(
            run.workflow_id
        ).fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    ]
    assert len(children) == 1
    queues = await scheduled_queues(dev_env.client, children[0])
    assert queues[MODEL_CALL] == {f"{task_queue}-model"}
    assert queues[TOOL_RUN_CODE] == {f"{task_queue}-tools"}
