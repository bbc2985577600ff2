"""The OpenAI chat-completions wire format: the request body, a whole JSON completion, the
errors a provider sends inside a 200 response, and the fields it needs echoed back. A
streamed completion is reassembled in ``_stream``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from temporalio import activity

from psych_runtime.activities._beat import BeatTimer
from psych_runtime.activities.contract import (
    LiveAttempt,
    ToolCallRequest,
    Usage,
    well_formed,
)
from psych_runtime.activities.model._failures import (
    _EXCERPT_CHARS,
    MAX_RESULT_BYTES,
    ProviderError,
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

    @field_validator("arguments", mode="before")
    @classmethod
    def _object_as_text(cls, value: object) -> object:
        # OpenAI sends the arguments as JSON text; TGI, and llama.cpp's server for a time
        # (ggml-org/llama.cpp#20198), send the object itself: the same call, written out.
        if isinstance(value, dict):
            return json.dumps(value, ensure_ascii=False)
        return value


class _WireToolCall(_Wire):
    index: int | None = None
    id: str | None = None
    function: _WireFunction = _WireFunction()
    extra_content: dict[str, Any] | None = None


class _WirePart(_Wire):
    """One typed part of a list ``content`` (Mistral's ``text`` and ``thinking``)."""

    type: str | None = None
    text: str | None = None


class _WireMessage(_Wire):
    content: str | list[_WirePart] | None = None
    tool_calls: list[_WireToolCall] | None = None
    extra_content: dict[str, Any] | None = None


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


def _parse(kind: type[_W], data: str | bytes | dict[str, Any]) -> _W:
    """``data`` (JSON text, or a JSON object already decoded) as ``kind``."""
    try:
        if isinstance(data, dict):
            return kind.model_validate(data)
        return kind.model_validate_json(data)
    except ValidationError as err:
        raise ProviderResponseError(
            f"not a chat completion: {err.error_count()} problem(s), first: "
            f"{err.errors()[0]['msg']} at {'.'.join(map(str, err.errors()[0]['loc'])) or 'top'}"
        ) from err


# The fields a provider needs sent back verbatim with the assistant message or tool call
# they came on (Gemini's OpenAI-compatible endpoint puts its thought signature in
# ``extra_content``; a request without it is refused once the model thinks). Kept as
# ``provider_fields`` on the stored message, merged back into its wire form.
_ECHOED_FIELDS = ("extra_content",)


def _echoed(wire: _WireMessage | _WireToolCall) -> dict[str, Any]:
    return {name: value for name in _ECHOED_FIELDS if (value := getattr(wire, name)) is not None}


def _merge(into: dict[str, Any], piece: dict[str, Any]) -> None:
    """Merge a streamed delta's echoed fields into what came before (objects key by key,
    anything else replaced), as a provider may spread them over several deltas."""
    for key, value in piece.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merged = dict(into[key])
            _merge(merged, value)
            into[key] = merged
        else:
            into[key] = value


def _text(content: str | list[_WirePart] | None) -> str:
    """The answer text of a ``content``: the string, or a list's ``text`` parts joined.

    Other parts are not answer text: ``thinking`` (Mistral's reasoning) has no place in a
    Run's records and is dropped (its tokens are in the provider's usage, if it reports
    them); parts of other types carry nothing a chat answer shows.
    """
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(part.text for part in content if part.type == "text" and part.text)


def _provider_error(document: object, *, error_event: bool = False) -> ProviderError | None:
    """The error a provider sent inside a 200 response, if ``document`` is one.

    ``{"error": {...}}`` (OpenAI's shape, which Groq and OpenRouter also send as a chunk,
    sometimes beside ``choices``), ``{"error": "text"}``, ``{"object": "error", ...}``
    (vLLM's), or anything sent as an ``event: error`` (``error_event``).
    """
    if isinstance(document, dict):
        error = document.get("error")
        if isinstance(error, str) and error:
            return ProviderError(error)
        if not isinstance(error, dict):
            if not (error_event or document.get("object") == "error"):
                return None
            error = document
        message = error.get("message")
        if not isinstance(message, str):
            message = json.dumps(error, ensure_ascii=False)
        kind = error.get("type")
        return ProviderError(
            message, code=error.get("code"), kind=kind if isinstance(kind, str) else None
        )
    if error_event:
        return ProviderError(document if isinstance(document, str) else json.dumps(document))
    return None


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
    turn: int,
    index: int,
    id_: str | None,
    name: str | None,
    args: str,
    echoed: dict[str, Any] | None = None,
) -> ToolCallRequest:
    if not name:
        raise ProviderResponseError(f"tool call {index} has no function name")
    # Some OpenAI-compatible servers omit ids; the tool result must still answer one.
    return ToolCallRequest(
        id=id_ or f"call_{turn}_{index}",
        name=name,
        arguments=args,
        provider_fields=echoed or None,
    )


@dataclass
class _Answer:
    text: str
    tool_calls: tuple[ToolCallRequest, ...]
    finish_reason: str | None
    usage: Usage | None
    """``None`` when the provider reported none (then the cost is unknown too)."""
    first_token_ms: float | None = None
    provider_fields: dict[str, Any] | None = None
    """What the provider needs back on this assistant message (``_ECHOED_FIELDS``)."""


def _check_finish(finish_reason: str | None) -> None:
    """An answer the provider itself ended as failed is not an answer, even when it sent no
    ``error`` object saying why (OpenRouter's ``finish_reason: "error"``)."""
    if finish_reason == "error":
        raise ProviderError('the answer ended with finish_reason "error" and no error message')


def _parse_completion(data: dict[str, Any], turn: int) -> _Answer:
    completion = _parse(_WireCompletion, data)
    choice = next((c for c in completion.choices if c.index == 0), None)
    if choice is None or choice.message is None:
        raise ProviderResponseError("no choices[0].message")
    _check_finish(choice.finish_reason)
    message = choice.message
    calls = tuple(
        _tool_call(
            turn, i, c.id, c.function.name, well_formed(c.function.arguments or ""), _echoed(c)
        )
        for i, c in enumerate(message.tool_calls or ())
    )
    return _Answer(
        text=well_formed(_text(message.content)),
        tool_calls=calls,
        finish_reason=choice.finish_reason,
        usage=None if completion.usage is None else _usage(completion.usage),
        provider_fields=_echoed(message) or None,
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


def _timeout(read: float | None) -> httpx.Timeout:
    return httpx.Timeout(_IO_TIMEOUT_SECONDS, read=read)


LIVE_FIRST_BEAT_SECONDS = 0.05
"""How long a call with live deltas runs before its first beat offers their address.

A shorter call is over before a follower could read a piece live (its record follows at
once), and a beat is a server round trip: at once, it cost every call one, about a fifth
of a zero-latency call's time. A provider's first token comes later than this (hundreds of
milliseconds), so a follower still finds the relay before there is text to read, and
reads every piece from the first: the hub keeps them all."""


CANCEL_BEAT_SECONDS = 5.0
"""The longest a model call goes without a beat. A cancelled call (its Run aborted,
cancelled or past its deadline) learns of it only from a beat's answer: at a third of the
70 s heartbeat timeout apart, the provider went on writing, and billing, an aborted Run's
answer for up to 23 s. A worker sends a tool call's beats at most every 5 s
(``HEARTBEAT_THROTTLE``) too."""


@contextlib.asynccontextmanager
async def _heartbeating(details: LiveAttempt | None = None) -> AsyncIterator[None]:
    """Heartbeat on a timer for as long as the call is open.

    Neither a non-streamed answer nor a stream's gaps (a reasoning model may think for
    minutes before its first token, within ``stream_idle_seconds``) give anything to beat
    on in time, so the beat is a timer; it still stops when the worker dies, which is what
    the heartbeat timeout detects, and its answer is how the call learns it was cancelled
    (an abort, the Run cancelled or past its deadline), so it beats at least every
    ``CANCEL_BEAT_SECONDS``. ``details`` (where the attempt's deltas are served) go with
    every beat, the first after ``LIVE_FIRST_BEAT_SECONDS`` (the SDK throttles only later
    ones), so a follower finds them as soon as there is anything to follow. Without
    details the first beat waits the interval: the usual call, shorter than that, sends
    none.
    """
    timeout = activity.info().heartbeat_timeout
    interval = CANCEL_BEAT_SECONDS
    if timeout:
        interval = min(interval, timeout.total_seconds() / 3)
    first = LIVE_FIRST_BEAT_SECONDS if details is not None else interval
    # A timer of the event loop rather than a task: the usual call, shorter than the
    # first wait, costs one timer.
    timer = BeatTimer(first, interval, () if details is None else (details,))
    try:
        yield
    finally:
        timer.cancel()


def _unreported(usage: Usage | None) -> bool:
    """Whether a provider's ``usage`` tells nothing of the prompt's size: none came, or it
    says zero input, cache-read and cache-write tokens (no request is that small)."""
    return usage is None or not (
        usage.input_tokens or usage.cache_read_tokens or usage.cache_write_tokens
    )
