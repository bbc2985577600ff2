"""psych_runtime.activities.hooks: tool-call hooks.

``Hooks``, an immutable chain of ``Hook(stage, pattern, action)`` every tool call runs
through (``Interception``: pre hooks, the call, post or on_error hooks), and
``CommandHook``, a hook run as a subprocess.
"""

from psych_runtime.activities.hooks._calls import (
    STAGES,
    Deny,
    HookAction,
    HookCall,
    HookStage,
    check_pattern,
)
from psych_runtime.activities.hooks._command import DEFAULT_TIMEOUT_SECONDS, CommandHook
from psych_runtime.activities.hooks._hooks import Hook, Hooks, Interception

__all__ = [
    "CommandHook",
    "DEFAULT_TIMEOUT_SECONDS",
    "Deny",
    "Hook",
    "HookAction",
    "HookCall",
    "HookStage",
    "Hooks",
    "Interception",
    "STAGES",
    "check_pattern",
]
