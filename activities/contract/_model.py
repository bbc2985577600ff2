"""The model call's payloads: its input, its result and why it failed.

The workflow builds ``ModelCallInput`` (features add to it) and reads ``ModelCallResult``;
the model activity runs on them. On the wire of ``psych.model.call`` they travel slim
(``SlimModelCallInput``, ``SlimModelCallResult``; ``_slim.py`` converts)."""

from __future__ import annotations

from typing import Any

from pydantic import field_serializer

from psych_runtime.activities.contract._base import _Compact, _compact_scope, _Payload
from psych_runtime.activities.contract._context import ContextTurn
from psych_runtime.activities.contract._conversation import ChatMessage, ToolCallRequest
from psych_runtime.activities.contract._mcp import McpTurn, McpTurnResult
from psych_runtime.activities.contract._refs import BlobRef
from psych_runtime.activities.contract._threads import ThreadContext
from psych_runtime.activities.contract._usage import Latency, Usage
from psych_runtime.specs import ModelRef, Scope


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
    """Longest allowed gap between received bytes: streamed chunks, or, not streamed, the
    wait for the answer; 0 disables."""
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
    estimated_prompt_tokens: int | None = None
    """Set only when the provider reported no prompt tokens (no usage, or zero input,
    cache-read and cache-write tokens): the request's size at four bytes a token, which
    compaction's trigger reads instead. Never billed or counted in the totals."""

    @field_serializer("usage")
    def _usage(self, usage: Usage) -> dict[str, Any]:
        # Zero counts (cache, reasoning) are the usual case: left out, read back as 0.
        return usage.model_dump(mode="json", exclude_defaults=True)


class ModelFailure(_Payload):
    """Why a model call failed: the details of a ``ModelCallFailed`` ApplicationError."""

    transient: bool
    """5xx, 429, 408, connection errors and stream idle are transient, and so is an error
    sent inside a 200 response that says so (such a status as its code, or a rate limit,
    overload or server error as its code or type); others are not."""
    status: int | None = None
    """The HTTP status, or the status an error inside a 200 response gave as its code."""
    retry_after: float | None = None
    """Seconds the provider asked us to wait (Retry-After), if it did."""
    message: str
