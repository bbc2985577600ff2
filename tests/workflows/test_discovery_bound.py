"""A workflow step's MCP discovery (a local activity, ``psych.mcp.list_tools``) has room
for everything its defaults let it wait on: the tenant permits port's answer for each
server (asked before any server is, at most ``PERMITS_ANSWER_SECONDS``), then a server's
connection and its listing (``McpSettings``' bounds; servers are discovered at once).

From a review: the activity's 30 s were less than the port's 20 s and a server's 8 + 10 s,
so a workflow Run whose port hung on one optional server while another was slow to list
failed ("MCP discovery failed: Activity timed out") instead of leaving both out. Checked
end to end once (a hanging port and a stalling test MCP server: the Run completed with
both unavailable, 36 s); pinned here by the bounds themselves, as that wait is the
point."""

from __future__ import annotations

from datetime import timedelta

from psych_runtime.activities.contract import MCP_LIST_TOOLS
from psych_runtime.activities.mcp import McpSettings
from psych_runtime.specs import PERMITS_ANSWER_SECONDS
from psych_runtime.workflows.kernel._activity_calls import OPTIONS


def test_discovery_outlasts_the_permits_answer_then_a_servers_connection_and_listing() -> None:
    defaults = McpSettings()
    waits = timedelta(
        seconds=PERMITS_ANSWER_SECONDS
        + defaults.connect_timeout_seconds
        + defaults.list_timeout_seconds
    )
    assert OPTIONS[MCP_LIST_TOOLS].start_to_close > waits
