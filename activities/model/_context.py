"""Pre-turn context providers: the ``ContextProvider`` port and the budget its blocks fit.

A provider is a consumer's callable that, before each model call, may add a block of text
(a customer record, a policy excerpt) to that call's per-turn context: the last block of
the system prompt (``specs.system_prompt``'s order). The block is for that call only: it is
appended to the system text the request carries and nowhere else, so it is never stored in
the conversation chain and the next call does not see it unless a provider gives it again.

It runs inside the model activity (``ModelActivities``), so a Run pays no extra Temporal
activity per turn for it, whether providers are registered or not. Per call:

1. every provider is asked at once with the Run's scope, run id, turn and the call's new
   messages, each bounded by its timeout (``ContextSource.timeout_seconds``, default
   ``ContextSettings.timeout_seconds``, 2 s); one that raises (its own ``CancelledError``
   too) or times out is skipped and reported (``failed``, ``timeout``), never fails the
   call; an empty answer shows nothing;
2. a block over its provider's ``max_tokens`` is cut to it (``truncated``);
3. the blocks are tried highest priority first (of equal priorities the earlier
   registered first) and each is kept if it fits in what is left of ``budget_tokens``
   (default 2000); one that does not is dropped (``over_budget``), and a smaller,
   lower-priority block may still be kept after it;
4. the kept blocks are stored in the BlobStore and shown highest priority first.

Tokens are estimated as characters / 4, rounded up: no tokenizer is model-independent, and
this one errs toward the long side for English text, which is the side a budget wants.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Protocol

from psych_runtime.activities.blobs import BlobStore
from psych_runtime.activities.contract import ChatMessage, ContextShown, ContextSkipped, ContextTurn
from psych_runtime.specs import Scope, printable

CHARS_PER_TOKEN = 4
DEFAULT_BUDGET_TOKENS = 2000
DEFAULT_TIMEOUT_SECONDS = 2.0


def estimate_tokens(text: str) -> int:
    """The documented estimate: characters / 4, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


_LINE_BREAKS = re.compile(r"[\t\n\r]")


def _one_line(text: str) -> str:
    """``printable`` (``specs/_printable.py``), with the tab, newline and carriage return it
    keeps escaped too (as ``\\x0a``).

    Not ``printable`` alone, on purpose: a skipped provider's detail is one line (psych
    run's and report's), and its failure's message may quote what a remote service sent,
    line breaks too. ``printable`` escapes the rest: a terminal's controls, as this module's
    own escaping did, and the bidi overrides, which it let through (until 12-07)."""
    return _LINE_BREAKS.sub(lambda found: f"\\x{ord(found.group()):02x}", printable(text))


@dataclass(frozen=True)
class ContextRequest:
    """What a provider is told about the call it contributes to."""

    scope: Scope
    run_id: str
    turn: int
    messages: tuple[ChatMessage, ...]
    """The messages this call adds to the conversation (user input, tool results)."""


class ContextProvider(Protocol):
    """The port: given a call's request, the text to show (empty or None: nothing).

    It runs on the worker's event loop, so it must not block: the timeout can only end a
    provider that awaits, and one that blocks (a synchronous HTTP call, ``time.sleep``)
    stalls every activity and workflow task of that worker until it returns. Run blocking
    work in a thread (``asyncio.to_thread``).
    """

    def __call__(self, request: ContextRequest) -> Awaitable[str | None]:
        """Return this call's block, or None to show nothing."""
        ...


@dataclass(frozen=True)
class ContextSource:
    """One provider as the worker registers it.

    Attributes:
        name: how records and the report name it (unique per worker).
        provider: the callable.
        priority: higher is kept first when the blocks exceed the budget.
        max_tokens: its own cap (a longer block is cut to it); None: only the budget.
        timeout_seconds: how long it may take; None: ``ContextSettings.timeout_seconds``.
    """

    name: str
    provider: ContextProvider
    priority: int = 0
    max_tokens: int | None = None
    timeout_seconds: float | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a context provider needs a name")
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ValueError(f"context provider {self.name!r}: max_tokens must be > 0")
        if self.timeout_seconds is not None and self.timeout_seconds <= 0:
            raise ValueError(f"context provider {self.name!r}: timeout_seconds must be > 0")


@dataclass(frozen=True)
class ContextSettings:
    """The worker's context providers and the budget their blocks share."""

    sources: tuple[ContextSource, ...] = ()
    budget_tokens: int = DEFAULT_BUDGET_TOKENS
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        names = [source.name for source in self.sources]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"context providers registered twice: {', '.join(duplicates)}")
        if self.budget_tokens <= 0:
            raise ValueError("the context budget_tokens must be > 0")
        if self.timeout_seconds <= 0:
            raise ValueError("the context timeout_seconds must be > 0")


@dataclass(frozen=True)
class _Block:
    index: int
    source: ContextSource
    text: str
    truncated: bool

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)


async def _ask(
    settings: ContextSettings, index: int, source: ContextSource, request: ContextRequest
) -> _Block | ContextSkipped | None:
    timeout = source.timeout_seconds or settings.timeout_seconds
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            # Typed str | None, but it is a consumer's code: checked, not trusted.
            answer: object = await source.provider(request)
    except TimeoutError as err:
        if not deadline.expired():
            # The provider's own TimeoutError (its HTTP client gave up, say), not ours.
            return ContextSkipped(
                provider=source.name,
                reason="failed",
                detail=_one_line(f"{type(err).__name__}: {err}")[:500],
            )
        return ContextSkipped(
            provider=source.name, reason="timeout", detail=f"no answer within {timeout:g} s"
        )
    except asyncio.CancelledError as err:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the model call itself is cancelled (an abort, a lost worker)
        # The provider's own (a task it awaited was cancelled): its failure, not the call's,
        # which would otherwise fail as a transient model failure and be retried.
        return ContextSkipped(
            provider=source.name,
            reason="failed",
            detail=_one_line(f"{type(err).__name__}: {err}")[:500],
        )
    except Exception as err:  # a consumer's provider: any failure skips it, reported
        return ContextSkipped(
            provider=source.name,
            reason="failed",
            detail=_one_line(f"{type(err).__name__}: {err}")[:500],
        )
    if answer is None or answer == "":
        return None
    if not isinstance(answer, str):
        return ContextSkipped(
            provider=source.name,
            reason="failed",
            detail=f"returned {type(answer).__name__}, not text",
        )
    text = answer.strip()
    cap = source.max_tokens
    if cap is not None and estimate_tokens(text) > cap:
        return _Block(index, source, text[: cap * CHARS_PER_TOKEN], truncated=True)
    return _Block(index, source, text, truncated=False) if text else None


def fit_budget(
    blocks: Sequence[_Block], budget: int
) -> tuple[list[_Block], list[tuple[_Block, int]]]:
    """The blocks kept and the blocks dropped, each with the tokens left when it was tried.

    Blocks are tried highest priority first (of equal priorities the earlier registered),
    and each one that still fits in what is left is kept: a block too big for the budget
    does not push out a smaller, lower-priority one that fits.
    """
    ranked = sorted(blocks, key=lambda b: (-b.source.priority, b.index))
    kept: list[_Block] = []
    dropped: list[tuple[_Block, int]] = []
    left = budget
    for block in ranked:
        if block.tokens <= left:
            kept.append(block)
            left -= block.tokens
        else:
            dropped.append((block, left))
    return kept, dropped


class ContextProviders:
    """Runs a worker's providers for one model call (see the module docstring)."""

    def __init__(self, settings: ContextSettings, blobs: BlobStore) -> None:
        """Args:
        settings: the providers and the budget.
        blobs: where each shown block is stored (the record refers to it).
        """
        self.settings = settings
        self.blobs = blobs

    async def gather(self, request: ContextRequest) -> tuple[list[str], ContextTurn | None]:
        """The texts to show this call, in order, and what to record about them (None when
        every provider gave nothing: the call's result and the Run's records are then the
        same as without providers)."""
        settings = self.settings
        answers = await asyncio.gather(
            *(_ask(settings, i, source, request) for i, source in enumerate(settings.sources))
        )
        skipped = [a for a in answers if isinstance(a, ContextSkipped)]
        blocks = [a for a in answers if isinstance(a, _Block)]
        kept, dropped = fit_budget(blocks, settings.budget_tokens)
        skipped += [
            ContextSkipped(
                provider=b.source.name,
                reason="over_budget",
                detail=f"{b.tokens} tokens did not fit the {left} left of the "
                f"{settings.budget_tokens}-token budget",
                tokens=b.tokens,
            )
            for b, left in dropped
        ]
        shown = [
            ContextShown(
                provider=b.source.name,
                ref=await self.blobs.put(b.text.encode()),
                tokens=b.tokens,
                truncated=b.truncated,
            )
            for b in kept
        ]
        if not shown and not skipped:
            return [], None
        turn = ContextTurn(
            shown=tuple(shown), skipped=tuple(skipped), budget_tokens=settings.budget_tokens
        )
        return [b.text for b in kept], turn
