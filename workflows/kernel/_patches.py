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

TAKEN_WITH_OUTPUTS_BOUNDED = frozenset(
    {
        "psych-a2a-cancel-asked-peer-task",
        "psych-a2a-poll-through-failures",
        "psych-a2a-pushed-read-through-failures",
    }
)
"""On-path patches of the release that added ``psych-workflow-outputs-bounded``: a Run that
asked it at its start takes them without asking (``RunBase.patched``). Some are reached
right after a local activity resolves (a Run settling as a local call of its turn ends),
where ``workflow.patched`` may answer otherwise on replay; a Run recorded before asks."""


@dataclass(frozen=True)
class StartPatches:
    unpermitted_told: bool
    """What the model reads of a tool the tenant's permits refuse is true across
    continue-as-new (``psych-unpermitted-told``): the note of a tool withdrawn mid-Run says
    it is offered again only if its permit is given back (before: "withdrawn for the rest
    of this Run", yet a continued execution's catalogue offers a permit given back), and a
    call of a code or HTTP tool of the Spec the execution's catalogue left out (the permits
    refuse it) is denied as not permitted, where it read as an unknown tool's (an error,
    counted toward the tool's failure streak). The note follows a tool call, which may be a
    local activity, so it is asked here. Such a Run also has every change of the patches
    below."""
    cards_settle: bool
    """A failure of the A2A cards at a boundary settles the Run FAILED
    (``psych-a2a-cards-failure-settles``; ``features/_a2a.py``): before, a non-retryable
    failure of that local activity reached the Run as the activity's own error and failed
    the workflow unsettled (no ``RunSettled``). (One that timed out on its last attempt
    settles FAILED whether the Run asked this or not: live it is an ``ActivityError``,
    which the old code caught too, and its marker replays as the bare ``TimeoutError``,
    read the same; likewise a workflow tool step's MCP discovery, ``features/_mcp.py``.)
    Such a Run also has every change of the patches below."""
    outputs_bounded: bool
    """A workflow's outputs are bounded (``psych-workflow-outputs-bounded``): a step whose
    output would take them past ``runs/_step_output.MAX_OUTPUTS_BYTES`` fails the Run,
    which before went on until its result passed Temporal's payload limit and was never
    settled. The check follows a tool step, often a local activity, so it is asked here. An
    AgentRun has no outputs, and asks it as every Run does: it records this marker. Such a
    Run also has every change of the patches below."""
    children_bounded: bool
    """A child Run is bounded as its parent is (``psych-children-bounded``): a subagent
    gets only the A2A peers its parent has in the same definition (as its tools and MCP
    servers), ``delegate`` refuses a call without a task (or an agent named by a
    non-string) instead of starting a child on an empty message, and a next Run keeps the
    ``spawn_depth`` of the Run it follows. Such a Run also has every change of the
    patches below."""
    batch_accounting: bool
    """Calls the Run itself does not run (past ``max_tool_calls_per_turn`` or ``max_steps``)
    count toward no tool's failure streak, and a Run force-settled or cancelled mid-batch
    records the batch's calls that finished with their results, not left unfinished (patch
    ``psych-batch-accounting``). Such a Run also has every change of the patches below."""
    catalog_settles: bool
    """A catalogue that fails settles the Run FAILED (``_catalog.resolve``): before, a local
    catalogue's non-retryable failure reached the Run as the activity's own error and failed
    the workflow unsettled (one that timed out on its last attempt settled it FAILED live,
    and replays so either way). Such a Run also takes ``FEATURE_PATCHES`` without asking."""
    local_safe: bool
    """What the Run does after a local activity resolves is the same whichever workflow
    task the resolution reached it in (patch ``psych-local-resolution-safe``,
    ``_deadline.py``)."""

    def answers(self, patch_id: str) -> bool | None:
        """What the start answered for ``patch_id`` when it is a start patch (None: it is
        not one): asked again later, it would answer otherwise for a Run that asked a newer
        one, which stands for it without its marker. One of ``TAKEN_WITH_OUTPUTS_BOUNDED``
        is taken unasked by a Run that asked that patch, and asked by one recorded before."""
        if patch_id in TAKEN_WITH_OUTPUTS_BOUNDED:
            return self.outputs_bounded or workflow.patched(patch_id)
        return {
            "psych-unpermitted-told": self.unpermitted_told,
            "psych-a2a-cards-failure-settles": self.cards_settle,
            "psych-workflow-outputs-bounded": self.outputs_bounded,
            "psych-children-bounded": self.children_bounded,
            "psych-batch-accounting": self.batch_accounting,
            "psych-catalog-failure-settles": self.catalog_settles,
            "psych-local-resolution-safe": self.local_safe,
        }.get(patch_id)


NOT_ASKED = StartPatches(
    unpermitted_told=False,
    cards_settle=False,
    outputs_bounded=False,
    children_bounded=False,
    batch_accounting=False,
    catalog_settles=False,
    local_safe=False,
)
"""What a Run holds before its start asked (and a Run whose input was refused)."""


def ask_at_start() -> StartPatches:
    """Ask the start patches (before the Run schedules anything), newest first."""
    told = workflow.patched("psych-unpermitted-told")
    cards = told or workflow.patched("psych-a2a-cards-failure-settles")
    outputs = cards or workflow.patched("psych-workflow-outputs-bounded")
    bounded = outputs or workflow.patched("psych-children-bounded")
    accounting = bounded or workflow.patched("psych-batch-accounting")
    settles = accounting or workflow.patched("psych-catalog-failure-settles")
    local_safe = settles or workflow.patched("psych-local-resolution-safe")
    return StartPatches(told, cards, outputs, bounded, accounting, settles, local_safe)
