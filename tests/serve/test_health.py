"""``psych serve``'s probes: ``/livez`` and ``/readyz``, unauthenticated, readiness from
the Temporal server (an orchestrator had no probe of serve but its authenticated routes)."""

from __future__ import annotations

from pathlib import Path

import httpx
from temporalio.testing import WorkflowEnvironment

from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.workers.serve import AuthSettings, ServeSettings, create_app
from psych_runtime.workflows import PsychClient

from ._app import KEYS, api


async def test_probes_need_no_key_and_readiness_follows_the_temporal_server(
    tmp_path: Path, dev_env: WorkflowEnvironment
) -> None:
    # The app's client points at a port where nothing listens: live, not ready.
    async with api(tmp_path) as http:
        live = await http.get("/livez")
        away = await http.get("/readyz")
    assert (live.status_code, live.text) == (200, "ok\n")
    assert (away.status_code, away.text) == (503, "not ok\n")
    # With a server that answers: ready.
    client = PsychClient(dev_env.client, store=FileVersionStore(tmp_path / "versions"))
    app = create_app(ServeSettings(client, AuthSettings(KEYS)))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
        ready = await http.get("/readyz")
        schema = (await http.get("/openapi.json")).json()
    assert (ready.status_code, ready.text) == (200, "ok\n")
    assert "/readyz" not in schema["paths"]  # probes, not the API's contract
