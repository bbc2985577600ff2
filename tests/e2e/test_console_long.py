"""Long words in what a Run shows (a model's text, a tool's result, a question, a
failure's reason: URLs, ids, JSON or base64 without a space), in a real browser: the page
stays as wide as the window, every text wrapped inside it.

From an audit of the console: a failure reason or a long message with no space to break
at made the page wider than the window, the reason cut off at its edge, to be read by
scrolling sideways.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from ._browser import in_browser, require_browser, served
from ._console_page import console_app, severe, sign_in
from ._waiting import is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

WORD = "x" * 2000
WIDTHS = "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"


def _widths(driver: Chrome) -> list[int]:
    widths: list[int] = driver.execute_script(WIDTHS)
    return widths


def _read(driver: Chrome, base: str, run_id: str) -> str:
    """The page's width against the window's in each view, as JSON: while the Run waits
    for an answer, and once it failed."""
    wait = sign_in(driver, base)
    driver.get(f"{base}/console/#/runs/{run_id}")
    wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, ".pending-item")))
    seen = {"waiting": _widths(driver)}
    driver.find_element(By.CSS_SELECTOR, ".pending-item textarea").send_keys("Ada")
    driver.find_element(By.CSS_SELECTOR, ".pending-item button[name=answer]").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "failed"))
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "[data-kind=run_settled]")))
    seen["failed"] = _widths(driver)
    driver.find_element(By.CSS_SELECTOR, "nav.tabs [data-tab=transcript]").click()
    wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, ".transcript")))
    seen["transcript"] = _widths(driver)
    driver.get(f"{base}/console/#/runs")
    wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, f"tr[data-run='{run_id}']")))
    seen["list"] = _widths(driver)
    return json.dumps({"seen": seen, "console_errors": severe(driver)})


async def test_long_words_wrap_inside_the_window(harness: Harness, tmp_path: Path) -> None:
    require_browser()

    @harness.registry.register
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    spec = (
        AgentBuilder("echoer", registry=harness.registry)
        .model("fake-model")
        .tool("echo")
        .suspension(may_ask_questions=True)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("echo", {"text": WORD}, id="e1"), content=WORD),
        Reply.tool_calls(ToolCall("ask_question", {"question": f"Which {WORD}?"}, id="q1")),
        Reply.error(400, message=f"refused: {WORD}"),
    )
    async with harness.worker(), served(console_app(harness)) as base:
        run = await harness.client.dispatch(spec, f"say {WORD}", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_waiting, what="the question")
        shown = json.loads(
            await asyncio.to_thread(
                in_browser, tmp_path / "profile", lambda d: _read(d, base, run.workflow_id)
            )
        )
        result = await harness.client.status(run, scope=harness.scope)

    assert result.status is RunStatus.FAILED and "x" * 200 in (result.reason or "")
    for view, (page, window) in shown["seen"].items():
        assert page <= window, f"{view}: the page is {page} px wide in a {window} px window"
    assert shown["console_errors"] == "[]"
