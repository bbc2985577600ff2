"""A 401 answering an action signs the person out of the console, saying why, as a 401
on a read does (the console's README promises it for every 401), in a real browser.

From an audit: an approve or a steer refused 401 showed the refusal beside the form and
left the person signed in with a key the API no longer takes. The key is changed in the
tab's storage after the page opened: a credential the API does not accept (as one the
operator revoked), sent first by the action (the open event stream was accepted before)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.wait import WebDriverWait

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall

from ._browser import in_browser, require_browser, served
from ._console_page import console_app, sign_in
from ._waiting import is_suspended, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

ITEM = ".pending-item[data-reason=approval][data-id=call-refund]"


def _revoked(driver: Chrome) -> None:
    driver.execute_script("sessionStorage.setItem('psych.apiKey', 'a-revoked-key')")


def _signed_out(driver: Chrome, wait: WebDriverWait[Chrome]) -> str:
    """The sign-in page's message, once it shows; the key must be gone from the tab."""
    wait.until(ec.visibility_of_element_located((By.ID, "api-key")))
    message = driver.find_element(By.CSS_SELECTOR, "main p[role=status]").text
    assert driver.execute_script("return sessionStorage.getItem('psych.apiKey')") is None
    return str(message)


def _act_with_a_revoked_key(driver: Chrome, base: str, run_id: str) -> dict[str, str]:
    shown = {}
    wait = sign_in(driver, base)
    driver.get(f"{base}/console/#/runs/{run_id}")
    item = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, ITEM)))
    wait.until(ec.text_to_be_present_in_element((By.ID, "connection"), "live"))
    _revoked(driver)
    item.find_element(By.NAME, "approve").click()
    shown["approve"] = _signed_out(driver, wait)

    wait = sign_in(driver, base)
    driver.get(f"{base}/console/#/runs/{run_id}")
    wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, ITEM)))
    driver.find_element(By.CSS_SELECTOR, "details.controls summary").click()
    driver.find_element(By.NAME, "message").send_keys("Answer in German.")
    _revoked(driver)
    driver.find_element(By.CSS_SELECTOR, "details.controls button[type=submit]").click()
    shown["steer"] = _signed_out(driver, wait)
    return shown


async def test_a_401_on_an_action_signs_the_person_out_saying_why(
    harness: Harness, tmp_path: Path
) -> None:
    require_browser()

    @harness.registry.register
    def refund(order_id: str) -> str:
        """Refund an order."""
        return f"refunded order {order_id}"

    harness.settings.policy = RulePolicy(tools={"refund": "ask"})
    spec = AgentBuilder("refunds", registry=harness.registry).model("fake-model").tool("refund")
    harness.fake.enqueue(Reply.tool_calls(ToolCall("refund", {"order_id": "42"}, id="call-refund")))
    async with harness.worker(), served(console_app(harness)) as base:
        run = await harness.client.dispatch(spec.build(), "refund order 42", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_suspended, what="the approval")
        shown = await asyncio.to_thread(
            in_browser,
            tmp_path / "profile",
            lambda d: _act_with_a_revoked_key(d, base, run.workflow_id),
        )
        state = await harness.client.status(run, scope=harness.scope)
        await harness.client.abort(run, scope=harness.scope, reason="test over")

    for action in ("approve", "steer"):
        assert shown[action].startswith("Signed out: 401"), shown
    assert [item.id for item in state.pending] == ["call-refund"]  # nothing was taken
