"""How a worker talks to A2A peers (``WorkerSettings`` leaves these at their defaults)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class A2aSettings:
    """How a worker talks to A2A peers."""

    card_ttl_seconds: float = 60.0
    """How long a fetched Agent Card answers for its (tenant, principal, url, credential)."""
    card_timeout_seconds: float = 10.0
    """Longest a card fetch may take before the peer counts as unreachable this turn."""
    call_timeout_seconds: float = 60.0
    """Longest sending one message (or reading its task) may take."""
    hold_seconds: float = 5.0
    """How long a call waits, inside its activity, for a task the peer left working; past
    it the call returns and the Run waits durably (``psych.a2a.poll`` on a timer)."""
    poll_seconds: float = 0.25
    """Between two reads of the task while the call holds."""
    heartbeat_seconds: float = 2.0
    max_entries: int = 256
    """Cards and transports a worker keeps (least recently used dropped first)."""
