"""Model calls: the ``psych.model.complete`` activity over OpenAI chat completions.

The workflow sends a model id and the conversation by reference (DESIGN.md §4); this
activity resolves the references in the BlobStore, calls the endpoint the worker configured
for that model id, stores the assistant message and returns the new conversation head.

Retrying is not done here. The HTTP client runs with its own retries off (httpx never
retries), every failure leaves as a non-retryable ``ModelCallFailed`` ApplicationError whose
details are a ``ModelFailure``, and the workflow decides from ``ModelFailure.transient``
whether to spend its per-Run transient budget or walk ``ModelRef.fallbacks``. ``classify``
is the one place that decides what is transient.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import json
import math
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType, TracebackType
from typing import Any, Protocol, Self, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from psych_runtime.activities._activity_class import ActivityClass
from psych_runtime.activities._blobs import BlobStore, Conversations
from psych_runtime.activities._payloads import (
    MODEL_COMPLETE,
    ChatMessage,
    Latency,
    ModelCallInput,
    ModelCallResult,
    ModelFailure,
    ToolCallRequest,
    ToolDefinition,
    Usage,
)
from psych_runtime.activities._redact import Redactor
from psych_runtime.specs import NotFound, SpecError

MODEL_CALL_FAILED = "ModelCallFailed"
"""The ApplicationError type of every failed model call; its details are a ModelFailure."""

DEFAULT_BASE_URL = "https://api.openai.com/v1"

# Connect, write and pool waits. Reads are bounded by the stream idle limit (streaming) or by
# the activity's start-to-close timeout (non-streaming: a long answer has no bytes to show).
_IO_TIMEOUT_SECONDS = 30.0
_DRAIN_SECONDS = 1.0
_TRANSIENT_STATUSES = frozenset({408, 429})
_PROVIDER_MESSAGE_LIMIT = 500
_EXCERPT_CHARS = 200

MAX_RESULT_BYTES = 1_500_000
"""Largest ``ModelCallResult`` (as JSON) a call returns. Temporal refuses payloads over
2 MB (its default blob limit), and a refused completion would be retried as if the worker
had failed; a larger answer fails at once, not transient, naming its size."""
MAX_BODY_BYTES = 4 * MAX_RESULT_BYTES
"""Largest response body read: JSON escaping and SSE framing make a body several times its
text, but one past this cannot fit ``MAX_RESULT_BYTES`` however it is framed."""
API_KEY_NAME = "model-api-key"
"""The name an endpoint's API key is redacted as: ``[REDACTED:model-api-key]``."""


# --- endpoints ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat-completions endpoint and its credential."""

    base_url: str
    """The API base, e.g. ``https://api.openai.com/v1``; ``/chat/completions`` is appended."""
    api_key: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer``; ``None`` sends no Authorization header."""
    stream: bool = True
    """Whether calls may stream (SSE). ``False`` always asks for a whole answer, for a
    gateway that cannot stream; ``True`` streams when the workflow asks to."""


class ModelEndpoints:
    """Worker configuration: which endpoint and credential serve which model id.

    It lives on the worker and is never part of a workflow payload, so credentials stay
    out of history; a workflow names models by id only.
    """

    def __init__(
        self, default: Endpoint | None = None, routes: Mapping[str, Endpoint] | None = None
    ) -> None:
        """Configure endpoints.

        Args:
            default: serves every model id without a route; ``None`` = none.
            routes: endpoints for specific model ids.
        """
        self.default = default
        self.routes: Mapping[str, Endpoint] = MappingProxyType(dict(routes or {}))

    def for_model(self, model_id: str) -> Endpoint:
        """The endpoint serving ``model_id``: its route, else the default.

        Raises:
            NotFound: no route and no default (a configuration error, never transient).
        """
        endpoint = self.routes.get(model_id, self.default)
        if endpoint is None:
            raise NotFound(
                f"no model endpoint configured for {model_id!r}: the worker's ModelEndpoints "
                "has no route for it and no default"
            )
        return endpoint

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ModelEndpoints:
        """One default endpoint from ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and
        ``OPENAI_STREAM``.

        ``OPENAI_BASE_URL`` defaults to OpenAI's API; an unset or empty key sends none;
        ``OPENAI_STREAM=0`` (or ``false``/``no``/``off``) turns streaming off.

        Raises:
            SpecError: ``OPENAI_STREAM`` is set to something other than a yes or a no.
        """
        base_url = environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        stream = _flag("OPENAI_STREAM", environ.get("OPENAI_STREAM", ""), default=True)
        return cls(default=Endpoint(base_url, environ.get("OPENAI_API_KEY") or None, stream=stream))

    def __repr__(self) -> str:
        return f"ModelEndpoints(default={self.default!r}, routes={dict(self.routes)!r})"


def _flag(variable: str, text: str, *, default: bool) -> bool:
    value = text.strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise SpecError(f"{variable}={text!r}: expected 1/0, true/false, yes/no or on/off")


# --- pricing ------------------------------------------------------------------------------


class Pricing(Protocol):
    """Port: the cost of one model call's usage, at call time."""

    def price(self, model: str, usage: Usage) -> float | None:
        """The cost of ``usage`` on ``model``; ``None`` when unknown, never 0 for unknown."""
        ...


@dataclass(frozen=True)
class ModelPrice:
    """Prices of one model per million tokens.

    A cache price of ``None`` is unknown: a call that used such tokens has no price.
    """

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None


class TablePricing:
    """Pricing from a fixed table keyed by model id; unknown models price as ``None``."""

    def __init__(self, prices: Mapping[str, ModelPrice]) -> None:
        self.prices: Mapping[str, ModelPrice] = MappingProxyType(dict(prices))

    def price(self, model: str, usage: Usage) -> float | None:
        """The cost of ``usage`` on ``model``, or ``None`` if any part of it has no price."""
        prices = self.prices.get(model)
        if prices is None:
            return None
        total = 0.0
        for tokens, per_million in (
            (usage.input_tokens, prices.input),
            (usage.output_tokens, prices.output),
            (usage.cache_read_tokens, prices.cache_read),
            (usage.cache_write_tokens, prices.cache_write),
        ):
            if tokens:
                if per_million is None:
                    return None
                total += tokens * per_million
        return total / 1_000_000


# --- failures -----------------------------------------------------------------------------


class StreamIdle(Exception):
    """A stream sent nothing for longer than its idle limit. Transient.

    Raised and classified inside this module only; it leaves as a ModelCallFailed.
    """

    def __init__(self, seconds: float) -> None:
        super().__init__(f"stream idle for more than {seconds:g} s")
        self.seconds = seconds


class ProviderResponseError(Exception):
    """A provider answered with something that is not a chat completion. Not transient.

    Raised and classified inside this module only; it leaves as a ModelCallFailed.
    """


class ResponseTooLarge(ProviderResponseError):
    """An answer too large to return through Temporal. Not transient: it would be as
    large next time.
    """


def classify(cause: httpx.Response | BaseException, *, model: str) -> ModelFailure:
    """Decide whether a failed model call is transient, and describe it.

    Transient: HTTP 5xx, 429 and 408, connection errors and timeouts, a connection dropped
    mid-response, and a stalled stream. Everything else (other 4xx, a response that is not
    a chat completion, configuration errors) is not: repeating the call cannot help.

    Args:
        cause: an error response (its body read), ``httpx.HTTPStatusError``, an httpx
            exception, ``StreamIdle``, ``ProviderResponseError`` or anything else raised.
        model: the model id called, which starts the message.
    """
    if isinstance(cause, httpx.HTTPStatusError):
        cause = cause.response
    if isinstance(cause, httpx.Response):
        status = cause.status_code
        reason = cause.reason_phrase or httpx.codes.get_reason_phrase(status)
        text = f"HTTP {status} {reason}".rstrip()
        detail = _provider_message(cause)
        return ModelFailure(
            transient=status >= 500 or status in _TRANSIENT_STATUSES,
            status=status,
            retry_after=_retry_after(cause.headers),
            message=f"model {model}: {text}: {detail}" if detail else f"model {model}: {text}",
        )
    transient = True
    if isinstance(cause, StreamIdle):
        text = str(cause)
    elif isinstance(cause, httpx.RemoteProtocolError):
        text = f"connection dropped mid-response ({_describe(cause)})"
    elif isinstance(cause, httpx.TimeoutException | httpx.NetworkError | httpx.ProxyError):
        text = _describe(cause)
    else:
        transient = False
        if isinstance(cause, ResponseTooLarge):
            text = str(cause)
        elif isinstance(cause, ProviderResponseError):
            text = f"malformed provider response: {cause}"
        elif isinstance(cause, NotFound):
            text = str(cause)
        else:
            text = _describe(cause)
    return ModelFailure(transient=transient, message=f"model {model}: {text}")


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def _provider_message(response: httpx.Response) -> str:
    """The provider's error message: OpenAI's ``error.message``, else the body, shortened."""
    try:
        text = response.text
    except httpx.ResponseNotRead:
        return ""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            text = error["message"]
        elif isinstance(error, str):
            text = error
        elif isinstance(body.get("message"), str):
            text = body["message"]
    text = " ".join(text.split())
    if len(text) > _PROVIDER_MESSAGE_LIMIT:
        text = text[: _PROVIDER_MESSAGE_LIMIT - 3] + "..."
    return text


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds from ``retry-after-ms`` (OpenAI's, more precise) or ``Retry-After``.

    ``Retry-After`` is either seconds or an HTTP date; a date in the past means 0.
    """
    millis = _seconds(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return max(0.0, number) if math.isfinite(number) else None


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
_TOOL_LIST = TypeAdapter(list[ToolDefinition])


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
            for position, piece in enumerate(delta.tool_calls or ()):
                # The id and name come in a call's first delta, its arguments in pieces.
                call = self.calls.setdefault(
                    position if piece.index is None else piece.index, _PartialCall()
                )
                call.id = call.id or piece.id
                call.name = call.name or piece.function.name
                if piece.function.arguments:
                    call.arguments.append(piece.function.arguments)
                    self._grew(piece.function.arguments)
                self._token()

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
async def _heartbeating() -> AsyncIterator[None]:
    """Heartbeat on a timer for as long as the call is open.

    Neither a non-streamed answer nor a stream's gaps (a reasoning model may think for
    minutes before its first token, within ``stream_idle_seconds``) give anything to beat
    on in time, so the beat is a timer; it still stops when the worker dies, which is what
    the heartbeat timeout detects.
    """
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        yield
        return
    interval = timeout.total_seconds() / 3

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# --- the activity -------------------------------------------------------------------------


class ModelActivities(ActivityClass):
    """The model-call activity and its collaborators.

    Register ``activities()`` (``complete``) on a worker. The instance keeps one
    ``Conversations`` so that a Run's next call resolves its conversation head from cache
    (O(1) per call).
    """

    def __init__(
        self,
        *,
        endpoints: ModelEndpoints,
        blobs: BlobStore,
        pricing: Pricing | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        """Bind the activity to its collaborators.

        Args:
            endpoints: which endpoint serves which model id.
            blobs: where conversations, system prompts and tool lists are stored.
            pricing: prices calls; ``None`` leaves every cost unknown.
            http: the client for provider requests (e.g. one from the egress policy);
                ``None`` creates one that ``aclose`` closes. Either way its timeouts are
                set per request and nothing retries.
        """
        self.endpoints = endpoints
        self.blobs = blobs
        self.pricing = pricing
        self.conversations = Conversations(blobs)
        self._owns_http = http is None
        self.http = httpx.AsyncClient(timeout=_timeout(None)) if http is None else http

    async def aclose(self) -> None:
        """Close the HTTP client if this instance created it."""
        if self._owns_http:
            await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @activity.defn(name=MODEL_COMPLETE)
    async def complete(self, input: ModelCallInput) -> ModelCallResult:
        """Call the model on the stored conversation plus what is new; store its answer.

        The endpoint's API key is redacted (``[REDACTED:model-api-key]``) from everything
        taken from the response: the answer, failure messages, their causes and the log.

        Raises:
            ApplicationError: type ``ModelCallFailed``, non-retryable, category BENIGN,
                details a ``ModelFailure`` saying whether the failure is transient.
        """
        started = time.monotonic()
        redact = Redactor()
        try:
            # Beats from the start: rebuilding a long conversation from a slow BlobStore
            # happens before the request and must not look like a lost worker.
            async with _heartbeating():
                return await self._complete(input, started, redact)
        except Exception as err:
            # The one place foreign exceptions are mapped. Non-retryable: the workflow
            # retries transient failures against its per-Run budget and fallbacks.
            failure = classify(err, model=input.model)
            failure = failure.model_copy(update={"message": redact(failure.message)})
            # The workflow handles every model failure, so it is an expected outcome:
            # one line here, and BENIGN makes the SDK log its traceback at DEBUG instead
            # of WARNING.
            activity.logger.warning(
                "model call failed (%s): %s",
                "transient" if failure.transient else "not transient",
                failure.message,
            )
            raise ApplicationError(
                failure.message,
                failure.model_dump(mode="json"),
                type=MODEL_CALL_FAILED,
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            ) from redact.scrub(err)

    async def _complete(
        self, input: ModelCallInput, started: float, redact: Redactor
    ) -> ModelCallResult:
        endpoint = self.endpoints.for_model(input.model)
        if endpoint.api_key:
            redact.add(API_KEY_NAME, endpoint.api_key)
        stream = input.stream and endpoint.stream
        system_ref, system = await self._system(input)
        history = await self.conversations.messages(input.context_ref)
        new_refs: list[str] = []
        new_messages: list[ChatMessage] = []
        for item in input.new_messages:
            if isinstance(item, ChatMessage):
                new_refs.append(await self.conversations.put_message(item))
                new_messages.append(item)
            else:
                new_refs.append(item)
                new_messages.append(await self.conversations.get_message(item))
        tools = await self._tools(input)
        body = _request_body(input, system, [*history, *new_messages], tools, stream=stream)
        url = endpoint.base_url.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}

        if stream:
            answer = await self._stream(url, body, headers, input, started)
        else:
            answer = await self._post(url, body, headers, input, started)
        answer = dataclasses.replace(
            answer,
            text=redact(answer.text),
            tool_calls=tuple(
                call.model_copy(update={"arguments": redact(call.arguments)})
                for call in answer.tool_calls
            ),
        )

        assistant = ChatMessage(role="assistant", content=answer.text, tool_calls=answer.tool_calls)
        assistant_ref = await self.conversations.put_message(assistant)
        head = await self.conversations.append(input.context_ref, [*new_refs, assistant_ref])
        assert head is not None  # the node holds at least the assistant message
        usage = answer.usage or Usage()
        cost = (
            None
            if self.pricing is None or answer.usage is None
            else self.pricing.price(input.model, usage)
        )
        info = activity.info()
        queue_wait = (info.started_time - info.current_attempt_scheduled_time).total_seconds()
        result = ModelCallResult(
            model=input.model,
            system_ref=system_ref,
            context_ref=head,
            text=answer.text,
            tool_calls=answer.tool_calls,
            finish_reason=answer.finish_reason,
            usage=usage,
            cost=cost,
            latency=Latency(
                queue_wait_ms=max(0.0, queue_wait * 1000),
                duration_ms=(time.monotonic() - started) * 1000,
                first_token_ms=answer.first_token_ms,
            ),
        )
        size = len(result.model_dump_json())
        if size > MAX_RESULT_BYTES:
            raise ResponseTooLarge(_too_large(size, "result"))
        return result

    async def _system(self, input: ModelCallInput) -> tuple[str | None, str | None]:
        """The system prompt's ref and text: stored now if inline, else loaded."""
        if input.system_prompt is not None:
            return await self.blobs.put(input.system_prompt.encode()), input.system_prompt
        if input.system_ref is not None:
            return input.system_ref, (await self.blobs.get(input.system_ref)).decode()
        return None, None

    async def _tools(self, input: ModelCallInput) -> list[ToolDefinition]:
        if input.tools_ref is None:
            return []
        tools = _TOOL_LIST.validate_json(await self.blobs.get(input.tools_ref))
        excluded = set(input.exclude_tools)
        return [t for t in tools if t.name not in excluded]

    async def _post(
        self,
        url: str,
        body: dict[str, Any],
        headers: dict[str, str],
        input: ModelCallInput,
        started: float,
    ) -> _Answer:
        async with self.http.stream(
            "POST", url, json=body, headers=headers, timeout=_timeout(None)
        ) as response:
            if not response.is_success:
                await response.aread()
                response.raise_for_status()
            data = await _read_capped(response)
        return _parse_body(data, _media_type(response), input.turn, started)

    async def _stream(
        self,
        url: str,
        body: dict[str, Any],
        headers: dict[str, str],
        input: ModelCallInput,
        started: float,
    ) -> _Answer:
        idle = input.stream_idle_seconds
        stream = _Stream(started=started)
        try:
            async with self.http.stream(
                "POST", url, json=body, headers=headers, timeout=_timeout(idle or None)
            ) as response:
                if not response.is_success:
                    await response.aread()
                    response.raise_for_status()
                media_type = _media_type(response)
                if media_type != "text/event-stream":
                    # A gateway that ignores `stream: true` (a whole JSON completion), or
                    # something else entirely (an HTML page): judged whole, by content.
                    data = await _read_capped(response)
                    return _parse_body(data, media_type, input.turn, started)
                lines = response.aiter_lines()
                async for line in lines:
                    stream.feed(line)
                    if stream.done:
                        break
                # Drain what follows [DONE] (normally nothing): a response left unread
                # closes its connection, and the next call would pay a new TCP (and TLS)
                # handshake. Bounded, so a server holding the stream open after [DONE]
                # cannot turn a complete answer into an idle failure.
                if stream.done:
                    with contextlib.suppress(TimeoutError, httpx.HTTPError):
                        async with asyncio.timeout(_DRAIN_SECONDS):
                            async for _ in lines:
                                pass
        except httpx.ReadTimeout as err:
            # The read timeout is the idle limit: only a silent stream can exceed it.
            raise StreamIdle(idle) from err
        return stream.answer(input.turn)
