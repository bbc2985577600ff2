"""The web console in a real browser: a person signs in with an API key, opens a Run that
waits for the approval of a refund, sees the call's arguments, approves it with a note,
and sees the Run finish live, without reloading the page."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, WorkflowBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import Resumed, RunStatus

from ._browser import in_browser, require_browser, served
from ._console_page import console_app, severe, sign_in
from ._waiting import eventually, is_suspended, is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

# Markup in what a model says is shown as text, never parsed as HTML.
ANSWER = "Refunded 19.99 for order <b>42</b>."
NOTE = "checked the photo of the broken parcel"


def _approve(driver: Chrome, base: str, run_id: str) -> dict[str, str]:
    """What a person does, step by step; returns what the page showed."""
    wait = sign_in(driver, base)
    # The tenant's Runs, the one waiting among them; it opens from the list.
    wait.until(ec.element_to_be_clickable((By.LINK_TEXT, run_id))).click()
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
        "console_errors": severe(driver),
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
    async with harness.worker(), served(console_app(harness)) as base:
        run = await harness.client.dispatch(spec.build(), "refund order 42", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_suspended, what="the approval")
        # The browser blocks: in a thread, so this loop keeps serving the API and the worker.
        shown = await asyncio.to_thread(
            in_browser, tmp_path / "profile", lambda d: _approve(d, base, run.workflow_id)
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
    driver = tmp_path / "chromedriver"  # present, whether this machine has one or not
    driver.touch()
    monkeypatch.setenv("PSYCH_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y chromium chromium-driver"):
        require_browser(browser=absent, driver=driver)
    monkeypatch.delenv("PSYCH_REQUIRE_BROWSER")
    with pytest.raises(pytest.skip.Exception, match=rf"\({absent} missing\)"):
        require_browser(browser=absent, driver=driver)


QUESTION = "Which name should I greet?"
GREETING = "Welcome aboard, Ada!"


def _answer(driver: Chrome, base: str, run_id: str) -> dict[str, str]:
    """A workflow waits on its agent step's question: the person finds it among the Runs
    waiting for someone, answers it on the workflow's page, then reads its steps."""
    wait = sign_in(driver, base)
    driver.find_element(By.NAME, "waiting").click()
    driver.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
    row = wait.until(
        ec.visibility_of_element_located((By.CSS_SELECTOR, f"tr[data-run='{run_id}']"))
    )
    waiting_on = row.text
    assert "waiting=true" in driver.current_url
    row.find_element(By.LINK_TEXT, run_id).click()
    item = wait.until(
        ec.visibility_of_element_located((By.CSS_SELECTOR, ".pending-item[data-reason=question]"))
    )
    heading = item.find_element(By.TAG_NAME, "h3").text
    child = item.find_element(By.CSS_SELECTOR, "p a").text
    item.find_element(By.NAME, "answer").send_keys("Ada")
    item.find_element(By.CSS_SELECTOR, "button[name=answer]").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "completed"))
    driver.find_element(By.CSS_SELECTOR, "nav.tabs [data-tab=steps]").click()
    rows = wait.until(
        ec.visibility_of_all_elements_located((By.CSS_SELECTOR, "table.steps tbody tr"))
    )
    steps = [[cell.text for cell in r.find_elements(By.TAG_NAME, "td")] for r in rows]
    driver.find_element(By.CSS_SELECTOR, "nav.tabs [data-tab=transcript]").click()
    transcript = wait.until(
        ec.visibility_of_element_located((By.CSS_SELECTOR, ".transcript .step .child"))
    ).text
    return {
        "waiting_on": waiting_on,
        "heading": heading,
        "child": child,
        "steps": json.dumps(steps),
        "transcript": transcript,
        "console_errors": severe(driver),
    }


async def test_a_person_answers_a_workflow_steps_question_and_reads_its_steps(
    harness: Harness, tmp_path: Path
) -> None:
    require_browser()

    @harness.registry.register
    def create_account(plan: str) -> dict[str, str]:
        """Create an account on a plan."""
        return {"account_id": "acct-1", "plan": plan}

    greeter = (
        AgentBuilder("greeter", registry=harness.registry)
        .model("fake-model")
        .suspension(may_ask_questions=True)
        .build()
    )
    spec = (
        WorkflowBuilder("onboard", registry=harness.registry)
        .tool("create_account")
        .tool_step("create", "create_account", {"plan": "starter"})
        .agent_step("welcome", greeter)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": QUESTION}, id="q1")),
        Reply.text(GREETING),
    )
    async with harness.worker(), served(console_app(harness)) as base:
        run = await harness.client.dispatch(spec, "onboard Ada", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_waiting, what="the question")

        async def listed() -> bool:  # the list reads visibility, which lags the Run
            runs = await harness.client.list(scope=harness.scope, suspended=True)
            return any(r.workflow_id == run.workflow_id for r in runs)

        await eventually(listed, within=60, what="the Run listed as waiting")
        shown = await asyncio.to_thread(
            in_browser, tmp_path / "profile", lambda d: _answer(d, base, run.workflow_id)
        )
        state = await harness.client.status(run, scope=harness.scope)

    assert "question" in shown["waiting_on"]
    assert QUESTION in shown["heading"]
    assert shown["child"].startswith(f"psych-{harness.scope.tenant}-")
    create, welcome = json.loads(shown["steps"])
    assert create[:4] == ["1", "create", "tool", "ok"]
    assert "acct-1" in create[5]
    assert welcome[:4] == ["2", "welcome", "agent", "ok (completed)"]
    assert welcome[4] == shown["child"]
    assert GREETING in shown["transcript"] and "Ada" in shown["transcript"]
    assert shown["console_errors"] == "[]"
    assert state.status is RunStatus.COMPLETED
    assert state.outputs is not None and state.outputs["welcome"] == GREETING
