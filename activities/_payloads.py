"""Activity payloads: the data a workflow sends to an activity and gets back.

These are the activity half of the workflow contract. Each activity takes one frozen
model and returns one; the names in ``ACTIVITY_NAMES`` are API. Payloads carry data only:
never a client, a callable or a secret (credentials travel as names).

History stays linear because the conversation travels by reference: message bodies are
content-addressed blobs (``BlobStore``), a conversation is a chain of blob nodes whose
head hash the model activity receives, and each body enters history at most once (as the
activity input that brings it, or the result that produced it).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_serializer,
)

from psych_runtime.activities._context_result import ContextTurn
from psych_runtime.specs import AgentSpec, HttpTool, McpServer, ModelRef, Scope, SpecError

_BLOB_REF = re.compile(r"sha256:[0-9a-f]{64}")
BlobRef = Annotated[str, Field(pattern=f"^{_BLOB_REF.pattern}$")]
"""The content hash of a stored blob."""


def is_blob_ref(value: str) -> bool:
    """Whether ``value`` is a ``BlobRef``: ``sha256:`` and 64 lowercase hex digits."""
    return _BLOB_REF.fullmatch(value) is not None


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Compact(_Payload):
    """A payload written without the fields that hold their default (read back with them).

    For the payloads an MCP Run sends on every turn: each default left out is history bytes
    not spent on every turn of every Run.
    """

    @model_serializer(mode="wrap")
    def _without_defaults(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        fields = type(self).model_fields
        implied = self._implied()
        return {
            key: value
            for key, value in data.items()
            if (key not in implied or getattr(self, key) != implied[key])
            and (
                key not in fields
                or fields[key].is_required()
                or getattr(self, key) != fields[key].get_default(call_default_factory=True)
            )
        }

    def _implied(self) -> dict[str, Any]:
        """Fields whose value the other fields imply: left out when they hold it (a class
        that has some fills them back in when they are missing)."""
        return {}


def _compact_scope(scope: Scope) -> dict[str, Any]:
    """A Scope as JSON without its defaults (no principal, no labels): the model and tool
    calls carry it every turn."""
    return scope.model_dump(mode="json", exclude_defaults=True)


LATENCY_DECIMALS = 3
"""Latencies travel rounded to the microsecond: float noise past it is history bytes."""


def _compact_server(server: McpServer) -> dict[str, Any]:
    """An ``McpServer`` as JSON without its default fields (the Spec's own dump keeps them:
    it is what a Version hashes)."""
    return server.model_dump(mode="json", exclude_defaults=True)


# --- activity names (API: a changed signature gets a new name) ----------------------------

MODEL_COMPLETE = "psych.model.complete"
MODEL_COMPACT = "psych.model.compact"
"""The summariser call of compaction (``activities/_compaction.py``)."""
MODEL_COMPLETE_V2 = "psych.model.complete.v2"
"""Same input; returns ``ModelCallResultV2`` (no echoed model or system prompt ref)."""
MODEL_COMPLETE_V3 = "psych.model.complete.v3"
"""Takes ``ModelCallInputV3``, returns ``ModelCallResultV3`` (``_slim_payloads.py``): only
what the other side cannot derive, refs in their compact wire form."""
TOOL_CATALOG = "psych.tool.catalog"
TOOL_CODE = "psych.tool.code"
TOOL_CODE_V2 = "psych.tool.code.v2"
"""Takes ``CodeToolCallV2``, returns ``ToolOutcomeV2`` (``_slim_payloads.py``)."""
TOOL_HTTP = "psych.tool.http"
TOOL_HTTP_V2 = "psych.tool.http.v2"
"""Takes ``HttpToolCallV2``, returns ``ToolOutcomeV2`` (``_slim_payloads.py``)."""
TOOL_READ_OUTPUT = "psych.tool.read_output"
POLICY_DECIDE = "psych.policy.decide"
MCP_LIST_TOOLS = "psych.mcp.list_tools"
"""Run as a local activity at every turn boundary (its result is a marker in history)."""
MCP_SEARCH_TOOLS = "psych.mcp.search_tools"
TOOL_MCP = "psych.tool.mcp"
VERSION_PUBLISH = "psych.version.publish"
"""Publishes a spawned child's composed Spec through the worker's VersionStore."""

ACTIVITY_NAMES = (
    MCP_LIST_TOOLS,
    MCP_SEARCH_TOOLS,
    MODEL_COMPACT,
    MODEL_COMPLETE,
    MODEL_COMPLETE_V2,
    MODEL_COMPLETE_V3,
    POLICY_DECIDE,
    TOOL_CATALOG,
    TOOL_CODE,
    TOOL_CODE_V2,
    TOOL_HTTP,
    TOOL_HTTP_V2,
    TOOL_MCP,
    TOOL_READ_OUTPUT,
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
    MCP_SEARCH_TOOLS: TOOLS_ROLE,
    MODEL_COMPACT: MODEL_ROLE,
    MODEL_COMPLETE: MODEL_ROLE,
    MODEL_COMPLETE_V2: MODEL_ROLE,
    MODEL_COMPLETE_V3: MODEL_ROLE,
    POLICY_DECIDE: TOOLS_ROLE,
    TOOL_CATALOG: TOOLS_ROLE,
    TOOL_CODE: TOOLS_ROLE,
    TOOL_CODE_V2: TOOLS_ROLE,
    TOOL_HTTP: TOOLS_ROLE,
    TOOL_HTTP_V2: TOOLS_ROLE,
    TOOL_MCP: TOOLS_ROLE,
    TOOL_READ_OUTPUT: TOOLS_ROLE,
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


# --- conversation -------------------------------------------------------------------------


class ToolCallRequest(_Payload):
    """A tool call as the model asked for it."""

    id: str
    """The provider's call id; tool results answer it."""
    name: str
    """The tool name the model used (may name no tool: that is the model's error)."""
    arguments: str
    """The arguments exactly as the model sent them: JSON text, possibly malformed."""


class ChatMessage(_Payload):
    """One message of a conversation (OpenAI chat roles)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    """Assistant messages only."""
    tool_call_id: str | None = None
    """Tool messages only: which call this answers."""


class ToolDefinition(_Payload):
    """A tool as the model is shown it."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments (an object schema)."""


# --- model --------------------------------------------------------------------------------


class Usage(_Payload):
    """Tokens of one model call, split the way providers bill them."""

    input_tokens: int = 0
    """Prompt tokens not served from cache."""
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    """Part of ``output_tokens`` spent reasoning, where the provider reports it."""


class Latency(_Compact):
    """Where the time of one activity went (milliseconds)."""

    queue_wait_ms: float
    """From scheduling to a worker starting it."""
    duration_ms: float
    """From start to finish on the worker."""
    first_token_ms: float | None = None
    """From start to the first streamed token (model calls that stream)."""

    @field_serializer("queue_wait_ms", "duration_ms", "first_token_ms")
    def _rounded(self, value: float | None) -> float | None:
        return None if value is None else round(value, LATENCY_DECIMALS)


class McpTurn(_Compact):
    """An agent turn's MCP servers, resolved by the model-call activity before it calls the
    model (so a turn's discovery costs no event of its own in history).

    The activity discovers each server (or reads the worker's cache), narrows and names the
    tools exactly as ``psych.mcp.list_tools`` does, and offers the model the base tools
    (``ModelCallInput.tools_ref``) plus those MCP tools.
    """

    servers: tuple[McpServer, ...]
    loaded: tuple[str, ...] = ()
    """Deferred servers' tools ``search_mcp_tools`` found (offered from the next turn)."""
    known_hash: str | None = None
    """The ``catalog_hash`` of the Run's previous turn."""
    have: tuple[str, ...] = ()
    """Names whose entries the workflow already holds for ``known_hash``: not sent again."""
    told_unavailable: tuple[str, ...] = ()
    """Optional servers the model was already told are unavailable (told once, until back)."""

    @field_serializer("servers")
    def _servers(self, servers: tuple[McpServer, ...]) -> list[dict[str, Any]]:
        return [_compact_server(server) for server in servers]


class McpTurnResult(_Compact):
    """What the turn's MCP discovery found, as the workflow needs it."""

    catalog_hash: str
    """Hash of the offered definitions, entries and statuses (``cached`` aside)."""
    servers: tuple[McpServerStatus, ...] = ()
    """Each server's status; empty when ``catalog_hash`` equals ``known_hash`` (then the
    workflow's are still true and ``cached`` says what the cache answered)."""
    fresh: tuple[str, ...] = ()
    """When unchanged: the servers whose tools came from the server this turn rather than
    the worker's cache (usually none, so usually left out on the wire)."""
    entries: tuple[CatalogEntry, ...] = ()
    """Entries of the offered MCP tools (and ``search_mcp_tools``) the model called this
    turn that ``have`` does not name: what the workflow needs to run those calls."""
    renamed: tuple[tuple[str, str, str], ...] = ()
    """``(model name, server, tool)`` for rewritten names (left out when unchanged)."""


class ModelCallInput(_Compact):
    """One model call: which model, and the conversation by reference."""

    run_id: str
    turn: int
    model: str
    """The model id for this attempt (the primary or a fallback)."""
    params: ModelRef
    """Sampling parameters (``params.model`` may differ from ``model`` on fallback)."""
    system_prompt: str | None = None
    """The system prompt, inline: sent once, then referred to by ``system_ref``."""
    system_ref: BlobRef | None = None
    context_ref: BlobRef | None = None
    """Head of the stored conversation so far; ``None`` = empty."""
    new_messages: tuple[ChatMessage | BlobRef, ...] = ()
    """Messages to append, in order: inline ones (user input, workflow notes, error results
    the workflow made) are stored by the activity; refs (tool results stored by their tool
    activity) are appended as they are. One ordered list, because tool results must follow
    their assistant message in call order and notes must come after them."""
    tools_ref: BlobRef | None = None
    """Stored list of ToolDefinitions offered; ``None`` = no tools."""
    exclude_tools: tuple[str, ...] = ()
    """Names in the stored list not offered this call (withheld tools)."""
    stream: bool = True
    stream_idle_seconds: float = 300.0
    """Longest allowed gap between streamed chunks; 0 disables."""
    scope: Scope
    mcp: McpTurn | None = None
    """The Run's MCP servers, resolved before the call; None = no MCP servers."""
    thread: ThreadContext | None = None
    """An earlier Run's conversation this Run continues (sent with the first call only):
    the activity puts its last messages before ``context_ref`` (by reference)."""

    @field_serializer("params")
    def _params(self, params: ModelRef) -> dict[str, Any]:
        # Sent every turn: only what the Spec set (``model`` is required, so it stays).
        return params.model_dump(mode="json", exclude_defaults=True)

    @field_serializer("scope")
    def _scope(self, scope: Scope) -> dict[str, Any]:
        return _compact_scope(scope)


class ModelCallResult(_Compact):
    """What a successful model call produced."""

    model: str
    """The model id that answered."""
    system_ref: BlobRef | None
    context_ref: BlobRef
    """Head of the stored conversation including the new input and the assistant message."""
    text: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    finish_reason: str | None = None
    usage: Usage
    cost: float | None = None
    """From the Pricing port at call time; ``None`` when the price is unknown, never 0."""
    latency: Latency
    mcp: McpTurnResult | None = None
    """What the turn's MCP discovery found (None without MCP servers)."""
    context: ContextTurn | None = None
    """What the worker's context providers showed this call (None: none registered, or
    every one gave nothing)."""

    @field_serializer("usage")
    def _usage(self, usage: Usage) -> dict[str, Any]:
        # Zero counts (cache, reasoning) are the usual case: left out, read back as 0.
        return usage.model_dump(mode="json", exclude_defaults=True)


class ModelCallResultV2(ModelCallResult):
    """What ``psych.model.complete.v2`` returns: a ``ModelCallResult`` without the echoes.

    The workflow knows which model it called, and which system prompt it referred to:
    ``model`` is left out (None), and ``system_ref`` is set only when the call stored an
    inline ``system_prompt`` (the ref the workflow sends from then on).
    """

    model: str | None = None  # type: ignore[assignment]
    system_ref: BlobRef | None = None


class ModelFailure(_Payload):
    """Why a model call failed: the details of a ``ModelCallFailed`` ApplicationError."""

    transient: bool
    """5xx, 429, 408, connection errors and stream idle are transient; others are not."""
    status: int | None = None
    retry_after: float | None = None
    """Seconds the provider asked us to wait (Retry-After), if it did."""
    message: str


# --- threads and compaction ---------------------------------------------------------------


class ThreadRef(_Payload):
    """The earlier Run a Run continues, and that Run's conversation head when it was read."""

    run: str
    """The earlier Run's workflow id (the same tenant's)."""
    head: BlobRef
    """Its conversation head (``RunState.conversation_ref``)."""


class ThreadContext(_Compact):
    """What the model activity puts before a threaded Run's first call."""

    head: BlobRef
    """The earlier conversation's head."""
    max_messages: int = Field(ge=1)
    """At most this many of its last messages (``Limits.max_history_records``), never
    starting on a tool result cut from its call nor ending on an unanswered tool call."""


class TurnMark(_Payload):
    """Where a turn starts in a stored conversation: ``offset`` messages into ``node``.

    ``node`` is the chain node the turn's model call appended (or, after a compaction, the
    node holding the kept turns); the messages before the offset belong to the turn before
    (its tool results and notes travel with the next call).
    """

    node: BlobRef
    offset: int = Field(default=0, ge=0)


class CompactInput(_Payload):
    """``psych.model.compact``: summarise a conversation up to a turn start."""

    run_id: str
    turn: int
    """The turn after which the Run compacts."""
    model: str
    """The summariser's model id (``compaction.model`` or the agent's)."""
    params: ModelRef
    """The agent's model parameters (sampling); the output cap is ``max_summary_tokens``."""
    context_ref: BlobRef
    """The conversation's head now."""
    marks: tuple[TurnMark, ...] = Field(min_length=1)
    """The start of the cut turn (everything before it is summarised), then the start of
    every later turn, in order."""
    max_summary_tokens: int = Field(gt=0)
    instructions: str | None = None
    """``compaction.summary_instructions``, appended to the summariser's system prompt."""
    stream_idle_seconds: float = 300.0
    scope: Scope


class CompactResult(_Payload):
    """A compacted conversation: the summary, then the kept turns verbatim."""

    context_ref: BlobRef
    """The new head: ``{summary}`` then one node of the kept messages."""
    marks: tuple[TurnMark, ...]
    """The input's marks, in the new chain."""
    summary_ref: BlobRef
    """The summary message the model sees from now on."""
    summary_preview: str
    """The summary's first ``SUMMARY_PREVIEW_CHARS`` characters."""
    replaced: int
    """Messages the summary replaced (the previous summary among them)."""
    model: str
    usage: Usage
    cost: float | None = None
    latency: Latency


# --- tools --------------------------------------------------------------------------------


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
    kind: Literal["code", "http", "mcp", "builtin"]
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
    kind: Literal["code", "http", "mcp", "builtin"]
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
    server: str | None = None
    """MCP tools: the server's name in the Spec."""
    tool: str | None = None
    """MCP tools: the tool's own name on the server (what ``tools/call`` is sent)."""


class PolicyInput(_Payload):
    """Ask the Policy about one call of a tool whose decision depends on the call."""

    run_id: str
    call_id: str
    tool: ToolInfo
    arguments: dict[str, Any]
    scope: Scope


class ToolCatalog(_Payload):
    """The tools a Run offers: the stored definitions and what the workflow must know."""

    tools_ref: BlobRef | None
    entries: tuple[CatalogEntry, ...]


class CodeToolCall(_Payload):
    """Run one registered code tool."""

    run_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    large_result_bytes: int
    scope: Scope

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


class McpCatalogInput(_Payload):
    """``psych.mcp.list_tools``: this turn's catalogue of a Run with MCP servers.

    The activity discovers each server (``initialize`` + every ``tools/list`` page, or the
    worker's cache), narrows by ``allow``, names the tools ``<server>__<tool>`` and stores
    the base definitions plus the offered MCP ones as one blob for the model call.
    """

    run_id: str
    turn: int
    servers: tuple[McpServer, ...]
    scope: Scope
    base_tools_ref: BlobRef | None = None
    """The Run's other definitions (code, HTTP, built-ins: ``ToolCatalog.tools_ref``)."""
    loaded: tuple[str, ...] = ()
    """Model-facing names of deferred servers' tools that ``search_mcp_tools`` found:
    offered from the turn after they were found."""
    known_hash: str | None = None
    """The ``catalog_hash`` the workflow already holds: when this turn's is the same, the
    result leaves out ``tools_ref`` and ``entries`` (a few bytes of history per turn)."""


class McpServerStatus(_Payload):
    """One server's part of a turn's catalogue."""

    server: str
    status: Literal["ok", "deferred", "unavailable"]
    """``deferred``: its catalogue is over the worker's preload budget (or ``preload`` is
    false), so only the tools found through ``search_mcp_tools`` are offered."""
    tools: int = 0
    """Tools offered this turn (after ``allow``)."""
    catalog_hash: str | None = None
    """Content hash of the server's narrowed definitions."""
    cached: bool = False
    """True when the worker's cache answered instead of the server."""
    error: str | None = None
    """Why it is unavailable (never carries a credential)."""


class McpCatalog(_Payload):
    """A turn's catalogue: base tools plus the MCP tools offered."""

    catalog_hash: str
    """Hash of ``tools_ref`` and ``entries``; equal to the input's ``known_hash`` when
    nothing changed, and then the two are left out."""
    tools_ref: BlobRef | None = None
    entries: tuple[CatalogEntry, ...] | None = None
    """The MCP entries (and ``search_mcp_tools`` when a server is deferred); None =
    unchanged since ``known_hash``."""
    servers: tuple[McpServerStatus, ...] = ()
    renamed: tuple[tuple[str, str, str], ...] = ()
    """``(model name, server, tool)`` for each tool whose name was sanitised, cut or
    suffixed to resolve a collision (left out when unchanged)."""


class McpToolCall(_Compact):
    """``psych.tool.mcp``: one ``tools/call``."""

    run_id: str
    call_id: str
    server: McpServer
    tool: str
    """The tool's own name on the server."""
    arguments: dict[str, Any]
    large_result_bytes: int
    scope: Scope
    report_through_client: bool = False
    """Set for a tool not safe to repeat (``not CatalogEntry.safe_to_repeat``): its outcome
    is reported through the worker's client so it survives a server outage, like a POST
    tool's. Left out (the usual read-only call) on the wire."""
    name: str | None = None
    """The name the model called it by (``<server>__<tool>``, sanitised and cut, as the
    records show it): what tool-call hooks match. None (calls scheduled before it): the
    hooks match ``<server name>__<tool>``."""

    @field_serializer("server")
    def _server(self, server: McpServer) -> dict[str, Any]:
        return _compact_server(server)


class McpSearchInput(_Payload):
    """``psych.mcp.search_tools``: search deferred servers' catalogues."""

    run_id: str
    call_id: str
    servers: tuple[McpServer, ...]
    """The deferred servers to search (the model may have named one)."""
    catalogs: dict[str, BlobRef] = Field(default_factory=dict)
    """Server name -> that server's ``McpServerStatus.catalog_hash`` this turn: the stored
    catalogue searched, holding the names the turn's catalogue gave its tools (so what is
    found is named as ``list_tools`` will offer it, and searching talks to no server). A
    server of ``servers`` without one is reported to the model as not searchable."""
    query: str
    limit: int = Field(default=10, ge=1, le=50)
    large_result_bytes: int
    scope: Scope


class HookEffect(_Payload):
    """What one tool-call hook did to a call (``activities/_hooks.py``)."""

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
    status: Literal["ok", "error", "wait", "denied"]
    """``wait``: the tool returned an ExternalWait; the Run suspends on ``wait_token``.
    ``denied``: a pre hook denied the call (the tool did not run)."""
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


class McpSearchResult(_Payload):
    """What ``search_mcp_tools`` found: the model's message and the names to load."""

    outcome: ToolOutcome
    found: tuple[str, ...] = ()
    """Model-facing names made callable from the next turn."""


class ReadOutputInput(_Payload):
    """``read_tool_output``: a slice of a stored result."""

    call_id: str
    """The tool call being answered (the read's own call id)."""
    handle: str
    offset: int = Field(default=0, ge=0)
    length: int = Field(default=8192, gt=0, le=65536)


# --- texts both sides write ---------------------------------------------------------------


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


McpTurnResult.model_rebuild()
ModelCallResult.model_rebuild()
ModelCallInput.model_rebuild()


class VersionPublishInput(_Payload):
    """Argument of ``psych.version.publish``: a Spec a Run composed (a spawned child's)."""

    run_id: str
    """The Run that composed it (for the activity's logs and spans)."""
    spec: AgentSpec
