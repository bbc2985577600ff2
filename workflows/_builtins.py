"""Built-in tools: name -> (when offered, definition, handler), in one table.

Adding a built-in touches only this table (its definition and handler live beside it).
A built-in that ``executes`` runs as a call (it is an open call for the deadline, abort
can cancel it); one that does not suspends the Run instead (a question, a subagent).
The table's order is the order the tools are offered to the model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        McpSearchInput,
        ReadOutputInput,
        ToolCallRequest,
        ToolDefinition,
    )
    from psych_runtime.specs import AgentSpec
    from psych_runtime.workflows import _activity_calls as calls
    from psych_runtime.workflows._components import offer_components, show_component
    from psych_runtime.workflows._spawn import spawn, spawn_definition
    from psych_runtime.workflows._spawn_collect import (
        message_child,
        message_definition,
        wait_children,
        wait_definition,
    )
    from psych_runtime.workflows._subagents import delegate, delegate_definition
    from psych_runtime.workflows._tasks import offer_tasks, update_tasks
    from psych_runtime.workflows._tool_result import ToolResult, from_outcome, inline

if TYPE_CHECKING:
    from psych_runtime.workflows._tool_calls import ToolCalls

READ_MAX_LENGTH = 65536

Handler = Callable[["ToolCalls", int, ToolCallRequest, dict[str, Any]], Awaitable[ToolResult]]


@dataclass(frozen=True)
class Builtin:
    """One built-in tool."""

    offer: Callable[[ToolCalls], ToolDefinition | None]
    """Its definition when the Run offers it, else None."""
    handle: Handler
    executes: bool
    """True: runs as a call; False: suspends the Run instead of running."""


# --- read_tool_output ----------------------------------------------------------------------

READ_TOOL_OUTPUT = ToolDefinition(
    name="read_tool_output",
    description=(
        "Read part of a large tool result that was stored whole and shown to you as a "
        "handle with a preview."
    ),
    parameters={
        "type": "object",
        "properties": {
            "handle": {"type": "string", "description": "The handle the result gave."},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
            "length": {"type": "integer", "minimum": 1, "maximum": 65536, "default": 8192},
        },
        "required": ["handle"],
        "additionalProperties": False,
    },
)


def _read_arguments(call_id: str, arguments: dict[str, Any]) -> ReadOutputInput | str:
    """``read_tool_output``'s arguments, or the error the model should read."""
    handle, offset, length = (
        arguments.get("handle"),
        arguments.get("offset", 0),
        arguments.get("length", 8192),
    )
    if not isinstance(handle, str) or not handle:
        return "read_tool_output needs a handle (the text after 'handle' in the preview)"
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        return f"offset must be a whole number >= 0, not {offset!r}"
    if not isinstance(length, int) or isinstance(length, bool) or not 0 < length <= READ_MAX_LENGTH:
        return f"length must be a whole number from 1 to {READ_MAX_LENGTH}, not {length!r}"
    return ReadOutputInput(call_id=call_id, handle=handle, offset=offset, length=length)


async def _read_tool_output(
    run: ToolCalls, turn: int, call: ToolCallRequest, arguments: dict[str, Any]
) -> ToolResult:
    read = _read_arguments(call.id, arguments)
    if isinstance(read, str):
        return inline(call, "error", read)
    outcome = await calls.read_output(read, summary=f"tool {call.name}, turn {turn}")
    return from_outcome(call, outcome)


# --- load_skill ----------------------------------------------------------------------------

LOAD_SKILL = ToolDefinition(
    name="load_skill",
    description="Load the full instructions of one of your skills by name.",
    parameters={
        "type": "object",
        "properties": {"name": {"type": "string", "description": "The skill's name."}},
        "required": ["name"],
        "additionalProperties": False,
    },
)


async def _load_skill(
    run: ToolCalls, turn: int, call: ToolCallRequest, arguments: dict[str, Any]
) -> ToolResult:
    spec = run._spec
    assert isinstance(spec, AgentSpec)
    name = str(arguments.get("name", ""))
    skill = next((s for s in spec.skills if s.name == name), None)
    if skill is None:
        known = ", ".join(s.name for s in spec.skills)
        return inline(call, "ok", f"There is no skill named {name!r}. Skills you have: {known}.")
    return inline(call, "ok", skill.body)


# --- ask_question --------------------------------------------------------------------------

ASK_QUESTION = ToolDefinition(
    name="ask_question",
    description=(
        "Ask the person you work for a question and wait for the answer. Use it only when "
        "you cannot go on without their input."
    ),
    parameters={
        "type": "object",
        "properties": {"question": {"type": "string", "description": "The question."}},
        "required": ["question"],
        "additionalProperties": False,
    },
)


async def _ask_question(
    run: ToolCalls, turn: int, call: ToolCallRequest, arguments: dict[str, Any]
) -> ToolResult:
    answer = await run._suspend_call(
        call,
        "question",
        run._suspension.question_expires_seconds,
        question=str(arguments.get("question", "")),
        arguments="",
    )
    return inline(call, "ok", answer.answer or "")


# --- search_mcp_tools ----------------------------------------------------------------------


async def _search_mcp_tools(
    run: ToolCalls, turn: int, call: ToolCallRequest, arguments: dict[str, Any]
) -> ToolResult:
    """Search the deferred MCP servers' catalogues; what it finds is offered next turn.

    Offered by ``psych.mcp.list_tools`` (with its definition) only while a server is
    deferred, so it has no ``offer`` of its own.
    """
    mcp = run._mcp
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        return inline(call, "error", "search_mcp_tools needs a query (words to look for)")
    server = arguments.get("server")
    if server is not None and server not in mcp.deferred:
        known = ", ".join(mcp.deferred) or "none"
        return inline(
            call, "error", f"{server!r} is not a server to search; deferred servers: {known}"
        )
    names = [server] if server is not None else list(mcp.deferred)
    if not names:
        return inline(call, "error", "no MCP server is deferred this turn; nothing to search")
    result = await calls.search_mcp_tools(
        McpSearchInput(
            run_id=run._input.run_id,
            call_id=call.id,
            servers=tuple(mcp.servers[name] for name in names),
            catalogs={name: mcp.catalogs[name] for name in names if name in mcp.catalogs},
            query=query,
            large_result_bytes=run._limits.large_result_bytes,
            scope=run._input.scope,
        ),
        summary=f"tool {call.name}, turn {turn}",
    )
    mcp.loaded.extend(name for name in result.found if name not in mcp.loaded)
    return from_outcome(call, result.outcome)


# --- the table -----------------------------------------------------------------------------


def _offer_skill(run: ToolCalls) -> ToolDefinition | None:
    spec = run._spec
    return LOAD_SKILL if isinstance(spec, AgentSpec) and spec.skills else None


def _offer_question(run: ToolCalls) -> ToolDefinition | None:
    return ASK_QUESTION if run._suspension.may_ask_questions else None


BUILTINS: dict[str, Builtin] = {
    "read_tool_output": Builtin(lambda run: READ_TOOL_OUTPUT, _read_tool_output, executes=True),
    "load_skill": Builtin(_offer_skill, _load_skill, executes=True),
    "ask_question": Builtin(_offer_question, _ask_question, executes=False),
    "delegate": Builtin(delegate_definition, delegate, executes=False),
    "search_mcp_tools": Builtin(lambda run: None, _search_mcp_tools, executes=True),
    "update_tasks": Builtin(offer_tasks, update_tasks, executes=True),
    "show_component": Builtin(offer_components, show_component, executes=True),
    # spawn (workflows/_spawn.py, _spawn_collect.py): only with the Spec's spawn envelope.
    "spawn": Builtin(spawn_definition, spawn, executes=True),
    "wait_children": Builtin(wait_definition, wait_children, executes=False),
    "message_child": Builtin(message_definition, message_child, executes=True),
}


def offered_builtins(run: ToolCalls) -> tuple[ToolDefinition, ...]:
    """The built-ins this Run offers, in table order."""
    offers = (builtin.offer(run) for builtin in BUILTINS.values())
    return tuple(offer for offer in offers if offer is not None)
