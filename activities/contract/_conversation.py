"""A conversation as the model sees it: messages, the tool calls in them, tool definitions."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from psych_runtime.activities.contract._base import _Payload


def _absent(value: object) -> bool:
    return value is None


def _provider_fields() -> Any:
    # Left out of the stored form when absent, so a message without them is stored (and
    # hashed) exactly as before the field existed, and older stored messages read back.
    return Field(default=None, exclude_if=_absent)


class ToolCallRequest(_Payload):
    """A tool call as the model asked for it."""

    id: str
    """The provider's call id; tool results answer it."""
    name: str
    """The tool name the model used (may name no tool: that is the model's error)."""
    arguments: str
    """The arguments exactly as the model sent them: JSON text, possibly malformed."""
    provider_fields: dict[str, Any] | None = _provider_fields()
    """Fields the provider sent on this call that it needs back verbatim in the next
    request (Gemini's ``extra_content`` with its thought signature). Kept on the stored
    assistant message only: a model call's result to the workflow never carries them."""


class ChatMessage(_Payload):
    """One message of a conversation (OpenAI chat roles)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    """Assistant messages only."""
    tool_call_id: str | None = None
    """Tool messages only: which call this answers."""
    provider_fields: dict[str, Any] | None = _provider_fields()
    """Assistant messages only: fields the provider sent on the message that it needs back
    verbatim in the next request (as ``ToolCallRequest.provider_fields``)."""


class ToolDefinition(_Payload):
    """A tool as the model is shown it."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments (an object schema)."""
