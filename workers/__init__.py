"""psych_runtime.workers: worker construction, the Temporal plugin, the dev server, the CLI."""

from psych_runtime.workers._console import follow_run, format_record, format_report
from psych_runtime.workers._devserver import (
    FAST_DISPATCH_ARGS,
    start_dev_server,
    start_time_skipping_server,
    temporal_binary,
)
from psych_runtime.workers._plugin import SANDBOX_PASSTHROUGH, PsychPlugin
from psych_runtime.workers._worker import (
    WorkerSettings,
    activities_for,
    build_worker,
    check_fleet_policy,
    connect,
    run_worker,
    run_workers,
    worker_identity,
)

__all__ = [
    "FAST_DISPATCH_ARGS",
    "PsychPlugin",
    "SANDBOX_PASSTHROUGH",
    "WorkerSettings",
    "activities_for",
    "build_worker",
    "check_fleet_policy",
    "connect",
    "follow_run",
    "format_record",
    "format_report",
    "run_worker",
    "run_workers",
    "start_dev_server",
    "start_time_skipping_server",
    "temporal_binary",
    "worker_identity",
]
