"""One ``tools/call`` round on a leased session, with no request sent after its answer.

The SDK's ``ClientSession.call_tool`` checks a successful result against the tool's output
schema and, when this session has not listed the tool yet, first sends ``tools/list``:
after the answer arrived. A listing failing there (the session broken meanwhile by another
lease, a listing over the egress bound) failed a call the server had run and answered, as
one that may have run or as an error outcome. So a round lists the tool first when its
session has not (a failure there leaves the call unsent, which ``Round.sent`` tells the
caller), sends the request through the session's ``send_request`` (what ``call_tool``
sends, without the check), and checks the answer against the schema that listing holds,
sending nothing: the SDK's ``validate_tool_result``, called only when the session's
listing holds the tool, so it has nothing to list. A tool no page of the server lists is
sent unchecked, as the SDK leaves it (``docs/decisions/activities.md``, Sessions).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import mcp_types
from mcp.client import Client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter

from psych_runtime.activities.contract import McpInputAnswers
from psych_runtime.activities.mcp._client import describe_error
from psych_runtime.activities.mcp._input import responses
from psych_runtime.activities.mcp._lease import unless_told

_log = logging.getLogger(__name__)

_RELIST_PAGES = 100
"""Bound on the pages listed to find a tool (as the SDK's own client bounds its re-list)."""

_Answer = mcp_types.CallToolResult | mcp_types.InputRequiredResult
_ANSWER = TypeAdapter[_Answer](_Answer)
"""What a ``tools/call`` answers (the SDK's ``call_tool`` reads it the same way; this
client takes part in no extension that adds other results)."""


@dataclass
class Round:
    """How far a round got, for its caller to read when it failed."""

    sent: bool = False
    """Its ``tools/call`` was given to the session, and not refused unrun since
    (``HEADER_MISMATCH``). Before, only listings were sent, or the server refused every
    ``tools/call`` sent, so a failure left nothing of the call (the tool did not run)."""
    refusal: MCPError | None = None
    """The ``HEADER_MISMATCH`` refusal after which listing the tool again failed: what
    the round's failure is (``failure``), the listing's only why it was not resent."""

    def failure(self, said: str) -> str:
        """What a failed round says, ``said`` naming the failure raised: the refusal first
        when the failure was the re-list's after it (12-07: only the listing's error)."""
        if self.refusal is None:
            return said
        return (
            f"{describe_error(self.refusal)} (the call was refused unrun; listing its tool "
            f"again to resend it failed: {said})"
        )


def listed(client: Client, tool: str) -> bool:
    """Whether the session's own listings hold ``tool``: the SDK's record of the output
    schemas it listed, which its ``validate_tool_result`` reads (no public name shows it)."""
    return tool in client.session._tool_output_schemas


async def list_until(client: Client, tool: str) -> None:
    """List the server's tools on ``client``, page by page, until a page names ``tool``
    (or the last page), so that the session holds its schema and header annotations."""
    cursor: str | None = None
    for _ in range(_RELIST_PAGES):
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        cursor = page.next_cursor
        if cursor is None or any(listing.name == tool for listing in page.tools):
            return


def refused(client: Client, err: MCPError) -> bool:
    """Whether ``err`` is a 2026-07-28 server refusing a request with ``HEADER_MISMATCH``:
    its transport checks a request's headers against its body before dispatching it, so a
    ``tools/call`` so refused ran no tool."""
    return (
        err.code == mcp_types.HEADER_MISMATCH
        and client.protocol_version in MODERN_PROTOCOL_VERSIONS
    )


async def call_round(
    client: Client,
    tool: str,
    arguments: dict[str, Any],
    progress: ProgressFnT,
    answers: McpInputAnswers | None,
    tracked: Round,
) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
    """One ``tools/call`` round: the first request, or a retry carrying ``answers``.

    Sent as the session's ``call_tool`` with ``allow_input_required`` sends it
    (``Client.call_tool`` would answer the server's input requests itself, through
    callbacks, inside the call), the tool listed first as the module docstring says. On a
    2026-07-28 session a ``HEADER_MISMATCH`` (the tool's listing is stale on this client)
    re-lists and resends once, as ``Client.call_tool`` does. The server refused that
    request unrun, so ``tracked.sent`` is False again until the resend (and after it, when
    the resend is refused too).

    A request of the round failing on an SSE session (its OAuth flow) is never answered
    there: the round stops at once with the failure (``_lease.unless_told``).

    Raises:
        BadAnswer: ``answers`` do not fit the server's requests (nothing was sent).
        RuntimeError: a successful result does not fit the tool's output schema (the
            SDK's words).
        RequestFailed, StoreUnavailable: a request of the round failed on an SSE session
            (``_pool.py``).
    """
    return await unless_told(_round(client, tool, arguments, progress, answers, tracked))


async def _round(
    client: Client,
    tool: str,
    arguments: dict[str, Any],
    progress: ProgressFnT,
    answers: McpInputAnswers | None,
    tracked: Round,
) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
    sent = None if answers is None else responses(answers)
    state = None if answers is None else answers.request_state
    if not listed(client, tool):
        await list_until(client, tool)
    request = mcp_types.CallToolRequest(
        params=mcp_types.CallToolRequestParams(
            name=tool, arguments=arguments, input_responses=sent, request_state=state
        )
    )

    async def send() -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        tracked.sent = True
        try:
            return await client.session.send_request(request, _ANSWER, progress_callback=progress)
        except MCPError as err:
            if refused(client, err):
                # The server's answer to this request, given before any tool ran: nothing
                # of the call is left on the server (the request was answered, so it has
                # nothing to cancel either).
                tracked.sent = False
            raise

    try:
        result = await send()
    except MCPError as mismatch:
        if not refused(client, mismatch):
            raise
        try:
            await list_until(client, tool)  # its failure leaves the call unsent, as before it
        except Exception:
            tracked.refusal = mismatch
            raise
        result = await send()
    if isinstance(result, mcp_types.CallToolResult) and not result.is_error:
        if listed(client, tool):
            # Sends nothing: it lists only a tool the session's listing lacks.
            await client.session.validate_tool_result(tool, result)
        else:
            _log.warning("MCP tool %r is not listed by its server: its result is unchecked", tool)
    return result
