"""A model endpoint that cannot work (a host name that does not resolve, an API key refused,
a TLS certificate that does not verify) fails the call at once, not transient, so a Run
fails in seconds instead of spending its whole retry budget (issue 14). Real DNS, a real
loopback server answering 401/403, a real TLS server on loopback whose certificate no CA
signed, a real dev server for the Run.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from pathlib import Path

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import (
    MODEL_CALL_FAILED,
    ChatMessage,
    ModelCallInput,
    ModelFailure,
)
from psych_runtime.activities.model import Endpoint, ModelActivities, ModelEndpoints, classify
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder, ModelRef, RunFailed, Scope
from psych_runtime.workers._worker import WorkerSettings, run_worker
from psych_runtime.workflows import ModelCallFailed, PsychClient, RunStatus
from tests._tls import tls_server
from tests._upstream import Answer, Request, Upstream

UNRESOLVABLE = "http://nonexistent.invalid/v1"
"""``.invalid`` is reserved (RFC 2606): no resolver ever answers it."""
MODEL = "gw-model"


def call() -> ModelCallInput:
    return ModelCallInput(
        run_id="run-1",
        turn=1,
        model=MODEL,
        params=ModelRef(model=MODEL),
        new_messages=(ChatMessage(role="user", content="Hi"),),
        scope=Scope(tenant="acme"),
    )


async def failure(acts: ModelActivities) -> ModelFailure:
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(acts.complete, call())
    assert caught.value.type == MODEL_CALL_FAILED
    (details,) = caught.value.details
    return ModelFailure.model_validate(details)


@pytest.mark.parametrize("stream", [True, False])
async def test_an_unresolvable_host_fails_not_transient(
    blobs: LocalBlobStore, http: httpx.AsyncClient, stream: bool
) -> None:
    acts = ModelActivities(
        endpoints=ModelEndpoints(default=Endpoint(UNRESOLVABLE, "sk-test", stream=stream)),
        blobs=blobs,
        http=http,
    )
    parsed = await failure(acts)
    assert not parsed.transient
    assert parsed.status is None
    assert parsed.message.startswith(f"model {MODEL}: cannot resolve host 'nonexistent.invalid'")


@pytest.mark.parametrize("stream", [True, False])
async def test_a_certificate_that_does_not_verify_fails_not_transient(
    blobs: LocalBlobStore, http: httpx.AsyncClient, tmp_path: Path, stream: bool
) -> None:
    # A self-signed (or expired, or another host's) certificate verifies no better on the
    # next attempt: the budget's backoff (a minute and a half by default) only delayed it.
    async with tls_server(tmp_path) as url:
        acts = ModelActivities(
            endpoints=ModelEndpoints(default=Endpoint(url + "/v1", "sk-test", stream=stream)),
            blobs=blobs,
            http=http,
        )
        parsed = await failure(acts)
    assert not parsed.transient
    assert parsed.status is None
    host = url.removeprefix("https://").split(":")[0]
    assert parsed.message.startswith(
        f"model {MODEL}: the TLS certificate of host '{host}' does not verify: "
    ), parsed.message
    assert "self-signed certificate" in parsed.message


def test_a_refused_connection_stays_transient() -> None:
    # Only name resolution is a configuration matter; a server not up yet may come up.
    assert classify(httpx.ConnectError("[Errno 111] Connection refused"), model="m").transient


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_fails_not_transient(
    blobs: LocalBlobStore, http: httpx.AsyncClient, status: int
) -> None:
    def respond(request: Request) -> Answer:
        return Answer(status, json.dumps({"error": {"message": "Incorrect API key provided"}}))

    with Upstream(respond) as upstream:
        acts = ModelActivities(
            endpoints=ModelEndpoints(default=Endpoint(upstream.url + "/v1", "sk-wrong")),
            blobs=blobs,
            http=http,
        )
        parsed = await failure(acts)
    assert parsed.status == status and not parsed.transient
    assert "Incorrect API key provided" in parsed.message


def _refusing(request: Request) -> Answer:
    return Answer(401, json.dumps({"error": {"message": "Incorrect API key provided"}}))


@pytest.mark.parametrize("endpoint", ["unresolvable", "401", "untrusted"])
async def test_a_run_fails_at_once_with_one_model_call_not_its_retry_budget(
    dev_env: WorkflowEnvironment, tmp_path: Path, endpoint: str
) -> None:
    with Upstream(_refusing) as upstream:
        async with tls_server(tmp_path) as tls_url:
            base_url = {
                "unresolvable": UNRESOLVABLE,
                "401": upstream.url + "/v1",
                "untrusted": tls_url + "/v1",
            }[endpoint]
            settings = WorkerSettings(
                task_queue=f"endpoint-{uuid.uuid4().hex[:12]}",
                blobs=LocalBlobStore(tmp_path / "blobs"),
                endpoints=ModelEndpoints(default=Endpoint(base_url, "sk-wrong")),
            )
            client = PsychClient(
                dev_env.client,
                store=FileVersionStore(tmp_path / "versions"),
                task_queue=settings.task_queue,
            )
            spec = AgentBuilder("support").instructions("Help.").model(MODEL).build()
            scope = Scope(tenant="acme")
            started = time.monotonic()
            async with run_worker(dev_env.client, settings):
                run = await client.dispatch(spec, "Hello", scope=scope)
                with contextlib.suppress(RunFailed):
                    await client.result(run, scope=scope)
                report = await client.report(run, scope=scope)
                records = [r async for r in client.stream(run, scope=scope)]
            elapsed = time.monotonic() - started
    failed = [record for record in records if isinstance(record, ModelCallFailed)]
    assert report.status is RunStatus.FAILED
    # The budget (8 transient retries, with backoff) would take far longer and show more.
    assert len(failed) == 1 and not failed[0].transient
    assert failed[0].budget_left == spec.limits.transient_retry_budget
    assert elapsed < 15
