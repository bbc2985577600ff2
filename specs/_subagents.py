"""What a subagent may start with: its depth chain and its tools, MCP servers and A2A peers,
compared by definition.

The validator and the runtime's ``delegate`` both call these, so a tree that validates runs
the same way and a Version that skipped publishing is narrowed (and refused) by the same
rules, with the same words (SEMANTICS "Limits", "Access narrowing").

Pure and deterministic, so the workflow calls them as the validator does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from psych_runtime.specs._depth import DepthCap, depth_refusal
from psych_runtime.specs._models import AgentSpec

Granted = Literal["tool", "mcp_server", "a2a_peer"]
"""What a subagent's Spec names that its parent must have too."""

_NOUNS: dict[Granted, str] = {"tool": "tool", "mcp_server": "MCP server", "a2a_peer": "A2A peer"}


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class LeftOut(BaseModel):
    """A tool, MCP server or A2A peer a subagent asked for and does not get."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    what: Granted
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


def spawn_depth_problem(spec: AgentSpec, depth: int, chain: Sequence[DepthCap]) -> str | None:
    """What is wrong with the ``spawn.max_depth`` of ``spec``, an agent at ``depth`` whose
    chain (root first) ends with ``spec`` itself (None: nothing).

    Its deepest spawned child runs at ``depth + max_depth`` and takes ``spec``'s limits, so
    the runtime's ``spawn`` refuses it unless that depth is within every cap on the chain
    (``depth_refusal``, the function it calls). At depth 0 that is ``max_depth`` within
    the agent's own ``max_delegation_depth``; a subagent's envelope must also stay within
    the caps above it (until 12-07 only its own was checked, and a subagent whose every
    spawn the runtime refused was published).
    """
    envelope = spec.spawn
    if envelope is None:
        return None
    own = spec.limits.max_delegation_depth
    if envelope.max_depth > own:
        return f"{envelope.max_depth} exceeds limits.max_delegation_depth ({own})"
    reach = depth + envelope.max_depth
    refusal = depth_refusal(reach, chain)
    if refusal is None:
        return None
    return (
        f"{envelope.max_depth} at delegation depth {depth} lets a spawned child reach depth "
        f"{reach}, where spawn refuses it: {refusal}"
    )


def different_definition(what: Granted, name: str) -> str:
    """The problem of a child entry whose name the parent uses for another definition."""
    noun = _NOUNS[what]
    return (
        f"{noun} {name!r} is not the same definition as the parent's {noun} of that name, "
        "so the subagent may not use it"
    )


def not_the_parents(what: Granted, name: str) -> str:
    """Why a child entry the parent does not have at all is left out."""
    noun = _NOUNS[what]
    return f"{noun} {name!r} is not one of the parent's {noun}s, so the subagent may not use it"


def narrow_subagent(
    parent: AgentSpec, child: AgentSpec, *, a2a_peers: bool = True
) -> tuple[AgentSpec, tuple[LeftOut, ...]]:
    """``child`` with only the tools, MCP servers and A2A peers its parent has in the same
    definition.

    A name is not enough: an HttpTool with the parent's name and another URL, method or
    credential, or a CodeTool with other settings, is another tool (the whole model is
    compared); MCP servers and A2A peers likewise (a peer's skills are tools the model
    calls, so a subagent may not reach a peer its parent may not).

    Args:
        parent: the delegating agent (as narrowed itself, for a subagent).
        child: the subagent's Spec.
        a2a_peers: False keeps the child's peers whole, as Runs recorded before the patch
            ``psych-children-bounded`` did.

    Returns:
        The narrowed Spec (``child`` itself when nothing is left out) and what was left out.
    """
    left: list[LeftOut] = []
    tools = _same(parent.tools, child.tools, "tool", left)
    servers = _same(parent.mcp_servers, child.mcp_servers, "mcp_server", left)
    peers = _same(parent.a2a_peers, child.a2a_peers, "a2a_peer", left) if a2a_peers else None
    if not left:
        return child, ()
    update: dict[str, Any] = {"tools": tools, "mcp_servers": servers}
    if peers is not None:
        update["a2a_peers"] = peers
    return child.model_copy(update=update), tuple(left)


def _same(
    parents: Sequence[_Named], childs: Sequence[_Named], what: Granted, left: list[LeftOut]
) -> tuple[Any, ...]:
    """The entries of ``childs`` the parent has in the same definition; the others are
    appended to ``left`` with the reason."""
    mine = {entry.name: entry for entry in parents}
    kept = []
    for entry in childs:
        theirs = mine.get(entry.name)
        if theirs == entry:
            kept.append(entry)
        else:
            reason = not_the_parents if theirs is None else different_definition
            left.append(LeftOut(what=what, name=entry.name, reason=reason(what, entry.name)))
    return tuple(kept)
