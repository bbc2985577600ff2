"""One patch marker per Run instead of one per change: the Run's shape.

Every ``workflow.patched(id)`` a Run asks records a marker event, and the Temporal server
(through the SDK core) upserts the ``TemporalChangeVersion`` search attribute after it: two
events and a visibility write per patch per Run. A new Run asked three of them before its
first model call. Now it asks one, ``SHAPE_PATCH``, first thing in ``RunBase._run``; a Run
that recorded it takes every change in ``SHAPE_1`` without asking (``has``). A Run recorded
before it (no marker) answers each patch as it always did, marker by marker, so every
committed history replays unchanged. A change made later is a new patch id outside
``SHAPE_1`` (asked as usual), until a new shape gathers it.
"""

from __future__ import annotations

from temporalio import workflow

SHAPE_PATCH = "psych-shape-1"
"""Marks a Run started by code that has every change in ``SHAPE_1``."""

SHAPE_1 = frozenset(
    {
        "psych-workflow-id",
        "psych-mcp",
        "psych-tasks",
        "psych-unsupported-fields",
        "psych-roles",
        "psych-roles-opt-in",
        "psych-model-v2",
        "psych-threads",
        "psych-continue-as-new",
        "psych-depth-chain",
        "psych-subagent-totals",
        "psych-step-depth",
        "psych-local-catalog",
        "psych-slim-payloads",
    }
)
"""The patch ids a Run with ``SHAPE_PATCH`` has without asking (every one before it)."""


def record_shape() -> bool:
    """Ask ``SHAPE_PATCH`` (once, at the start of the Run): True for a Run that has it."""
    return workflow.patched(SHAPE_PATCH)


def has(patch: str) -> bool:
    """``workflow.patched(patch)``, answered without a marker for a Run of ``SHAPE_1``.

    The running Run says whether it recorded ``SHAPE_PATCH`` (``RunBase._shaped``); any
    other workflow asks the patch itself.
    """
    if patch in SHAPE_1 and getattr(workflow.instance(), "_shaped", False) is True:
        return True
    return workflow.patched(patch)
