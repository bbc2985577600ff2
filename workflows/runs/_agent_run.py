"""AgentRun: the Temporal workflow of one agent Run.

The turn loop is the kernel's (``kernel/_turns.py``); this is the workflow definition that
runs it with every feature in ``features.FEATURES``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.workflows.contract._contract import AGENT_RUN, AgentRunInput, RunResult
    from psych_runtime.workflows.features import FEATURES
    from psych_runtime.workflows.kernel._handlers import parse_input
    from psych_runtime.workflows.kernel._turns import TurnLoop


@workflow.defn(name=AGENT_RUN)
class AgentRun(TurnLoop):
    """One agent Run (see the module docstring)."""

    KIND: ClassVar[str] = "agent"
    FEATURES = FEATURES

    @workflow.init
    def __init__(self, *args: Any) -> None:
        # Untyped so that a start with no argument or two fails the Run, not every task.
        super().__init__(parse_input(args, AgentRunInput))

    @workflow.run
    async def run(self, *args: Any) -> RunResult:
        """Run the turn loop to a settled state."""
        return await self._run()
