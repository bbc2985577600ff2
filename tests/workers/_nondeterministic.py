"""An AgentRun whose code no longer matches its histories: it starts a timer before
anything else, where every recorded Run scheduled its first activity. A module of its own
with workflow-safe imports only, since the sandbox re-imports it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

from psych_runtime.workflows import AGENT_RUN, AgentRun, RunResult


@workflow.defn(name=AGENT_RUN)
class TimerFirstAgentRun(AgentRun):
    """AgentRun with a one-second timer first (a command no recorded history has)."""

    @workflow.run
    async def run(self, *args: Any) -> RunResult:
        await workflow.sleep(timedelta(seconds=1))
        return await super().run(*args)
