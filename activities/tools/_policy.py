"""The Policy port: allow, deny or ask (approval) for each tool call.

Most policies decide per tool, not per call: the catalog asks ``Policy.fixed`` once per
tool when a Run resolves its tools, and the workflow applies that answer to every call
with no further activity. Only tools whose ``fixed`` answer is ``None`` cost a
``psych.policy.decide`` activity per call. An exception inside the policy counts as deny,
and so does no answer within ``POLICY_ANSWER_SECONDS``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from temporalio import activity

from psych_runtime.activities.contract import Decision, PolicyDecision, PolicyInput, ToolInfo
from psych_runtime.specs import Scope, matches

POLICY_ANSWER_SECONDS = 20.0
"""How long ``decide`` may take before the call is denied: inside the activity's 30 s
start-to-close bound, so a policy that hangs is a deny, not a failed Run."""


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
        read_only: the decision for tools annotated read-only.
        write: the decision for tools annotated as writes (and unannotated tools).
        destructive: the decision for tools annotated destructive.

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

    def describe(self) -> str:
        """The rules as text, e.g. ``issue_refund: ask; read_only: allow, write: allow,
        destructive: ask``.

        Patterns keep their order (the first match wins), except that neighbours with the
        same decision are sorted: swapping them changes nothing, so ``--ask a --ask b``
        and ``--ask b --ask a`` describe the same policy.
        """
        runs: list[list[tuple[str, Decision]]] = []
        for pattern, decision in self.tools.items():
            if runs and runs[-1][0][1] == decision:
                runs[-1].append((pattern, decision))
            else:
                runs.append([(pattern, decision)])
        rules = [f"{pattern}: {decision}" for run in runs for pattern, decision in sorted(run)]
        effects = ", ".join(f"{effect}: {decision}" for effect, decision in self.by_effect.items())
        return "; ".join([*rules, effects])


async def ask_policy(policy: Policy, input: PolicyInput) -> PolicyDecision:
    """``policy``'s decision on one call (``psych.policy.decide``); an exception inside it,
    or no answer within ``POLICY_ANSWER_SECONDS``, counts as deny."""
    try:
        async with asyncio.timeout(POLICY_ANSWER_SECONDS):
            decision = await policy.decide(input.scope, input.tool, input.arguments)
        return PolicyDecision.model_validate(decision)
    except TimeoutError:
        activity.logger.warning("policy did not answer for %s", input.tool.name)
        return PolicyDecision(
            decision="deny",
            reason=f"the policy did not answer within {POLICY_ANSWER_SECONDS:g} s",
        )
    except Exception as err:
        activity.logger.warning("policy failed for %s", input.tool.name, exc_info=True)
        return PolicyDecision(decision="deny", reason=f"the policy failed: {err!r}")


def policy_description(policy: Policy) -> str:
    """A stable, human-readable description of what ``policy`` decides.

    Workers of one task queue must decide alike (a call asks for approval on one and runs
    unasked on another otherwise), and this text, or its ``policy_digest``, is what they
    compare. A policy describes itself with a ``describe() -> str`` method, as
    ``RulePolicy`` does; one without is described by its class's qualified name only, so
    two instances of such a class compare equal whatever they were configured with.
    """
    cls = type(policy)
    name = cls.__qualname__ if cls is RulePolicy else f"{cls.__module__}.{cls.__qualname__}"
    describe = getattr(policy, "describe", None)
    return f"{name}({describe()})" if callable(describe) else name


def policy_digest(policy: Policy) -> str:
    """Eight hex digits of the sha256 of ``policy_description(policy)``."""
    return hashlib.sha256(policy_description(policy).encode()).hexdigest()[:8]
