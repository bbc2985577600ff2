"""Permits for the e2e tests: a client of the harness's store, task queue and registry that
checks a permits port before each dispatch (``PsychClient(permits=...)``), as ``psych
serve``'s does, and a port whose operator revokes permits while a Run works."""

from __future__ import annotations

from psych_runtime.specs import PermitSource, TenantPermits
from psych_runtime.workflows import PsychClient

from .conftest import Harness


def checking_client(harness: Harness, permits: TenantPermits | None) -> PsychClient:
    """The harness's client, but dispatching through ``permits``."""
    return PsychClient(
        harness.env.client,
        store=harness.client.store,
        task_queue=harness.settings.task_queue,
        registry=harness.registry,
        permits=permits,
    )


class Revoking:
    """A ``TenantPermits`` (given in code, ``WorkerSettings.permits``) that permits
    everything until it has answered ``until`` times, then only ``lookup*`` and ``echo``:
    an operator revoking a permit between the turn's offer and the call."""

    def __init__(self, until: int) -> None:
        self.until = until
        self.asked: list[tuple[str, str]] = []

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        self.asked.append((tenant, source.kind))
        return None if len(self.asked) <= self.until else ("echo", "lookup*")
