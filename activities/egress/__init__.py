"""psych_runtime.activities.egress: where a worker may connect, decided once.

``Egress`` is the one port every outbound HTTP request of a worker goes through: it makes
the httpx clients (model endpoints, HTTP tools) and the httpx2 clients (MCP sessions),
each connecting through a guard that resolves the host, judges every address against the
``EgressPolicy`` and connects only to an allowed one. See ``_rules.py`` for the default.
"""

from psych_runtime.activities.egress._clients import Egress, ResponseTooLarge
from psych_runtime.activities.egress._guard import EgressDenied, Resolver, system_resolver
from psych_runtime.activities.egress._rules import (
    DEFAULT_MAX_RESPONSE_BYTES,
    LOOPBACK,
    EgressPolicy,
    EgressRules,
    EgressSettings,
    Origin,
    Refusal,
    blocked_kind,
)

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "LOOPBACK",
    "Egress",
    "EgressDenied",
    "EgressPolicy",
    "EgressRules",
    "EgressSettings",
    "Origin",
    "Refusal",
    "ResponseTooLarge",
    "Resolver",
    "blocked_kind",
    "system_resolver",
]
