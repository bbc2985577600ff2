"""A child the Run's own limits refuse: the result of a ``delegate`` or ``spawn`` call that
starts nothing because of ``spawn.max_alive``, ``spawn.max_depth`` or a
``max_delegation_depth`` on the child's chain.

Such a call is the Run refusing, not the tool failing, so its error counts toward no
failure streak (as a call past ``max_fanout_per_turn``, ``_fanout.over_fanout``, or past
``max_tool_calls_per_turn`` does not). Counted, a model that asked seven times had the
tool withheld at the default ``failure_streak_threshold`` (3) and the Run failed at the
default hard stop (6), though nothing had failed.

A Run recorded before the patch ``psych-limit-refusals-no-failure`` counted them. The patch
is asked with the refusal only, so only a Run that refuses a child records its marker; it
is not ``psych-fanout-no-failure``: Runs recorded since that patch with its marker and
later a refusal of these limits counted the latter, and would replay otherwise.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ToolCallRequest
    from psych_runtime.workflows.kernel._tool_result import ToolResult, inline


def refused_child(call: ToolCallRequest, why: str) -> ToolResult:
    """The result of ``call``, a child the Run's limits refuse (``why``): an error the model
    reads, and no failure of its tool (see the module)."""
    counts = False if workflow.patched("psych-limit-refusals-no-failure") else None
    return inline(call, "error", why, counts=counts)
