"""The OpenAI chat-completions wire format: the request body, a whole JSON completion, and a
streamed one (SSE) read with an idle limit and a size bound."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError
from temporalio import activity

from psych_runtime.activities.contract import (
    ChatMessage,
    LiveAttempt,
    ModelCallInput,
    ToolCallRequest,
    ToolDefinition,
    Usage,
)
from psych_runtime.activities.live import AttemptDeltas
from psych_runtime.activities.model._failures import (
    _EXCERPT_CHARS,
    MAX_RESULT_BYTES,
    ProviderResponseError,
    ResponseTooLarge,
)

# Connect, write and pool waits. Reads are bounded by the stream idle limit (streaming) or by
# the activity's start-to-close timeout (non-streaming: a long answer has no bytes to show).
_IO_TIMEOUT_SECONDS = 30.0

MAX_BODY_BYTES = 4 * MAX_RESULT_BYTES
"""Largest response body read: JSON escaping and SSE framing make a body several times its
text, but one past this cannot fit ``MAX_RESULT_BYTES`` however it is framed."""


# --- the provider's wire format -----------------------------------------------------------


class _Wire(BaseModel):
    # Providers add fields freely; only what is read here is checked.
    model_config = ConfigDict(extra="ignore")


class _WireFunction(_Wire):
    name: str | None = None
    arguments: str | None = None


class _WireToolCall(_Wire):
    index: int | None = None
    id: str | None = None
    function: _WireFunction = _WireFunction()


class _WireMessage(_Wire):
    content: str | None = None
    tool_calls: list[_WireToolCall] | None = None


class _WireChoice(_Wire):
    index: int = 0
    message: _WireMessage | None = None
    delta: _WireMessage | None = None
    finish_reason: str | None = None


class _WirePromptDetails(_Wire):
    cached_tokens: int | None = None
    cache_creation_tokens: int | None = None
    cache_write_tokens: int | None = None


class _WireCompletionDetails(_Wire):
    reasoning_tokens: int | None = None


class _WireUsage(_Wire):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cache_write_tokens: int | None = None
    prompt_tokens_details: _WirePromptDetails | None = None
    completion_tokens_details: _WireCompletionDetails | None = None


class _WireCompletion(_Wire):
    """A chat completion, or one chunk of a streamed one."""

    choices: list[_WireChoice] = []
    usage: _WireUsage | None = None


_W = TypeVar("_W", bound=BaseModel)


def _parse(kind: type[_W], data: str | bytes) -> _W:
    try:
        return kind.model_validate_json(data)
    except ValidationError as err:
        raise ProviderResponseError(
            f"not a chat completion: {err.error_count()} problem(s), first: "
            f"{err.errors()[0]['msg']} at {'.'.join(map(str, err.errors()[0]['loc'])) or 'top'}"
        ) from err


def _usage(wire: _WireUsage) -> Usage:
    """The provider's usage split into disjoint parts (each token counted once)."""
    details = wire.prompt_tokens_details or _WirePromptDetails()
    cache_read = details.cached_tokens or 0
    cache_write = (
        details.cache_creation_tokens or details.cache_write_tokens or wire.cache_write_tokens or 0
    )
    reasoning = (wire.completion_tokens_details or _WireCompletionDetails()).reasoning_tokens
    return Usage(
        input_tokens=max(0, (wire.prompt_tokens or 0) - cache_read - cache_write),
        output_tokens=wire.completion_tokens or 0,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_tokens=reasoning or 0,
    )


def _tool_call(
    turn: int, index: int, id_: str | None, name: str | None, args: str
) -> ToolCallRequest:
    if not name:
        raise ProviderResponseError(f"tool call {index} has no function name")
    # Some OpenAI-compatible servers omit ids; the tool result must still answer one.
    return ToolCallRequest(id=id_ or f"call_{turn}_{index}", name=name, arguments=args)


@dataclass
class _Answer:
    text: str
    tool_calls: tuple[ToolCallRequest, ...]
    finish_reason: str | None
    usage: Usage | None
    """``None`` when the provider reported none (then the cost is unknown too)."""
    first_token_ms: float | None = None


def _parse_completion(data: bytes, turn: int) -> _Answer:
    completion = _parse(_WireCompletion, data)
    choice = next((c for c in completion.choices if c.index == 0), None)
    if choice is None or choice.message is None:
        raise ProviderResponseError("no choices[0].message")
    message = choice.message
    calls = tuple(
        _tool_call(turn, i, c.id, c.function.name, c.function.arguments or "")
        for i, c in enumerate(message.tool_calls or ())
    )
    return _Answer(
        text=message.content or "",
        tool_calls=calls,
        finish_reason=choice.finish_reason,
        usage=None if completion.usage is None else _usage(completion.usage),
    )


def _media_type(response: httpx.Response) -> str:
    media_type: str = response.headers.get("content-type", "")
    return media_type.partition(";")[0].strip().lower()


def _excerpt(media_type: str, body: bytes) -> str:
    """What came back, for a reason: the content type and the body's start, on one line."""
    text = " ".join(body[: _EXCERPT_CHARS * 4].decode("utf-8", errors="replace").split())
    if len(text) > _EXCERPT_CHARS:
        text = text[: _EXCERPT_CHARS - 3] + "..."
    return f"{media_type or 'no content type'}, {len(body)} bytes: {text!r}"


def _parse_body(body: bytes, media_type: str, turn: int, started: float) -> _Answer:
    """A whole response body as an answer: a chat completion, or a whole SSE stream.

    Gateways differ from what was asked: some ignore ``stream: true`` and answer JSON,
    some stream when asked not to. A body that is neither is a ProviderResponseError
    saying what came back (content type and start), never a dropped connection: reading
    it again would return the same thing.
    """
    if media_type == "text/event-stream" or body.lstrip().startswith(b"data:"):
        stream = _Stream(started=started)
        for line in body.decode("utf-8", errors="replace").splitlines():
            stream.feed(line)
            if stream.done:
                break
        if not stream.done and stream.finish_reason is None:
            raise ProviderResponseError(
                f"an event stream that never finished: {_excerpt(media_type, body)}"
            )
        return stream.answer(turn)
    try:
        document = json.loads(body)
    except ValueError:
        raise ProviderResponseError(
            f"not a chat completion: {_excerpt(media_type, body)}"
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get("choices"), list):
        raise ProviderResponseError(
            f"JSON that is not a chat completion (no choices list): {_excerpt(media_type, body)}"
        )
    try:
        return _parse_completion(body, turn)
    except ProviderResponseError as err:
        raise ProviderResponseError(f"{err}: {_excerpt(media_type, body)}") from None


async def _read_capped(response: httpx.Response) -> bytes:
    """The body, refusing one past ``MAX_BODY_BYTES`` as soon as it passes it."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ResponseTooLarge(_too_large(int(declared), "response body"))
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ResponseTooLarge(_too_large(size, "response body", more=True))
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int, what: str, *, more: bool = False) -> str:
    limit = MAX_BODY_BYTES if what == "response body" else MAX_RESULT_BYTES
    return (
        f"response too large: {'over ' if more else ''}{size} bytes of {what}, more than the "
        f"{limit} bytes a model call may return through Temporal (whose payload limit is "
        "2 MB); lower max_output_tokens or use a model that answers shorter"
    )


@dataclass
class _PartialCall:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Stream:
    """Reassembles a streamed completion from its server-sent events."""

    started: float
    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: _WireUsage | None = None
    first_token: float | None = None
    done: bool = False
    size: int = 0
    """Bytes of text and tool-call arguments so far, bounded by ``MAX_RESULT_BYTES``."""
    deltas: AttemptDeltas | None = None
    """Where each piece is published as it arrives (for followers), if anywhere."""
    redact: Callable[[str], str] = str
    """Applied to each piece published (the answer itself is redacted whole later)."""

    def feed(self, line: str) -> None:
        """Take one SSE line (``data: {...}``, ``data: [DONE]``, comments, other fields)."""
        if not line.startswith("data:"):
            return  # blank separators, `: keep-alive` comments, `event:`/`id:` fields
        data = line.removeprefix("data:").strip()
        if data == "[DONE]":
            self.done = True
            return
        chunk = _parse(_WireCompletion, data)
        if chunk.usage is not None:
            self.usage = chunk.usage
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                self.text.append(delta.content)
                self._grew(delta.content)
                self._token()
                if self.deltas is not None:
                    self.deltas.text(self.redact(delta.content))
            for position, piece in enumerate(delta.tool_calls or ()):
                # The id and name come in a call's first delta, its arguments in pieces.
                index = position if piece.index is None else piece.index
                call = self.calls.setdefault(index, _PartialCall())
                call.id = call.id or piece.id
                call.name = call.name or piece.function.name
                if piece.function.arguments:
                    call.arguments.append(piece.function.arguments)
                    self._grew(piece.function.arguments)
                self._token()
                if self.deltas is not None:
                    self.deltas.tool_call(
                        index,
                        piece.id,
                        piece.function.name,
                        self.redact(piece.function.arguments or ""),
                    )

    def _grew(self, piece: str) -> None:
        # Fails the call as soon as it cannot fit, instead of buffering an endless stream.
        self.size += len(piece.encode())
        if self.size > MAX_RESULT_BYTES:
            raise ResponseTooLarge(_too_large(self.size, "answer", more=True))

    def _token(self) -> None:
        if self.first_token is None:
            self.first_token = time.monotonic()

    def answer(self, turn: int) -> _Answer:
        if not self.done and self.finish_reason is None:
            raise httpx.RemoteProtocolError("the stream ended before the response finished")
        calls = tuple(
            _tool_call(turn, index, call.id, call.name, "".join(call.arguments))
            for index, call in sorted(self.calls.items())
        )
        return _Answer(
            text="".join(self.text),
            tool_calls=calls,
            finish_reason=self.finish_reason,
            usage=None if self.usage is None else _usage(self.usage),
            first_token_ms=None
            if self.first_token is None
            else (self.first_token - self.started) * 1000,
        )


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def _request_body(
    input: ModelCallInput,
    system: str | None,
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolDefinition],
    *,
    stream: bool,
) -> dict[str, Any]:
    wire = [_wire_message(m) for m in messages]
    if system:
        wire.insert(0, {"role": "system", "content": system})
    body: dict[str, Any] = {"model": input.model, "messages": wire, "stream": stream}
    if tools:
        body["tools"] = [
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
    params = input.params
    for key, value in (
        ("temperature", params.temperature),
        ("top_p", params.top_p),
        ("max_completion_tokens", params.max_output_tokens),
        ("reasoning_effort", params.reasoning_effort),
    ):
        if value is not None:
            body[key] = value
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def _timeout(read: float | None) -> httpx.Timeout:
    return httpx.Timeout(_IO_TIMEOUT_SECONDS, read=read)


@contextlib.asynccontextmanager
async def _heartbeating(details: LiveAttempt | None = None) -> AsyncIterator[None]:
    """Heartbeat on a timer for as long as the call is open.

    Neither a non-streamed answer nor a stream's gaps (a reasoning model may think for
    minutes before its first token, within ``stream_idle_seconds``) give anything to beat
    on in time, so the beat is a timer; it still stops when the worker dies, which is what
    the heartbeat timeout detects. ``details`` (where the attempt's deltas are served) go
    with every beat, the first sent at once (the SDK throttles only later ones), so a
    follower finds them as soon as the attempt starts.
    """
    timeout = activity.info().heartbeat_timeout
    beats = () if details is None else (details,)
    if not timeout:
        if beats:
            activity.heartbeat(*beats)
        yield
        return
    interval = timeout.total_seconds() / 3

    async def beat() -> None:
        while True:
            activity.heartbeat(*beats)
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
