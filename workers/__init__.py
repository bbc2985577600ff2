"""psych_runtime.workers: worker construction, the Temporal plugin, the dev server, the CLI."""

from psych_runtime.workers._client import connect
from psych_runtime.workers._connections import check_connections
from psych_runtime.workers._devserver import (
    FAST_DISPATCH_ARGS,
    start_dev_server,
    start_time_skipping_server,
    temporal_binary,
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
    WorkerSettings,
    activities_for,
    build_worker,
    egress_for,
    run_worker,
    run_workers,
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
    "Telemetry",
    "TelemetryConfig",
    "WorkerSettings",
    "activities_for",
    "build_worker",
    "check_connections",
    "check_fleet_policy",
    "codec_from_env",
    "connect",
    "current_telemetry",
    "egress_for",
    "follow_run",
    "format_record",
    "format_report",
    "install_telemetry",
    "run_worker",
    "run_workers",
    "start_dev_server",
    "start_time_skipping_server",
    "telemetry_from_env",
    "telemetry_plugins",
    "temporal_binary",
    "uninstall_telemetry",
    "worker_identity",
]
