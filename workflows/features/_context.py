"""Per-turn context: what the worker's context providers gave a model call, as a record.

Providers run inside the model activity (``activities`` owns them); a call whose result
carries ``context`` gets a ``ContextProvided`` record of its turn, right after its
``model_call_finished``. It comes from the activity's result in history, so replay sees it
without asking a provider. No state.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.workflows.contract._records import ContextProvided
    from psych_runtime.workflows.kernel._feature import CallDone, Feature


class Context(Feature):
    """Records a model call's ``context``."""

    name = "context"

    def after_call(self, done: CallDone) -> None:
        context = done.result.context
        if context is not None:
            log = self.run.log
            log.add(ContextProvided.of(done.turn, context, **log.stamp()))
