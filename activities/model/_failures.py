"""What went wrong with a model call, decided in one place: ``classify`` turns an HTTP
response or an exception into a ``ModelFailure`` (transient or not, with Retry-After), which
the workflow reads to spend its retry budget or walk the fallbacks."""

from __future__ import annotations

import email.utils
import math
import socket
import ssl
from datetime import UTC, datetime

import httpx

from psych_runtime.activities.blobs import LocalStoreFailed, unreadable_blob
from psych_runtime.activities.contract import ModelCallResult, ModelFailure
from psych_runtime.specs import NotFound, StoreUnavailable

_TRANSIENT_STATUSES = frozenset({408, 429})
_PROVIDER_MESSAGE_LIMIT = 500
_EXCERPT_CHARS = 200

MAX_RESULT_BYTES = 1_500_000
"""Largest ``ModelCallResult`` (as JSON) a call returns. Temporal refuses payloads over
2 MB (its default blob limit), and a refused completion would be retried as if the worker
had failed; a larger answer fails at once, not transient, naming its size."""


# --- failures -----------------------------------------------------------------------------


class StreamIdle(Exception):
    """A response sent nothing for longer than its idle limit (``stream_idle_seconds``).
    Transient.

    Streamed, the limit is the gap between chunks; not streamed (an endpoint configured
    ``stream=False``), the gap between any bytes of the response, which for most servers
    is the wait for the whole answer. Raised and classified inside this module only; it
    leaves as a ModelCallFailed.
    """

    def __init__(self, seconds: float, *, streamed: bool = True) -> None:
        if streamed:
            text = f"stream idle for more than {seconds:g} s"
        else:
            text = (
                f"response idle for more than {seconds:g} s (not streamed: "
                "stream_idle_seconds bounds the wait for the answer's bytes)"
            )
        super().__init__(text)
        self.seconds = seconds


class ProviderResponseError(Exception):
    """A provider answered with something that is not a chat completion. Not transient.

    Raised and classified inside this module only; it leaves as a ModelCallFailed.
    """


class ProviderError(Exception):
    """A provider answered 200 and then reported an error in the body: an ``event: error``
    in the stream, or a chunk or a whole body carrying an ``error`` object (Groq and
    OpenRouter send these when a call fails after the status line went out).

    Raised and classified inside this module only; it leaves as a ModelCallFailed that
    carries the provider's message. ``classify`` decides whether it is transient from
    ``code`` and ``kind``.
    """

    def __init__(self, message: str, *, code: object = None, kind: str | None = None) -> None:
        self.provider_message = " ".join(message.split()) or "no message"
        if len(self.provider_message) > _PROVIDER_MESSAGE_LIMIT:
            self.provider_message = self.provider_message[: _PROVIDER_MESSAGE_LIMIT - 3] + "..."
        self.code = code
        """The error's ``code`` as sent: a number (429, 502) or a word (``rate_limit_exceeded``)."""
        self.kind = kind
        """The error's ``type`` (``overloaded_error``, ``invalid_request_error``), if any."""
        said = ", ".join(
            f"{label} {value}"
            for label, value in (("code", code), ("type", kind))
            if value is not None and value != ""
        )
        super().__init__(self.provider_message + (f" ({said})" if said else ""))

    @property
    def status(self) -> int | None:
        """The code when it is an HTTP status (a number from 100 to 599), else ``None``."""
        code = self.code
        if isinstance(code, str) and code.isdigit():
            code = int(code)
        if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599:
            return code
        return None


class ResponseTooLarge(ProviderResponseError):
    """An answer too large to return through Temporal. Not transient: it would be as
    large next time.
    """


def classify(cause: httpx.Response | BaseException, *, model: str) -> ModelFailure:
    """Decide whether a failed model call is transient, and describe it.

    Transient: HTTP 5xx, 429 and 408, connection errors and timeouts, a connection dropped
    mid-response, a stalled stream, an error the provider sent inside a 200 response
    (``ProviderError``) whose code is one of those statuses or whose code or type names a
    rate limit, overload or server-side trouble, and a store of the call's input or answer
    that did not answer (``StoreUnavailable``: the blob by ref and the store's kind, its
    endpoint only in the worker's log; a local disk's error, ``LocalStoreFailed``, alike:
    the errno's name and words, its path only in the log, transient unless it lasts: a
    read-only or unwritable directory). Everything else (other 4xx such as 401 and 403, a
    host name that does not resolve, a TLS certificate that does not verify (self-signed,
    expired, another host's: it verifies no better on the next attempt), a response that
    is not a chat completion,
    configuration errors, a blob of the call's input that cannot be read: missing, its
    seal refused or its bytes damaged, said by ref with ``unreadable_blob``, where the store
    is only in the worker's log: ``blob_words``) is not: repeating the call cannot help.

    Args:
        cause: an error response (its body read), ``httpx.HTTPStatusError``, an httpx
            exception, ``StreamIdle``, ``ProviderError``, ``ProviderResponseError`` or
            anything else raised.
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
    unresolved = _name_resolution_error(cause)
    if unresolved is not None:
        # A name that does not resolve is a wrong OPENAI_BASE_URL or a machine with no
        # network; the resolver already retried within getaddrinfo. Spending the Run's
        # transient budget on it took minutes and hid the cause behind retries.
        transient = False
        text = f"cannot resolve {_host(cause)}: {unresolved.strerror or unresolved}"
    elif (refused := _certificate_error(cause)) is not None:
        # Lasting as a name that does not resolve: a certificate the worker's trust store
        # refuses is refused again after every backoff, and the budget spent on it (a
        # minute and a half by default) only delayed saying so.
        transient = False
        text = (
            f"the TLS certificate of {_host(cause)} does not verify: "
            f"{refused.verify_message or refused}"
        )
    elif isinstance(cause, StreamIdle):
        text = str(cause)
    elif isinstance(cause, httpx.RemoteProtocolError):
        text = f"connection dropped mid-response ({_describe(cause)})"
    elif isinstance(cause, httpx.TimeoutException | httpx.NetworkError | httpx.ProxyError):
        text = _describe(cause)
    elif isinstance(cause, StoreUnavailable):
        # A local disk's error that lasts (read-only, permission refused) is the
        # deployment's to mend: the Run's budget would only delay saying so.
        transient = not (isinstance(cause, LocalStoreFailed) and cause.lasting)
        text = str(cause)
    elif isinstance(cause, ProviderError):
        return ModelFailure(
            transient=_provider_error_transient(cause),
            status=cause.status,
            message=f"model {model}: provider error in a 200 response: {cause}",
        )
    else:
        transient = False
        unreadable = unreadable_blob(cause)
        if unreadable is not None:
            # Read before any request: the model was not called, and no retry opens it.
            text = f"not called: {unreadable}"
        elif isinstance(cause, ResponseTooLarge):
            text = str(cause)
        elif isinstance(cause, ProviderResponseError):
            text = f"malformed provider response: {cause}"
        elif isinstance(cause, NotFound):
            text = str(cause)
        else:
            text = _describe(cause)
    return ModelFailure(transient=transient, message=f"model {model}: {text}")


# Words in an error's code or type that mean "try again later": rate limits, overload, and
# the provider's own (5xx-like) trouble. Anything else (invalid request, content filter,
# tool_use_failed, context length) would fail the same way again.
_TRANSIENT_WORDS = (
    "rate_limit",
    "ratelimit",
    "too_many_requests",
    "overloaded",
    "capacity",
    "server_error",
    "internal_error",
    "unavailable",
    "timeout",
    "timed_out",
)


def _provider_error_transient(error: ProviderError) -> bool:
    status = error.status
    if status is not None:
        return status >= 500 or status in _TRANSIENT_STATUSES
    words = " ".join(
        str(value).lower().replace("-", "_").replace(" ", "_")
        for value in (error.code, error.kind)
        if value is not None
    )
    return any(word in words for word in _TRANSIENT_WORDS)


def _name_resolution_error(err: BaseException) -> socket.gaierror | None:
    """The ``getaddrinfo`` failure behind an httpx connect error, if that is what it was."""
    if not isinstance(err, httpx.ConnectError):
        return None
    link: BaseException | None = err
    while link is not None:
        if isinstance(link, socket.gaierror):
            return link
        link = link.__cause__ or link.__context__
    return None


def _certificate_error(err: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure behind an httpx connect error, if that is what
    it was (the handshake's: ``CERTIFICATE_VERIFY_FAILED``)."""
    if not isinstance(err, httpx.ConnectError):
        return None
    link: BaseException | None = err
    while link is not None:
        if isinstance(link, ssl.SSLCertVerificationError):
            return link
        link = link.__cause__ or link.__context__
    return None


def _host(err: BaseException) -> str:
    try:
        if isinstance(err, httpx.RequestError):
            return f"host {err.request.url.host!r}"
    except RuntimeError:  # raised without its request (httpx sets it on every real call)
        pass
    return "the endpoint's host"


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


_FIXED_BYTES = 4096
"""More than the JSON of a result's fields other than its strings (usage, latency, cost,
the keys and punctuation)."""


def surely_fits(result: ModelCallResult) -> bool:
    """Whether ``result``'s JSON is surely within ``MAX_RESULT_BYTES``, without writing it.

    An upper bound: a character takes at most 6 bytes of JSON (``\\u00XX``), each tool call
    its three strings plus its punctuation. MCP and context results are structured and
    unbounded here, so they are always measured whole (as is anything near the limit).
    """
    if result.mcp is not None or result.context is not None:
        return False
    chars = len(result.model) + len(result.text) + len(result.finish_reason or "")
    chars += len(result.system_ref or "") + len(result.context_ref)
    for call in result.tool_calls:
        chars += len(call.id) + len(call.name) + len(call.arguments) + 64
    return 6 * chars + _FIXED_BYTES <= MAX_RESULT_BYTES
