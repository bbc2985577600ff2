"""The patches every Run asks at its start, before its first local activity.

What follows a local activity's resolution may run a workflow task later live than on
replay (``_deadline.py``), where ``workflow.patched`` would answer otherwise: a change there
is asked here instead. Newest first, so a new Run records one marker, and a Run that asked
the newer has every change of the older (``RunBase.patched``).
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

FEATURE_PATCHES = frozenset(
    {
        "read-own-results",
        "psych-a2a-cancel-peer-task",
        "psych-fanout-counts-spawn",
        "psych-consent-forget",
    }
)
"""The features' patches older than ``psych-local-resolution-safe`` that Runs asking it
still asked (and recorded) until ``psych-catalog-failure-settles``: only a Run that asked
that one takes them without asking, or such a Run's marker would be unmatched on replay."""


@dataclass(frozen=True)
class StartPatches:
    batch_accounting: bool
    """Calls the Run itself does not run (past ``max_tool_calls_per_turn`` or ``max_steps``)
    count toward no tool's failure streak, and a Run force-settled or cancelled mid-batch
    records the batch's calls that finished with their results, not left unfinished (patch
    ``psych-batch-accounting``). Such a Run also has every change of the patches below."""
    catalog_settles: bool
    """A catalogue that fails settles the Run FAILED (``_catalog.resolve``): before, a local
    catalogue's failure reached the Run as the activity's own error and failed the workflow
    unsettled. Such a Run also takes ``FEATURE_PATCHES`` without asking."""
    local_safe: bool
    """What the Run does after a local activity resolves is the same whichever workflow
    task the resolution reached it in (patch ``psych-local-resolution-safe``,
    ``_deadline.py``)."""


def ask_at_start() -> StartPatches:
    """Ask the start patches (before the Run schedules anything)."""
    accounting = workflow.patched("psych-batch-accounting")
    settles = accounting or workflow.patched("psych-catalog-failure-settles")
    return StartPatches(
        batch_accounting=accounting,
        catalog_settles=settles,
        local_safe=settles or workflow.patched("psych-local-resolution-safe"),
    )
