"""What a subagent may start with: its depth chain and its tools, compared by definition.

The validator and the runtime's ``delegate`` both call these, so a tree that validates runs
the same way and a Version that skipped publishing is narrowed (and refused) by the same
rules, with the same words (SEMANTICS "Limits", "Access narrowing").

Pure and deterministic, so the workflow calls them as the validator does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from psych_runtime.specs._depth import DepthCap, depth_refusal
from psych_runtime.specs._models import AgentSpec


class LeftOut(BaseModel):
    """A tool or MCP server a subagent asked for and does not get."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    what: Literal["tool", "mcp_server"]
    name: str
    reason: str
    """Why, in the words the validator uses for the same Spec."""


def own_cap(spec: AgentSpec) -> DepthCap:
    """``spec``'s entry on a delegation chain."""
    return (spec.name, spec.limits.max_delegation_depth)


def child_chain(
    above: Sequence[DepthCap], parent: AgentSpec, child: AgentSpec
) -> tuple[DepthCap, ...]:
    """The chain a child of ``parent`` is checked against: every agent above the parent
    (``above``, root first), the parent, then the child itself."""
    return (*above, own_cap(parent), own_cap(child))


def subagent_depth_refusal(
    depth: int, above: Sequence[DepthCap], parent: AgentSpec, child: AgentSpec
) -> str | None:
    """Why ``child`` may not start at ``depth`` below ``parent`` (None when it may)."""
    return depth_refusal(depth, child_chain(above, parent, child))


def different_definition(what: Literal["tool", "mcp_server"], name: str) -> str:
    """The problem of a child entry whose name the parent uses for another definition."""
    noun = "tool" if what == "tool" else "MCP server"
    return (
        f"{noun} {name!r} is not the same definition as the parent's {noun} of that name, "
        "so the subagent may not use it"
    )


def not_the_parents(what: Literal["tool", "mcp_server"], name: str) -> str:
    """Why a child entry the parent does not have at all is left out."""
    noun = "tool" if what == "tool" else "MCP server"
    return f"{noun} {name!r} is not one of the parent's {noun}s, so the subagent may not use it"


def narrow_subagent(parent: AgentSpec, child: AgentSpec) -> tuple[AgentSpec, tuple[LeftOut, ...]]:
    """``child`` with only the tools and MCP servers its parent has in the same definition.

    A name is not enough: an HttpTool with the parent's name and another URL, method or
    credential, or a CodeTool with other settings, is another tool (the whole model is
    compared); MCP servers likewise.

    Returns:
        The narrowed Spec (``child`` itself when nothing is left out) and what was left out.
    """
    parent_tools = {tool.name: tool for tool in parent.tools}
    parent_servers = {server.name: server for server in parent.mcp_servers}
    left: list[LeftOut] = []
    tools = []
    for tool in child.tools:
        mine = parent_tools.get(tool.name)
        if mine == tool:
            tools.append(tool)
        else:
            reason = not_the_parents if mine is None else different_definition
            left.append(LeftOut(what="tool", name=tool.name, reason=reason("tool", tool.name)))
    servers = []
    for server in child.mcp_servers:
        theirs = parent_servers.get(server.name)
        if theirs == server:
            servers.append(server)
        else:
            reason = not_the_parents if theirs is None else different_definition
            left.append(
                LeftOut(
                    what="mcp_server", name=server.name, reason=reason("mcp_server", server.name)
                )
            )
    if not left:
        return child, ()
    narrowed = child.model_copy(update={"tools": tuple(tools), "mcp_servers": tuple(servers)})
    return narrowed, tuple(left)
