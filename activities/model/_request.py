"""The chat-completions request body, written from encoded pieces kept between calls.

Every call sends the whole conversation, so encoding it anew each call costs time in
proportion to its length, and a Run's calls together in proportion to its square: at the
end of a 1000-turn Run of 8 tool calls a turn, 31 ms a call (issue 27). The messages of a
conversation ending at a head ref never change (a ref names content), so their JSON is kept
by head ref, and a Run's next call encodes only what is new to it; a tool list's JSON is
kept by its ref alike. The body is byte for byte what ``httpx``'s ``json=`` would send for
the same dict (its encoder's settings, the same key order).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psych_runtime.activities.blobs import RecentBlobs
from psych_runtime.activities.contract import ChatMessage, ModelCallInput, ToolDefinition


def dumps(value: Any) -> bytes:
    """``value`` as JSON the way ``httpx`` writes a ``json=`` body."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def wire_message(message: ChatMessage) -> dict[str, Any]:
    """``message`` as a chat-completions message."""
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
                **(c.provider_fields or {}),
            }
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    wire.update(message.provider_fields or {})
    return wire


def encode_message(message: ChatMessage) -> bytes:
    """``message``'s JSON in a request body."""
    return dumps(wire_message(message))


def encode_tools(tools: Sequence[ToolDefinition]) -> bytes:
    """The ``tools`` member's JSON; empty when there are none (the member is left out)."""
    if not tools:
        return b""
    return dumps(
        [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in tools
        ]
    )


@dataclass(frozen=True)
class Request:
    """One call's body, and what ``RequestBodies.remember`` keeps of it."""

    body: bytes
    history: bytes
    """The messages of the conversation before the call, comma-joined."""
    new: tuple[bytes, ...]
    """Each of the call's new messages, encoded."""


KEPT_BYTES = 64 * 1024 * 1024
"""Bytes of encoded conversations a worker keeps (one larger than a sixteenth of it is
not kept: ``RecentBlobs``)."""


class RequestBodies:
    """Writes request bodies, keeping each conversation's encoded messages by head ref.

    A Run's entry is replaced by the next head's as its calls go on, so it holds about one
    entry per Run whose call this worker made last: the most recently used, ``max_bytes``
    in all (``RecentBlobs``, whose refs here are conversation heads); a miss encodes the
    messages given.
    """

    def __init__(self, max_bytes: int = KEPT_BYTES) -> None:
        self._messages = RecentBlobs(max_bytes)

    def __len__(self) -> int:
        """Conversations kept."""
        return len(self._messages)

    @property
    def kept_bytes(self) -> int:
        """Bytes of the conversations kept."""
        return self._messages.kept_bytes

    def write(
        self,
        input: ModelCallInput,
        system: str | None,
        head: str | None,
        history: Sequence[ChatMessage],
        new: Sequence[ChatMessage],
        tools: bytes,
        *,
        stream: bool,
    ) -> Request:
        """The body of a call on the conversation ending at ``head`` (whose messages are
        ``history``) with ``new`` messages after it and ``tools`` (``encode_tools``)."""
        known = None if head is None else self._messages.get(head)
        if known is None:
            known = b",".join(encode_message(m) for m in history)
            if head is not None:
                self._messages.keep(head, known)
        fresh = tuple(encode_message(m) for m in new)
        messages = b",".join((known, *fresh)) if known else b",".join(fresh)
        parts = [b'{"model":', dumps(input.model), b',"messages":[']
        if system:
            parts += [dumps({"role": "system", "content": system}), b"," if messages else b""]
        parts += [messages, b'],"stream":', b"true" if stream else b"false"]
        if tools:
            parts += [b',"tools":', tools]
        rest: dict[str, Any] = {}
        params = input.params
        for key, value in (
            ("temperature", params.temperature),
            ("top_p", params.top_p),
            ("max_completion_tokens", params.max_output_tokens),
            ("reasoning_effort", params.reasoning_effort),
        ):
            if value is not None:
                rest[key] = value
        if stream:
            rest["stream_options"] = {"include_usage": True}
        if rest:
            parts += [b",", dumps(rest)[1:-1]]
        parts.append(b"}")
        return Request(body=b"".join(parts), history=known, new=fresh)

    def remember(
        self,
        head: str | None,
        next_head: str,
        request: Request,
        new: Sequence[ChatMessage],
        stored: Sequence[ChatMessage] | None,
    ) -> None:
        """Keep the messages of ``next_head``: ``request``'s history, its ``new`` messages and
        the answer as a reader of the store gets them back (``stored``: the last messages
        of ``next_head``, the new ones then the answer; None: unknown, nothing is kept).
        ``head``'s entry goes: the Run's next call starts from ``next_head``."""
        if stored is None or len(stored) != len(new) + 1:
            return
        pieces = [
            sent if message is given else encode_message(message)
            for sent, given, message in zip(request.new, new, stored, strict=False)
        ]
        pieces.append(encode_message(stored[-1]))
        if request.history:
            pieces.insert(0, request.history)
        if head is not None:
            self._messages.drop(head)
        self._messages.keep(next_head, b",".join(pieces))
