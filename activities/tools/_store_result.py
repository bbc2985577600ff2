"""``psych.tool.store_result``: a result the workflow made itself, stored as a tool
activity stores its own outcome.

A child Run's answer is the result of ``delegate`` (and, with its siblings', of
``wait_children``): the workflow has it whole, but only an activity can store it. Stored
through ``store_outcome``, it reaches the model as every tool result does: whole within
``large_result_bytes``, else a handle plus a preview that ``read_tool_output`` reads on
(the handle is the Run's own: its ``tool_call_finished`` record names it).
"""

from __future__ import annotations

import time

from temporalio import activity

from psych_runtime.activities._activity_class import ActivityClass
from psych_runtime.activities.blobs import BlobStore
from psych_runtime.activities.contract import TOOL_STORE_RESULT, StoreResultInput, ToolOutcome
from psych_runtime.activities.tools._outcomes import store_outcome


class StoredResults(ActivityClass):
    """The ``psych.tool.store_result`` activity, a base of ``ToolActivities`` (its
    BlobStore is theirs)."""

    blobs: BlobStore

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
