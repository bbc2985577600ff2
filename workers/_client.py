"""Connecting a Temporal client for psych: the plugin, the payload codec, and retries
that outlast a server outage (``outage_retry``)."""

from __future__ import annotations

from typing import Any, Literal

from temporalio.client import Client
from temporalio.envconfig import ClientConfig

from psych_runtime.workers._plugin import PsychPlugin
from psych_runtime.workers._telemetry import telemetry_from_env
from psych_runtime.workers._worker_checks import outage_retry
from psych_runtime.workers.codec import PsychCodec, codec_from_env


async def connect(
    target: str | None = None,
    *,
    namespace: str | None = None,
    codec: PsychCodec | Literal["env"] | None = "env",
    **kwargs: Any,
) -> Client:
    """Connect a Temporal client with the psych plugin.

    Without ``target``, address, namespace, TLS and API key come from Temporal's standard
    environment configuration (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``,
    ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS*``, and the profile file), defaulting to a local
    server at ``localhost:7233``.

    ``codec`` encrypts the payloads (``PsychCodec``); by default it comes from
    ``PSYCH_CODEC_KEYS`` / ``PSYCH_CODEC_KEY_FILE`` (``codec_from_env``: none when
    neither is set), and None turns encryption off whatever the environment says.
    """
    config: dict[str, Any] = dict(ClientConfig.load_client_connect_config())
    if target is not None:
        config["target_host"] = target
    if namespace is not None:
        config["namespace"] = namespace
    config.setdefault("target_host", "localhost:7233")
    config.setdefault("retry_config", outage_retry())
    config.update(kwargs)
    if codec == "env":
        codec = codec_from_env()
    plugins = [*config.pop("plugins", []), PsychPlugin(codec=codec)]
    # Tracing and metrics when OTEL_* configures an exporter (see workers/_telemetry.py).
    telemetry = telemetry_from_env()
    plugins += [] if telemetry is None else telemetry.plugins()
    return await Client.connect(plugins=plugins, **config)


def with_codec(client: Client, codec: PsychCodec | None) -> Client:
    """``client``'s connection and settings with ``codec`` encrypting its payloads
    (``client`` itself for None): what ``psych dev`` gives the worker of the dev server it
    started, whose client was built before the keys were read."""
    if codec is None:
        return client
    config = client.config()
    others = [plugin for plugin in config["plugins"] if not isinstance(plugin, PsychPlugin)]
    config["plugins"] = [*others, PsychPlugin(codec=codec)]
    return Client(**config)
