"""The worker process's deltas: each model-call attempt's pieces, kept for its followers.

One ``DeltaHub`` per worker process. The model activity opens an ``AttemptDeltas`` per
attempt (``open``), publishes every text and tool-call piece as the provider sends it, and
ends it (completed or failed). The relay (``DeltaRelay``) reads an attempt by its token,
from any piece on, live. Nothing here is durable: an attempt is forgotten ``keep_seconds``
after it ended, and every worker restart loses what it held (the records stay the truth).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator

from psych_runtime.activities.contract import LiveAttempt, RelayEnd, RelayLine

_Piece = tuple[str, int | None, str | None, str | None, str]
"""A piece as published: text, then a tool call's index, id, name and arguments. Written
as a ``RelayLine`` only when read: a piece as a model and its JSON cost every call about
as much again as the rest of the hub's work, for followers most attempts never have."""


def _utf8(text: str) -> str:
    """``text`` with what UTF-8 cannot hold (lone surrogates) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


KEEP_SECONDS = 30.0
"""How long an ended attempt stays readable: enough for a follower that joined just as it
ended (or reconnects) to read it to its end marker."""

MAX_PIECES = 100_000
"""Pieces kept per attempt. An answer is bounded in bytes (``MAX_RESULT_BYTES``) but not in
chunks; past this the attempt is ended ``failed`` for its followers (the call goes on)."""


class AttemptDeltas:
    """One attempt's pieces and how it ended; what the model activity publishes into."""

    def __init__(self, hub: DeltaHub, token: str, call: str, turn: int) -> None:
        self.hub = hub
        self.token = token
        self.call = call
        self.turn = turn
        self.lines: list[bytes | RelayLine | _Piece] = []
        """Piece ``n`` is ``lines[n - 1]``, the end line follows; each is written as one
        JSON line when a reader first reads it (most attempts have none)."""
        self.ended: RelayEnd | None = None
        self._grew: asyncio.Event | None = None
        """Set when a line is added; made only while a reader waits (most attempts have
        none, and an event a piece would be garbage)."""

    @property
    def details(self) -> LiveAttempt:
        """What the attempt's heartbeats carry."""
        return LiveAttempt(call=self.call, turn=self.turn, url=self.hub.url_of(self.token))

    @property
    def pieces(self) -> int:
        return len(self.lines) - (self.ended is not None)

    def text(self, text: str) -> None:
        """Publish a piece of the answer's text."""
        if text:
            self._piece((text, None, None, None, ""))

    def tool_call(self, index: int, id: str | None, name: str | None, arguments: str) -> None:
        """Publish a piece of the answer's ``index``-th tool call."""
        self._piece(("", index, id, name, arguments))

    def end(self, how: RelayEnd, reason: str = "") -> None:
        """Mark the attempt ended; idempotent (the first end wins). Forgotten later."""
        if self.ended is not None:
            return
        self.ended = how
        self._append(RelayLine(end=how, reason=reason))
        self.hub.forget_later(self)

    def _piece(self, piece: _Piece) -> None:
        if self.ended is not None:
            return
        if self.pieces >= self.hub.max_pieces:
            self.end("failed", f"more than {self.hub.max_pieces} pieces")
            return
        self._append(piece)

    def _append(self, line: RelayLine | _Piece) -> None:
        self.lines.append(line)
        grew, self._grew = self._grew, None
        if grew is not None:
            grew.set()

    def line(self, position: int) -> bytes:
        """The JSON line at ``position`` (piece ``position + 1``, or the end line)."""
        line = self.lines[position]
        if isinstance(line, bytes):
            return line
        if isinstance(line, tuple):
            text, index, id, name, arguments = line
            line = RelayLine(
                n=position + 1,
                text=text,
                tool_index=index,
                tool_id=id,
                tool_name=name,
                tool_arguments=arguments,
            )
        try:
            data = line.model_dump_json(exclude_defaults=True)
        except ValueError:
            # A lone surrogate a provider's escapes spelled (half of a pair split across
            # two chunks): shown replaced, so a follower still reads on to the end line.
            data = RelayLine.model_validate(
                {
                    key: _utf8(value) if isinstance(value, str) else value
                    for key, value in line.model_dump().items()
                }
            ).model_dump_json(exclude_defaults=True)
        written = data.encode() + b"\n"
        self.lines[position] = written
        return written

    async def read(self, after: int) -> AsyncIterator[bytes]:
        """The lines of pieces ``after + 1`` on, live, then the end line."""
        position = max(0, after)
        while True:
            while position < len(self.lines):
                yield self.line(position)
                position += 1
            if self.ended is not None:
                return
            # Nothing runs between the check above and the wait: no line can slip by.
            if self._grew is None:
                self._grew = asyncio.Event()
            await self._grew.wait()


class DeltaHub:
    """The attempts of one worker process, by token.

    Args:
        keep_seconds: how long an ended attempt stays readable.
        max_pieces: pieces kept per attempt (see ``MAX_PIECES``).
    """

    def __init__(self, *, keep_seconds: float = KEEP_SECONDS, max_pieces: int = MAX_PIECES) -> None:
        self.keep_seconds = keep_seconds
        self.max_pieces = max_pieces
        self.base_url: str | None = None
        """Where the relay serving this hub is reached; set when it starts."""
        self._attempts: dict[str, AttemptDeltas] = {}
        self._ended: deque[tuple[float, str]] = deque()
        """Ended attempts' tokens with the monotonic time each is forgotten at, oldest
        first: swept as attempts open and end, not by a timer each (a timer would keep
        the activity's context alive for ``keep_seconds``)."""

    def url_of(self, token: str) -> str:
        if self.base_url is None:
            raise RuntimeError("the DeltaHub has no relay: start a DeltaRelay on it first")
        return f"{self.base_url.rstrip('/')}/deltas/{token}"

    @property
    def serving(self) -> bool:
        """Whether a relay serves this hub (otherwise nothing is offered)."""
        return self.base_url is not None

    def open(self, call: str, turn: int = 0) -> AttemptDeltas:
        """A new attempt ``call`` (``<turn>.<activity id>#<attempt>``) of a Run's ``turn``,
        under a fresh random token."""
        self._sweep()
        token = secrets.token_urlsafe(18)
        attempt = self._attempts[token] = AttemptDeltas(self, token, call, turn)
        return attempt

    def get(self, token: str) -> AttemptDeltas | None:
        self._sweep()
        return self._attempts.get(token)

    def __len__(self) -> int:
        self._sweep()
        return len(self._attempts)

    def forget_later(self, attempt: AttemptDeltas) -> None:
        """Forget ``attempt`` ``keep_seconds`` from now (at the first sweep after)."""
        self._sweep()
        self._ended.append((time.monotonic() + self.keep_seconds, attempt.token))

    def _sweep(self) -> None:
        now = time.monotonic()
        while self._ended and self._ended[0][0] <= now:
            self._attempts.pop(self._ended.popleft()[1], None)
