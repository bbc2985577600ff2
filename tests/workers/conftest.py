"""Fixtures for the ``psych`` command tests: the session dev server, a fake model, a worker."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.activities.secrets import StaticSecretResolver
from psych_runtime.specs import ToolRegistry
from psych_runtime.testing import FakeModel
from psych_runtime.workers._loading import load_object
from psych_runtime.workers._worker import WorkerSettings, run_worker
from psych_runtime.workers.cli import main
from tests.forking import aio
from tests.forking.client import SIGINT_IGNORED as SIGINT_IGNORED  # for this folder's tests

from ..e2e._http_server import CountingServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SUPPORT_SPEC = EXAMPLES / "support-agent.yaml"
TOOLS_REF = f"{EXAMPLES / 'tools.py'}:registry"
PAYMENTS_KEY = "test-payments-key"


async def psych(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``psych`` in a thread (it runs its own event loop), so this loop keeps serving
    the fake model and the worker; returns (status, stdout, stderr)."""
    capsys.readouterr()
    status = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@dataclass
class Cli:
    """What a CLI test drives: the session server's address, a task queue with a worker,
    the fake model, the payments API, and a copy of the support Spec pointed at it."""

    address: str
    task_queue: str
    fake: FakeModel
    payments: CountingServer
    spec_file: Path
    home: Path
    settings: WorkerSettings
    env: WorkflowEnvironment

    def args(self, *extra: str, tenant: str = "acme") -> list[str]:
        """Connection, tenant and store arguments for a Run command."""
        return [*extra, "--address", self.address, "--tenant", tenant]

    def run_args(self, *extra: str, tenant: str = "acme", tools: bool = True) -> list[str]:
        """``psych run`` of the support Spec on this fixture's task queue."""
        return [
            "run",
            str(self.spec_file),
            *self.args(*extra, tenant=tenant),
            "--task-queue",
            self.task_queue,
            "--store",
            str(self.home / "versions"),
            *(["--tools", TOOLS_REF] if tools else []),
        ]

    @asynccontextmanager
    async def worker(self) -> AsyncIterator[None]:
        async with run_worker(self.env.client, self.settings):
            yield

    def child_env(self, **extra: str) -> dict[str, str]:
        """Environment of a ``psych`` child process wired like this fixture."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TEMPORAL_", "PSYCH_", "OPENAI_"))
        }
        env.update(
            OPENAI_BASE_URL=self.fake.base_url,
            OPENAI_API_KEY="test-key",
            PSYCH_BLOB_DIR=str(self.home / "blobs"),
            PSYCH_SECRET_PAYMENTS_API_KEY=PAYMENTS_KEY,
            # The suite's tool servers are on loopback (tests/conftest.py).
            PSYCH_EGRESS_ALLOW=os.environ["PSYCH_EGRESS_ALLOW"],
        )
        env.update(extra)
        return env


def registry() -> ToolRegistry:
    loaded = load_object(TOOLS_REF)
    assert isinstance(loaded, ToolRegistry)
    return loaded


@pytest.fixture
def payments() -> Iterator[CountingServer]:
    server = CountingServer(
        respond=lambda seen: (200, json.dumps({"refunded": True, "path": seen.path}))
    ).start()
    yield server
    server.stop()


@pytest.fixture
async def fake() -> AsyncIterator[FakeModel]:
    async with FakeModel(models=("gpt-4o-mini",)) as model:
        yield model


@pytest.fixture
def cli(
    dev_env: WorkflowEnvironment, fake: FakeModel, payments: CountingServer, tmp_path: Path
) -> Cli:
    spec_text = SUPPORT_SPEC.read_text().replace("http://127.0.0.1:8765", payments.url)
    spec_file = tmp_path / "support-agent.yaml"
    spec_file.write_text(spec_text)
    task_queue = f"cli-{uuid.uuid4().hex[:12]}"
    settings = WorkerSettings(
        task_queue=task_queue,
        registry=registry(),
        blobs=LocalBlobStore(tmp_path / "blobs"),
        endpoints=ModelEndpoints(default=Endpoint(base_url=fake.base_url, api_key="test-key")),
        secrets=StaticSecretResolver({"payments-api-key": PAYMENTS_KEY}),
    )
    return Cli(
        address=dev_env.client.service_client.config.target_host,
        task_queue=task_queue,
        fake=fake,
        payments=payments,
        spec_file=spec_file,
        home=tmp_path,
        settings=settings,
        env=dev_env,
    )


async def read_until(stream: asyncio.StreamReader, marker: str) -> str:
    """Read lines from a child's output until one contains ``marker``; return them all."""
    seen: list[str] = []
    # A child process starts (and stops) in a few seconds; on a machine loaded by a
    # whole parallel suite it has taken over 20.
    async with asyncio.timeout(90):
        while True:
            line = (await stream.readline()).decode()
            if not line:
                raise AssertionError(f"output ended before {marker!r}:\n{''.join(seen)}")
            seen.append(line)
            if marker in line:
                return "".join(seen)


async def spawn(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> aio.Process:
    """Start ``psych`` (``python -m psych_runtime.workers.cli`` or the console script),
    forked from this process's fork host (``tests.forking``): the command's own process,
    without the second of CPU a fresh interpreter spends importing the worker stack."""
    return await aio.create_subprocess_exec(
        *argv,
        env=dict(env),
        cwd=cwd,
        stdout=aio.PIPE,
        stderr=aio.PIPE,
    )
