"""psych_runtime.workers.fleet: running a fleet of workers.

Worker roles and their task queues, worker versioning (deployments), the approval policy
one task queue shares, which queues have pollers, replaying recorded histories, and the
health and metrics endpoints.
"""

from psych_runtime.workers.fleet._health import (
    Health,
    check_listen_ports,
    metrics_runtime,
    port_from,
    serve_health,
    server_ready,
)
from psych_runtime.workers.fleet._policy import (
    POLLER_LIVE_SECONDS,
    check_fleet_policy,
    policy_queues,
    worker_identity,
)
from psych_runtime.workers.fleet._pollers import unpolled_queues
from psych_runtime.workers.fleet._replay import (
    WORKFLOW_TYPES,
    ReplayOutcome,
    history_files,
    load_history,
    recent_histories,
    replay,
)
from psych_runtime.workers.fleet._roles import (
    Concurrency,
    RolesApartInterceptor,
    activities_of_role,
    parse_roles,
    runs_roles_apart,
)
from psych_runtime.workers.fleet._versioning import (
    deployment_config,
    deployment_version,
    promote,
    version_from_env,
)

__all__ = [
    "Concurrency",
    "Health",
    "POLLER_LIVE_SECONDS",
    "ReplayOutcome",
    "RolesApartInterceptor",
    "WORKFLOW_TYPES",
    "activities_of_role",
    "check_fleet_policy",
    "check_listen_ports",
    "deployment_config",
    "deployment_version",
    "history_files",
    "load_history",
    "metrics_runtime",
    "parse_roles",
    "policy_queues",
    "port_from",
    "promote",
    "recent_histories",
    "replay",
    "runs_roles_apart",
    "serve_health",
    "server_ready",
    "unpolled_queues",
    "version_from_env",
    "worker_identity",
]
