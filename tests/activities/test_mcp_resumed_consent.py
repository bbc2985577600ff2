"""A consent needed to resume a call's dropped event stream: the call's request had left.

Over streamable HTTP the SDK resumes a ``tools/call`` whose event stream dropped with a GET
carrying ``Last-Event-ID``, in the asking call's context and through its OAuth flow. A 401
there (the token revoked while the tool ran) led the flow to park a person's consent for
the call, which raised it: "never reached the tool, run it again once the person
consented", and after the consent the Run ran the tool a second time. Now such a flow
parks nothing (``_consent.ConsentProvider``): the call fails as one that may have run, and
the next request of the key, refused 401, asks for the consent.

Against the consent server on loopback (``tests.mcp.consent_server --resumable``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from psych_runtime.activities import LocalTokenStore, McpSettings
from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.mcp import McpActivities
from psych_runtime.activities.mcp._consent import ConsentProvider
from tests.activities.test_mcp import call
from tests.activities.test_mcp_consent_owner import CLIENT, REDIRECT, asked, consent, crm
from tests.mcp.oauth_fixture import OAuthMcpServer, start_oauth_server


@pytest.fixture
def consent_server() -> Iterator[OAuthMcpServer]:
    server = start_oauth_server(
        "streamable-http",
        {CLIENT: REDIRECT},
        module="tests.mcp.consent_server",
        extra=("--resumable",),
    )
    yield server
    server.stop()


async def test_a_consent_needed_resuming_a_calls_stream_is_a_call_that_may_have_run(
    consent_server: OAuthMcpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A refused refresh waits this long for another worker's token before it asks.
    monkeypatch.setattr(ConsentProvider, "refresh_settle_seconds", 0.1)
    store = LocalTokenStore(tmp_path / "tokens")
    mcp = McpActivities(
        blobs=LocalBlobStore(tmp_path / "blobs"),
        settings=McpSettings(oauth_issuers={CLIENT: consent_server.issuer}),
        tokens=store,
    )
    server = crm(consent_server)
    try:
        with pytest.raises(ApplicationError) as first:
            await call(mcp, server, "whoami", {})
        await consent(mcp, store, asked(first.value))
        # The tool revokes every token, then drops its stream: the GET resuming it is
        # refused 401, and its flow would ask for a person's consent.
        outcome = await call(mcp, server, "dropped", {"seconds": 0.5})
        assert consent_server.state()["calls"]["dropped"] == 1  # its POST had left
        # Before: ApplicationError MCP_CONSENT_REQUIRED (the Run would run it again).
        assert outcome.status == "error", outcome.content
        assert "did not run" not in outcome.content, outcome.content
        assert "consent" in outcome.content, outcome.content
        # The next call of the key meets the 401 on its own request and asks for consent.
        with pytest.raises(ApplicationError) as again:
            await call(mcp, server, "whoami", {})
        assert asked(again.value).server == "crm"
        assert consent_server.state()["calls"]["dropped"] == 1
    finally:
        await mcp.aclose()


async def test_a_consent_the_sessions_own_stream_needs_is_not_its_openers_call(
    consent_server: OAuthMcpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session's standing event stream (its GET) runs in the context of the call that
    # opened the session. The tool revokes every token and closes that stream: opened
    # again, its GET is refused 401 and its flow would ask for a person's consent.
    # Before: parked for the opener's call, which it interrupted while the tool ran, and
    # which raised it as "never reached the tool" (after the consent, run a second time).
    monkeypatch.setattr(ConsentProvider, "refresh_settle_seconds", 0.1)
    store = LocalTokenStore(tmp_path / "tokens")
    mcp = McpActivities(
        blobs=LocalBlobStore(tmp_path / "blobs"),
        settings=McpSettings(oauth_issuers={CLIENT: consent_server.issuer}),
        tokens=store,
    )
    server = crm(consent_server)
    try:
        with pytest.raises(ApplicationError) as first:
            await call(mcp, server, "whoami", {})
        await consent(mcp, store, asked(first.value))
        # A fresh session (the first was retired for the consent): this call opens it.
        outcome = await call(mcp, server, "unheard", {"seconds": 4})
        assert outcome.status == "ok", outcome.content
        assert outcome.content == "unheard for 4"
        # The next call of the key meets the 401 on its own request and asks for consent.
        with pytest.raises(ApplicationError) as again:
            await call(mcp, server, "whoami", {})
        assert asked(again.value).server == "crm"
        assert consent_server.state()["calls"]["unheard"] == 1
    finally:
        await mcp.aclose()
