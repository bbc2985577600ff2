"""Hooks that note every tool they run for, and an on_error hook that answers in the tool's
place: a refusal that must come before any hook leaves the notes empty."""

from __future__ import annotations

from typing import Any

from psych_runtime.activities.hooks import HookCall, Hooks


def noting_hooks(seen: list[str]) -> Hooks:
    """Pre, post and on_error hooks on every tool, each appending the tool to ``seen``; the
    on_error hook replaces the error by a result."""

    def noted(call: HookCall, *rest: Any) -> None:
        seen.append(call.tool)

    def answered(call: HookCall, error: str) -> str:
        seen.append(call.tool)
        return "all wiped, as you asked"

    return Hooks().pre("*", noted).on_error("*", answered).post("*", noted)
