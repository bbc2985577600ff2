"""Hook functions the settings tests name as ``tests.workers._hook_module:<name>``."""

from __future__ import annotations

from psych_runtime.activities import Deny, HookCall


def deny_everything(call: HookCall) -> Deny:
    """A pre hook that denies every call it covers."""
    return Deny(f"{call.tool} is switched off by the settings file")


def shout(call: HookCall, result: str) -> str:
    """A post hook that upper-cases the result."""
    return result.upper()


NOT_CALLABLE = 3
