"""``psych.tool.store_result``: a result the workflow made itself, stored as a tool
activity stores its own outcome; and ``psych.tool.finish_external``: the payload that
completed an external wait (a code tool's ``ExternalWait``; an A2A peer's task completed
by hand), through the call's post hooks, then stored.

A child Run's answer is the result of ``delegate`` (and, with its siblings', of
``wait_children``): the workflow has it whole, but only an activity can store it. Stored
through ``store_outcome``, it reaches the model as every tool result does: whole within
``large_result_bytes``, else a handle plus a preview that ``read_tool_output`` reads on
(the handle is the Run's own: its ``tool_call_finished`` record names it).

An external completion is the call's result arriving late: the pre hooks ran on the call
(which returned the wait), so only the post hooks run, on the payload, as on any result
(until 12-06 the payload reached the model as sent, seen by no hook).
"""

from __future__ import annotations

import time
from typing import Literal

from temporalio import activity

from psych_runtime.activities._activity_class import ActivityClass
from psych_runtime.activities.blobs import BlobStore
from psych_runtime.activities.contract import (
    TOOL_FINISH_EXTERNAL,
    TOOL_STORE_RESULT,
    CodeToolCall,
    ExternalResultInput,
    HttpToolCall,
    ReadOutputInput,
    StoreResultInput,
    ToolOutcome,
)
from psych_runtime.activities.hooks import HookCall, Hooks, Interception
from psych_runtime.activities.tools._outcomes import store_outcome


class StoredResults(ActivityClass):
    """The ``psych.tool.store_result`` and ``psych.tool.finish_external`` activities, a
    base of ``ToolActivities`` (its BlobStore and hooks are theirs), and ``_outcome``,
    every tool activity's last step."""

    blobs: BlobStore
    hooks: Hooks

    @activity.defn(name=TOOL_STORE_RESULT)
    async def store_result(self, input: StoreResultInput) -> ToolOutcome:
        """Store ``input.text`` as the ``ok`` result of call ``input.call_id``."""
        return await store_outcome(
            self.blobs,
            input.call_id,
            "ok",
            input.text,
            started=time.monotonic(),
            limit=input.large_result_bytes,
        )

    @activity.defn(name=TOOL_FINISH_EXTERNAL)
    async def finish_external(self, input: ExternalResultInput) -> ToolOutcome:
        """Run the post hooks covering ``input.tool`` on the payload, then store it as the
        call's result, stamped with what the hooks did (their effects only: the pre hooks'
        are the waiting call's)."""
        started = time.monotonic()
        plan = self.hooks.plan(
            HookCall.of(
                input.tool, input.kind, input.arguments, input.call_id, input.run_id, input.scope
            )
        )
        return await self._outcome(input, "ok", input.text, started, plan)

    async def _outcome(
        self,
        input: CodeToolCall | HttpToolCall | ReadOutputInput | ExternalResultInput,
        status: Literal["ok", "error", "wait", "denied"],
        text: str,
        started: float,
        plan: Interception,
        *,
        once: bool = False,
        unsent: bool = False,
    ) -> ToolOutcome:
        """Run the post or on_error hooks, then store the whole result and the tool
        message the model is shown, stamped with what the hooks did (every tool activity's
        last step; ``once``: a tool not safe to repeat ran; ``unsent``: its request never
        left; ``store_outcome``)."""
        status, text = await plan.after(status, text)
        limit = None if isinstance(input, ReadOutputInput) else input.large_result_bytes
        outcome = await store_outcome(
            self.blobs,
            input.call_id,
            status,
            text,
            started=started,
            limit=limit,
            once=once,
            unsent=unsent,
        )
        return plan.stamp(outcome)
