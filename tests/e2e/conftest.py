"""End-to-end harness: a real dev server, the fake model, a real worker per test."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.activities.secrets import StaticSecretResolver
from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import Scope, ToolRegistry
from psych_runtime.testing import FakeModel
from psych_runtime.workers import start_time_skipping_server
from psych_runtime.workers._worker import WorkerSettings, run_worker
from psych_runtime.workflows import PsychClient

from ._short_reads import shorten_long_polls, shorten_reads

MODELS = ("fake-model", "fake-fallback", "fake-other")


@dataclass
class Harness:
    """What an e2e test drives: the client, the fake model, and the worker's wiring."""

    env: WorkflowEnvironment
    client: PsychClient
    fake: FakeModel
    scope: Scope
    registry: ToolRegistry
    settings: WorkerSettings
    home: Path

    @asynccontextmanager
    async def worker(self, task_queue: str | None = None) -> AsyncIterator[None]:
        """Run a worker for this test's task queue (or ``task_queue``, with this worker's
        wiring otherwise) while the block runs."""
        settings = self.settings
        if task_queue is not None:
            settings = dataclasses.replace(settings, task_queue=task_queue)
        async with run_worker(self.env.client, settings):
            yield

    def client_of(self, task_queue: str) -> PsychClient:
        """A client that starts Runs on ``task_queue``, sharing this one's Versions."""
        return PsychClient(
            self.env.client,
            store=FileVersionStore(self.home / "versions"),
            task_queue=task_queue,
            registry=self.registry,
        )


@pytest.fixture(scope="module")
async def ts_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping test server for one test module."""
    env = await start_time_skipping_server()
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
async def fake() -> AsyncIterator[FakeModel]:
    async with FakeModel(models=MODELS) as model:
        yield model


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry()


@pytest.fixture
def harness(
    dev_env: WorkflowEnvironment, fake: FakeModel, registry: ToolRegistry, tmp_path: Path
) -> Harness:
    task_queue = f"e2e-{uuid.uuid4().hex[:12]}"
    settings = WorkerSettings(
        task_queue=task_queue,
        registry=registry,
        blobs=LocalBlobStore(tmp_path / "blobs"),
        tokens=LocalTokenStore(tmp_path / "tokens"),
        endpoints=ModelEndpoints(default=Endpoint(base_url=fake.base_url, api_key="test-key")),
        secrets=StaticSecretResolver({"orders-key": "s3cret"}),
        # In the sandbox: workers run psych's workflows without it by default, and this is
        # where a restricted (non-deterministic) call on a path no committed history covers
        # still fails (docs/decisions/workers.md, "The workflow sandbox"); the CLI, roles and fleet
        # tests run the default.
        workflow_sandbox=True,
    )
    client = PsychClient(
        dev_env.client,
        store=FileVersionStore(tmp_path / "versions"),
        task_queue=task_queue,
        registry=registry,
    )
    return Harness(
        env=dev_env,
        client=client,
        fake=fake,
        scope=Scope(tenant="acme", principal="tester"),
        registry=registry,
        settings=settings,
        home=tmp_path,
    )


@pytest.fixture
def short_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads of Temporal bounded by ``SHORT_READ`` instead of 10 s (``_short_reads.py``)."""
    shorten_reads(monkeypatch)


@pytest.fixture
def short_long_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """History long polls bounded by ``SHORT_LONG_POLL`` instead of 30 s (``_short_reads.py``)."""
    shorten_long_polls(monkeypatch)
