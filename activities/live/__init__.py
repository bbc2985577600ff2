"""psych_runtime.activities.live: a model call's deltas, live, for followers on any machine.

``DeltaHub`` keeps each model-call attempt's pieces in the worker process; ``DeltaRelay``
serves them over HTTP (``GET /deltas/<token>?after=N``, JSON lines). The model activity
heartbeats the attempt's address (``contract.LiveAttempt``); see
docs/decisions/activities.md, "Live deltas".
"""

from psych_runtime.activities.live._hub import KEEP_SECONDS, MAX_PIECES, AttemptDeltas, DeltaHub
from psych_runtime.activities.live._relay import DeltaRelay, parse_listen

__all__ = [
    "AttemptDeltas",
    "DeltaHub",
    "DeltaRelay",
    "KEEP_SECONDS",
    "MAX_PIECES",
    "parse_listen",
]
