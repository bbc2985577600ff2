"""The app under a real uvicorn on loopback: what it made is closed when it stops."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from psych_runtime.workers.serve import Caller
from psych_runtime.workers.serve.a2a import a2a_routes
from psych_runtime.workflows import PsychClient

from ._app import served


async def test_the_app_closes_the_push_registry_it_made_when_the_server_stops(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as (base, app), httpx.AsyncClient() as http:
        card = await http.get(f"{base}/a2a/support/.well-known/agent-card.json")
        assert card.status_code == 404  # served: no agent published
        assert not app.state.a2a_pushes.closed
    # Closed by the app's shutdown: its tasks' push notifications are left to another
    # process at once, and its egress clients are closed.
    assert app.state.a2a_pushes.closed


def test_the_a2a_mount_is_given_its_push_registry_and_makes_none() -> None:
    # A registry it made would be one nobody closes (nothing runs at a mount's shutdown).
    async def caller_for(header: str | None) -> Caller:
        raise AssertionError("never called")

    client = PsychClient.__new__(PsychClient)
    with pytest.raises(TypeError, match="pushes"):
        a2a_routes(  # type: ignore[call-arg]
            client, caller_for, jwt=False, query_timeout=timedelta(seconds=1)
        )
