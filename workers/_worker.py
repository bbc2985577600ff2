"""Building a psych worker: the workflows, the activities and their collaborators."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from psych_runtime.activities import role_task_queue
from psych_runtime.activities.a2a import A2aSettings
from psych_runtime.activities.blobs import (
    BlobStore,
    LocalBlobStore,
    blob_store_from_env,
)
from psych_runtime.activities.contract import MODEL_ROLE, WORKFLOWS_ROLE
from psych_runtime.activities.egress import Egress, EgressSettings
from psych_runtime.activities.hooks import Hooks
from psych_runtime.activities.live import DeltaHub
from psych_runtime.activities.mcp import McpSettings, parse_oauth_issuers
from psych_runtime.activities.model import (
    CompactionActivities,
    ContextProviders,
    ContextSettings,
    ModelActivities,
    ModelEndpoints,
    Pricing,
)
from psych_runtime.activities.secrets import EnvSecretResolver, SecretResolver
from psych_runtime.activities.tokens import (
    LocalTokenStore,
    TokenStore,
    token_store_from_env,
)
from psych_runtime.activities.tools import (
    OUTAGE_MARGIN,
    Policy,
    RulePolicy,
    ToolActivities,
    drain_reports,
)
from psych_runtime.activities.versions import (
    FileVersionStore,
    VersionActivities,
    version_store_at,
)
from psych_runtime.specs import SpecError, ToolRegistry, VersionStore, env_flag
from psych_runtime.workers._environment import (
    ask_policy,
    seconds_from,
    split_patterns,
)
from psych_runtime.workers._live import LiveSettings, serving_deltas
from psych_runtime.workers._loading import load_object
from psych_runtime.workers._settings import worker_a2a, worker_egress, worker_hooks
from psych_runtime.workers._telemetry import current_telemetry
from psych_runtime.workers._worker_checks import (
    DEFAULT_OUTAGE_SECONDS,
    check_outage_retry,
    quiet_benign_cancel_warning,
    sealed_blobs,
    sealed_tokens,
)
from psych_runtime.workers.fleet import (
    Concurrency,
    RolesApartInterceptor,
    activities_of_role,
    check_fleet_policy,
    deployment_config,
    parse_roles,
    policy_queues,
    runs_roles_apart,
    version_from_env,
    worker_identity,
)
from psych_runtime.workflows import DEFAULT_TASK_QUEUE, AgentRun, WorkflowRun

if TYPE_CHECKING:
    from psych_runtime.activities.mcp import McpActivities

DEFAULT_HOME = ".psych"
HEARTBEAT_THROTTLE = timedelta(seconds=5)
"""The longest a worker holds back a tool call's heartbeat (the SDK's default, up to 60 s,
would leave a call's last heartbeat that much older than an outage)."""


@dataclass
class WorkerSettings:
    """What a worker is wired with. ``from_env`` reads the ``PSYCH_*`` variables.

    Attributes:
        task_queue: the fleet's base task queue (``PSYCH_TASK_QUEUE``, default ``psych``):
            the workflows role polls it, the model and tools roles ``<base>-model`` and
            ``<base>-tools``.
        roles: the worker roles this process runs (``PSYCH_ROLES``, comma-separated
            ``workflows``, ``model``, ``tools`` or ``all``; default all three).
        roles_apart: whether the fleet runs roles in separate processes, so that every
            Run its workflows-role workers start schedules each activity on its role's
            queue, whatever its client said (``PSYCH_ROLES_APART`` 1/0; default None:
            yes when this process does not run every role).
        concurrency: how much each role runs at once (``Concurrency``:
            ``PSYCH_MAX_WORKFLOW_TASKS``, ``PSYCH_MAX_MODEL_CALLS``,
            ``PSYCH_MAX_TOOL_CALLS``, 100 each by default).
        deployment: the Worker Deployment Version this worker belongs to
            (``PSYCH_DEPLOYMENT`` and ``PSYCH_BUILD_ID``; default none: unversioned).
        registry: code tools (``PSYCH_TOOLS`` = ``module:attribute`` of a ToolRegistry).
        blobs: the BlobStore (``PSYCH_BLOB_URL=s3://bucket/prefix?...`` for an S3-compatible
            bucket, else the directory ``PSYCH_BLOB_DIR``, default ``.psych/blobs``).
        endpoints: which endpoint serves which model (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
            ``OPENAI_STREAM``).
        secrets: the SecretResolver (default: ``PSYCH_SECRET_<NAME>`` variables).
        pricing: the Pricing port (default none: every cost is unknown, None).
        policy: the Policy port deciding allow/deny/ask per tool call (default
            ``RulePolicy()``: allow everything; ``PSYCH_ASK`` and ``PSYCH_ASK_DESTRUCTIVE``
            make ``from_env`` build an asking one, see ``ask_policy``).
        outage_seconds: how long the Temporal server may be unreachable without losing
            the result of a tool call not safe to repeat that finished meanwhile
            (``PSYCH_OUTAGE_SECONDS``, default 60; 0 turns this off). Such calls get a
            heartbeat timeout of this plus ``OUTAGE_MARGIN`` (10 s), so a worker that dies
            mid-call is noticed that much later: lower it where servers never go away
            for long and crashed calls should be settled sooner. The worker's client
            must retry that long (``outage_retry``; psych's ``connect`` does).
        mcp: how the worker talks to MCP servers (timeouts, catalogue cache, preload
            budget, session pool bounds, the issuers of OAuth client secrets,
            ``PSYCH_MCP_OAUTH_ISSUERS``; ``McpSettings``' documented defaults).
        tokens: the TokenStore of MCP OAuth tokens, shared by the fleet (with
            ``PSYCH_BLOB_URL`` the same bucket, under ``tokens/``; else the directory
            ``PSYCH_TOKEN_DIR``, default ``.psych/tokens``); encrypted like the blobs when
            the client encrypts payloads.
        context: the pre-turn context providers the model activity asks before every
            call, and their token budget (``ContextSettings``; default none registered).
        hooks: tool-call hooks declared in code (``Hooks``), run before the settings
            files' hooks.
        egress: where the worker may connect (``EgressSettings``: the fleet's allow and
            deny lists, ``PSYCH_EGRESS_ALLOW`` / ``PSYCH_EGRESS_DENY``, each tenant's, the
            response bound). Every outbound request goes through one ``Egress`` port made
            from it; the model endpoints' hosts are allowed as the operator's own.
        settings_file: the global settings file (``--settings``, ``PSYCH_SETTINGS``); None:
            ``PSYCH_SETTINGS`` of the process, else the default path when it exists
            (``workers/_settings.py``).
        trust_project_settings: also load ``./.psych/settings.yaml``
            (``--trust-project-settings``).
        versions: where ``psych.version.publish`` stores the Versions a Run composes (a
            spawned child's; ``PSYCH_STORE``, default the directory ``.psych/versions``, as
            for ``psych publish``). Give it the store the fleet's PsychClient uses.
        workflow_sandbox: run AgentRun and WorkflowRun in Temporal's workflow sandbox
            (``PSYCH_WORKFLOW_SANDBOX=1``; default off: they are psych's own code, replayed
            under the sandbox by the test suite, and the sandbox costs a third of a turn's
            worker CPU; see docs/decisions/workers.md, "The workflow sandbox"). Your own workflow
            classes (a ``workflows`` option) always get the sandbox unless you pass a
            ``workflow_runner``.
        live: where the model role serves its calls' deltas to followers (``LiveSettings``:
            ``PSYCH_LIVE_LISTEN``, ``PSYCH_LIVE_URL``; default loopback, any free port).
        a2a: how the worker talks to A2A peers (``A2aSettings``: card cache and timeouts,
            the call's hold); the global settings file's ``a2a:`` keys replace these.
    """

    task_queue: str = DEFAULT_TASK_QUEUE
    roles: tuple[str, ...] = field(default_factory=lambda: parse_roles(()))
    roles_apart: bool | None = None
    concurrency: Concurrency = field(default_factory=Concurrency)
    deployment: WorkerDeploymentVersion | None = None
    registry: ToolRegistry = field(default_factory=ToolRegistry)
    blobs: BlobStore = field(default_factory=lambda: LocalBlobStore(Path(DEFAULT_HOME) / "blobs"))
    endpoints: ModelEndpoints = field(default_factory=ModelEndpoints.from_env)
    secrets: SecretResolver = field(default_factory=EnvSecretResolver)
    pricing: Pricing | None = None
    policy: Policy = field(default_factory=RulePolicy)
    outage_seconds: float = DEFAULT_OUTAGE_SECONDS
    mcp: McpSettings = field(default_factory=McpSettings)
    tokens: TokenStore = field(
        default_factory=lambda: LocalTokenStore(Path(DEFAULT_HOME) / "tokens")
    )
    context: ContextSettings = field(default_factory=ContextSettings)
    hooks: Hooks = field(default_factory=Hooks)
    egress: EgressSettings = field(default_factory=EgressSettings.from_env)
    settings_file: Path | None = None
    trust_project_settings: bool = False
    versions: VersionStore = field(
        default_factory=lambda: FileVersionStore(Path(DEFAULT_HOME) / "versions")
    )
    workflow_sandbox: bool = False
    live: LiveSettings = field(default_factory=LiveSettings)
    a2a: A2aSettings = field(default_factory=A2aSettings)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerSettings:
        """Settings from ``PSYCH_*`` and ``OPENAI_*`` environment variables."""
        env = os.environ if environ is None else environ
        registry = ToolRegistry()
        if env.get("PSYCH_TOOLS"):
            try:
                loaded = load_object(env["PSYCH_TOOLS"])
            except SpecError as err:
                raise SpecError(f"PSYCH_TOOLS: {err}") from err
            if not isinstance(loaded, ToolRegistry):
                raise SpecError(f"PSYCH_TOOLS={env['PSYCH_TOOLS']!r} is not a ToolRegistry")
            registry = loaded
        return cls(
            task_queue=env.get("PSYCH_TASK_QUEUE", DEFAULT_TASK_QUEUE),
            roles=parse_roles([env.get("PSYCH_ROLES", "")]),
            roles_apart=env_flag(env, "PSYCH_ROLES_APART", None),
            concurrency=Concurrency.from_env(env),
            deployment=version_from_env(env),
            registry=registry,
            blobs=blob_store_from_env(env, Path(DEFAULT_HOME) / "blobs"),
            endpoints=ModelEndpoints.from_env(env),
            secrets=EnvSecretResolver(env),
            policy=ask_policy(
                split_patterns(env.get("PSYCH_ASK", "")),
                destructive=env_flag(env, "PSYCH_ASK_DESTRUCTIVE"),
            ),
            outage_seconds=seconds_from("PSYCH_OUTAGE_SECONDS", env, DEFAULT_OUTAGE_SECONDS),
            mcp=McpSettings(
                oauth_issuers=parse_oauth_issuers(env.get("PSYCH_MCP_OAUTH_ISSUERS", ""))
            ),
            tokens=token_store_from_env(env, Path(DEFAULT_HOME) / "tokens"),
            egress=EgressSettings.from_env(env),
            settings_file=Path(env["PSYCH_SETTINGS"]) if env.get("PSYCH_SETTINGS") else None,
            versions=version_store_at(env.get("PSYCH_STORE") or Path(DEFAULT_HOME) / "versions"),
            workflow_sandbox=env_flag(env, "PSYCH_WORKFLOW_SANDBOX"),
            live=LiveSettings.from_env(env),
        )


def bound_hooks(settings: WorkerSettings) -> Hooks:
    """The hook chain a worker with ``settings`` runs: its code hooks, then the settings
    files' (``workers/_settings.py``); equal chains every time, nothing mutated.

    Raises:
        AccessDenied: a settings file names a Python hook of an untrusted module.
        SpecError: any other problem of the settings files.
    """
    return worker_hooks(
        settings.hooks,
        settings.settings_file,
        trust_project_settings=settings.trust_project_settings,
    )


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
    )


def egress_for(settings: WorkerSettings) -> Egress:
    """The worker's egress port: ``settings.egress`` plus the global settings file's
    ``egress`` section, with the model endpoints' hosts allowed as the operator's own
    (close it with ``aclose``).

    Raises:
        SpecError: a problem of the settings files.
    """
    egress = worker_egress(
        settings.egress,
        settings.settings_file,
        trust_project_settings=settings.trust_project_settings,
    )
    return Egress(egress, operator_hosts=settings.endpoints.hosts())


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
    elif runs_roles_apart(settings.roles, settings.roles_apart):
        interceptors = [*worker_options.get("interceptors", []), RolesApartInterceptor()]
        worker_options["interceptors"] = interceptors
    elif own_workflows and not settings.workflow_sandbox:
        # psych's own workflows leave the sandbox (WorkerSettings.workflow_sandbox); the
        # plugin keeps a runner that is not sandboxed as it is.
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
