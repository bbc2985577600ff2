"""The web console in a real browser: a person signs in with an API key, opens a Run that
waits for the approval of a refund, sees the call's arguments, approves it with a note,
and sees the Run finish live, without reloading the page."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from selenium.common.exceptions import TimeoutException
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.wait import WebDriverWait

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.serve import ApiKey, AuthSettings, ServeSettings, create_app
from psych_runtime.workflows import Resumed, RunStatus

from ._browser import browser_log, chromium, require_browser, served
from ._waiting import is_suspended, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

KEY = "console-test-key"
# Markup in what a model says is shown as text, never parsed as HTML.
ANSWER = "Refunded 19.99 for order <b>42</b>."
NOTE = "checked the photo of the broken parcel"


def _approve_in_browser(profile: Path, base: str, run_id: str) -> dict[str, str]:
    """What a person does, in a browser of its own; returns what the page showed."""
    with chromium(profile) as driver:
        try:
            return _approve(driver, base, run_id)
        except TimeoutException as err:
            # What the person would have seen, so a failure says where it stopped.
            driver.save_screenshot(str(profile.parent / "console.png"))
            page = driver.find_element(By.TAG_NAME, "body").text
            logs = browser_log(driver)
            raise AssertionError(f"the page showed:\n{page}\nbrowser log: {logs}") from err


def _approve(driver: Chrome, base: str, run_id: str) -> dict[str, str]:
    wait = WebDriverWait(driver, 30)
    driver.get(f"{base}/console")
    key = wait.until(ec.visibility_of_element_located((By.ID, "api-key")))
    key.send_keys(KEY)
    driver.find_element(By.CSS_SELECTOR, "form.sign-in button[type=submit]").click()
    # The tenant's Runs, the one waiting among them; it opens from the list.
    link = wait.until(ec.element_to_be_clickable((By.LINK_TEXT, run_id)))
    assert driver.execute_script("return sessionStorage.getItem('psych.apiKey')") == KEY
    link.click()
    item = wait.until(
        ec.visibility_of_element_located(
            (By.CSS_SELECTOR, ".pending-item[data-reason=approval][data-id=call-refund]")
        )
    )
    arguments = json.loads(item.find_element(By.CSS_SELECTOR, ".arguments").text)
    heading = item.find_element(By.TAG_NAME, "h3").text
    # A mark on this page: still there at the end, so nothing reloaded it.
    driver.execute_script("window.__sameDocument = true")
    item.find_element(By.NAME, "note").send_keys(NOTE)
    item.find_element(By.NAME, "approve").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "completed"))
    answer = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "#answer pre"))).text
    settled = wait.until(
        ec.presence_of_element_located((By.CSS_SELECTOR, "#records [data-kind=run_settled]"))
    ).text
    resumed = driver.find_element(By.CSS_SELECTOR, "#records [data-kind=resumed]").text
    markup = len(driver.find_elements(By.CSS_SELECTOR, "main b"))
    driver.find_element(By.CSS_SELECTOR, "nav.tabs [data-tab=transcript]").click()
    last_message = (By.CSS_SELECTOR, ".transcript .role-assistant:last-of-type pre")
    transcript_answer = wait.until(ec.visibility_of_element_located(last_message)).text
    return {
        "heading": heading,
        "arguments": json.dumps(arguments, sort_keys=True),
        "answer": answer,
        "settled": settled,
        "resumed": resumed,
        "transcript_answer": transcript_answer,
        "markup_elements": str(markup + len(driver.find_elements(By.CSS_SELECTOR, "main b"))),
        "same_document": str(driver.execute_script("return window.__sameDocument === true")),
        "pending_left": str(len(driver.find_elements(By.CSS_SELECTOR, ".pending-item"))),
        "console_errors": json.dumps(
            [e for e in browser_log(driver) if e.get("level") == "SEVERE"]
        ),
    }


async def test_a_person_approves_a_refund_and_sees_the_run_finish(
    harness: Harness, tmp_path: Path
) -> None:
    require_browser()
    refunds: list[tuple[str, float]] = []

    @harness.registry.register
    def refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        refunds.append((order_id, amount))
        return f"refunded {amount} for order {order_id}"

    harness.settings.policy = RulePolicy(tools={"refund": "ask"})
    spec = AgentBuilder("refunds", registry=harness.registry).model("fake-model").tool("refund")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("refund", {"order_id": "42", "amount": 19.99}, id="call-refund")),
        Reply.text(ANSWER),
    )
    app = create_app(
        ServeSettings(
            client=harness.client,
            auth=AuthSettings(api_keys=(ApiKey.of(KEY, harness.scope.tenant, "ops"),)),
        )
    )
    async with harness.worker(), served(app) as base:
        run = await harness.client.dispatch(spec.build(), "refund order 42", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_suspended, what="the approval")
        # The browser blocks: in a thread, so this loop keeps serving the API and the worker.
        shown = await asyncio.to_thread(
            _approve_in_browser, tmp_path / "profile", base, run.workflow_id
        )

        state = await harness.client.status(run, scope=harness.scope)
        records = [r async for r in harness.client.stream(run, scope=harness.scope)]

    assert "approval of refund" in shown["heading"]
    assert shown["arguments"] == json.dumps({"amount": 19.99, "order_id": "42"}, sort_keys=True)
    assert shown["answer"] == ANSWER
    assert "completed" in shown["settled"] and ANSWER in shown["settled"]
    assert "approved" in shown["resumed"] and NOTE in shown["resumed"]
    assert shown["transcript_answer"] == ANSWER
    assert shown["markup_elements"] == "0"
    assert shown["same_document"] == "True"
    assert shown["pending_left"] == "0"
    assert shown["console_errors"] == "[]"
    assert refunds == [("42", 19.99)]
    assert state.status is RunStatus.COMPLETED and state.answer == ANSWER
    (resumed,) = [r for r in records if isinstance(r, Resumed)]
    assert (resumed.outcome, resumed.by, resumed.detail) == ("approved", "ops", NOTE)


def test_a_missing_browser_fails_where_one_is_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    absent = tmp_path / "chromium"
    monkeypatch.setenv("PSYCH_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y chromium chromium-driver"):
        require_browser(browser=absent)
    monkeypatch.delenv("PSYCH_REQUIRE_BROWSER")
    with pytest.raises(pytest.skip.Exception, match=f"{absent} missing"):
        require_browser(browser=absent)
