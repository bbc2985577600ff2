"""What one call cost: its tokens and where its time went."""

from __future__ import annotations

from pydantic import field_serializer

from psych_runtime.activities.contract._base import LATENCY_DECIMALS, _Compact, _Payload


class Usage(_Payload):
    """Tokens of one model call, split the way providers bill them."""

    input_tokens: int = 0
    """Prompt tokens not served from cache."""
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    """Part of ``output_tokens`` spent reasoning, where the provider reports it."""


class Latency(_Compact):
    """Where the time of one activity went (milliseconds)."""

    queue_wait_ms: float
    """From scheduling to a worker starting it."""
    duration_ms: float
    """From start to finish on the worker."""
    first_token_ms: float | None = None
    """From start to the first streamed token (model calls that stream)."""

    @field_serializer("queue_wait_ms", "duration_ms", "first_token_ms")
    def _rounded(self, value: float | None) -> float | None:
        return None if value is None else round(value, LATENCY_DECIMALS)
