"""The Policy port: allow, deny or ask (approval) for each tool call.

Most policies decide per tool, not per call: the catalog asks ``Policy.fixed`` once per
tool when a Run resolves its tools, and the workflow applies that answer to every call
with no further activity. Only tools whose ``fixed`` answer is ``None`` cost a
``psych.policy.decide`` activity per call. An exception inside the policy counts as deny.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from psych_runtime.activities._payloads import Decision, PolicyDecision, ToolInfo
from psych_runtime.specs import Scope, matches


@runtime_checkable
class Policy(Protocol):
    """Port: decides whether a tool call runs, is refused, or waits for an approval."""

    def fixed(self, tool: ToolInfo) -> PolicyDecision | None:
        """The decision for every call of ``tool``, or ``None`` if it depends on the call."""
        ...

    async def decide(
        self, scope: Scope, tool: ToolInfo, arguments: Mapping[str, Any]
    ) -> PolicyDecision:
        """The decision for one call (asked only when ``fixed`` returned ``None``)."""
        ...


class RulePolicy:
    """The default Policy: rules per tool name, then by annotation.

    Args:
        tools: decisions by tool name, exact or with a trailing ``*``; the first matching
            pattern in the mapping's order wins.
        read_only, write, destructive: decisions for tools by their annotation
            (unannotated tools are ``write``).

    ``RulePolicy()`` allows everything; ``RulePolicy(destructive="ask")`` asks a human
    before any destructive call.
    """

    def __init__(
        self,
        *,
        tools: Mapping[str, Decision] | None = None,
        read_only: Decision = "allow",
        write: Decision = "allow",
        destructive: Decision = "allow",
    ) -> None:
        self.tools = dict(tools or {})
        self.by_effect: dict[str, Decision] = {
            "read_only": read_only,
            "write": write,
            "destructive": destructive,
        }

    def fixed(self, tool: ToolInfo) -> PolicyDecision:
        """Rules never depend on arguments, so every tool gets a fixed decision."""
        for pattern, decision in self.tools.items():
            if matches(tool.name, [pattern]):
                return PolicyDecision(decision=decision, reason=f"rule for {pattern!r}")
        effect = tool.effect
        return PolicyDecision(decision=self.by_effect[effect], reason=f"{effect} tool")

    async def decide(
        self, scope: Scope, tool: ToolInfo, arguments: Mapping[str, Any]
    ) -> PolicyDecision:
        """Same as ``fixed``."""
        return self.fixed(tool)
