"""psych_runtime.activities.mcp: MCP servers as tools.

``McpActivities`` (a turn's catalogue, ``tools/call``, the search of deferred catalogues)
over the official ``mcp`` SDK, its session pool, catalogue cache and naming, the worker's
``McpSettings``, and an agent turn's discovery inside the model call (``resolve_turn``).
"""

import importlib
from typing import TYPE_CHECKING, Any

from psych_runtime.activities.mcp._consent_error import McpConsentRequired, consent_error
from psych_runtime.activities.mcp._settings import McpSettings, parse_oauth_issuers
from psych_runtime.activities.mcp._turn import (
    McpResolver,
    McpUnreachable,
    Resolved,
    resolve_turn,
    turn_result,
)

if TYPE_CHECKING:
    from psych_runtime.activities.mcp._activities import McpActivities
    from psych_runtime.activities.mcp._connect import check_servers
    from psych_runtime.activities.mcp._consent_callback import (
        Waiting,
        WrongIssuer,
        deliver_authorization,
        waiting_on,
    )

_LAZY = {
    "Waiting": "_consent_callback",
    "WrongIssuer": "_consent_callback",
    "McpActivities": "_activities",
    "check_servers": "_connect",
    "deliver_authorization": "_consent_callback",
    "waiting_on": "_consent_callback",
}
"""Names imported on first use (name -> module): the ``mcp`` SDK takes one to two seconds to
import, and workflows and every ``psych`` command import this package without touching MCP."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "McpActivities",
    "McpConsentRequired",
    "McpResolver",
    "McpSettings",
    "McpUnreachable",
    "Resolved",
    "Waiting",
    "WrongIssuer",
    "check_servers",
    "consent_error",
    "deliver_authorization",
    "parse_oauth_issuers",
    "resolve_turn",
    "turn_result",
    "waiting_on",
]
