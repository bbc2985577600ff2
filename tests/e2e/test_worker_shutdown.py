"""A process running several roles stops them together: every Temporal Worker stops
polling at once and lets its running calls finish in parallel. From a review: unwound one
by one, a role still polling took new calls while another drained its own, and the
process took one grace period per role, past a deploy's termination grace."""

from __future__ import annotations

import dataclasses

import pytest
from temporalio.worker import Worker

from psych_runtime.workers import run_workers

from .conftest import Harness

pytestmark = pytest.mark.e2e


async def test_every_role_of_a_process_stops_together(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps: list[tuple[str, str]] = []
    shutdown = Worker.shutdown

    async def recorded(self: Worker) -> None:
        queue = self.task_queue
        steps.append(("stop", queue))
        await shutdown(self)
        steps.append(("stopped", queue))

    monkeypatch.setattr(Worker, "shutdown", recorded)
    settings = dataclasses.replace(harness.settings, roles=("workflows", "model", "tools"))
    async with run_workers(harness.env.client, settings) as workers:
        assert len(workers) == 3
    first = [step for step, _ in steps[:3]]
    assert first == ["stop", "stop", "stop"], steps
    assert {queue for _, queue in steps[:3]} == {
        settings.task_queue,
        f"{settings.task_queue}-model",
        f"{settings.task_queue}-tools",
    }
