"""A streamed chat completion: server-sent events split into lines and events, the answer
reassembled from its chunks (text, tool calls, usage), and a whole body judged by content."""

from __future__ import annotations

import codecs
import json
import re
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import ValidationError

from psych_runtime.activities.contract import well_formed
from psych_runtime.activities.live import AttemptDeltas
from psych_runtime.activities.model._failures import (
    MAX_RESULT_BYTES,
    ProviderResponseError,
    ResponseTooLarge,
)
from psych_runtime.activities.model._wire import (
    _Answer,
    _check_finish,
    _echoed,
    _excerpt,
    _merge,
    _parse,
    _parse_completion,
    _provider_error,
    _text,
    _too_large,
    _tool_call,
    _usage,
    _WireCompletion,
    _WireToolCall,
    _WireUsage,
)

# The only line ends of an event stream (the SSE grammar): CRLF, CR or LF. Not
# ``str.splitlines``, which also splits at U+2028, U+0085 and others that JSON carries raw
# inside strings, cutting a chunk in two.
_LINE_END = re.compile("\r\n|\r|\n")


class _Lines:
    """Splits UTF-8 bytes arriving in pieces into lines, at CR, LF or CRLF only."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._rest = ""
        self._after_cr = False

    def feed(self, data: bytes) -> list[str]:
        text = self._decoder.decode(data)
        if not text:
            return []
        if self._after_cr and text.startswith("\n"):
            text = text[1:]  # the LF of a CRLF split between two pieces
        self._after_cr = text.endswith("\r")
        lines = _LINE_END.split(self._rest + text)
        self._rest = lines.pop()
        return lines

    def flush(self) -> list[str]:
        rest = self._rest + self._decoder.decode(b"", final=True)
        self._rest = ""
        return [rest] if rest else []


async def _sse_lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[str]:
    """The lines of an event stream read in pieces (the last one even without its end)."""
    lines = _Lines()
    async for chunk in chunks:
        for line in lines.feed(chunk):
            yield line
    for line in lines.flush():
        yield line


def _plain_chunk(value: str) -> _WireCompletion | None:
    """``value`` as a chunk, read in one pass, when it cannot be a provider's error: no
    ``"error"`` in it (the key, or vLLM's ``"object": "error"``) and no ``\\u`` escape that
    could spell one. None: read it the general way (part of a longer event, an error, or
    not a chunk at all, which that way fails as such).

    Every chunk of a stream comes here: one pass in pydantic's parser costs about half of
    ``json.loads`` and a validation of the result (issue 27).
    """
    if '"error"' in value or "\\u" in value:
        return None
    try:
        return _WireCompletion.model_validate_json(value)
    except ValidationError:
        return None


@dataclass
class _PartialCall:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)
    echoed: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Stream:
    """Reassembles a streamed completion from its server-sent events."""

    started: float
    text: list[str] = field(default_factory=list)
    calls: list[_PartialCall] = field(default_factory=list)
    """In the order they began."""
    by_index: dict[int, int] = field(default_factory=dict)
    """A delta's ``index`` -> its position in ``calls``."""
    echoed: dict[str, Any] = field(default_factory=dict)
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
    event: str = ""
    """The current event's type (``event:`` field), until the blank line that ends it."""
    data: list[str] = field(default_factory=list)
    """The current event's ``data:`` lines not handled yet."""

    def feed(self, line: str) -> None:
        """Take one SSE line: a field (``data:``, ``event:``, ...), a comment or a blank.

        Each ``data:`` line that is a whole JSON document is handled at once (every
        provider sends a chunk on one line, and some send no blank line between chunks);
        one that is not is joined with the event's next ``data:`` lines and handled at the
        blank line that ends the event, as the SSE grammar says.
        """
        if not line:
            self._dispatch()
            self.event = ""
            return
        if line.startswith(":"):
            return  # a comment: `: keep-alive`, `: OPENROUTER PROCESSING`
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self.event = value
        elif name == "data":
            if self.data:
                self.data.append(value)
            elif value.strip() == "[DONE]":
                self.done = True
            elif (chunk := None if self.event == "error" else _plain_chunk(value)) is not None:
                self._take(chunk)
            else:
                try:
                    document = json.loads(value)
                except ValueError:
                    self.data.append(value)  # a part of a longer event, or not JSON at all
                else:
                    self._handle(value, document)

    def close(self) -> None:
        """The stream ended: handle an event its last blank line did not end."""
        self._dispatch()

    def _dispatch(self) -> None:
        if not self.data:
            return
        data = "\n".join(self.data)
        self.data = []
        try:
            document: Any = json.loads(data)
        except ValueError:
            document = data
        self._handle(data, document)

    def _handle(self, data: str, document: Any) -> None:
        error = _provider_error(document, error_event=self.event == "error")
        if error is not None:
            raise error
        # Decoded once: a chunk already read as JSON is validated as it is.
        self._take(_parse(_WireCompletion, document if isinstance(document, dict) else data))

    def _take(self, chunk: _WireCompletion) -> None:
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
            _merge(self.echoed, _echoed(delta))
            text = _text(delta.content)
            if text:
                self.text.append(text)
                self._grew(text)
                self._token()
                if self.deltas is not None:
                    self.deltas.text(self.redact(text))
            for position, piece in enumerate(delta.tool_calls or ()):
                self._tool_call_piece(position, piece)

    def _tool_call_piece(self, position: int, piece: _WireToolCall) -> None:
        # The id and name come in a call's first delta, its arguments in pieces.
        slot = self._slot(position, piece)
        call = self.calls[slot]
        call.id = call.id or piece.id
        call.name = call.name or piece.function.name
        _merge(call.echoed, _echoed(piece))
        if piece.function.arguments:
            call.arguments.append(piece.function.arguments)
            self._grew(piece.function.arguments)
        self._token()
        if self.deltas is not None:
            self.deltas.tool_call(
                slot, piece.id, piece.function.name, self.redact(piece.function.arguments or "")
            )

    def _slot(self, position: int, piece: _WireToolCall) -> int:
        """Which call a delta belongs to: by its ``index`` (OpenAI's); without one (Gemini's
        OpenAI-compatible endpoint), by ``id``: a new id begins a new call, and a delta
        with neither continues the last call (unless another piece of the same delta came
        first: two pieces of one delta are two calls)."""
        if piece.index is not None:
            if piece.index not in self.by_index:
                self.by_index[piece.index] = len(self.calls)
                self.calls.append(_PartialCall())
            return self.by_index[piece.index]
        if piece.id is not None:
            known = next((n for n, c in enumerate(self.calls) if c.id == piece.id), None)
            if known is not None:
                return known
            self.calls.append(_PartialCall())
            return len(self.calls) - 1
        if not self.calls or position > 0:
            self.calls.append(_PartialCall())
        return len(self.calls) - 1

    def _grew(self, piece: str) -> None:
        # Fails the call as soon as it cannot fit, instead of buffering an endless stream.
        self.size += len(piece.encode("utf-8", "surrogatepass"))
        if self.size > MAX_RESULT_BYTES:
            raise ResponseTooLarge(_too_large(self.size, "answer", more=True))

    def _token(self) -> None:
        if self.first_token is None:
            self.first_token = time.monotonic()

    def answer(self, turn: int) -> _Answer:
        if not self.done and self.finish_reason is None:
            raise httpx.RemoteProtocolError("the stream ended before the response finished")
        _check_finish(self.finish_reason)
        calls = tuple(
            _tool_call(
                turn, index, call.id, call.name, well_formed("".join(call.arguments)), call.echoed
            )
            for index, call in enumerate(self.calls)
        )
        return _Answer(
            text=well_formed("".join(self.text)),
            tool_calls=calls,
            finish_reason=self.finish_reason,
            usage=None if self.usage is None else _usage(self.usage),
            first_token_ms=None
            if self.first_token is None
            else (self.first_token - self.started) * 1000,
            provider_fields=self.echoed or None,
        )


def _parse_body(body: bytes, media_type: str, turn: int, started: float) -> _Answer:
    """A whole response body as an answer: a chat completion, or a whole SSE stream.

    Gateways differ from what was asked: some ignore ``stream: true`` and answer JSON,
    some stream when asked not to. A body carrying the provider's error is a
    ``ProviderError`` with its message. A body that is neither is a ProviderResponseError
    saying what came back (content type and start), never a dropped connection: reading
    it again would return the same thing.
    """
    if media_type == "text/event-stream" or body.lstrip().startswith((b"data:", b"event:")):
        stream = _Stream(started=started)
        lines = _Lines()
        for line in [*lines.feed(body), *lines.flush()]:
            stream.feed(line)
            if stream.done:
                break
        stream.close()
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
    error = _provider_error(document)
    if error is not None:
        raise error
    if not isinstance(document, dict) or not isinstance(document.get("choices"), list):
        raise ProviderResponseError(
            f"JSON that is not a chat completion (no choices list): {_excerpt(media_type, body)}"
        )
    try:
        # The document already decoded: a stricter decoder refuses half a surrogate pair
        # that json reads (and ``well_formed`` replaces).
        return _parse_completion(document, turn)
    except ProviderResponseError as err:
        raise ProviderResponseError(f"{err}: {_excerpt(media_type, body)}") from None
