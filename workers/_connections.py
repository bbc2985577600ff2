"""Publish-time connection checks: may the worker reach each URL of a Spec, and does each
MCP server of a Spec answer?

``egress_refusals`` judges every URL a Spec names (HTTP tools, MCP servers, A2A peers, at
any depth) under the worker's egress policy without connecting: ``psych validate`` and
``publish`` report each one the policy would refuse, at its path.

``check_connections`` connects to every server ``mcp_servers_of(spec)`` lists (the Spec's
own, its subagents', its workflow steps') through the MCP activities' ``check_servers``
(``initialize`` and ``tools/list`` on a fresh connection each, concurrently, bounded
by the connect and list timeouts) and answers in the shape
``ValidationContext.mcp_connections`` takes, so ``validate`` reports an unreachable
non-optional server as a problem at its path. ``psych validate|publish
--check-connections`` and ``PsychClient.publish(..., mcp_connections=...)`` both use it.
``allow_unmatched`` reads the tools it found listed: each ``allow`` entry naming none of a
server's tools is a problem at its path (it would grant nothing, silently).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from psych_runtime.activities.egress import EgressPolicy
from psych_runtime.activities.secrets import SecretResolver
from psych_runtime.specs import (
    MCP_TOOL_SEPARATOR,
    AgentSpec,
    HttpTool,
    Problem,
    Scope,
    WorkflowSpec,
    mcp_connection_key,
    mcp_servers_of,
    narrow,
    nested_specs,
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
    tools: dict[str, tuple[str, ...]] | None = None,
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
        tools: filled with ``mcp_connection_key`` -> the names of the tools the server
            lists, sorted, per server that listed them (what ``allow_unmatched`` reads).
    """
    # Imported here: the mcp SDK takes seconds to import, and every psych command imports
    # this module (through the package and validate/publish), few of them checking.
    from psych_runtime.activities.mcp import check_servers

    servers = mcp_servers_of(spec)
    # check_servers answers by server name, and a name is unique only within one Spec
    # level: each distinct endpoint is asked under a name of its own.
    probes = [server.model_copy(update={"name": f"s{i}"}) for i, server in enumerate(servers)]
    said: dict[str, str] = {}
    listed: dict[str, tuple[str, ...]] = {}
    answers = await check_servers(
        probes, scope, secrets, settings, egress=egress, tokens=tokens, oauth=said, tools=listed
    )
    for server, probe in zip(servers, probes, strict=True):
        if oauth is not None and probe.name in said:
            oauth[mcp_connection_key(server)] = said[probe.name]
        if tools is not None and probe.name in listed:
            tools[mcp_connection_key(server)] = listed[probe.name]
    return {
        mcp_connection_key(server): answers[probe.name]
        for server, probe in zip(servers, probes, strict=True)
    }


_SHOWN_TOOLS = 20
"""Tool names an unmatched ``allow`` entry's problem lists (a server may offer hundreds)."""


def allow_unmatched(
    spec: AgentSpec | WorkflowSpec, tools: Mapping[str, tuple[str, ...]]
) -> list[Problem]:
    """Each ``allow`` entry of an MCP server of ``spec``, at any depth, that names no tool
    the server listed (``tools``: ``check_connections``'s), at its path: such an entry
    grants nothing, which a Run would not say. A server not in ``tools`` is not judged."""
    found: list[Problem] = []
    for prefix, node in nested_specs(spec):
        for server in node.mcp_servers:
            offered = tools.get(mcp_connection_key(server))
            if offered is None:
                continue
            shown = ", ".join(offered[:_SHOWN_TOOLS]) or "no tools"
            if len(offered) > _SHOWN_TOOLS:
                shown += f" and {len(offered) - _SHOWN_TOOLS} more"
            model_prefix = f"{server.name}{MCP_TOOL_SEPARATOR}"
            for entry in server.allow:
                if narrow(offered, allow=(entry,)):
                    continue
                said = f"{entry!r} names no tool the server offers (it offers: {shown})"
                if entry.startswith(model_prefix):
                    said += (
                        "; allow names the server's own tool names, not the "
                        f"'{model_prefix}<tool>' names the model sees"
                    )
                found.append(Problem(f"{prefix}mcp_servers[{server.name}].allow", said))
    return found


@dataclass(frozen=True)
class SpecUrl:
    """A URL ``spec`` names, where, and whether a connection check reports its refusal."""

    path: str
    """Where, as ``validate`` names paths: ``tools[refund].url``,
    ``subagents[x].spec.mcp_servers[docs].url``, ``steps[y].spec.tools[z].url``."""
    url: str
    checked: bool
    """The URL of a non-optional MCP server or A2A peer: the connection check connects to
    it through the same egress port, and reports a refusal as why it did not answer, at
    its path."""


def spec_urls(spec: AgentSpec | WorkflowSpec) -> list[SpecUrl]:
    """Every URL of an HTTP tool, MCP server or A2A peer ``spec`` names, at any depth, in
    the order found."""
    found: list[SpecUrl] = []
    for prefix, node in nested_specs(spec):
        for tool in node.tools:
            if isinstance(tool, HttpTool):
                found.append(SpecUrl(f"{prefix}tools[{tool.name}].url", tool.url, False))
        for server in node.mcp_servers:
            path = f"{prefix}mcp_servers[{server.name}].url"
            found.append(SpecUrl(path, server.url, not server.optional))
        for peer in getattr(node, "a2a_peers", ()):
            path = f"{prefix}a2a_peers[{peer.name}].url"
            found.append(SpecUrl(path, peer.url, not peer.optional))
    return found


def egress_refusals(
    spec: AgentSpec | WorkflowSpec, *, scope: Scope, policy: EgressPolicy
) -> list[Problem]:
    """Each URL of ``spec`` that ``policy`` refuses for ``scope`` by what needs no lookup
    (``EgressPolicy.judge``: address literals, ``localhost``, host patterns), at its path."""
    return [
        Problem(found.path, f"this environment's {refusal.message(found.url)}")
        for found in spec_urls(spec)
        if (refusal := policy.judge(_host_part(found.url), scope.tenant)) is not None
    ]


async def egress_refusals_resolved(
    spec: AgentSpec | WorkflowSpec, *, scope: Scope, egress: Egress
) -> list[Problem]:
    """``egress_refusals`` with every host looked up, for a connection check: but for the
    URLs the check reports itself (``SpecUrl.checked``), so each refusal is told once."""
    found: list[Problem] = []
    for entry in spec_urls(spec):
        if entry.checked:
            continue
        refusal = await egress.judge_resolved(_host_part(entry.url), scope.tenant)
        if refusal is not None:
            found.append(Problem(entry.path, f"this environment's {refusal.message(entry.url)}"))
    return found


def _host_part(url: str) -> str:
    # A URL template's placeholders stand in the path or query, never the host.
    return url.replace("{", "").replace("}", "")
