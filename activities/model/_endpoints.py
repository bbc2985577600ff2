"""Which endpoint serves which model, and what a call costs: worker configuration, never
payloads (``Endpoint``, ``ModelEndpoints``, the ``Pricing`` port and ``TablePricing``)."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol
from urllib.parse import urlsplit

from psych_runtime.activities.contract import Usage
from psych_runtime.specs import NotFound, env_flag

DEFAULT_BASE_URL = "https://api.openai.com/v1"

_log = logging.getLogger(__name__)


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

    def hosts(self) -> frozenset[str]:
        """The host names of every endpoint: the operator's own, for the egress port."""
        endpoints = (self.default, *self.routes.values())
        return frozenset(
            host
            for endpoint in endpoints
            if endpoint is not None and (host := urlsplit(endpoint.base_url).hostname)
        )

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
        stream = env_flag(environ, "OPENAI_STREAM", default=True)
        return cls(default=Endpoint(base_url, environ.get("OPENAI_API_KEY") or None, stream=stream))

    def __repr__(self) -> str:
        return f"ModelEndpoints(default={self.default!r}, routes={dict(self.routes)!r})"


# --- pricing ------------------------------------------------------------------------------


class Pricing(Protocol):
    """Port: the cost of one model call's usage, at call time."""

    def price(self, model: str, usage: Usage) -> float | None:
        """The cost of ``usage`` on ``model``; ``None`` when unknown, never 0 for unknown.
        An exception here leaves the call's cost unknown too (``call_cost``)."""
        ...


def call_cost(pricing: Pricing | None, model: str, usage: Usage | None) -> float | None:
    """What one answered call cost: ``pricing``'s answer, or None when unknown (no port,
    no usage reported, or the port failed or answered no cost: a negative or non-finite
    number, or not a number). The call was made and its answer and usage stand, so a port
    that fails leaves the cost unknown, logged as a warning, and does not fail the call."""
    if pricing is None or usage is None:
        return None
    try:
        cost = pricing.price(model, usage)
    except Exception as err:
        _log.warning(
            "the pricing port failed for model %s (%r): cost unknown", model, err, exc_info=True
        )
        return None
    if cost is None:
        return None
    if isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost < math.inf:
        _log.warning("the pricing port answered %r for model %s: cost unknown", cost, model)
        return None
    return float(cost)


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
