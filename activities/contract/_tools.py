"""The tool payloads: a Run's catalogue, what a policy is asked and answers, a code or HTTP
tool call, a hook's effect, a tool's outcome, a read of a stored result, and the text the
model reads when its arguments are not JSON."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, field_serializer

from psych_runtime.activities.contract._base import _Compact, _compact_scope, _Payload
from psych_runtime.activities.contract._conversation import ToolDefinition
from psych_runtime.activities.contract._mcp_input import McpInputRequired
from psych_runtime.activities.contract._refs import BlobRef
from psych_runtime.activities.contract._usage import Latency
from psych_runtime.specs import HttpTool, Scope


class CatalogInput(_Payload):
    """Resolve the tools a Run offers into definitions and execution facts."""

    run_id: str
    code_tools: tuple[str, ...] = ()
    """Names of code tools the Spec grants (looked up in the worker's ToolRegistry)."""
    http_tools: tuple[HttpTool, ...] = ()
    builtins: tuple[ToolDefinition, ...] = ()
    """Built-in tools the workflow offers, with their definitions."""


Decision = Literal["allow", "deny", "ask"]


class ToolInfo(_Payload):
    """What a policy knows about a tool (MCP-style annotations; None = unannotated)."""

    name: str
    kind: Literal["code", "http", "mcp", "a2a", "builtin"]
    read_only: bool | None = None
    destructive: bool | None = None

    @property
    def effect(self) -> Literal["read_only", "write", "destructive"]:
        """``destructive`` if annotated so, ``read_only`` if annotated so, else ``write``."""
        if self.destructive:
            return "destructive"
        if self.read_only:
            return "read_only"
        return "write"


class PolicyDecision(_Payload):
    """A policy's answer for a tool or for one call."""

    decision: Decision
    reason: str = ""


class CatalogEntry(_Payload):
    """Execution facts of one offered tool."""

    name: str
    """The name the model sees (for an MCP tool ``<server>__<tool>``, sanitised)."""
    kind: Literal["code", "http", "mcp", "a2a", "builtin"]
    safe_to_repeat: bool
    """False for code tools not registered idempotent, for HTTP POST/PATCH and for MCP
    tools the server marks neither read-only nor idempotent."""
    info: ToolInfo
    policy: PolicyDecision | None = None
    """The Policy's decision for every call of this tool; None = ask per call."""
    heartbeat_timeout_seconds: float | None = None
    """How long a call of this tool may go unheard by the server before it counts as lost;
    set by the worker for tools not safe to repeat, sized for the server outage a finished
    call must survive. None: the workflow's default (10 s)."""
    local_seconds: float | None = None
    """Code tools registered quick and safe to repeat (``ToolDef.local_seconds``): the
    workflow runs their calls as local activities, each attempt given this many seconds.
    None (every catalogue recorded before it existed, and a tool a hook of the worker
    covers): a normal activity."""
    server: str | None = None
    """MCP tools: the server's name in the Spec; A2A skills: the peer's."""
    tool: str | None = None
    """MCP tools: the tool's own name on the server (what ``tools/call`` is sent); A2A
    skills: the skill's id on the peer's card."""


class PolicyInput(_Payload):
    """Ask the Policy about one call of a tool whose decision depends on the call."""

    run_id: str
    call_id: str
    tool: ToolInfo
    arguments: dict[str, Any]
    scope: Scope


class ToolCatalog(_Payload):
    """The tools a Run offers: the stored definitions and what the workflow must know.

    Every Run records one (``psych.tool.catalog``), so its JSON leaves out each entry's
    fields at their defaults (read back with them). Elsewhere an entry dumps whole: the
    MCP and A2A catalogue hashes are over full entries, and a Policy sees them whole.
    """

    tools_ref: BlobRef | None
    entries: tuple[CatalogEntry, ...]

    @field_serializer("entries", when_used="json")
    def _entries(self, entries: tuple[CatalogEntry, ...]) -> list[dict[str, Any]]:
        return [entry.model_dump(mode="json", exclude_defaults=True) for entry in entries]


class CodeToolCall(_Payload):
    """Run one registered code tool."""

    run_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    large_result_bytes: int
    scope: Scope
    local_bytes: int | None = None
    """A local call's bound on its outcome (``SlimCodeToolCall.local_bytes``)."""
    local_seconds: float | None = None
    """A local call's bound on its tool's run (``SlimCodeToolCall.local_seconds``)."""

    @field_serializer("scope")
    def _scope(self, scope: Scope) -> dict[str, Any]:
        return _compact_scope(scope)


class HttpToolCall(_Payload):
    """Send one HTTP tool request."""

    run_id: str
    call_id: str
    tool: HttpTool
    arguments: dict[str, Any]
    large_result_bytes: int
    scope: Scope

    @field_serializer("scope")
    def _scope(self, scope: Scope) -> dict[str, Any]:
        return _compact_scope(scope)


class HookEffect(_Payload):
    """What one tool-call hook did to a call (``activities/hooks/_hooks.py``)."""

    stage: Literal["pre", "post", "on_error"]
    hook: str
    """The hook's name: ``module:function``, ``command:[argv...]`` or the callable's name."""
    effect: Literal["denied", "rewrote_arguments", "rewrote_result", "replaced_error", "failed"]
    """``failed``: a post or on_error hook failed; the failure was logged and ignored."""
    detail: str = ""
    """The denial's reason, or what failed."""


class ToolOutcome(_Compact):
    """What one tool call produced, stored whole, shown small."""

    call_id: str
    status: Literal["ok", "error", "wait", "denied", "input_required"]
    """``wait``: the tool returned an ExternalWait; the Run suspends on ``wait_token``.
    ``denied``: a pre hook denied the call (the tool did not run). ``input_required``: an
    MCP server asks for input before it completes the call (``input_required``)."""
    content: str
    """The result if it fits ``large_result_bytes``, else a preview of it."""
    truncated: bool
    """True when ``content`` is a preview and the model got a handle to read the rest."""
    size: int
    """Size of the whole result in bytes (UTF-8)."""
    result_ref: BlobRef
    """The whole result (the handle ``read_tool_output`` reads)."""
    message_ref: BlobRef
    """The tool message the model is shown (result or handle + preview)."""
    latency: Latency
    wait_token: str | None = None
    ran_arguments: dict[str, Any] | None = None
    """The arguments the tool ran with when a pre hook rewrote them (None: the model's)."""
    hooks: tuple[HookEffect, ...] = ()
    """Each hook that denied or changed something, in the order they ran."""
    input_required: McpInputRequired | None = None
    """Status ``input_required``: what the server asks (left out on the wire otherwise)."""
    unpermitted: bool = False
    """Status ``denied`` by the tenant's permits (``TenantPermits``), not by a hook: a code
    or HTTP tool the Run's catalogue offered, revoked since. The Run offers it no more
    (left out while False: the wire of a Run whose calls were never so refused)."""
    handles: tuple[BlobRef, ...] = ()
    """Blobs the tool stored beside its result, which the result names as handles for
    ``read_tool_output`` (an A2A peer's large artifacts): the Run's own, as ``result_ref``
    is (left out while empty: the wire of every other outcome)."""


class ReadOutputInput(_Payload):
    """``read_tool_output``: a slice of a stored result."""

    call_id: str
    """The tool call being answered (the read's own call id)."""
    handle: str
    offset: int = Field(default=0, ge=0)
    length: int = Field(default=8192, gt=0, le=65536)


class ExternalResultInput(_Compact):
    """The payload that completed an external wait (a code tool's ``ExternalWait``, or by
    hand an A2A peer's task): the call's post hooks see it, then it is stored as a tool
    activity stores its own result. Written without ``kind`` when it is ``code`` (the
    shape a tools worker of 12-06 reads)."""

    run_id: str
    call_id: str
    tool: str
    """The tool's name as the model called it (what hooks match)."""
    kind: Literal["code", "a2a"] = "code"
    """The tool's kind, as its hooks match it."""
    arguments: dict[str, Any]
    """The arguments the tool ran with (after its pre hooks), as its hooks saw them."""
    text: str
    """The payload as text (a JSON payload's JSON)."""
    large_result_bytes: int = Field(gt=0)
    scope: Scope

    @field_serializer("scope")
    def _scope(self, scope: Scope) -> dict[str, Any]:
        return _compact_scope(scope)


class StoreResultInput(_Payload):
    """A result the workflow made itself, stored as a tool activity stores its own: a
    child Run's answer to ``delegate`` or ``wait_children``."""

    call_id: str
    """The tool call it answers."""
    text: str
    large_result_bytes: int = Field(gt=0)


# --- texts both sides write ---------------------------------------------------------------


def unpermitted_message(kind: str, name: str, tenant: str) -> str:
    """Why ``tenant`` may not call the ``kind`` (code or HTTP) tool ``name``: the refusal a
    tool activity answers when the tenant's permits refuse a call, and what the Run says of
    a call of such a tool its catalogue left out. Pure, for the workflow to call."""
    return f"{kind} tool {name!r} is not permitted to tenant {tenant!r}"


def invalid_arguments_message(err: json.JSONDecodeError) -> str:
    """What the model reads when its tool-call arguments are not JSON.

    ``JSONDecodeError.msg`` may already end in "at" ("Unterminated string starting at"),
    so the position is given as its own clause rather than appended to it. Pure, for the
    workflow to call.
    """
    return (
        f"arguments are not valid JSON: {err.msg.removesuffix(' at').rstrip(':')} "
        f"(at character {err.pos}); resend"
    )
