"""How a worker talks to A2A peers: ``WorkerSettings.a2a`` in code, and the global settings
file's ``a2a:`` section (``workers/_a2a_settings.py``) on top of it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from urllib.parse import urlsplit

_AT_LEAST_ZERO = frozenset({"hold_seconds"})
"""Fields that may be 0 (no hold: a task the peer leaves working is waited for at once)."""


@dataclass(frozen=True)
class A2aSettings:
    """How a worker talks to A2A peers.

    Raises:
        ValueError: a field out of its range (the message names it).
    """

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
    """Between two heartbeats of a call waiting on the peer."""
    max_entries: int = 256
    """Cards and transports a worker keeps (least recently used dropped first)."""
    push_url: str | None = None
    """Where peers reach ``psych serve``'s push route (``https://psych.example.com/a2a-push``,
    the app's ``/a2a-push``): a peer whose card supports push notifications is asked to
    push each task's updates there, ending the Run's wait at once. None: poll only."""

    def __post_init__(self) -> None:
        if self.push_url is not None:
            parts = urlsplit(self.push_url) if isinstance(self.push_url, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    f"A2aSettings.push_url: an http(s) URL with a host, not {self.push_url!r}"
                )
        for item in fields(self):
            if item.name == "push_url":
                continue
            value = getattr(self, item.name)
            kind = int if item.name == "max_entries" else (int, float)
            if isinstance(value, bool) or not isinstance(value, kind):
                raise ValueError(f"A2aSettings.{item.name}: a number, not {value!r}")
            if item.name in _AT_LEAST_ZERO and value < 0:
                raise ValueError(f"A2aSettings.{item.name}: 0 or more, not {value!r}")
            if item.name not in _AT_LEAST_ZERO and value <= 0:
                raise ValueError(f"A2aSettings.{item.name}: more than 0, not {value!r}")


A2A_SETTING_NAMES = tuple(item.name for item in fields(A2aSettings))
"""The settings an ``a2a:`` section may set."""
