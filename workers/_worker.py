"""Building a psych worker: the workflows, the activities and their collaborators."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.worker import (
    Interceptor,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from psych_runtime.activities import role_task_queue
from psych_runtime.activities.contract import MODEL_ROLE, WORKFLOWS_ROLE
from psych_runtime.activities.egress import Egress
from psych_runtime.activities.live import DeltaHub
from psych_runtime.activities.model import (
    CompactionActivities,
    ContextProviders,
    ModelActivities,
)
from psych_runtime.activities.tools import (
    OUTAGE_MARGIN,
    ToolActivities,
    drain_reports,
)
from psych_runtime.activities.versions import VersionActivities
from psych_runtime.specs import SpecError
from psych_runtime.workers._live import serving_deltas
from psych_runtime.workers._settings import worker_a2a
from psych_runtime.workers._telemetry import current_telemetry
from psych_runtime.workers._worker_checks import (
    check_outage_retry,
    quiet_benign_cancel_warning,
    sealed_blobs,
    sealed_tokens,
)

# Defined apart (``_worker_settings``), named here too, where callers have found them.
from psych_runtime.workers._worker_settings import DEFAULT_HOME as DEFAULT_HOME
from psych_runtime.workers._worker_settings import WorkerSettings as WorkerSettings
from psych_runtime.workers._worker_settings import bound_hooks as bound_hooks
from psych_runtime.workers._worker_settings import egress_for as egress_for
from psych_runtime.workers._worker_settings import tenant_permits
from psych_runtime.workers.fleet import (
    RolesApartInterceptor,
    activities_of_role,
    check_fleet_policy,
    deployment_config,
    policy_queues,
    runs_roles_apart,
    worker_identity,
)
from psych_runtime.workflows import MODEL_LOST_EXTERN, AgentRun, WorkflowRun

if TYPE_CHECKING:
    from psych_runtime.activities.mcp import McpActivities

HEARTBEAT_THROTTLE = timedelta(seconds=5)
"""The longest a worker holds back a tool call's heartbeat (the SDK's default, up to 60 s,
would leave a call's last heartbeat that much older than an outage)."""


class ModelLostInterceptor(Interceptor):
    """Tells the workflows this worker runs the heartbeat timeout of the model calls they
    schedule (the extern function ``MODEL_LOST_EXTERN``): the worker's ``outage_seconds``
    plus ``OUTAGE_MARGIN``, as its tool calls get, so a model worker holding an answer
    through an outage as long as the settings say is not given up on before it reports.
    In a fleet running roles apart the workflows role's settings decide: give the roles
    the same ``outage_seconds``."""

    def __init__(self, outage_seconds: float) -> None:
        lost_after = outage_seconds + OUTAGE_MARGIN
        self._told = lambda: lost_after

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        input.unsafe_extern_functions[MODEL_LOST_EXTERN] = self._told
        return None


def _mcp_activities(settings: WorkerSettings, egress: Egress) -> McpActivities:
    """The MCP activities (and their session pool) for a worker with ``settings``; close
    them (``await mcp.aclose()``) once the worker has stopped."""
    # Imported here: the mcp SDK takes a second or two to import, and every psych command
    # imports this module, most of them never building a worker.
    from psych_runtime.activities.mcp import McpActivities

    return McpActivities(
        blobs=settings.blobs,
        secrets=settings.secrets,
        policy=settings.policy,
        settings=settings.mcp,
        outage_seconds=settings.outage_seconds,
        hooks=bound_hooks(settings),
        egress=egress,
        tokens=settings.tokens,
        permits=tenant_permits(settings),
    )


def activities_for(
    settings: WorkerSettings,
    egress: Egress,
    mcp: McpActivities | None = None,
    live: DeltaHub | None = None,
) -> list[Any]:
    """The activity callables a psych worker registers: each activity class's own list.

    Every outbound request goes through ``egress`` (the caller closes it). ``mcp`` holds
    the MCP session pool the caller closes when the worker stops; without one, one is made
    (on ``egress``) whose sessions close only once idle (``McpSettings.idle_seconds``).
    """
    mcp = mcp if mcp is not None else _mcp_activities(settings, egress)
    # One MCP pool and cache serve both the model call (an agent turn's discovery) and the
    # MCP tool calls.
    model = ModelActivities(
        endpoints=settings.endpoints,
        blobs=settings.blobs,
        pricing=settings.pricing,
        http=egress.http(None, "operator"),
        mcp=mcp,
        context=ContextProviders(settings.context, settings.blobs),
        live=live,
        outage_seconds=settings.outage_seconds,
    )
    tools = ToolActivities(
        registry=settings.registry,
        blobs=settings.blobs,
        secrets=settings.secrets,
        egress=egress,
        policy=settings.policy,
        outage_seconds=settings.outage_seconds,
        hooks=mcp.hooks,
        permits=mcp.permits,
    )
    # Imported here: the a2a SDK (protobuf types) costs import time every psych command
    # would pay otherwise.
    from psych_runtime.activities.a2a import A2aActivities

    peers = A2aActivities(
        blobs=settings.blobs,
        egress=egress,
        secrets=settings.secrets,
        policy=settings.policy,
        hooks=mcp.hooks,
        settings=worker_a2a(
            settings.a2a,
            settings.settings_file,
            trust_project_settings=settings.trust_project_settings,
        ),
        outage_seconds=settings.outage_seconds,
        tokens=settings.tokens,
        permits=mcp.permits,
    )
    # The summariser shares the model activities' endpoints, pricing and HTTP client.
    compaction = CompactionActivities(model)
    versions = VersionActivities(settings.versions)
    return [
        *model.activities(),
        *compaction.activities(),
        *tools.activities(),
        *mcp.activities(),
        *peers.activities(),
        *versions.activities(),
    ]


def build_worker(
    client: Client,
    settings: WorkerSettings,
    *,
    egress: Egress,
    role: str = WORKFLOWS_ROLE,
    mcp: McpActivities | None = None,
    live: DeltaHub | None = None,
    **worker_options: Any,
) -> Worker:
    """The Worker of one role: for ``workflows`` (the default) AgentRun, WorkflowRun and
    every psych activity on ``settings.task_queue``; for ``model`` and ``tools`` that
    role's activities on its own queue (``role_task_queue``).

    ``client`` must carry the psych plugin (see ``connect``); when the plugin encrypts
    payloads (``PsychCodec``), the blob store is wrapped to encrypt with the same keys
    (``EncryptedBlobStore``), unless it already is; ``egress`` is the one port
    every outbound request of the activities goes through (``egress_for(settings)``; the
    caller closes it);
    ``mcp`` the MCP activities (an ``McpActivities``, built on the ``sealed`` settings),
    whose session pool the caller closes after the worker stops (without one,
    build_worker makes one whose sessions close only once idle); ``live`` the hub of a
    running ``DeltaRelay`` the model calls publish their deltas to (None: none offered,
    followers see records only); extra keyword arguments
    go to ``temporalio.worker.Worker`` (they win over the role's
    ``settings.concurrency``; a ``workflows`` option replaces AgentRun and WorkflowRun on
    the workflows role, as a variant build does). Its identity carries the policy's digest
    (``worker_identity``; an ``identity`` option replaces the part before it). A
    ``settings.deployment`` joins that Worker Deployment Version. ``run_worker`` does all
    of this for every role of ``settings.roles``, and closes the MCP sessions when the
    workers stop.
    """
    if not issubclass(client.data_converter.payload_converter_class, PydanticPayloadConverter):
        raise SpecError("connect the Temporal client with plugins=[PsychPlugin()]")
    settings = sealed(client, settings)
    own_workflows = "workflows" not in worker_options
    workflows: Sequence[type] = worker_options.pop("workflows", (AgentRun, WorkflowRun))
    if role != WORKFLOWS_ROLE:
        workflows = []
    else:
        told: list[Interceptor] = [ModelLostInterceptor(settings.outage_seconds)]
        apart = runs_roles_apart(settings.roles, settings.roles_apart)
        if apart:
            told.append(RolesApartInterceptor())
        worker_options["interceptors"] = [*worker_options.get("interceptors", []), *told]
        if not apart and own_workflows and not settings.workflow_sandbox:
            # psych's own workflows leave the sandbox (WorkerSettings.workflow_sandbox);
            # the plugin keeps a runner that is not sandboxed as it is.
            worker_options.setdefault("workflow_runner", UnsandboxedWorkflowRunner())
    identity = worker_identity(settings.policy, worker_options.pop("identity", None))
    worker_options.setdefault("max_heartbeat_throttle_interval", HEARTBEAT_THROTTLE)
    for option, value in settings.concurrency.worker_options(role).items():
        worker_options.setdefault(option, value)
    if settings.deployment is not None:
        worker_options.setdefault("deployment_config", deployment_config(settings.deployment))
    check_outage_retry(client, settings.outage_seconds)
    quiet_benign_cancel_warning()
    telemetry = current_telemetry()
    if telemetry is not None:
        telemetry.watch_suspended(client, settings.task_queue)
        # A client connected without them still gets a traced worker (no client spans).
        missing = telemetry.missing_from(client)
        worker_options["plugins"] = [*worker_options.get("plugins", []), *missing]
    return Worker(
        client,
        task_queue=role_task_queue(settings.task_queue, role),
        workflows=list(workflows),
        activities=activities_of_role(activities_for(settings, egress, mcp, live), role),
        identity=identity,
        **worker_options,
    )


def sealed(client: Client, settings: WorkerSettings) -> WorkerSettings:
    """``settings`` with its blob and token stores encrypting under the client's keys: a
    message kept out of history must not sit in clear, nor an OAuth token."""
    blobs = sealed_blobs(client, settings.blobs)
    tokens = sealed_tokens(client, settings.tokens)
    if blobs is settings.blobs and tokens is settings.tokens:
        return settings
    return dataclasses.replace(settings, blobs=blobs, tokens=tokens)


@asynccontextmanager
async def run_workers(
    client: Client, settings: WorkerSettings | None = None, **worker_options: Any
) -> AsyncIterator[list[Worker]]:
    """Run a psych worker of every role in ``settings.roles`` (one Temporal Worker per
    role, in that order, sharing one HTTP client) for the duration of the block.

    Raises:
        PsychError: a live worker of one of the task queues has another approval policy
            (``check_fleet_policy``); this one does not start.
    """
    # Sealed before the MCP activities are made: they store results in the blob store too.
    settings = sealed(client, settings or WorkerSettings())
    for queue in policy_queues(settings.task_queue, settings.roles):
        await check_fleet_policy(client, queue, settings.policy)
    egress = egress_for(settings)
    try:
        wanted = WORKFLOWS_ROLE in settings.roles or MODEL_ROLE in settings.roles
        async with serving_deltas(settings.live, wanted=wanted) as live:
            # One MCP session pool and cache for every role of this process.
            mcp = _mcp_activities(settings, egress)
            try:
                workers = [
                    build_worker(
                        client,
                        settings,
                        egress=egress,
                        role=role,
                        mcp=mcp,
                        live=live,
                        **dict(worker_options),
                    )
                    for role in settings.roles
                ]
                async with AsyncExitStack() as running:
                    for worker in workers:
                        await running.enter_async_context(worker)
                    try:
                        yield workers
                    finally:
                        # Every role stops polling at once and its calls finish in parallel:
                        # one by one, a role still polling took calls while another drained.
                        await asyncio.gather(*(worker.shutdown() for worker in workers))
            finally:
                await mcp.aclose()
            # Calls not safe to repeat report their outcome through the client; the workers
            # have stopped, but those reports may still be retrying through an outage.
            await drain_reports(settings.outage_seconds + OUTAGE_MARGIN)
    finally:
        await egress.aclose()
    telemetry = current_telemetry()
    if telemetry is not None:
        # The psych command ends with os._exit, which skips the exporters' atexit flush.
        telemetry.flush()


@asynccontextmanager
async def run_worker(
    client: Client, settings: WorkerSettings | None = None, **worker_options: Any
) -> AsyncIterator[Worker]:
    """``run_workers``, yielding the first role's Worker (the workflows role's when it
    runs here, as it does by default).

    Raises:
        PsychError: a live worker of one of the task queues has another approval policy
            (``check_fleet_policy``); this one does not start.
    """
    async with run_workers(client, settings, **worker_options) as workers:
        yield workers[0]
