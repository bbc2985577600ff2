"""The records of what a hook did to a call (``HookEffect``), bounded to travel in a tool's
result payload."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psych_runtime.activities.contract import HookEffect

DETAIL_CHARS = 4000
"""The most of an effect's detail (a denial's reason, the failure an on_error hook replaced,
why a hook failed) a record keeps: its head and its tail, saying how much was cut between
them. A command hook's stderr or an upstream's error page may run to megabytes, and the
record travels in the tool call's result, which Temporal refuses past its payload limit."""


def hook_effect(**fields: Any) -> HookEffect:
    """A ``HookEffect`` record, its ``detail`` bounded by ``DETAIL_CHARS``.

    The payload contract is imported when a hook first acts, so declaring hooks (the
    settings files, ``psych validate``) does not load it.
    """
    from psych_runtime.activities.contract import HookEffect

    detail = fields.get("detail")
    if isinstance(detail, str) and len(detail) > DETAIL_CHARS:
        half = DETAIL_CHARS // 2
        cut = len(detail) - 2 * half
        fields["detail"] = f"{detail[:half]} [... {cut} characters cut ...] {detail[-half:]}"
    return HookEffect(**fields)
