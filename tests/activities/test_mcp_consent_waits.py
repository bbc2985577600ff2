"""A call's wait for consent (``Consents.unless_needed``): a flow parked for one asker's
request (``asking``) stops that asker's wait and is taken by it alone; another call of the
same key goes on waiting for its own answer and takes nothing; nothing is kept per key
once the calls are done. Against real servers: ``test_mcp_consent_owner.py``."""

from __future__ import annotations

import asyncio

import pytest
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata

from psych_runtime.activities.mcp._consent import ConsentInterrupted, Consents, Flow, asking
from psych_runtime.activities.tokens import TokenKey

URL = "http://127.0.0.1:9/mcp"


def key(principal: str) -> TokenKey:
    return TokenKey("acme", principal, "http://127.0.0.1:9", "psych", URL)  # ``flow``'s


def flow(principal: str) -> Flow:
    redirect = "http://127.0.0.1:9/cb"
    return Flow(
        key=("acme", principal, "http://127.0.0.1:9", "psych", URL),
        url="http://127.0.0.1:9/authorize?state=s",
        state="s",
        verifier="v",
        server_url=URL,
        client_metadata=OAuthClientMetadata.model_validate({"redirect_uris": [redirect]}),
        client_info=OAuthClientInformationFull(client_id="psych", redirect_uris=None),
        oauth_metadata=None,
        protected_resource=None,
        protocol_version=None,
    )


async def answer(value: str, delay: float = 0.0) -> str:
    await asyncio.sleep(delay)
    return value


async def test_calls_of_many_keys_leave_nothing_behind() -> None:
    consents = Consents(None, {})
    for n in range(50):
        with asking():
            assert await consents.unless_needed(answer(f"ok-{n}")) == f"ok-{n}"
    assert consents.needed == {}


async def test_a_consent_needed_stops_its_own_call_only_and_is_taken_by_it() -> None:
    consents = Consents(None, {})
    started = asyncio.Event()

    async def other_call() -> str:  # B: already with the server, answered later
        with asking():
            started.set()
            got = await consents.unless_needed(answer("done", 0.2))
            assert consents.take(key("a")) is None  # never another's flow
            return got

    async def needs_consent() -> str:  # A: its own request's flow parks (``saw``)
        consents.saw(flow("a"))
        await asyncio.sleep(5)
        return "never"

    other = asyncio.ensure_future(other_call())
    await started.wait()
    with asking():
        with pytest.raises(ConsentInterrupted):
            await consents.unless_needed(needs_consent())
        taken = consents.take(key("a"))
        assert taken is not None and taken.state == "s"
    assert await other == "done"
    assert consents.needed == {}


async def test_a_flow_outside_any_asker_is_the_keys() -> None:
    # A publish-time check (``_connect.py``) makes its requests outside any asker.
    consents = Consents(None, {})
    consents.saw(flow("a"))
    with asking():
        assert consents.take(key("a")) is None
    taken = consents.take(key("a"))
    assert taken is not None and consents.needed == {}
