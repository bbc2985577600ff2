"""Delegation depth: the one rule the validator and the runtime both apply.

Depth is absolute and monotone: the root Run is depth 0, a delegated or spawned child is
its parent's depth + 1, and a resumed or continued child keeps the depth it was started
with. A child may start only when its depth is within the ``max_delegation_depth`` of every
agent on its chain, itself included (SEMANTICS "Limits").

Pure and deterministic, so the workflow calls it as the validator does.
"""

from __future__ import annotations

from collections.abc import Sequence

DepthCap = tuple[str, int]
"""``(agent name, its limits.max_delegation_depth)``: one agent on a delegation chain."""


def depth_refusal(depth: int, chain: Sequence[DepthCap]) -> str | None:
    """Why a child at ``depth`` may not start, or None when it may.

    Args:
        depth: the child's depth (its parent's + 1).
        chain: every agent from the root to the child itself, root first, each with its
            ``max_delegation_depth``.

    Returns:
        The refusal naming the first agent on the chain whose bound the depth exceeds.
    """
    for name, cap in chain:
        if depth > cap:
            return f"delegation depth {depth} exceeds max_delegation_depth {cap} of agent {name!r}"
    return None
