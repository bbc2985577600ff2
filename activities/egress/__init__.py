"""psych_runtime.activities.egress: where a worker may connect, decided once.

``Egress`` is the one port every outbound HTTP request of a worker goes through: it makes
the httpx clients (model endpoints, HTTP tools) and the httpx2 clients (MCP sessions),
each connecting through a guard that resolves the host, judges every address against the
``EgressPolicy`` and connects only to an allowed one. See ``_rules.py`` for the default.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psych_runtime.activities.egress._bounds import McpResponseTooLarge, ResponseTooLarge
    from psych_runtime.activities.egress._clients import Egress
    from psych_runtime.activities.egress._guard import (
        PURPOSE,
        EgressDenied,
        Purpose,
        PurposeKind,
        Resolver,
        system_resolver,
    )
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
    from psych_runtime.activities.egress._sent import (
        Attempt,
        attempts,
        never_sent,
        untracked,
    )

_HOMES = {
    "DEFAULT_MAX_RESPONSE_BYTES": "psych_runtime.activities.egress._rules",
    "Egress": "psych_runtime.activities.egress._clients",
    "EgressDenied": "psych_runtime.activities.egress._guard",
    "EgressPolicy": "psych_runtime.activities.egress._rules",
    "EgressRules": "psych_runtime.activities.egress._rules",
    "EgressSettings": "psych_runtime.activities.egress._rules",
    "LOOPBACK": "psych_runtime.activities.egress._rules",
    "McpResponseTooLarge": "psych_runtime.activities.egress._bounds",
    "Origin": "psych_runtime.activities.egress._rules",
    "PURPOSE": "psych_runtime.activities.egress._guard",
    "Purpose": "psych_runtime.activities.egress._guard",
    "PurposeKind": "psych_runtime.activities.egress._guard",
    "Refusal": "psych_runtime.activities.egress._rules",
    "Resolver": "psych_runtime.activities.egress._guard",
    "ResponseTooLarge": "psych_runtime.activities.egress._bounds",
    "blocked_kind": "psych_runtime.activities.egress._rules",
    "never_sent": "psych_runtime.activities.egress._sent",
    "Attempt": "psych_runtime.activities.egress._sent",
    "attempts": "psych_runtime.activities.egress._sent",
    "untracked": "psych_runtime.activities.egress._sent",
    "system_resolver": "psych_runtime.activities.egress._guard",
}
"""Where each public name lives, imported on first use: the rules and the policy need no HTTP
client, and ``psych validate`` judges a Spec's URLs with them alone; ``Egress`` (httpx and
httpx2) is loaded by what connects."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: the next lookup does not come here
    return value


__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "Attempt",
    "LOOPBACK",
    "Egress",
    "EgressDenied",
    "EgressPolicy",
    "EgressRules",
    "EgressSettings",
    "McpResponseTooLarge",
    "Origin",
    "PURPOSE",
    "Purpose",
    "PurposeKind",
    "Refusal",
    "ResponseTooLarge",
    "Resolver",
    "attempts",
    "blocked_kind",
    "never_sent",
    "system_resolver",
    "untracked",
]
