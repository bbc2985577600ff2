"""Building a psych worker: the workflows, the activities and their collaborators."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.envconfig import ClientConfig
from temporalio.worker import Worker

from psych_runtime.activities._blobs import BlobStore, LocalBlobStore
from psych_runtime.activities._model import ModelActivities, ModelEndpoints, Pricing
from psych_runtime.activities._payloads import Decision
from psych_runtime.activities._policy import Policy, RulePolicy
from psych_runtime.activities._secrets import EnvSecretResolver, SecretResolver
from psych_runtime.activities._tools import ToolActivities
from psych_runtime.specs import SpecError, ToolRegistry
from psych_runtime.workers._loading import load_object
from psych_runtime.workers._plugin import PsychPlugin
from psych_runtime.workflows import DEFAULT_TASK_QUEUE, AgentRun

DEFAULT_HOME = ".psych"


@dataclass
class WorkerSettings:
    """What a worker is wired with. ``from_env`` reads the ``PSYCH_*`` variables.

    Attributes:
        task_queue: the queue to poll (``PSYCH_TASK_QUEUE``, default ``psych``).
        registry: code tools (``PSYCH_TOOLS`` = ``module:attribute`` of a ToolRegistry).
        blobs: the BlobStore (``PSYCH_BLOB_DIR``, default ``.psych/blobs``).
        endpoints: which endpoint serves which model (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
            ``OPENAI_STREAM``).
        secrets: the SecretResolver (default: ``PSYCH_SECRET_<NAME>`` variables).
        pricing: the Pricing port (default none: every cost is unknown, None).
        policy: the Policy port deciding allow/deny/ask per tool call (default
            ``RulePolicy()``: allow everything; ``PSYCH_ASK`` and ``PSYCH_ASK_DESTRUCTIVE``
            make ``from_env`` build an asking one, see ``ask_policy``).
    """

    task_queue: str = DEFAULT_TASK_QUEUE
    registry: ToolRegistry = field(default_factory=ToolRegistry)
    blobs: BlobStore = field(default_factory=lambda: LocalBlobStore(Path(DEFAULT_HOME) / "blobs"))
    endpoints: ModelEndpoints = field(default_factory=ModelEndpoints.from_env)
    secrets: SecretResolver = field(default_factory=EnvSecretResolver)
    pricing: Pricing | None = None
    policy: Policy = field(default_factory=RulePolicy)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerSettings:
        """Settings from ``PSYCH_*`` and ``OPENAI_*`` environment variables."""
        env = os.environ if environ is None else environ
        registry = ToolRegistry()
        if env.get("PSYCH_TOOLS"):
            loaded = load_object(env["PSYCH_TOOLS"])
            if not isinstance(loaded, ToolRegistry):
                raise SpecError(f"PSYCH_TOOLS={env['PSYCH_TOOLS']!r} is not a ToolRegistry")
            registry = loaded
        return cls(
            task_queue=env.get("PSYCH_TASK_QUEUE", DEFAULT_TASK_QUEUE),
            registry=registry,
            blobs=LocalBlobStore(env.get("PSYCH_BLOB_DIR", str(Path(DEFAULT_HOME) / "blobs"))),
            endpoints=ModelEndpoints.from_env(env),
            secrets=EnvSecretResolver(env),
            policy=ask_policy(
                split_patterns(env.get("PSYCH_ASK", "")),
                destructive=_truthy(env.get("PSYCH_ASK_DESTRUCTIVE", "")),
            ),
        )


def split_patterns(text: str) -> list[str]:
    """Comma-separated tool patterns (``PSYCH_ASK``), blanks dropped."""
    return [part.strip() for part in text.split(",") if part.strip()]


def _truthy(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


def ask_policy(patterns: Sequence[str] = (), *, destructive: bool = False) -> RulePolicy:
    """A RulePolicy asking a person to approve calls of the tools ``patterns`` name (exact
    names, or a prefix ending in ``*``), and of every destructive tool with
    ``destructive``; everything else is allowed.

    Raises:
        SpecError: a pattern has a ``*`` other than at its end, or is empty.
    """
    for pattern in patterns:
        if not pattern or "*" in pattern[:-1]:
            raise SpecError(
                f"invalid tool pattern {pattern!r}: a tool name, or a prefix ending in '*'"
            )
    asking: dict[str, Decision] = {pattern: "ask" for pattern in patterns}
    return RulePolicy(tools=asking, destructive="ask" if destructive else "allow")


def describe_policy(policy: Policy) -> str | None:
    """What an asking RulePolicy asks approval for, in words (None when it never asks)."""
    if not isinstance(policy, RulePolicy):
        return f"what {type(policy).__name__} decides"
    asked = [pattern for pattern, decision in policy.tools.items() if decision == "ask"]
    asked += [f"{effect} tools" for effect, d in policy.by_effect.items() if d == "ask"]
    return ", ".join(asked) if asked else None


async def connect(
    target: str | None = None, *, namespace: str | None = None, **kwargs: Any
) -> Client:
    """Connect a Temporal client with the psych plugin.

    Without ``target``, address, namespace, TLS and API key come from Temporal's standard
    environment configuration (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``,
    ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS*``, and the profile file), defaulting to a local
    server at ``localhost:7233``.
    """
    config: dict[str, Any] = dict(ClientConfig.load_client_connect_config())
    if target is not None:
        config["target_host"] = target
    if namespace is not None:
        config["namespace"] = namespace
    config.setdefault("target_host", "localhost:7233")
    config.update(kwargs)
    plugins = [*config.pop("plugins", []), PsychPlugin()]
    return await Client.connect(plugins=plugins, **config)


def activities_for(settings: WorkerSettings, http: httpx.AsyncClient) -> list[Any]:
    """The activity callables a psych worker registers."""
    model = ModelActivities(
        endpoints=settings.endpoints, blobs=settings.blobs, pricing=settings.pricing, http=http
    )
    tools = ToolActivities(
        registry=settings.registry,
        blobs=settings.blobs,
        secrets=settings.secrets,
        http=http,
        policy=settings.policy,
    )
    return [
        model.complete,
        tools.catalog,
        tools.code,
        tools.decide,
        tools.http,
        tools.read_output,
    ]


def build_worker(
    client: Client,
    settings: WorkerSettings,
    *,
    http: httpx.AsyncClient,
    **worker_options: Any,
) -> Worker:
    """A Worker running AgentRun and every psych activity.

    ``client`` must carry the psych plugin (see ``connect``); ``http`` is the one HTTP
    client every outbound request of the activities goes through (the caller closes it);
    extra keyword arguments go to ``temporalio.worker.Worker``. ``run_worker`` does all of
    this for you.
    """
    if not issubclass(client.data_converter.payload_converter_class, PydanticPayloadConverter):
        raise SpecError("connect the Temporal client with plugins=[PsychPlugin()]")
    workflows: Sequence[type] = [AgentRun]
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=workflows,
        activities=activities_for(settings, http),
        **worker_options,
    )


@asynccontextmanager
async def run_worker(
    client: Client, settings: WorkerSettings | None = None, **worker_options: Any
) -> AsyncIterator[Worker]:
    """Run a psych worker (and its HTTP client) for the duration of the block."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as http:
        worker = build_worker(client, settings or WorkerSettings(), http=http, **worker_options)
        async with worker:
            yield worker
