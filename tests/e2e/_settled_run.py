"""A stand-in for an ``AgentRun`` whose Run settled and whose workflow execution stays open
a while after (a real Run does so as it starts the next Runs it was sent, a short window):
it sets the ``PsychStatus`` it is given, as a Run that settles does, then waits until
Temporal closes it (an operator's terminate or cancel). Its history is that of a Run
closed there, which a test cannot otherwise reach but by a race. A module of its own with
workflow-safe imports only, since the sandbox re-imports it."""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import SearchAttributeKey

from psych_runtime.workflows import AGENT_RUN


@workflow.defn(name=AGENT_RUN)
class SettledThenOpen:
    """Sets ``PsychStatus`` to ``status``, then waits to be closed."""

    @workflow.run
    async def run(self, status: str) -> None:
        key = SearchAttributeKey.for_keyword("PsychStatus")
        workflow.upsert_search_attributes([key.value_set(status)])
        await workflow.wait_condition(lambda: False)
