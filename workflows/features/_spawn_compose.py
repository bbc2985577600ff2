"""Composing a spawned child's AgentSpec from its parent and the model's request.

Pure and deterministic (no I/O, no clock), so the workflow composes in its own code: the
same parent and request always give the same Spec, hence the same Version hash. Each
function returns what it built, or the refusal the model reads (a ``str``) naming what is
wrong; nothing is started on a refusal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.specs import (
        MCP_TOOL_SEPARATOR,
        AgentSpec,
        CodeTool,
        HttpTool,
        ModelRef,
        SpawnEnvelope,
        ValidationContext,
        WorkflowSpec,
        narrow,
        sanitise_tool_name,
        validate,
    )

NAME_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_.-]{0,127}$"
"""What a child's name must match (the Spec's own name rule)."""

_SPAWNED_BY = "Spawned by "
_INHERITED_MODELS = ("model.", "spawn.models[")
"""Where a composed child's problems name its models: the parent's own (its model and
fallbacks, or one of its envelope's models, and the envelope)."""


def is_spawned(spec: AgentSpec | WorkflowSpec) -> bool:
    """Whether ``spec`` is one ``compose`` made: an agent whose description is the one a
    composed child gets (``Spawned by <parent>.``) and which holds a spawn envelope.

    A spawned child's Version is stored beside the published ones (``psych`` commands find
    it by hash), but its name and instructions are a model's: whoever reads the store by
    name (the A2A catalogue serves the newest Version of an agent's name) must skip it. A
    published Spec that copies that description and holds an envelope is skipped too.
    """
    return (
        isinstance(spec, AgentSpec)
        and spec.spawn is not None
        and spec.description is not None
        and spec.description.startswith(_SPAWNED_BY)
        and spec.description.endswith(".")
    )


@dataclass(frozen=True)
class SpawnRequest:
    """What the model asked for in one ``spawn`` call."""

    name: str
    instructions: str
    task: str
    tools: tuple[str, ...]
    model: str | None


def parse_request(arguments: dict[str, Any]) -> SpawnRequest | str:
    """``spawn``'s arguments, or what is wrong with them."""
    name, instructions, task = (
        arguments.get("name"),
        arguments.get("instructions", ""),
        arguments.get("task"),
    )
    tools, model = arguments.get("tools", []), arguments.get("model")
    if not isinstance(name, str) or not name:
        return "spawn needs a name for the child (letters, digits, _ . -)"
    if not isinstance(instructions, str):
        return "instructions must be a string (the child's system prompt)"
    if not isinstance(task, str) or not task.strip():
        return "spawn needs a task: the child's first message, self-contained"
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        return "tools must be a list of tool names"
    if model is not None and (not isinstance(model, str) or not model):
        return "model must be a model id (or left out for the default)"
    return SpawnRequest(name, instructions, task, tuple(dict.fromkeys(tools)), model)


def child_tools(
    spec: AgentSpec, envelope: SpawnEnvelope, requested: Sequence[str]
) -> tuple[CodeTool | HttpTool, ...] | str:
    """The tools requested, within the envelope and the parent's: request ∩ envelope ∩
    parent, with the parent's own definitions (an empty envelope grants every tool of the
    parent's). The child holds the parent's definition of each tool, never one by the same
    name from elsewhere, so a name cannot smuggle in another URL or function."""
    own = {tool.name: tool for tool in spec.tools}
    granted = set(narrow(own, permitted=envelope.tools or None))
    unknown = [name for name in requested if name not in own]
    outside = [name for name in requested if name in own and name not in granted]
    problems = []
    # A tool of one of the parent's MCP servers or A2A peers is the parent's tool too, as
    # the model sees it: the refusal says why it cannot pass on (the child is composed
    # without them), not that the parent lacks it.
    connected = [name for name in unknown if _connection_of(spec, name) is not None]
    if connected:
        unknown = [name for name in unknown if name not in connected]
        problems.append(
            "; ".join(f"{name!r} is a tool of {_connection_of(spec, name)}" for name in connected)
            + ": a spawned child holds only your code and HTTP tools "
            f"({', '.join(sorted(granted)) or 'none'}), never an MCP server's or an A2A peer's"
        )
    if unknown:
        problems.append(
            f"{', '.join(map(repr, unknown))} {'is' if len(unknown) == 1 else 'are'} not "
            f"among your tools ({', '.join(sorted(own)) or 'none'})"
        )
    if outside:
        problems.append(
            f"{', '.join(map(repr, outside))} {'is' if len(outside) == 1 else 'are'} outside "
            f"the spawn envelope (a child may hold: {', '.join(sorted(granted)) or 'no tools'})"
        )
    if problems:
        return "not started: " + "; ".join(problems)
    return tuple(sorted((own[name] for name in requested), key=lambda tool: tool.name))


def _connection_of(spec: AgentSpec, tool: str) -> str | None:
    """The parent's MCP server or A2A peer whose tool ``tool`` is, by its name
    (``<server>__<tool>``), or None."""
    prefix = tool.split(MCP_TOOL_SEPARATOR, 1)[0]
    if MCP_TOOL_SEPARATOR not in tool or not prefix:
        return None
    for server in spec.mcp_servers:
        if prefix in (server.name, sanitise_tool_name(server.name)):
            return f"MCP server {server.name!r}"
    for peer in spec.a2a_peers:
        if prefix in (peer.name, sanitise_tool_name(peer.name)):
            return f"A2A peer {peer.name!r}"
    return None


def child_model(spec: AgentSpec, envelope: SpawnEnvelope, requested: str | None) -> ModelRef | str:
    """The child's model: the one requested if the envelope allows it (an empty
    ``models`` allows only the parent's); none requested, the parent's when allowed, else
    the envelope's first. The parent's call parameters carry over; its fallbacks only with
    its own model (they are failover for that model, not grants)."""
    allowed = envelope.models or (spec.model.model,)
    chosen = requested
    if chosen is None:
        chosen = spec.model.model if spec.model.model in allowed else allowed[0]
    if chosen not in allowed:
        return (
            f"not started: model {chosen!r} is outside the spawn envelope "
            f"(a child may use: {', '.join(allowed)})"
        )
    if chosen == spec.model.model:
        return spec.model
    return spec.model.model_copy(update={"model": chosen, "fallbacks": ()})


def compose(
    spec: AgentSpec,
    envelope: SpawnEnvelope,
    request: SpawnRequest,
    tools: tuple[CodeTool | HttpTool, ...],
    model: ModelRef,
) -> AgentSpec | str:
    """The child's Spec, validated as ``psych publish`` validates, or why it is invalid.

    Limits, suspension expiries and answer style are the parent's; the envelope passes
    down unchanged but for its tools (every tool the child holds is within it already), so
    the child may spawn in its turn and its spawns count toward ``max_depth``. No MCP
    servers, skills or subagents: a child holds only what the request names.
    """
    try:
        child = AgentSpec(
            name=request.name,
            description=f"{_SPAWNED_BY}{spec.name}.",  # what is_spawned recognises
            instructions=request.instructions,
            model=model,
            tools=tools,
            spawn=envelope.model_copy(update={"tools": ()}),
            limits=spec.limits,
            suspension=spec.suspension,
            answer_style=spec.answer_style,
        )
    except ValidationError as err:
        details = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or 'spec'}: {error['msg']}"
            for error in err.errors(include_url=False)
        )
        return f"not started: the composed child Spec is invalid: {details}"
    # The parent's code tools were registered when it was published: the child's are those.
    registered = (tool.name for tool in tools if isinstance(tool, CodeTool))
    checked = validate(child, ValidationContext(registered_tools=registered))
    # The child's models are the parent's, checked when the parent was dispatched, under
    # the rules of then: judged again here, a rule added since (9964667: a blank model id)
    # would refuse, on replay, a child the Run started (a nondeterminism error).
    problems = [p for p in checked if not p.path.startswith(_INHERITED_MODELS)]
    if problems:
        details = "; ".join(str(problem) for problem in problems)
        return f"not started: the composed child Spec is invalid: {details}"
    return child
