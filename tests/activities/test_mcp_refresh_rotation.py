"""Workers sharing one OAuth key's tokens through the store: a session whose refresh token
another worker has rotated since it read the store refreshes with the stored one, and a
refused refresh takes the stored token when it is newer, instead of asking a person for
consent again (``ConsentProvider``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx2
import pytest
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
)

from psych_runtime.activities.mcp._consent import ConsentProvider
from psych_runtime.activities.mcp._held import TokensHeld
from psych_runtime.activities.mcp._oauth import StoredTokens
from psych_runtime.activities.tokens import LocalTokenStore, TokenKey

KEY = TokenKey("acme", "alice", "http://127.0.0.1:9", "psych", "http://127.0.0.1:9/mcp")
REDIRECT = "http://127.0.0.1:9/oauth/callback"


def provider(store: LocalTokenStore) -> ConsentProvider:
    made = ConsentProvider(
        server_url="http://127.0.0.1:9/mcp",
        client_metadata=OAuthClientMetadata.model_validate({"redirect_uris": [REDIRECT]}),
        storage=StoredTokens(store, KEY, TokensHeld()),
        client_metadata_url=None,
        issuer="http://127.0.0.1:9",
        key=KEY,
        parked=lambda flow: None,
    )
    made.context.oauth_metadata = OAuthMetadata.model_validate(
        {
            "issuer": "http://127.0.0.1:9",
            "authorization_endpoint": "http://127.0.0.1:9/authorize",
            "token_endpoint": "http://127.0.0.1:9/token",
        }
    )
    made.context.client_info = OAuthClientInformationFull.model_validate(
        {"client_id": "psych", "redirect_uris": [REDIRECT]}
    )
    return made


def holding(made: ConsentProvider, token: OAuthToken) -> ConsentProvider:
    made.context.current_tokens = token
    made.context.update_token_expiry(token)
    return made


EXPIRED = OAuthToken(access_token="t1", expires_in=0, refresh_token="r1")
ROTATED = OAuthToken(access_token="t2", expires_in=3600, refresh_token="r2")


async def test_a_session_takes_a_token_another_worker_refreshed_before_refreshing(
    tmp_path: Path,
) -> None:
    store = LocalTokenStore(tmp_path)
    stale = holding(provider(store), EXPIRED)  # read before the other worker refreshed
    stale._initialized = True
    await StoredTokens(store, KEY, TokensHeld()).set_tokens(ROTATED)
    flow = stale._auth_flow(httpx2.Request("GET", "http://127.0.0.1:9/mcp"))
    first = await flow.__anext__()
    # The request itself, with the stored token: no refresh (its rotated r1 never sent).
    assert first.url == "http://127.0.0.1:9/mcp"
    assert first.headers["Authorization"] == "Bearer t2"
    with pytest.raises(StopAsyncIteration):
        await flow.asend(httpx2.Response(200))


async def test_a_refresh_uses_the_refresh_token_another_worker_stored(tmp_path: Path) -> None:
    store = LocalTokenStore(tmp_path)
    stale = holding(provider(store), EXPIRED)
    stale._initialized = True
    await StoredTokens(store, KEY, TokensHeld()).set_tokens(
        OAuthToken(access_token="t2", expires_in=0, refresh_token="r2")  # expired too
    )
    flow = stale._auth_flow(httpx2.Request("GET", "http://127.0.0.1:9/mcp"))
    refresh = await flow.__anext__()
    assert refresh.url == "http://127.0.0.1:9/token"
    assert b"refresh_token=r2" in refresh.content and b"r1" not in refresh.content
    await flow.aclose()


async def test_a_refused_refresh_takes_a_newer_stored_token(tmp_path: Path) -> None:
    store = LocalTokenStore(tmp_path)
    stale = holding(provider(store), EXPIRED)
    await StoredTokens(store, KEY, TokensHeld()).set_tokens(ROTATED)  # stored meanwhile
    assert await stale._handle_refresh_response(httpx2.Response(400)) is True
    assert stale.context.current_tokens is not None
    assert stale.context.current_tokens.access_token == "t2"
    assert stale.context.is_token_valid()


async def test_a_refused_refresh_takes_a_token_another_worker_stores_a_moment_later(
    tmp_path: Path,
) -> None:
    # Both workers' tokens expired together and both refreshed: the server took the other
    # worker's refresh and refused this one before the other had stored its new token.
    store = LocalTokenStore(tmp_path)
    await StoredTokens(store, KEY, TokensHeld()).set_tokens(EXPIRED)
    stale = holding(provider(store), EXPIRED)

    async def other_worker_stores() -> None:
        await asyncio.sleep(0.3)
        await StoredTokens(store, KEY, TokensHeld()).set_tokens(ROTATED)

    storing = asyncio.create_task(other_worker_stores())
    assert await stale._handle_refresh_response(httpx2.Response(400)) is True
    await storing
    assert stale.context.current_tokens is not None
    assert stale.context.current_tokens.access_token == "t2"


class CountingReads(LocalTokenStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads = 0

    async def get(self, key: TokenKey) -> bytes | None:
        self.reads += 1
        return await super().get(key)


async def test_a_refused_refresh_with_nothing_newer_stored_asks_again(tmp_path: Path) -> None:
    store = CountingReads(tmp_path)
    await StoredTokens(store, KEY, TokensHeld()).set_tokens(EXPIRED)
    stale = holding(provider(store), EXPIRED)
    stale.refresh_settle_seconds = 0.3
    assert await stale._handle_refresh_response(httpx2.Response(400)) is False
    assert store.reads >= 3  # asked again while it waited, not once
    assert stale.context.current_tokens is None  # the full flow (a consent) follows


async def test_a_refresh_cancelled_while_it_waits_keeps_no_token(tmp_path: Path) -> None:
    # Kept, the spent refresh token would be sent again at the session's next request.
    store = LocalTokenStore(tmp_path)
    await StoredTokens(store, KEY, TokensHeld()).set_tokens(EXPIRED)
    stale = holding(provider(store), EXPIRED)
    waiting = asyncio.create_task(stale._handle_refresh_response(httpx2.Response(400)))
    await asyncio.sleep(0.3)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert stale.context.current_tokens is None
