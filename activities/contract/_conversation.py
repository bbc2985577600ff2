"""A conversation as the model sees it: messages, the tool calls in them, tool definitions."""

from __future__ import annotations

from typing import Any, Literal

from psych_runtime.activities.contract._base import _Payload


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
