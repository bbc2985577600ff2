"""Publish-time connection checks: does each MCP server of a Spec answer?

``check_connections`` connects to every server ``mcp_servers_of(spec)`` lists (the Spec's
own, its subagents', its workflow steps') through the MCP activities' ``check_servers``
(``initialize`` and one ``tools/list`` on a fresh connection each, concurrently, bounded
by the connect and list timeouts) and answers in the shape
``ValidationContext.mcp_connections`` takes, so ``validate`` reports an unreachable
non-optional server as a problem at its path. ``psych validate|publish
--check-connections`` and ``PsychClient.publish(..., mcp_connections=...)`` both use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psych_runtime.activities.secrets import SecretResolver
from psych_runtime.specs import (
    AgentSpec,
    Scope,
    WorkflowSpec,
    mcp_connection_key,
    mcp_servers_of,
)

if TYPE_CHECKING:
    from psych_runtime.activities.mcp import McpSettings


async def check_connections(
    spec: AgentSpec | WorkflowSpec,
    *,
    scope: Scope,
    secrets: SecretResolver | None,
    settings: McpSettings | None = None,
) -> dict[str, str | None]:
    """Connect to every MCP server of ``spec``, at any depth; ``mcp_connection_key`` ->
    None when it answered, else why not (credentials named, never their values).

    Args:
        spec: the Spec to be published.
        scope: whose credentials the servers are called with (a server's ``credential``
            is resolved for it, as a worker would for a Run of this Scope).
        secrets: resolves the credentials; None when no server names one.
        settings: the connect and list timeouts (the worker's defaults when None).
    """
    # Imported here: the mcp SDK takes seconds to import, and every psych command imports
    # this module (through the package and validate/publish), few of them checking.
    from psych_runtime.activities.mcp import check_servers

    servers = mcp_servers_of(spec)
    # check_servers answers by server name, and a name is unique only within one Spec
    # level: each distinct endpoint is asked under a name of its own.
    probes = [server.model_copy(update={"name": f"s{i}"}) for i, server in enumerate(servers)]
    answers = await check_servers(probes, scope, secrets, settings)
    return {
        mcp_connection_key(server): answers[probe.name]
        for server, probe in zip(servers, probes, strict=True)
    }
