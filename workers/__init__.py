"""psych_runtime.workers: worker construction, the Temporal plugin, the dev server, the CLI."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psych_runtime.workers._client import connect
    from psych_runtime.workers._connections import allow_unmatched, check_connections
    from psych_runtime.workers._devserver import (
        FAST_DISPATCH_ARGS,
        UPDATE_PAYLOADS_ARGS,
        free_port,
        start_dev_server,
        start_time_skipping_server,
        temporal_binary,
    )
    from psych_runtime.workers._exit import exit_process
    from psych_runtime.workers._gc import SERVING_GC_THRESHOLDS, tune_gc_for_serving
    from psych_runtime.workers._oauth_callback import (
        complete_authorization,
        oauth_callback_app,
    )
    from psych_runtime.workers._plugin import SANDBOX_PASSTHROUGH, PsychPlugin
    from psych_runtime.workers._telemetry import (
        Telemetry,
        TelemetryConfig,
        current_telemetry,
        install_telemetry,
        telemetry_from_env,
        telemetry_plugins,
        uninstall_telemetry,
    )
    from psych_runtime.workers._worker import (
        activities_for,
        build_worker,
        run_worker,
        run_workers,
    )
    from psych_runtime.workers._worker_checks import tenant_sealed_blobs
    from psych_runtime.workers._worker_settings import (
        WorkerSettings,
        egress_for,
        tenant_permits,
    )
    from psych_runtime.workers.codec import (
        EnvKeyProvider,
        FileKeyProvider,
        Key,
        KeyProvider,
        Keyring,
        PsychCodec,
        codec_from_env,
    )
    from psych_runtime.workers.console import follow_run, format_record, format_report
    from psych_runtime.workers.fleet import check_fleet_policy, worker_identity

_HOMES = {
    "EnvKeyProvider": "psych_runtime.workers.codec",
    "FAST_DISPATCH_ARGS": "psych_runtime.workers._devserver",
    "FileKeyProvider": "psych_runtime.workers.codec",
    "Key": "psych_runtime.workers.codec",
    "KeyProvider": "psych_runtime.workers.codec",
    "Keyring": "psych_runtime.workers.codec",
    "PsychCodec": "psych_runtime.workers.codec",
    "PsychPlugin": "psych_runtime.workers._plugin",
    "SANDBOX_PASSTHROUGH": "psych_runtime.workers._plugin",
    "SERVING_GC_THRESHOLDS": "psych_runtime.workers._gc",
    "Telemetry": "psych_runtime.workers._telemetry",
    "TelemetryConfig": "psych_runtime.workers._telemetry",
    "UPDATE_PAYLOADS_ARGS": "psych_runtime.workers._devserver",
    "WorkerSettings": "psych_runtime.workers._worker_settings",
    "activities_for": "psych_runtime.workers._worker",
    "allow_unmatched": "psych_runtime.workers._connections",
    "build_worker": "psych_runtime.workers._worker",
    "check_connections": "psych_runtime.workers._connections",
    "check_fleet_policy": "psych_runtime.workers.fleet",
    "codec_from_env": "psych_runtime.workers.codec",
    "complete_authorization": "psych_runtime.workers._oauth_callback",
    "connect": "psych_runtime.workers._client",
    "current_telemetry": "psych_runtime.workers._telemetry",
    "egress_for": "psych_runtime.workers._worker_settings",
    "exit_process": "psych_runtime.workers._exit",
    "follow_run": "psych_runtime.workers.console",
    "format_record": "psych_runtime.workers.console",
    "format_report": "psych_runtime.workers.console",
    "free_port": "psych_runtime.workers._devserver",
    "install_telemetry": "psych_runtime.workers._telemetry",
    "oauth_callback_app": "psych_runtime.workers._oauth_callback",
    "run_worker": "psych_runtime.workers._worker",
    "run_workers": "psych_runtime.workers._worker",
    "start_dev_server": "psych_runtime.workers._devserver",
    "start_time_skipping_server": "psych_runtime.workers._devserver",
    "telemetry_from_env": "psych_runtime.workers._telemetry",
    "telemetry_plugins": "psych_runtime.workers._telemetry",
    "temporal_binary": "psych_runtime.workers._devserver",
    "tenant_permits": "psych_runtime.workers._worker_settings",
    "tenant_sealed_blobs": "psych_runtime.workers._worker_checks",
    "tune_gc_for_serving": "psych_runtime.workers._gc",
    "uninstall_telemetry": "psych_runtime.workers._telemetry",
    "worker_identity": "psych_runtime.workers.fleet",
}
"""Where each public name lives, imported on first use: the ``psych`` command imports this
package for every command, and most need neither Temporal's worker, OpenTelemetry nor the
codec's cryptography (``psych --help`` and ``psych validate`` need none of them)."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: the next lookup does not come here
    return value


__all__ = [
    "EnvKeyProvider",
    "FAST_DISPATCH_ARGS",
    "FileKeyProvider",
    "Key",
    "KeyProvider",
    "Keyring",
    "PsychCodec",
    "PsychPlugin",
    "SANDBOX_PASSTHROUGH",
    "SERVING_GC_THRESHOLDS",
    "Telemetry",
    "TelemetryConfig",
    "UPDATE_PAYLOADS_ARGS",
    "WorkerSettings",
    "activities_for",
    "allow_unmatched",
    "build_worker",
    "check_connections",
    "check_fleet_policy",
    "codec_from_env",
    "complete_authorization",
    "connect",
    "current_telemetry",
    "egress_for",
    "exit_process",
    "follow_run",
    "format_record",
    "format_report",
    "free_port",
    "install_telemetry",
    "oauth_callback_app",
    "run_worker",
    "run_workers",
    "start_dev_server",
    "start_time_skipping_server",
    "telemetry_from_env",
    "telemetry_plugins",
    "temporal_binary",
    "tenant_permits",
    "tenant_sealed_blobs",
    "tune_gc_for_serving",
    "uninstall_telemetry",
    "worker_identity",
]
