"""An action the console sent that no worker took in time (a 503: it may still be
applied), sent again by the person, in a real browser: the second send goes under the
first's Idempotency-Key, so the Run takes the message once.

From an audit of the console: it sent no key, so a person who clicked Steer again after
the 503 (which says the request may still be applied, or to send it again under the same
key) gave the model the message twice once a worker was back.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec

from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import SteerReceived

from ._browser import in_browser, require_browser, served
from ._console_page import console_app, severe, sign_in
from ._waiting import all_records, eventually, is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

MESSAGE = "Answer in German."
RESULT = "details.controls .result"


def _steer_twice(
    driver: Chrome,
    base: str,
    run_id: str,
    refused: threading.Event,
    worker_back: threading.Event,
) -> dict[str, str]:
    wait = sign_in(driver, base)
    driver.get(f"{base}/console/#/runs/{run_id}")
    # No worker answers the state query either: the page says so, and offers the controls.
    wait.until(ec.text_to_be_present_in_element((By.ID, "run-problem"), "503"))
    driver.find_element(By.CSS_SELECTOR, "details.controls summary").click()
    driver.find_element(By.NAME, "message").send_keys(MESSAGE)
    steer = driver.find_element(By.CSS_SELECTOR, "details.controls button[type=submit]")
    steer.click()
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, RESULT), "503"))
    first = driver.find_element(By.CSS_SELECTOR, RESULT).text
    refused.set()
    assert worker_back.wait(60), "the worker did not come back"
    steer.click()  # the person sends it again, as the 503 suggests
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, RESULT), "steer sent"))
    return {"first": first, "console_errors": severe(driver)}


async def test_a_steer_sent_again_after_a_503_reaches_the_model_once(
    harness: Harness, tmp_path: Path
) -> None:
    require_browser()
    spec = (
        AgentBuilder("greeter", registry=harness.registry)
        .model("fake-model")
        .suspension(may_ask_questions=True)
        .build()
    )
    harness.fake.enqueue(Reply.tool_calls(ToolCall("ask_question", {"question": "Name?"}, id="q1")))
    refused, worker_back = threading.Event(), threading.Event()

    async def steers() -> int:
        records = await all_records(harness.client, run, harness.scope)
        return len([r for r in records if isinstance(r, SteerReceived)])

    async with served(console_app(harness, query_timeout_seconds=2)) as base:
        async with harness.worker():
            run = await harness.client.dispatch(spec, "greet me", scope=harness.scope)
            await state_when(harness.client, run, harness.scope, is_waiting, what="the question")
        # No worker now: the page's steer is not taken in time.
        browsing = asyncio.create_task(
            asyncio.to_thread(
                in_browser,
                tmp_path / "profile",
                lambda d: _steer_twice(d, base, run.workflow_id, refused, worker_back),
            )
        )
        assert await asyncio.to_thread(refused.wait, 90), await browsing
        async with harness.worker():
            # The first send, taken once a worker polls again.
            await eventually(lambda: _is(steers(), 1), within=60, what="the first steer")
            worker_back.set()
            shown = await browsing
            taken = await steers()
            await harness.client.abort(run, scope=harness.scope, reason="done")

    assert "503" in shown["first"] and "Idempotency-Key" in shown["first"]
    assert taken == 1
    # Only the refusals the page showed; no script error.
    logged = json.loads(shown["console_errors"])
    assert logged and all("status of 503" in e["message"] for e in logged), logged


async def _is(count: asyncio.Future[int] | object, expected: int) -> bool:
    assert asyncio.iscoroutine(count)
    return bool(await count == expected)
