"""What a test scripts the fake model to answer: ``Reply`` values (text, tool calls, HTTP
errors, stalls, dropped streams) with their ``ToolCall``s and ``Usage``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Usage:
    """Token usage a reply reports, in provider-neutral names.

    Mapped onto the OpenAI `usage` object as `prompt_tokens`, `completion_tokens`,
    `prompt_tokens_details.cached_tokens` and `completion_tokens_details.reasoning_tokens`;
    `total_tokens` is the sum of input and output.
    """

    input_tokens: int = 0
    """Tokens of the prompt, reported as `prompt_tokens`."""
    output_tokens: int = 0
    """Tokens of the completion, reported as `completion_tokens`."""
    cache_read_tokens: int = 0
    """Prompt tokens served from the provider's cache, reported as `cached_tokens`."""
    reasoning_tokens: int = 0
    """Completion tokens spent reasoning, reported as `reasoning_tokens`."""


@dataclass(frozen=True)
class ToolCall:
    """One tool call the fake model makes.

    Attributes:
        name: the function name.
        arguments: a dict is JSON-encoded; a str is sent verbatim, so a test can send
            arguments that are not valid JSON.
        id: the tool-call id; when None the server assigns `call_<n>`, counting per server.
    """

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None


ReplyKind = Literal["text", "tool_calls", "error", "stall", "abort"]


@dataclass(frozen=True)
class Reply:
    """One scripted response of the fake model.

    Build replies with the static constructors (`Reply.text`, `Reply.tool_calls`,
    `Reply.malformed_tool_call`, `Reply.error`, `Reply.stall`, `Reply.abort`); the fields
    are what the server reads and are only meaningful for the kinds that use them.
    """

    kind: ReplyKind
    """Which behaviour the server acts out."""
    content: str = ""
    """Assistant text (`text` and `tool_calls`)."""
    calls: tuple[ToolCall, ...] = ()
    """Tool calls made (`tool_calls`)."""
    usage: Usage | None = None
    """Usage reported; None derives a rough count from the characters exchanged."""
    chunk_size: int = 8
    """Characters of content or tool-call arguments per streamed chunk."""
    chunk_seconds: float = 0.0
    """Seconds between streamed chunks (a model writing at its own pace)."""
    status: int = 0
    """HTTP status (`error`)."""
    retry_after: float | None = None
    """Seconds sent as `Retry-After` and `retry-after-ms` (`error`)."""
    message: str = ""
    """Error message (`error`)."""
    seconds: float = 0.0
    """How long the stream goes silent (`stall`)."""
    after_chunks: int = 0
    """Chunks sent before stalling or dropping the connection (`stall`, `abort`)."""
    then: Reply | None = None
    """The reply streamed around the stall, or the partial stream aborted (`stall`, `abort`)."""
    cut_off: bool = False
    """Finish with `length`, as an answer cut off at its output cap does (`text`)."""

    @staticmethod
    def text(
        content: str,
        *,
        usage: Usage | None = None,
        chunk_size: int = 8,
        chunk_seconds: float = 0.0,
        cut_off: bool = False,
    ) -> Reply:
        """A plain assistant message, finishing with `stop` (`length` when ``cut_off``).

        Args:
            content: the assistant text.
            usage: usage to report; None derives it from character counts.
            chunk_size: characters per streamed chunk.
            chunk_seconds: seconds between streamed chunks.
            cut_off: finish with `length`, as an answer cut off at its output cap.
        """
        _check_chunk_size(chunk_size)
        _check_chunk_seconds(chunk_seconds)
        return Reply(
            kind="text",
            content=content,
            usage=usage,
            chunk_size=chunk_size,
            chunk_seconds=chunk_seconds,
            cut_off=cut_off,
        )

    @staticmethod
    def tool_calls(
        *calls: ToolCall,
        content: str = "",
        usage: Usage | None = None,
        chunk_seconds: float = 0.0,
    ) -> Reply:
        """An assistant message making tool calls, finishing with `tool_calls`.

        When streamed, each call's arguments arrive split across several chunks, as real
        providers send them.

        Args:
            *calls: the calls, in order; at least one.
            content: optional text sent before the calls.
            usage: usage to report; None derives it from character counts.
            chunk_seconds: seconds between streamed chunks.
        """
        if not calls:
            raise ValueError("Reply.tool_calls needs at least one ToolCall")
        _check_chunk_seconds(chunk_seconds)
        return Reply(
            kind="tool_calls",
            content=content,
            calls=calls,
            usage=usage,
            chunk_seconds=chunk_seconds,
        )

    @staticmethod
    def malformed_tool_call(name: str, raw_arguments: str) -> Reply:
        """A tool call whose arguments are sent verbatim, typically not valid JSON.

        Args:
            name: the function name.
            raw_arguments: the exact arguments string, e.g. `'{"city": "Par'`.
        """
        return Reply.tool_calls(ToolCall(name, raw_arguments))

    @staticmethod
    def error(
        status: int, *, retry_after: float | None = None, message: str = "scripted error"
    ) -> Reply:
        """An HTTP error with an OpenAI-style body `{"error": {"message", "type", "code"}}`.

        Streaming requests get the same plain JSON error, as OpenAI answers before a stream
        starts.

        Args:
            status: an HTTP status from 400 to 599.
            retry_after: seconds to send as `Retry-After` (and `retry-after-ms`, which the
                OpenAI SDK prefers); no header when None.
            message: the error message.
        """
        if not 400 <= status <= 599:
            raise ValueError(f"Reply.error needs a 4xx or 5xx status, got {status}")
        return Reply(kind="error", status=status, retry_after=retry_after, message=message)

    @staticmethod
    def stall(seconds: float, *, after_chunks: int = 1, then: Reply | None = None) -> Reply:
        """A response that goes silent for a while, then finishes normally.

        Streaming: the first `after_chunks` chunks of `then` are sent, then nothing for
        `seconds`, then the rest of the stream. Non-streaming: the server waits `seconds`
        before answering with `then`.

        Args:
            seconds: how long to stay silent.
            after_chunks: chunks sent before the silence; 0 stalls right after the headers.
            then: a `text` or `tool_calls` reply; defaults to a short text reply.
        """
        if seconds < 0:
            raise ValueError(f"Reply.stall needs seconds >= 0, got {seconds}")
        if after_chunks < 0:
            raise ValueError(f"Reply.stall needs after_chunks >= 0, got {after_chunks}")
        then = Reply.text("stalled, then finished") if then is None else then
        if then.kind not in ("text", "tool_calls"):
            raise ValueError(f"Reply.stall needs a text or tool_calls reply, got {then.kind}")
        return Reply(kind="stall", seconds=seconds, after_chunks=after_chunks, then=then)

    @staticmethod
    def abort(after_chunks: int = 1, *, chunk_seconds: float = 0.0) -> Reply:
        """A response whose connection drops abruptly.

        Streaming: `after_chunks` chunks of a text reply are sent, then the connection is
        reset with no finishing chunk and no `[DONE]`. Non-streaming: the connection is
        closed without any response.

        Args:
            after_chunks: chunks sent before the drop; 0 drops right after the headers.
            chunk_seconds: seconds between streamed chunks.
        """
        if after_chunks < 0:
            raise ValueError(f"Reply.abort needs after_chunks >= 0, got {after_chunks}")
        # One chunk longer than what is sent, so the stream is always cut short.
        partial = Reply.text(
            "partial " * (after_chunks + 1),
            chunk_size=len("partial "),
            chunk_seconds=chunk_seconds,
        )
        return Reply(kind="abort", after_chunks=after_chunks, then=partial)


def _check_chunk_size(chunk_size: int) -> None:
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")


def _check_chunk_seconds(seconds: float) -> None:
    if not 0 <= seconds <= 60:
        raise ValueError(f"chunk_seconds must be from 0 to 60, got {seconds}")
