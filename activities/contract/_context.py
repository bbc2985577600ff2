"""What a model call's context providers contributed: plain data for the model call's
result and the ``ContextProvided`` record (kept apart from ``_context.py``, which runs the
providers, so that the payloads and the workflow can import it without the port)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ContextShown(_Frozen):
    """One block shown in the call's per-turn context, by reference."""

    provider: str
    ref: str
    """The block's text in the BlobStore."""
    tokens: int
    """Its estimated size (characters / 4, rounded up)."""
    truncated: bool = False
    """Cut to the provider's own ``max_tokens``."""


class ContextSkipped(_Frozen):
    """A provider whose block was not shown, and why."""

    provider: str
    reason: Literal["failed", "timeout", "over_budget"]
    detail: str
    tokens: int = 0
    """The dropped block's estimated size (``over_budget``)."""


class ContextTurn(_Frozen):
    """What every provider gave one model call."""

    shown: tuple[ContextShown, ...] = ()
    skipped: tuple[ContextSkipped, ...] = ()
    budget_tokens: int
