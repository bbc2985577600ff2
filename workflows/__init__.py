"""psych_runtime.workflows: the deterministic Temporal workflows and the client driving them.

``AgentRun`` is the durable turn loop; the record, state, query and report types are the
workflow contract (plain JSON on the wire); ``PsychClient`` publishes Specs and drives Runs.
"""

from psych_runtime.workflows._agent_run import AgentRun
from psych_runtime.workflows._client import (
    DEFAULT_TASK_QUEUE,
    PsychClient,
    RunHandle,
    RunSummary,
    parse_workflow_id,
    workflow_id_for,
)
from psych_runtime.workflows._records import (
    AGENT_RUN,
    QUERY_RECORDS,
    QUERY_STATE,
    SEARCH_ATTRIBUTES,
    AgentRunInput,
    ModelCallFailed,
    ModelCallFinished,
    ModelCallStarted,
    Record,
    RecordsPage,
    RecordsQuery,
    RunAdmitted,
    RunResult,
    RunSettled,
    RunState,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
    ToolWithheld,
    Totals,
    TurnStarted,
)
from psych_runtime.workflows._report import ModelCallReport, RunReport, ToolCallReport

__all__ = [
    "AGENT_RUN",
    "AgentRun",
    "AgentRunInput",
    "DEFAULT_TASK_QUEUE",
    "ModelCallFailed",
    "ModelCallFinished",
    "ModelCallReport",
    "ModelCallStarted",
    "PsychClient",
    "QUERY_RECORDS",
    "QUERY_STATE",
    "Record",
    "RecordsPage",
    "RecordsQuery",
    "RunAdmitted",
    "RunHandle",
    "RunReport",
    "RunResult",
    "RunSettled",
    "RunState",
    "RunStatus",
    "RunSummary",
    "SEARCH_ATTRIBUTES",
    "ToolCallFinished",
    "ToolCallReport",
    "ToolCallStarted",
    "ToolWithheld",
    "Totals",
    "TurnStarted",
    "parse_workflow_id",
    "workflow_id_for",
]
