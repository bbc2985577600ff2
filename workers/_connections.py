"""Publish-time connection checks: may the worker reach each URL of a Spec, and does each
MCP server of a Spec answer?

``egress_problems`` judges every URL a Spec names (HTTP tools, MCP servers, at any depth)
under the worker's egress policy without connecting: ``psych validate`` and ``publish``
report each one the policy would refuse.

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

from psych_runtime.activities.egress import EgressPolicy
from psych_runtime.activities.secrets import SecretResolver
from psych_runtime.specs import (
    AgentSpec,
    AgentStep,
    HttpTool,
    Scope,
    WorkflowSpec,
    WorkflowStepRef,
    mcp_connection_key,
    mcp_servers_of,
)

if TYPE_CHECKING:
    from psych_runtime.activities.egress import Egress
    from psych_runtime.activities.mcp import McpSettings
    from psych_runtime.activities.tokens import TokenStore


async def check_connections(
    spec: AgentSpec | WorkflowSpec,
    *,
    scope: Scope,
    secrets: SecretResolver | None,
    settings: McpSettings | None = None,
    egress: Egress | None = None,
    tokens: TokenStore | None = None,
    oauth: dict[str, str] | None = None,
) -> dict[str, str | None]:
    """Connect to every MCP server of ``spec``, at any depth; ``mcp_connection_key`` ->
    None when it answered, else why not (credentials named, never their values).

    Args:
        spec: the Spec to be published.
        scope: whose credentials the servers are called with (a server's ``credential``
            is resolved for it, as a worker would for a Run of this Scope).
        secrets: resolves the credentials; None when no server names one.
        settings: the connect and list timeouts (the worker's defaults when None).
        egress: the port the connections go through (the environment's policy when None).
        tokens: the workers' token store, read only: a server behind OAuth is checked
            with the token held for ``scope`` (None: as if none were held).
        oauth: filled with ``mcp_connection_key`` -> whether a token is held for
            ``scope`` and what a person must do if not, per server behind OAuth.
    """
    # Imported here: the mcp SDK takes seconds to import, and every psych command imports
    # this module (through the package and validate/publish), few of them checking.
    from psych_runtime.activities.mcp import check_servers

    servers = mcp_servers_of(spec)
    # check_servers answers by server name, and a name is unique only within one Spec
    # level: each distinct endpoint is asked under a name of its own.
    probes = [server.model_copy(update={"name": f"s{i}"}) for i, server in enumerate(servers)]
    said: dict[str, str] = {}
    answers = await check_servers(
        probes, scope, secrets, settings, egress=egress, tokens=tokens, oauth=said
    )
    if oauth is not None:
        for server, probe in zip(servers, probes, strict=True):
            if probe.name in said:
                oauth[mcp_connection_key(server)] = said[probe.name]
    return {
        mcp_connection_key(server): answers[probe.name]
        for server, probe in zip(servers, probes, strict=True)
    }


def spec_urls(spec: AgentSpec | WorkflowSpec) -> list[tuple[str, str]]:
    """Every URL ``spec`` names, at any depth, with what names it (``http tool 'refund'``,
    ``mcp server 'docs'``, within ``subagent 'x'`` / ``step 'y'``), in the order found."""
    found: list[tuple[str, str]] = []

    def walk(node: AgentSpec | WorkflowSpec, within: str) -> None:
        for tool in node.tools:
            if isinstance(tool, HttpTool):
                found.append((f"{within}http tool {tool.name!r}", tool.url))
        for server in node.mcp_servers:
            found.append((f"{within}mcp server {server.name!r}", server.url))
        if isinstance(node, AgentSpec):
            for sub in node.subagents:
                walk(sub.spec, f"{within}subagent {sub.name!r}: ")
            return
        for step in node.steps:
            if isinstance(step, AgentStep | WorkflowStepRef):
                walk(step.spec, f"{within}step {step.name!r}: ")

    walk(spec, "")
    return found


def egress_refusals(
    spec: AgentSpec | WorkflowSpec, *, scope: Scope, policy: EgressPolicy
) -> list[str]:
    """One line per URL of ``spec`` that ``policy`` refuses for ``scope`` by what needs no
    lookup (``EgressPolicy.judge``): address literals, ``localhost``, host patterns."""
    return [
        f"{what}: this environment's {refusal.message(url)}"
        for what, url in spec_urls(spec)
        if (refusal := policy.judge(_host_part(url), scope.tenant)) is not None
    ]


async def egress_refusals_resolved(
    spec: AgentSpec | WorkflowSpec, *, scope: Scope, egress: Egress
) -> list[str]:
    """``egress_refusals`` with every host looked up (``--check-connections``)."""
    found: list[str] = []
    for what, url in spec_urls(spec):
        refusal = await egress.judge_resolved(_host_part(url), scope.tenant)
        if refusal is not None:
            found.append(f"{what}: this environment's {refusal.message(url)}")
    return found


def _host_part(url: str) -> str:
    # A URL template's placeholders stand in the path or query, never the host.
    return url.replace("{", "").replace("}", "")
