"""Threads: a Run that continues an earlier Run's conversation.

A Run started with ``RunInput.thread`` (a ``next_run`` steer of an earlier Run, or a caller
naming a thread) puts the earlier conversation's last ``max_history_records`` messages
first in its first model call (the model activity builds the node, ``ThreadContext``);
every later call continues the Run's own chain, so only a call with no conversation yet
carries it. A continued execution already has its conversation: it carries nothing.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import ModelCallInput, ThreadContext
    from psych_runtime.workflows.kernel._feature import Feature, RunView


class Threads(Feature):
    """The earlier conversation the first model call puts first."""

    name = "threads"

    def __init__(self, run: RunView) -> None:
        super().__init__(run)
        self.thread: ThreadContext | None = None

    def admit(self) -> None:
        run = self.run
        thread, limit = run.input.thread, run.limits.max_history_records
        if thread is not None and run.input.carry is None and limit > 0:
            self.thread = ThreadContext(head=thread.head, max_messages=limit)

    def into_call(self, call: ModelCallInput) -> ModelCallInput:
        if self.thread is None or call.context_ref is not None:
            return call
        return call.model_copy(update={"thread": self.thread})
