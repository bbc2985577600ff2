"""A stand-in for a Run's workflow that continues as new when told (a ``go`` signal), then
waits to be closed: a test of a reader waiting on a Run (``PsychClient.result``) makes it
continue as new while that reader waits. A module of its own with workflow-safe imports
only, since the sandbox re-imports it."""

from __future__ import annotations

from temporalio import workflow


@workflow.defn(name="ContinuingStandIn")
class ContinuesWhenTold:
    """Continues as new (once: ``left`` 1, then 0) on ``go``; then waits to be closed."""

    def __init__(self) -> None:
        self.go = False

    @workflow.signal(name="go")
    def told(self) -> None:
        self.go = True

    @workflow.run
    async def run(self, left: int) -> None:
        await workflow.wait_condition(lambda: self.go and left > 0)
        workflow.continue_as_new(left - 1)
