"""``psych serve`` answers the OAuth redirect of MCP servers a person consents to at
``/oauth/callback`` when it has the workers' token store (and not without one): a
redirect whose state no Run waits on, or that carries the authorization server's refusal,
is answered 400 naming what is wrong, and nothing reaches Temporal."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities.mcp._consent_callback import Waiting, index_key
from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.specs import Scope
from psych_runtime.workers._oauth_callback import complete_authorization
from psych_runtime.workers.serve.a2a import MemoryTokenStore
from psych_runtime.workflows import ResumeInput

from ._app import api


async def test_the_callback_is_mounted_with_a_token_store(tmp_path: Path) -> None:
    async with api(tmp_path, tokens=LocalTokenStore(tmp_path / "tokens")) as http:
        unknown = await http.get("/oauth/callback", params={"code": "c", "state": "nobody"})
        assert unknown.status_code == 400
        assert "no authorization waits on this state" in unknown.text
        assert unknown.headers["cache-control"] == "no-store"
        refused = await http.get("/oauth/callback", params={"error": "access_denied", "state": "s"})
        assert refused.status_code == 400
        assert "the authorization server refused: access_denied" in refused.text
        bare = await http.get("/oauth/callback")
        assert "the redirect carries no code or no state" in bare.text


async def test_without_a_token_store_there_is_no_callback(tmp_path: Path) -> None:
    async with api(tmp_path) as http:
        assert (await http.get("/oauth/callback", params={"state": "s"})).status_code == 404


class Stuck:
    """A PsychClient whose resume no worker takes, or that Temporal refuses."""

    def __init__(self, refused: RPCStatusCode | None = None) -> None:
        self.refused = refused
        self.update_timeout: timedelta | None = None

    async def resume(
        self, run: str, request: ResumeInput, *, scope: Scope, update_timeout: timedelta | None
    ) -> None:
        self.update_timeout = update_timeout  # the client's bound, as long as the page's
        if self.refused is not None:
            raise RPCError("refused", self.refused, b"")
        await asyncio.Event().wait()


@pytest.mark.parametrize(
    ("client", "said"),
    [
        (Stuck(), "no worker answered for the Run within 0.2 s"),
        (Stuck(RPCStatusCode.UNAVAILABLE), "Temporal refused (UNAVAILABLE)"),
    ],
)
async def test_a_resume_nobody_takes_is_answered_not_waited_on_for_ever(
    monkeypatch: pytest.MonkeyPatch, client: Stuck, said: str
) -> None:
    # A person waits on this page: it says what happened once the bound has passed.
    monkeypatch.setattr("psych_runtime.workers._oauth_callback.RESUME_WAIT_SECONDS", 0.2)
    store = MemoryTokenStore()
    waiting = Waiting(workflow_id="psych-acme-r1", tenant="acme", id="consent-1")
    await store.put(index_key("s1"), waiting.model_dump_json().encode())
    done = await asyncio.wait_for(
        complete_authorization(client, store, {"code": "c", "state": "s1"}),  # type: ignore[arg-type]
        timeout=10,
    )
    assert not done.ok
    assert said in done.message
    assert done.workflow_id == "psych-acme-r1"
    assert client.update_timeout == timedelta(seconds=0.2)
