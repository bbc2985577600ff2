"""psych_runtime.activities.model: the model call and what rides on it.

``ModelActivities`` (``psych.model.call``: OpenAI-compatible chat completions
over httpx, streamed, its wire format and failure classifier), the worker's
``ModelEndpoints`` and ``Pricing``, pre-turn ``ContextProvider``s, threads, and
``CompactionActivities`` (``psych.model.compact``, the summariser call).
"""

from psych_runtime.activities.model._activities import ModelActivities
from psych_runtime.activities.model._compaction import SUMMARISER_PROMPT, CompactionActivities
from psych_runtime.activities.model._context import (
    ContextProvider,
    ContextProviders,
    ContextRequest,
    ContextSettings,
    ContextSource,
    estimate_tokens,
)
from psych_runtime.activities.model._endpoints import (
    Endpoint,
    ModelEndpoints,
    ModelPrice,
    Pricing,
    TablePricing,
)
from psych_runtime.activities.model._failures import classify

__all__ = [
    "CompactionActivities",
    "ContextProvider",
    "ContextProviders",
    "ContextRequest",
    "ContextSettings",
    "ContextSource",
    "Endpoint",
    "ModelActivities",
    "ModelEndpoints",
    "ModelPrice",
    "Pricing",
    "SUMMARISER_PROMPT",
    "TablePricing",
    "classify",
    "estimate_tokens",
]
