"""What the API's routes share (``ApiContext``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

from psych_runtime.specs import Scope
from psych_runtime.workers.serve._auth import Caller
from psych_runtime.workers.serve._settings import ServeSettings
from psych_runtime.workflows import PsychClient


@dataclass(frozen=True)
class ApiContext:
    """What the routes share: the client, the settings and the caller's Scope."""

    client: PsychClient
    settings: ServeSettings
    caller: Callable[..., Awaitable[Scope]]
    """The dependency giving the request's Scope (401 problem when it has none)."""
    identity: Callable[..., Awaitable[Caller]]
    """The dependency giving who the request acts for, with whether it may publish."""

    @property
    def query_timeout(self) -> timedelta:
        """How long a query waits for the Run's worker."""
        return timedelta(seconds=self.settings.query_timeout_seconds)
