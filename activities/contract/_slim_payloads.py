"""The slim payloads of the hot path: ``psych.model.call``, ``psych.tool.run_code``
and ``psych.tool.send_http``.

Each carries only what the other side cannot derive (issue 15): ``_slim.py`` converts
between them and the full payloads (``_model.py``, ``_tools.py``), which both sides keep
working with.
Their wire forms are compact too: refs as ``_refs.WireRef``; tool calls, usage and latency
as lists (``WireToolCall``, ``WireUsage``, ``WireLatency``), each of which also reads the
object form. Python sees the same values as in the full payloads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    PlainSerializer,
    field_serializer,
    model_validator,
)

from psych_runtime.activities.contract._base import _Compact
from psych_runtime.activities.contract._context import ContextTurn
from psych_runtime.activities.contract._conversation import ChatMessage, ToolCallRequest
from psych_runtime.activities.contract._mcp import McpTurn, McpTurnResult
from psych_runtime.activities.contract._refs import WireRef
from psych_runtime.activities.contract._threads import ThreadContext
from psych_runtime.activities.contract._tools import HookEffect
from psych_runtime.activities.contract._usage import Latency, Usage
from psych_runtime.specs import HttpTool, ModelRef

# Positions are the wire form: a new Latency field is appended, never inserted, and
# _latency_to_wire sends it (test_slim pins this tuple and _USAGE_FIELDS to the classes).
_LATENCY_FIELDS = ("queue_wait_ms", "duration_ms", "first_token_ms")


def _latency_from_wire(value: object) -> object:
    if isinstance(value, list | tuple) and 2 <= len(value) <= len(_LATENCY_FIELDS):
        return dict(zip(_LATENCY_FIELDS, value, strict=False))
    return value


def _latency_to_wire(latency: Latency) -> list[float | int]:
    def cut(value: float) -> float | int:
        # 30.0 travels as 30: a float field reads an integer back as the same value.
        rounded = round(value, SLIM_LATENCY_DECIMALS)
        return int(rounded) if rounded.is_integer() else rounded

    values: list[float | int] = [cut(latency.queue_wait_ms), cut(latency.duration_ms)]
    if latency.first_token_ms is not None:
        values.append(cut(latency.first_token_ms))
    return values


SLIM_LATENCY_DECIMALS = 1
"""Latencies in the slim results travel to 0.1 ms: the console shows whole milliseconds,
and the bench's medians of sub-millisecond tool bodies still read."""

WireLatency = Annotated[
    Latency,
    BeforeValidator(_latency_from_wire),
    PlainSerializer(_latency_to_wire, when_used="json"),
]
"""A ``Latency`` that travels as ``[queue_wait_ms, duration_ms(, first_token_ms)]``,
to ``SLIM_LATENCY_DECIMALS``, in the slim results (the object form is read too)."""


class WireScope(_Compact):
    """A ``Scope`` on the slim wire: ``tenant`` left out (None) when the workflow id
    names it, as it names the run id (``activities/contract/_slim.py`` puts both back)."""

    tenant: str | None = None
    principal: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


def usual_finish_reason(tool_calls: object) -> str:
    """The finish reason a call with (or without) tool calls usually gives."""
    return "tool_calls" if tool_calls else "stop"


# Positions are the wire form: a new Usage field is appended, never inserted.
_USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


def _usage_from_wire(value: object) -> object:
    if isinstance(value, list | tuple) and len(value) <= len(_USAGE_FIELDS):
        return dict(zip(_USAGE_FIELDS, value, strict=False))
    return value


def _usage_to_wire(usage: Usage) -> list[int]:
    values = [getattr(usage, name) for name in _USAGE_FIELDS]
    while values and values[-1] == 0:
        values.pop()
    return values


WireUsage = Annotated[
    Usage,
    BeforeValidator(_usage_from_wire),
    PlainSerializer(_usage_to_wire, when_used="json"),
]
"""A ``Usage`` that travels as its counts in field order, trailing zeros left out
(``[1041, 5]``: input and output tokens), in the slim results (the object form is read
too)."""


def _call_from_wire(value: object) -> object:
    if isinstance(value, list | tuple) and len(value) == 3:
        return dict(zip(("id", "name", "arguments"), value, strict=True))
    return value


def _call_to_wire(call: ToolCallRequest) -> list[str]:
    return [call.id, call.name, call.arguments]


WireToolCall = Annotated[
    ToolCallRequest,
    BeforeValidator(_call_from_wire),
    PlainSerializer(_call_to_wire, when_used="json"),
]
"""A ``ToolCallRequest`` that travels as ``[id, name, arguments]`` in the slim results
(the object form is read too)."""


class SlimModelCallInput(_Compact):
    """``psych.model.call``: a ``ModelCallInput`` without what the activity derives.

    ``run_id`` and ``scope.tenant`` are read off the workflow id (``psych-<tenant>-<run
    id>``) unless sent, ``params`` is ``ModelRef(model=model)`` unless sent, and refs travel
    in their compact wire form (``contract/_refs.py``). ``contract/_slim.py`` converts.
    """

    turn: int
    model: str
    params: ModelRef | None = None
    """Sent when it says more than ``model`` (sampling, a fallback's primary)."""
    run_id: str | None = None
    """Sent (with ``scope.tenant``) only when the workflow id does not name them."""
    system_prompt: str | None = None
    system_ref: WireRef | None = None
    context_ref: WireRef | None = None
    new_messages: tuple[ChatMessage | WireRef, ...] = ()
    tools_ref: WireRef | None = None
    exclude_tools: tuple[str, ...] = ()
    stream: bool = True
    stream_idle_seconds: float = 300.0
    scope: WireScope = WireScope()
    mcp: McpTurn | None = None
    thread: ThreadContext | None = None

    @field_serializer("params")
    def _params(self, params: ModelRef | None) -> dict[str, Any] | None:
        return None if params is None else params.model_dump(mode="json", exclude_defaults=True)


class SlimModelCallResult(_Compact):
    """What ``psych.model.call`` returns: only what the workflow does not know.

    ``model`` is the one the workflow called; ``context_ref`` and ``system_ref`` are left
    out (None) when they are what the workflow derives from its call and this answer (the
    activity checks, ``activities/contract/_slim.py``); an empty ``text``, zero ``usage`` and the
    usual ``finish_reason`` (``tool_calls`` with tool calls, else ``stop``) are left out,
    refs travel compact, tool calls, usage and latency as lists.
    """

    context_ref: WireRef | None = None
    system_ref: WireRef | None = None
    text: str = ""
    tool_calls: tuple[WireToolCall, ...] = ()
    finish_reason: str | None
    """Filled in with ``usual_finish_reason`` when the wire leaves it out."""
    usage: WireUsage = Usage()
    cost: float | None = None
    latency: WireLatency
    mcp: McpTurnResult | None = None
    context: ContextTurn | None = None
    estimated_prompt_tokens: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _usual_finish(cls, data: Any) -> Any:
        if isinstance(data, dict) and "finish_reason" not in data:
            return {**data, "finish_reason": usual_finish_reason(data.get("tool_calls"))}
        return data

    def _implied(self) -> dict[str, Any]:
        return {"finish_reason": usual_finish_reason(self.tool_calls)}


class SlimCodeToolCall(_Compact):
    """``psych.tool.run_code``: a ``CodeToolCall`` without what the activity derives
    (``run_id`` and ``scope.tenant``, read off the workflow id unless sent) and with
    ``large_result_bytes`` left out at the Limits default."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    large_result_bytes: int = 32768
    run_id: str | None = None
    """Sent (with ``scope.tenant``) only when the workflow id does not name them."""
    scope: WireScope = WireScope()
    local_bytes: int | None = None
    """A local call's share of its workflow task's completion, which carries the outcomes of
    all the turn's local calls: an outcome larger as JSON (its UTF-8 bytes) fails
    ``LocalResultTooLarge`` and the workflow runs the call as an activity. None: no bound (an
    activity's own call)."""
    local_seconds: float | None = None
    """A local call's bound on its tool's own run (the tool's ``local_seconds``), from after
    the tenant's permits answered: a tool past it fails ``LocalCallTimedOut``. The local
    activity's bound leaves room for the permits check and for storing the outcome. None:
    no bound of its own (an activity's call, or one a workflow of before it made)."""


class SlimHttpToolCall(_Compact):
    """``psych.tool.send_http``: an ``HttpToolCall`` without what the activity derives (as
    ``SlimCodeToolCall``), its tool without the fields at their defaults."""

    call_id: str
    tool: HttpTool
    arguments: dict[str, Any]
    large_result_bytes: int = 32768
    run_id: str | None = None
    """Sent (with ``scope.tenant``) only when the workflow id does not name them."""
    scope: WireScope = WireScope()

    @field_serializer("tool")
    def _tool(self, tool: HttpTool) -> dict[str, Any]:
        return tool.model_dump(mode="json", exclude_defaults=True)


class SlimToolOutcome(_Compact):
    """What ``psych.tool.run_code`` and ``psych.tool.send_http`` return: a ``ToolOutcome``
    without what the workflow derives exactly (``activities/contract/_slim.py``).

    No ``call_id`` (the workflow made the call); ``status`` ``ok`` and ``truncated`` false
    are left out; ``size``, ``result_ref`` and ``message_ref`` are left out (None) when
    they are what a result shown whole gives: its UTF-8 size, the ref of its bytes and the
    ref of the tool message holding it. The activity leaves one out only after checking it
    equals that derivation, so a store keying blobs otherwise (sealed) sends them all.
    """

    status: Literal["ok", "error", "wait", "denied"] = "ok"
    content: str
    truncated: bool = False
    size: int | None = None
    result_ref: WireRef | None = None
    message_ref: WireRef | None = None
    latency: WireLatency
    wait_token: str | None = None
    ran_arguments: dict[str, Any] | None = None
    hooks: tuple[HookEffect, ...] = ()
    unpermitted: bool = False
    """``ToolOutcome.unpermitted``: refused by the tenant's permits (left out while False)."""
