"""Which protocol a session speaks: the ``initialize`` handshake (every MCP revision up to
2025-11-25) first, and the stateless 2026-07-28 protocol (``server/discover``, no session
id) when a server refuses the handshake.

Handshake first, not the SDK's ``mode="auto"`` (``server/discover`` first) for every
server: a server that speaks both keeps the session the pool and the exactly-once rules
were built on (``notifications/tools/list_changed`` pushed on the session, a cancelled call
told with ``notifications/cancelled``, one session id per pooled key), byte for byte as
before. A server that speaks only 2026-07-28 answers ``initialize`` with -32022
(unsupported protocol version) or -32601 (no such method); the session is then opened again
with ``mode="auto"``, which probes ``server/discover`` and adopts the version both speak.
Such a session costs one refused request when it opens (sessions are pooled).
"""

from __future__ import annotations

import mcp_types
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

_REFUSED = frozenset({mcp_types.UNSUPPORTED_PROTOCOL_VERSION, mcp_types.METHOD_NOT_FOUND})


def handshake_refused(err: BaseException) -> bool:
    """Whether ``err`` (as a transport's task groups wrap it) is a server refusing the
    ``initialize`` handshake."""
    if isinstance(err, BaseExceptionGroup):
        return any(handshake_refused(inner) for inner in err.exceptions)
    return isinstance(err, MCPError) and err.code in _REFUSED


def is_stateless(client: Client) -> bool:
    """Whether ``client``'s session speaks a stateless (2026-07-28 or later) protocol."""
    return client.session.protocol_version in MODERN_PROTOCOL_VERSIONS
