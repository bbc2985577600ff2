"""Activity names (API: a changed signature gets a new name) and the worker roles whose
task queues they are scheduled on."""

from __future__ import annotations

from psych_runtime.specs import SpecError

MODEL_CALL = "psych.model.call"
"""One model call: takes ``SlimModelCallInput``, returns ``SlimModelCallResult``
(``_slim_payloads.py``): only what the other side cannot derive, refs in their compact
wire form."""
MODEL_COMPACT = "psych.model.compact"
"""The summariser call of compaction (``activities/model/_compaction.py``)."""
TOOL_CATALOG = "psych.tool.catalog"
TOOL_RUN_CODE = "psych.tool.run_code"
"""One code tool call: takes ``SlimCodeToolCall``, returns ``SlimToolOutcome``."""
TOOL_SEND_HTTP = "psych.tool.send_http"
"""One HTTP tool call: takes ``SlimHttpToolCall``, returns ``SlimToolOutcome``."""
TOOL_READ_OUTPUT = "psych.tool.read_output"
TOOL_STORE_RESULT = "psych.tool.store_result"
"""Stores a result the workflow made (a child's answer) as a tool activity stores its own:
shown whole within ``large_result_bytes``, else a handle plus a preview."""
TOOL_FINISH_EXTERNAL = "psych.tool.finish_external"
"""The payload that completed a code tool's ``ExternalWait``, through the call's post hooks
and stored as any tool result (``ExternalResultInput`` -> ``ToolOutcome``)."""
POLICY_DECIDE = "psych.policy.decide"
MCP_LIST_TOOLS = "psych.mcp.list_tools"
"""Run as a local activity at every turn boundary (its result is a marker in history)."""
MCP_SEARCH_TOOLS = "psych.mcp.search_tools"
MCP_AUTHORIZE = "psych.mcp.authorize"
"""Exchanges the authorization code a person's consent brought for a token (``_consent``)."""
TOOL_MCP = "psych.tool.mcp"
A2A_CARDS = "psych.a2a.cards"
"""Run as a local activity at every turn boundary of a Run with A2A peers."""
TOOL_A2A = "psych.tool.a2a"
"""One message sent to an A2A peer (a skill offered as a tool)."""
A2A_POLL = "psych.a2a.poll"
"""Reads a peer task left working, on a workflow timer (the Run waits durably)."""
A2A_CANCEL = "psych.a2a.cancel"
"""Asks a peer to cancel the task a Run settling (aborted, expired) still waited on."""
VERSION_PUBLISH = "psych.version.publish"
"""Publishes a spawned child's composed Spec through the worker's VersionStore."""

ACTIVITY_NAMES = (
    A2A_CANCEL,
    A2A_CARDS,
    A2A_POLL,
    MCP_AUTHORIZE,
    MCP_LIST_TOOLS,
    MCP_SEARCH_TOOLS,
    MODEL_CALL,
    MODEL_COMPACT,
    POLICY_DECIDE,
    TOOL_A2A,
    TOOL_CATALOG,
    TOOL_FINISH_EXTERNAL,
    TOOL_MCP,
    TOOL_READ_OUTPUT,
    TOOL_RUN_CODE,
    TOOL_SEND_HTTP,
    TOOL_STORE_RESULT,
    VERSION_PUBLISH,
)

# --- worker roles (which task queue each activity is scheduled on) ------------------------

WORKFLOWS_ROLE = "workflows"
MODEL_ROLE = "model"
TOOLS_ROLE = "tools"
ROLES = (WORKFLOWS_ROLE, MODEL_ROLE, TOOLS_ROLE)
"""The worker roles, each polling its own task queue (``role_task_queue``)."""

ACTIVITY_ROLES: dict[str, str] = {
    # A local activity runs on the worker that runs the workflow task, whatever its queue.
    MCP_LIST_TOOLS: WORKFLOWS_ROLE,
    A2A_CARDS: WORKFLOWS_ROLE,
    A2A_POLL: TOOLS_ROLE,
    A2A_CANCEL: TOOLS_ROLE,
    MCP_SEARCH_TOOLS: TOOLS_ROLE,
    MCP_AUTHORIZE: TOOLS_ROLE,
    MODEL_CALL: MODEL_ROLE,
    MODEL_COMPACT: MODEL_ROLE,
    POLICY_DECIDE: TOOLS_ROLE,
    TOOL_A2A: TOOLS_ROLE,
    TOOL_CATALOG: TOOLS_ROLE,
    TOOL_FINISH_EXTERNAL: TOOLS_ROLE,
    TOOL_MCP: TOOLS_ROLE,
    TOOL_READ_OUTPUT: TOOLS_ROLE,
    TOOL_RUN_CODE: TOOLS_ROLE,
    TOOL_SEND_HTTP: TOOLS_ROLE,
    TOOL_STORE_RESULT: TOOLS_ROLE,
    VERSION_PUBLISH: TOOLS_ROLE,
}
"""The role whose workers run each activity: the workflow schedules it on that role's task
queue, and a worker of the role registers it."""


def role_task_queue(base: str, role: str) -> str:
    """The task queue of ``role`` in the fleet named ``base`` (``PSYCH_TASK_QUEUE``): the
    base itself for workflows, ``<base>-model`` and ``<base>-tools`` for the others."""
    if role not in ROLES:
        raise SpecError(f"unknown worker role {role!r}: one of {', '.join(ROLES)}")
    return base if role == WORKFLOWS_ROLE else f"{base}-{role}"
