"""A Run waiting for a person's consent to an MCP server, in a real browser: the console
shows the server and the link to open, the person opens it (the consent server's
``/authorize`` redirects to psych's OAuth callback, which resumes the Run), and the page
shows the Run finish.

From an audit of the console: an ``authorization`` item was shown as "Waiting for
authorization <id>", without the URL the person must open (what ``psych status``, ``run``
and ``list --suspended`` print, and the MCP guide promises of the console too).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec

from psych_runtime.activities import McpSettings
from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.specs import AgentBuilder, McpOAuth
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus, SuspensionReason
from tests.mcp.consent_fixture import CLIENT, Consenting, consenting

from ._browser import in_browser, require_browser, served
from ._console_page import console_app, severe, sign_in
from ._waiting import is_waiting, only_pending, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

ITEM = ".pending-item[data-reason=authorization]"


@pytest.fixture
async def consent_pair(harness: Harness) -> AsyncIterator[Consenting]:
    store = LocalTokenStore(harness.home / "tokens")
    async with consenting("streamable-http", harness.client, store) as pair:
        harness.settings.mcp = McpSettings(oauth_issuers={CLIENT: pair.server.issuer})
        yield pair


def _consent(driver: Chrome, base: str, run_id: str) -> dict[str, str]:
    wait = sign_in(driver, base)
    console = driver.current_window_handle
    driver.get(f"{base}/console/#/runs/{run_id}")
    item = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, ITEM)))
    heading = item.find_element(By.TAG_NAME, "h3").text
    link = item.find_element(By.CSS_SELECTOR, "a.consent")
    shown = {
        "heading": heading,
        "href": str(link.get_attribute("href")),
        "target": str(link.get_attribute("target")),
        "rel": str(link.get_attribute("rel")),
    }
    link.click()  # a new tab: the consent page, then the callback's
    wait.until(lambda d: len(d.window_handles) == 2)
    driver.switch_to.window(next(h for h in driver.window_handles if h != console))
    wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "body"), "authorized"))
    driver.close()
    driver.switch_to.window(console)
    wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "completed"))
    shown["pending_left"] = str(len(driver.find_elements(By.CSS_SELECTOR, ".pending-item")))
    # The console's own: the consent and callback pages are other sites (their favicon).
    logged = json.loads(severe(driver))
    shown["console_errors"] = json.dumps([e for e in logged if base in e.get("message", "")])
    return shown


async def test_a_person_opens_the_consent_link_from_the_console_and_the_run_finishes(
    harness: Harness, consent_pair: Consenting, tmp_path: Path
) -> None:
    require_browser()
    server = consent_pair.server
    oauth = McpOAuth(
        grant="authorization_code",
        preregistered_client_id=CLIENT,
        redirect_uris=(consent_pair.callback_url,),
    )
    spec = (
        AgentBuilder("consent-agent")
        .instructions("Use the CRM.")
        .model("fake-model")
        .mcp_server("crm", server.url, transport="http", oauth=oauth)
        .build()
    )
    harness.fake.enqueue(Reply.tool_calls(ToolCall("crm__whoami", {})), Reply.text("done"))
    async with harness.worker(), served(console_app(harness)) as base:
        run = await harness.client.dispatch(spec, "who am I?", scope=harness.scope)
        state = await state_when(
            harness.client, run, harness.scope, is_waiting, what="consent", within=60
        )
        item = only_pending(state)
        assert item.reason is SuspensionReason.AUTHORIZATION and item.question is not None
        shown = await asyncio.to_thread(
            in_browser, tmp_path / "profile", lambda d: _consent(d, base, run.workflow_id)
        )
        result = await harness.client.result(run, scope=harness.scope)

    assert "consent" in shown["heading"] and "crm" in shown["heading"]
    assert shown["href"] == item.question
    assert shown["target"] == "_blank"
    assert set(shown["rel"].split()) >= {"noopener", "noreferrer"}
    assert shown["pending_left"] == "0"
    assert shown["console_errors"] == "[]"
    assert result.status is RunStatus.COMPLETED, result.reason
    assert server.consents()["authorized"] == [CLIENT]
