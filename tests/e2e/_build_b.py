"""Build B's workflow code for the Worker Versioning test: AgentRun with a ``build-b``
patch marker at its start, a changed command its histories show.

A module of its own with workflow-safe imports only: the sandbox re-imports the module
that defines a workflow for every Run.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from psych_runtime.workflows import AGENT_RUN, AgentRun, RunResult

BUILD_B_MARKER = "build-b"


@workflow.defn(name=AGENT_RUN)
class AgentRunB(AgentRun):
    """Build B's AgentRun: a marker first, then the same turn loop."""

    @workflow.run
    async def run(self, *args: Any) -> RunResult:
        workflow.patched(BUILD_B_MARKER)
        return await super().run(*args)
