"""RFC 9207's ``iss`` on the redirect that answers a person's consent: psych's callback
takes a code, or a refusal (``error=access_denied``), only when its ``iss`` is the issuer
of the authorization server the consent was asked of, and present where that server says
it sends one. Otherwise (another server's redirect: a mix-up) the page names the mismatch,
nothing is resumed, and the Run goes on waiting on the same item, which the right redirect
then answers. Real Runs on the dev server against ``tests.mcp.consent_server`` (the SDK's
own authorization server, its redirects' ``iss`` set by ``--iss`` and
``/control/authorize-iss``), psych's worker and callback on loopback."""

from __future__ import annotations

import asyncio
import html
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from psych_runtime.activities import McpSettings
from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.specs import RunFailed
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import Resumed, RunStatus
from tests.mcp.consent_fixture import CLIENT, Consenting, consenting

from ._waiting import all_records, is_waiting, only_pending
from .conftest import Harness
from .test_mcp_consent import WAIT, Callback, agent, consent, consent_asked

pytestmark = pytest.mark.e2e

ELSEWHERE = "http://127.0.0.1:9/"
"""The issuer of another authorization server (a mix-up's)."""


@asynccontextmanager
async def pair_with(harness: Harness, *extra: str) -> AsyncIterator[Consenting]:
    store = LocalTokenStore(harness.home / "tokens")
    async with consenting("streamable-http", harness.client, store, extra=extra) as pair:
        harness.settings.mcp = McpSettings(oauth_issuers={CLIENT: pair.server.issuer})
        yield pair


@pytest.mark.parametrize(
    ("answer", "advertised", "iss", "said"),
    [
        ("refusal", False, ELSEWHERE, f"the redirect's iss '{ELSEWHERE}' is not http://"),
        ("refusal", True, None, "the redirect carries no iss, which the authorization server"),
        ("code", True, ELSEWHERE, f"the redirect's iss '{ELSEWHERE}' is not http://"),
    ],
    ids=["refusal-wrong-iss", "refusal-missing-iss", "code-wrong-iss"],
)
async def test_a_redirect_with_another_iss_is_not_taken_and_the_wait_goes_on(
    harness: Harness, answer: str, advertised: bool, iss: str | None, said: str
) -> None:
    extra = ("--iss",) if advertised else ()
    async with pair_with(harness, *extra) as pair:
        server = pair.server
        if answer == "refusal":
            server.refuse_consent("access_denied", "The user denied the request")
        server.set_authorize_iss(iss)
        harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done"))
        async with harness.worker():
            run = await harness.client.dispatch(
                agent(server, Callback(pair.callback_url)).build(), "who am I?", scope=harness.scope
            )
            item = await consent_asked(harness, run, harness.scope)
            page = await consent(item)
            assert page.status_code == 400, page.text
            told = html.unescape(page.text)
            assert said in told, told
            assert "(RFC 9207" in told and "refused; the Run still waits for consent" in told
            # Nothing was resumed (before the fix, a refusal's ended the wait and failed
            # the Run; a code's was taken, its exchange refused, and consent asked anew).
            state = await harness.client.status(run, scope=harness.scope)
            assert is_waiting(state) and only_pending(state).id == item.id, state
            records = await all_records(harness.client, run, harness.scope)
            assert not any(isinstance(r, Resumed) for r in records), records
            # The authorization server's own redirect answers the same item.
            server.refuse_consent(None)
            server.reset_authorize_iss()
            page = await consent(item)
            assert page.status_code == 200, page.text
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), WAIT)
        assert result.status is RunStatus.COMPLETED, result.reason
        consents = server.consents()["authorized"]
        assert consents == ([CLIENT] if answer == "refusal" else [CLIENT, CLIENT])


async def test_a_refusal_with_the_right_iss_ends_the_wait(harness: Harness) -> None:
    async with pair_with(harness, "--iss") as pair:
        server = pair.server
        server.refuse_consent("access_denied", None)
        harness.fake.enqueue(Reply.text("never"))
        async with harness.worker():
            run = await harness.client.dispatch(
                agent(server, Callback(pair.callback_url)).build(), "who am I?", scope=harness.scope
            )
            page = await consent(await consent_asked(harness, run, harness.scope))
            assert page.status_code == 400
            assert "the authorization server refused: access_denied; the Run was told" in page.text
            with pytest.raises(RunFailed, match="consent to MCP server 'crm' was refused"):
                await asyncio.wait_for(harness.client.result(run, scope=harness.scope), WAIT)
