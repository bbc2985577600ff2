"""Waiting for a Run on the time-skipping test server."""

from __future__ import annotations

import asyncio

from temporalio.api.testservice.v1 import LockTimeSkippingRequest, UnlockTimeSkippingRequest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.specs import Scope
from psych_runtime.workflows import PsychClient, RunHandle


async def until_settled(
    env: WorkflowEnvironment,
    client: PsychClient,
    run: RunHandle,
    scope: Scope,
) -> None:
    """Let the test server's clock run ahead until the Run settles.

    The environment unlocks the clock only while a handle returned by ``start_workflow`` is
    awaited, and PsychClient waits on a handle it makes from the workflow id; so this
    unlocks it with the test service calls the SDK itself uses, and polls the Run's state.
    (Waiting in ``PsychClient.result`` also fails after 20 s there: the test server ends
    its history long poll without the continuation token a real server sends.)
    """
    service = env.client.test_service
    await service.unlock_time_skipping(UnlockTimeSkippingRequest())
    try:
        while True:
            if (await client.status(run, scope=scope)).status.terminal:
                return
            await asyncio.sleep(0.1)
    finally:
        await service.lock_time_skipping(LockTimeSkippingRequest())
