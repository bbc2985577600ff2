"""Publish-time validation and access narrowing.

``validate`` reports every problem it finds, never only the first; an empty list means the
Spec may be published. Checks that need the network (is this MCP server reachable?) take
their answer from the ``ValidationContext`` the caller filled in, so validating offline still
reports everything else.

``narrow`` is the one function that decides what is callable; the validator calls it for
spawn envelopes and MCP grants, and the runtime calls it at every turn boundary.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from psych_runtime.specs._allow import allow_problems, matches, not_one_string
from psych_runtime.specs._credentials import header_credentials, url_credentials
from psych_runtime.specs._depth import DepthCap
from psych_runtime.specs._documents import MAX_SPEC_BYTES, tree_problem
from psych_runtime.specs._endpoint import endpoint_problems
from psych_runtime.specs._headers import header_problems
from psych_runtime.specs._mcp_tool_names import MCP_TOOL_SEPARATOR, sanitise_tool_name
from psych_runtime.specs._models import (
    A2APeer,
    AgentSpec,
    AgentStep,
    CodeTool,
    HttpTool,
    McpServer,
    ToolStep,
    WorkflowSpec,
    WorkflowStepRef,
)
from psych_runtime.specs._nested import nested_specs
from psych_runtime.specs._oauth_urls import oauth_problems
from psych_runtime.specs._peer_urls import peer_url_problems
from psych_runtime.specs._problem import Problem
from psych_runtime.specs._subagents import (
    child_chain,
    different_definition,
    narrow_subagent,
    own_cap,
    spawn_depth_problem,
    subagent_depth_refusal,
)
from psych_runtime.specs._tool_steps import tool_step_problems
from psych_runtime.specs._unsupported import unsupported_features
from psych_runtime.specs._url_template import (
    fragment_placeholders,
    host_placeholders,
    url_placeholders,
)
from psych_runtime.specs._version import canonical_bytes
from psych_runtime.specs._workflow_fields import unread_workflow_fields

BUILTIN_TOOL_NAMES = frozenset(
    {
        "ask_question",
        "delegate",
        "load_skill",
        "message_child",
        "read_tool_output",
        "search_mcp_tools",
        "show_component",
        "spawn",
        "update_tasks",
        "wait_children",
    }
)
"""The built-in tools the runtime offers itself (``workflows.features`` implements each;
a test ties the two)."""
RESERVED_TOOL_NAMES = BUILTIN_TOOL_NAMES | {"send_message"}
"""Names no declared tool may take: the built-ins, and ``send_message``, reserved since the
first Spec layer for messaging peers."""

MAX_NESTING_DEPTH = 16
"""Deepest nesting of workflows within workflows (and agents within workflows)."""

_SKILL_LINK = re.compile(r"\[\[\s*skills?\s*:\s*([^\]\n]*?)\s*\]\]", re.IGNORECASE)
"""A link to a skill in a skill's body. Nothing in the runtime follows links: the model
reads the body and calls ``load_skill``, which matches a name exactly. So a link is what a
model reads as one, not only ``[[skill:name]]``: spaces around the parts, ``Skill``,
``skills``; the name, as written, must be a skill's."""


@dataclass(frozen=True, init=False)
class ValidationContext:
    """What the world looks like at publish time.

    Attributes:
        registered_tools: names of code tools the worker's ToolRegistry holds. A code tool
            the registry does not hold is a problem.
        known_models: model ids the model endpoint accepts; empty = don't check.
        reachable_mcp_servers: MCP server names that answered; empty = don't check. Kept
            for callers that check by name; ``mcp_connections`` supersedes it.
        mcp_connections: the answer of a connection check (``--check-connections``): for
            each server's ``mcp_connection_key``, None when it answered, else why it did
            not. None (the default) = not checked. When set, every non-optional MCP server
            of the Spec, at any depth, must have answered: one that failed, or that the
            check did not cover, is a problem, even when no server answered at all.

    Raises:
        TypeError: one of the first three is a string, not a sequence of names.
    """

    registered_tools: frozenset[str] = field(default_factory=frozenset)
    known_models: frozenset[str] = field(default_factory=frozenset)
    reachable_mcp_servers: frozenset[str] = field(default_factory=frozenset)
    # Read-only, and left out of the hash: a mapping has none.
    mcp_connections: Mapping[str, str | None] | None = field(default=None, hash=False)

    def __init__(
        self,
        registered_tools: Iterable[str] = (),
        known_models: Iterable[str] = (),
        reachable_mcp_servers: Iterable[str] = (),
        mcp_connections: Mapping[str, str | None] | None = None,
    ) -> None:
        not_one_string(registered_tools=registered_tools, known_models=known_models)
        not_one_string(reachable_mcp_servers=reachable_mcp_servers)
        object.__setattr__(self, "registered_tools", frozenset(registered_tools))
        object.__setattr__(self, "known_models", frozenset(known_models))
        object.__setattr__(self, "reachable_mcp_servers", frozenset(reachable_mcp_servers))
        connections = None if mcp_connections is None else MappingProxyType(dict(mcp_connections))
        object.__setattr__(self, "mcp_connections", connections)


def mcp_connection_key(server: McpServer) -> str:
    """What decides whether ``server`` answers a connection check: its transport, URL,
    credential name and OAuth settings, as one string.

    A connection check's answers are keyed by it, not by the server's name, because a name
    is unique only within one Spec: a subagent may call another endpoint by the same name.
    """
    oauth = None if server.oauth is None else server.oauth.model_dump(mode="json")
    return json.dumps(
        [server.transport, server.url, server.credential, oauth],
        sort_keys=True,
        separators=(",", ":"),
    )


def mcp_servers_of(spec: AgentSpec | WorkflowSpec) -> tuple[McpServer, ...]:
    """Every MCP server ``spec`` may connect to, at any depth (subagents' embedded Specs,
    workflow steps, nested workflows), one per ``mcp_connection_key``, in the order found.

    What a connection check must reach for ``validate`` to find no unreachable server.
    """
    found: dict[str, McpServer] = {}
    for _, node in nested_specs(spec):
        for server in node.mcp_servers:
            found.setdefault(mcp_connection_key(server), server)
    return tuple(found.values())


def narrow(
    offered: Iterable[str],
    *,
    allow: Sequence[str] = (),
    permitted: Sequence[str] | None = None,
    withheld: Iterable[str] = (),
) -> tuple[str, ...]:
    """What is callable: offered ⊇ permitted ⊇ allowed ⊇ callable now.

    Args:
        offered: what the source offers (a server's tools, a peer's skills, a parent's tools).
        allow: what the Spec grants, exact names or trailing-``*`` prefixes; empty grants
            everything offered (the seed's rule for ``allow``).
        permitted: what the tenant (or a parent) permits, in the same pattern syntax.
            Three-state: ``None`` inherits (permits all), ``()`` permits nothing.
        withheld: exact names not callable right now (e.g. a tool on a failure streak).

    Returns:
        The callable names, sorted and unique.

    Raises:
        TypeError: ``allow`` or ``permitted`` is one string (each character a pattern).
    """
    not_one_string(allow=allow, permitted=permitted)
    withheld_set = set(withheld)
    return tuple(
        sorted(
            {
                name
                for name in offered
                if (permitted is None or matches(name, permitted))
                and (not allow or matches(name, allow))
                and name not in withheld_set
            }
        )
    )


def _check_http_tool(tool: HttpTool, path: str) -> list[Problem]:
    problems = []
    properties = tool.input_schema.get("properties", {})
    if not isinstance(properties, dict):
        problems.append(Problem(f"{path}.input_schema.properties", "must be a mapping"))
        properties = {}
    for placeholder in host_placeholders(tool.url):
        problems.append(
            Problem(
                f"{path}.url",
                f"placeholder {{{placeholder}}} is in the scheme, host or port: arguments "
                "may fill the path and the query only (the model would choose where the "
                "request and its credential go)",
            )
        )
    for placeholder in fragment_placeholders(tool.url):
        problems.append(
            Problem(
                f"{path}.url",
                f"placeholder {{{placeholder}}} is in the fragment (after '#'), which is "
                "never sent: the argument filling it would be dropped",
            )
        )
    for placeholder in url_placeholders(tool.url):
        if placeholder not in properties:
            problems.append(
                Problem(
                    f"{path}.url",
                    f"placeholder {{{placeholder}}} is not a property of input_schema",
                )
            )
    if tool.input_schema and tool.input_schema.get("type", "object") != "object":
        problems.append(Problem(f"{path}.input_schema.type", "must be 'object'"))
    problems += url_credentials(tool.url, f"{path}.url")
    problems += header_credentials(tool.headers, f"{path}.headers")
    problems += header_problems(tool.headers, f"{path}.headers")
    return problems


def _connected(servers: Sequence[McpServer], peers: Sequence[A2APeer]) -> dict[str, str]:
    """The prefixes (``<prefix>__<tool>``) the model sees the tools of ``servers`` and the
    skills of ``peers`` under, each name as written and sanitised, with whose they are."""
    owners: dict[str, str] = {}
    for server in servers:
        for prefix in (server.name, sanitise_tool_name(server.name)):
            owners.setdefault(prefix, f"tools of MCP server {server.name!r}")
    for peer in peers:
        for prefix in (peer.name, sanitise_tool_name(peer.name)):
            owners.setdefault(prefix, f"skills of A2A peer {peer.name!r}")
    return owners


def _check_tools(
    tools: Sequence[CodeTool | HttpTool],
    connected: Mapping[str, str],
    context: ValidationContext,
    prefix: str,
) -> list[Problem]:
    problems = []
    for tool in tools:
        name = tool.name
        path = f"{prefix}tools[{name}]"
        if name in RESERVED_TOOL_NAMES:
            problems.append(Problem(path, f"name {name!r} is taken by a built-in tool"))
        owner = connected.get(name.split(MCP_TOOL_SEPARATOR, 1)[0])
        if MCP_TOOL_SEPARATOR in name and owner is not None:
            problems.append(Problem(path, f"name {name!r} collides with the {owner}"))
        if isinstance(tool, HttpTool):
            problems.extend(_check_http_tool(tool, path))
        elif name not in context.registered_tools:
            problems.append(
                Problem(path, f"code tool {name!r} is not registered in the ToolRegistry")
            )
    return problems


def _check_mcp(
    servers: Sequence[McpServer], context: ValidationContext, prefix: str
) -> list[Problem]:
    problems = []
    for server in servers:
        path = f"{prefix}mcp_servers[{server.name}]"
        problems += endpoint_problems(server.url, f"{path}.url")
        problems += url_credentials(server.url, f"{path}.url")
        problems += allow_problems(server.allow, f"{path}.allow")
        if server.oauth is not None:
            problems += oauth_problems(server, path)
        if server.optional:
            continue
        if context.mcp_connections is not None:
            key = mcp_connection_key(server)
            if key not in context.mcp_connections:
                problems.append(Problem(path, "the connection check did not reach this server"))
            elif (error := context.mcp_connections[key]) is not None:
                problems.append(
                    Problem(path, f"server did not answer at publish and is not optional: {error}")
                )
        elif context.reachable_mcp_servers and server.name not in context.reachable_mcp_servers:
            problems.append(Problem(path, "server did not answer at publish and is not optional"))
    return problems


def _check_a2a(peers: Sequence[A2APeer], prefix: str) -> list[Problem]:
    problems = []
    for peer in peers:
        path = f"{prefix}a2a_peers[{peer.name}].url"
        problems += url_credentials(peer.url, path) + peer_url_problems(peer.url, path)
        problems += allow_problems(peer.allow, f"{prefix}a2a_peers[{peer.name}].allow")
    return problems


def _check_model(model: str, path: str, context: ValidationContext) -> list[Problem]:
    if not model.strip():  # a blank compaction.model was taken as left out: the agent's
        return [Problem(path, f"{model!r} names no model: give a model id, or leave it out")]
    if context.known_models and model not in context.known_models:
        return [Problem(path, f"unknown model {model!r}")]
    return []


def _spawn_tool_problem(spec: AgentSpec, tool: str) -> str:
    """Why ``tool`` may not stand in ``spec``'s spawn envelope: a spawned child holds only
    its parent's code and HTTP tools (``workflows.features`` composes it with no MCP
    servers), so an MCP tool's name there would grant nothing."""
    server = tool.split(MCP_TOOL_SEPARATOR, 1)[0]
    if MCP_TOOL_SEPARATOR in tool and server in {s.name for s in spec.mcp_servers}:
        return (
            f"{tool!r} is a tool of MCP server {server!r}: a spawned child holds only its "
            "parent's code and HTTP tools"
        )
    return f"{tool!r} is not one of this agent's own tools"


def _validate_agent(
    spec: AgentSpec,
    context: ValidationContext,
    prefix: str,
    depth: int,
    chain: tuple[DepthCap, ...],
) -> list[Problem]:
    """Validate one agent. ``depth`` is its delegation depth and ``chain`` every agent from
    the root to it (itself last), as the runtime's ``delegate`` checks them."""
    problems: list[Problem] = []
    connected = _connected(spec.mcp_servers, spec.a2a_peers)
    problems += _check_tools(spec.tools, connected, context, prefix)
    problems += _check_mcp(spec.mcp_servers, context, prefix)
    problems += _check_a2a(spec.a2a_peers, prefix)
    problems += _check_model(spec.model.model, f"{prefix}model.model", context)
    for index, fallback in enumerate(spec.model.fallbacks):
        problems += _check_model(fallback, f"{prefix}model.fallbacks[{index}]", context)
    if spec.compaction is not None and spec.compaction.model is not None:
        problems += _check_model(spec.compaction.model, f"{prefix}compaction.model", context)

    skill_names = {skill.name for skill in spec.skills}
    for skill in spec.skills:
        for link in _SKILL_LINK.finditer(skill.body):
            if link.group(1) not in skill_names:
                problems.append(
                    Problem(
                        f"{prefix}skills[{skill.name}].body",
                        f"link {link.group(0)} names no skill of this agent",
                    )
                )

    if spec.spawn is not None:
        envelope = spec.spawn
        path = f"{prefix}spawn"
        granted = narrow(envelope.tools, permitted=[tool.name for tool in spec.tools])
        for tool in envelope.tools:
            if tool not in granted:
                problems.append(Problem(f"{path}.tools", _spawn_tool_problem(spec, tool)))
        for index, model in enumerate(envelope.models):
            problems += _check_model(model, f"{path}.models[{index}]", context)
        too_deep = spawn_depth_problem(spec, depth, chain)
        if too_deep is not None:
            problems.append(Problem(f"{path}.max_depth", too_deep))

    above = chain[:-1]
    for sub in spec.subagents:
        path = f"{prefix}subagents[{sub.name}]"
        refusal = subagent_depth_refusal(depth + 1, above, spec, sub.spec)
        if refusal is not None:
            problems.append(Problem(path, refusal))
            continue
        _, left_out = narrow_subagent(spec, sub.spec)
        for left in left_out:
            if left.reason == different_definition(left.what, left.name):
                field = {"tool": "tools", "mcp_server": "mcp_servers", "a2a_peer": "a2a_peers"}[
                    left.what
                ]
                problems.append(Problem(f"{path}.spec.{field}[{left.name}]", left.reason))
        problems += _validate_agent(
            sub.spec, context, f"{path}.spec.", depth + 1, child_chain(above, spec, sub.spec)
        )
    return problems


def _validate_workflow(
    spec: WorkflowSpec, context: ValidationContext, prefix: str, nesting: int
) -> list[Problem]:
    problems: list[Problem] = []
    problems += _check_tools(spec.tools, _connected(spec.mcp_servers, ()), context, prefix)
    problems += _check_mcp(spec.mcp_servers, context, prefix)
    problems += unread_workflow_fields(spec, prefix)
    for step in spec.steps:
        path = f"{prefix}steps[{step.name}]"
        if isinstance(step, ToolStep):
            problems += tool_step_problems(step, spec, path)
        elif isinstance(step, AgentStep):
            # A step's agent is not delegated: it roots a chain of its own, at depth 0
            # (the WorkflowRun starts it so).
            problems += _validate_agent(
                step.spec, context, f"{path}.spec.", 0, (own_cap(step.spec),)
            )
        elif isinstance(step, WorkflowStepRef):
            if nesting + 1 > MAX_NESTING_DEPTH:
                problems.append(
                    Problem(path, f"workflow nesting exceeds {MAX_NESTING_DEPTH} levels")
                )
                continue
            problems += _validate_workflow(step.spec, context, f"{path}.spec.", nesting + 1)
    return problems


def _check_size(spec: AgentSpec | WorkflowSpec) -> list[Problem]:
    """The Spec travels whole in Temporal payloads: it must encode, and within the bound."""
    try:
        problem = tree_problem(spec.model_dump(), max_values=None)
    except ValueError as err:  # pydantic's own serialisation depth limit
        return [Problem("<root>", f"the Spec cannot be serialised: {err}")]
    if problem is not None:
        return [problem]
    size = len(canonical_bytes(spec))
    if size > MAX_SPEC_BYTES:
        return [
            Problem(
                "<root>",
                f"the Spec is {size} bytes of canonical JSON; at most {MAX_SPEC_BYTES} "
                "(1 MiB) may be published, so that it fits in a Temporal payload",
            )
        ]
    return []


def validate(
    spec: AgentSpec | WorkflowSpec, context: ValidationContext | None = None
) -> list[Problem]:
    """Every problem with ``spec`` that can be found before it runs; empty = valid.

    Structural rules (bounds, names, unique entries, literal ``Authorization`` headers) are
    enforced by the models themselves when the Spec is built; this finds what needs the
    whole tree or the world: registrations, models, reachability, links, depths, name
    collisions, templates, other credentials written as literals in URLs and headers
    instead of named, an HTTP tool's headers no request can carry as written
    (``specs._headers``), a WorkflowSpec's limits and suspension fields a WorkflowRun does
    not read (``specs._workflow_fields``), every field the runtime does not implement yet
    (``unsupported_features``), and a Spec whose canonical JSON cannot be encoded or is
    larger than ``MAX_SPEC_BYTES``.
    """
    context = context or ValidationContext()
    if isinstance(spec, AgentSpec):
        problems = _validate_agent(spec, context, "", 0, (own_cap(spec),))
    else:
        problems = _validate_workflow(spec, context, "", 0)
    return problems + unsupported_features(spec) + _check_size(spec)
