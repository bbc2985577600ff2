"""Worker settings read from the environment: seconds, flags, the asking policy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from psych_runtime.activities.contract import Decision
from psych_runtime.activities.tools import Policy, RulePolicy
from psych_runtime.specs import SpecError


def split_patterns(text: str) -> list[str]:
    """Comma-separated tool patterns (``PSYCH_ASK``), blanks dropped."""
    return [part.strip() for part in text.split(",") if part.strip()]


def seconds_from(name: str, env: Mapping[str, str], default: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise SpecError(f"{name}={text!r} is not a number of seconds") from None
    if not 0 <= value <= 86400:
        raise SpecError(f"{name}={text!r} must be from 0 to 86400 seconds")
    return value


def ask_policy(patterns: Sequence[str] = (), *, destructive: bool = False) -> RulePolicy:
    """A RulePolicy asking a person to approve calls of the tools ``patterns`` name (exact
    names, or a prefix ending in ``*``), and of every destructive tool with
    ``destructive``; everything else is allowed.

    Raises:
        SpecError: a pattern has a ``*`` other than at its end, or is empty.
    """
    for pattern in patterns:
        if not pattern or "*" in pattern[:-1]:
            raise SpecError(
                f"invalid tool pattern {pattern!r}: a tool name, or a prefix ending in '*'"
            )
    asking: dict[str, Decision] = {pattern: "ask" for pattern in patterns}
    return RulePolicy(tools=asking, destructive="ask" if destructive else "allow")


def describe_policy(policy: Policy) -> str | None:
    """What an asking RulePolicy asks approval for, in words (None when it never asks)."""
    if not isinstance(policy, RulePolicy):
        return f"what {type(policy).__name__} decides"
    asked = [pattern for pattern, decision in policy.tools.items() if decision == "ask"]
    asked += [f"{effect} tools" for effect, d in policy.by_effect.items() if d == "ask"]
    return ", ".join(asked) if asked else None
