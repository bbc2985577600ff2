"""What a hook is asked and what it answers: the call (``HookCall``), a pre hook's
``Deny``, the action types, and the tool patterns hooks are chained under."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from psych_runtime.activities.hooks._command import CommandHook

if TYPE_CHECKING:
    from psych_runtime.specs import Scope

HookStage = Literal["pre", "post", "on_error"]
STAGES: tuple[HookStage, ...] = ("pre", "post", "on_error")
ToolKind = Literal["code", "http", "mcp", "a2a", "builtin"]


@dataclass(frozen=True)
class HookCall:
    """The call a hook is asked about.

    Attributes:
        tool: the tool's name as the model called it (``server__tool`` for MCP).
        kind: ``code``, ``http``, ``mcp``, ``a2a`` or ``builtin``.
        arguments: the arguments as they stand (after earlier pre hooks' rewrites), a
            copy of its own: changing it in place changes nothing (a pre hook returns
            the new arguments).
        call_id: the model's tool-call id.
        run_id: the Run's id (None for a built-in that does not carry it).
        tenant: the Run's tenant (None likewise).
        principal: who acts within the tenant, from the Run's Scope (None when not known).
        labels: the Run's Scope labels (empty when it has none, or they are not known).
    """

    tool: str
    kind: ToolKind
    arguments: Mapping[str, Any]
    call_id: str
    run_id: str | None = None
    tenant: str | None = None
    principal: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        tool: str,
        kind: ToolKind,
        arguments: Mapping[str, Any],
        call_id: str,
        run_id: str | None,
        scope: Scope,
    ) -> HookCall:
        """The call of a Run whose Scope is ``scope`` (its tenant, principal and labels; each
        hook is handed a copy of its own, ``Interception``)."""
        return cls(
            tool, kind, arguments, call_id, run_id, scope.tenant, scope.principal, scope.labels
        )


@dataclass(frozen=True)
class Deny:
    """What a pre hook returns to deny a call; the model reads ``reason``.

    Raises:
        TypeError: ``reason`` is not a str (inside a pre hook: the hook failed, and so
            denies, saying so).
    """

    reason: str

    def __post_init__(self) -> None:
        reason: object = self.reason
        if not isinstance(reason, str):
            raise TypeError(f"a Deny's reason is a str, not {reason!r}")


PreResult: TypeAlias = Deny | Mapping[str, Any] | None
"""A pre hook's answer: Deny, the new arguments, or None (let the call run as it is)."""
PreHook: TypeAlias = Callable[[HookCall], PreResult | Awaitable[PreResult]]
"""``(call) -> Deny | new arguments | None``, sync or async."""
ResultHook: TypeAlias = Callable[[HookCall, str], str | Awaitable[str | None] | None]
"""Post: ``(call, result) -> new result | None``; on_error: ``(call, error) -> result that
replaces the failure | None`` (the failure stands). Sync or async."""
HookAction: TypeAlias = PreHook | ResultHook | CommandHook


def check_pattern(pattern: str) -> str:
    """``pattern`` if it is a tool name, a ``prefix*`` or ``*``.

    Raises:
        ValueError: it is empty or has a ``*`` other than at its end.
    """
    if not isinstance(pattern, str) or not pattern or "*" in pattern[:-1]:
        raise ValueError(
            f"invalid tool pattern {pattern!r}: a tool name, a prefix ending in '*', or '*'"
        )
    return pattern


def pattern_matches(pattern: str, tool: str) -> bool:
    """Whether ``pattern`` (a name, ``prefix*`` or ``*``) covers ``tool``."""
    if pattern.endswith("*"):
        return tool.startswith(pattern[:-1])
    return pattern == tool
