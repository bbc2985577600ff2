"""A client of the harness's store, task queue and registry that checks a permits port
before each dispatch (``PsychClient(permits=...)``), as ``psych serve``'s does."""

from __future__ import annotations

from psych_runtime.specs import TenantPermits
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
