"""What a worker is wired with (``WorkerSettings``), and what its settings files add to it:
the hook chain (``bound_hooks``), the egress port (``egress_for``) and what each tenant may
use (``tenant_permits``, ``permits_with_file``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.common import WorkerDeploymentVersion

from psych_runtime.activities.a2a import A2aSettings
from psych_runtime.activities.blobs import BlobStore, LocalBlobStore, blob_store_from_env
from psych_runtime.activities.egress import Egress, EgressSettings
from psych_runtime.activities.hooks import Hooks
from psych_runtime.activities.mcp import McpSettings, parse_oauth_issuers
from psych_runtime.activities.model import ContextSettings, ModelEndpoints, Pricing
from psych_runtime.activities.secrets import EnvSecretResolver, SecretResolver
from psych_runtime.activities.tokens import LocalTokenStore, TokenStore, token_store_from_env
from psych_runtime.activities.tools import Policy, RulePolicy
from psych_runtime.activities.versions import FileVersionStore, version_store_at
from psych_runtime.specs import (
    AllPermits,
    SpecError,
    TenantPermits,
    ToolRegistry,
    VersionStore,
    env_flag,
)
from psych_runtime.workers._environment import ask_policy, seconds_from, split_patterns
from psych_runtime.workers._live import LiveSettings
from psych_runtime.workers._loading import load_object
from psych_runtime.workers._settings import (
    global_settings_path,
    read_settings_file,
    worker_egress,
    worker_hooks,
)
from psych_runtime.workers._worker_checks import DEFAULT_OUTAGE_SECONDS
from psych_runtime.workers.fleet import Concurrency, parse_roles, version_from_env
from psych_runtime.workflows import DEFAULT_TASK_QUEUE

DEFAULT_HOME = ".psych"


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
            heartbeat timeout of this plus ``OUTAGE_MARGIN`` (10 s), and so do the model
            calls of the Runs this worker's workflows role runs, so a worker that dies
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
        permits: what each tenant may use of code, HTTP and MCP tools and A2A peers
            (``TenantPermits``); with the global settings file's ``permits:`` section, only
            what both permit (``workers/_permits_settings.py``). Default none: no
            restriction.
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
    permits: TenantPermits | None = None

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


def tenant_permits(settings: WorkerSettings) -> TenantPermits | None:
    """What a worker with ``settings`` asks what each tenant may use: ``settings.permits``
    and its global settings file's ``permits:`` section (``permits_with_file``).

    Raises:
        SpecError: a problem of the global settings file.
    """
    return permits_with_file(settings.permits, settings.settings_file)


def permits_with_file(
    given: TenantPermits | None, settings_file: Path | None = None
) -> TenantPermits | None:
    """``given`` and the global settings file's ``permits:`` section (``settings_file``,
    else ``PSYCH_SETTINGS``, else the default one when it exists): only what both permit
    when both are set; None when neither is (no restriction). What a worker and a client
    dispatching to its workers (``psych serve``, ``psych run``) both ask. Only the global
    file may set permits, so a project file is not read.

    Raises:
        SpecError: a problem of the global settings file.
    """
    path = global_settings_path(settings_file)
    section = None if path is None else read_settings_file(path, "global").permits
    if section is None or given is None:
        return given if section is None else section
    return AllPermits((given, section))
