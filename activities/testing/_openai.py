"""OpenAI's chat-completions bodies the fake model answers with: errors and usage."""

from __future__ import annotations

from typing import Any

from psych_runtime.testing._http import _Response
from psych_runtime.testing._replies import Reply, Usage

# OpenAI's `error.type` for the statuses tests script most; anything else is a server error.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def _error(
    status: int, message: str, *, code: str | None = None, type_: str | None = None
) -> _Response:
    error_type = type_ or _ERROR_TYPES.get(status, "server_error")
    if code is None:
        code = "rate_limit_exceeded" if status == 429 else error_type
    return _Response(
        status, {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    )


def _usage(reply: Reply, calls: list[tuple[str, str, str]], body: dict[str, Any]) -> dict[str, Any]:
    usage = reply.usage
    if usage is None:
        # A rough four-characters-per-token count: enough for budget arithmetic in tests.
        completion = len(reply.content) + sum(len(name) + len(args) for _, name, args in calls)
        usage = Usage(
            input_tokens=_prompt_chars(body.get("messages")) // 4,
            output_tokens=max(1, completion // 4),
        )
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def _prompt_chars(messages: object) -> int:
    """Characters of text in the request messages: contents, text parts and tool calls."""
    if not isinstance(messages, list):
        return 0
    total = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(
                len(part["text"])
                for part in content
                if isinstance(part, dict) and isinstance(part.get("text"), str)
            )
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                total += sum(len(v) for v in function.values() if isinstance(v, str))
    return total
