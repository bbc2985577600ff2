"""An external wait completed from the console, in a real browser: the person reads what
the tool said it waits for, is told (and nothing is sent) when the payload is not JSON,
completes it with a JSON payload, and sees the Run finish with the payload as the tool's
result.

From an audit of the console: the item showed the tool and its token but not the wait's
message (what ``psych status`` and ``list --suspended`` print after the call).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec

from psych_runtime.specs import AgentBuilder, ExternalWait
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import Resumed, RunStatus, ToolCallFinished

from ._browser import in_browser, require_browser, served
from ._console_page import console_app, severe, sign_in
from ._waiting import is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

MESSAGE = "waiting for the payment provider's webhook"
ITEM = ".pending-item[data-reason=external][data-id=pay-42]"


def request_payment(order_id: str) -> ExternalWait:
    """Ask the payment provider to charge an order; its webhook completes the call.

    Args:
        order_id: The order.
    """
    return ExternalWait(token=f"pay-{order_id}", message=MESSAGE)


def _complete(driver: Chrome, base: str, run_id: str) -> dict[str, str]:
    wait = sign_in(driver, base)
    driver.get(f"{base}/console/#/runs/{run_id}")
    item = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, ITEM)))
    shown = {"item": item.text}
    payload = item.find_element(By.NAME, "payload")
    payload.send_keys("{paid: yes}")
    item.find_element(By.CSS_SELECTOR, "button[name=complete]").click()
    shown["not_json"] = item.find_element(By.CSS_SELECTOR, ".result").text
    payload.clear()
    payload.send_keys('{"paid": true, "amount": 19.99}')
    item.find_element(By.CSS_SELECTOR, "button[name=complete]").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "completed"))
    shown["answer"] = driver.find_element(By.CSS_SELECTOR, "#answer pre").text
    shown["console_errors"] = severe(driver)
    return shown


async def test_a_person_completes_an_external_wait_from_the_console(
    harness: Harness, tmp_path: Path
) -> None:
    require_browser()
    harness.registry.register(request_payment)
    spec = (
        AgentBuilder("payer", registry=harness.registry)
        .model("fake-model")
        .tool("request_payment")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("request_payment", {"order_id": "42"}, id="p1")),
        Reply.text("Paid."),
    )
    async with harness.worker(), served(console_app(harness)) as base:
        run = await harness.client.dispatch(spec, "charge 42", scope=harness.scope)
        await state_when(harness.client, run, harness.scope, is_waiting, what="the wait")
        shown = await asyncio.to_thread(
            in_browser, tmp_path / "profile", lambda d: _complete(d, base, run.workflow_id)
        )
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records

    assert MESSAGE in shown["item"] and "request_payment" in shown["item"]
    assert "not JSON" in shown["not_json"]
    assert shown["answer"] == "Paid."
    assert shown["console_errors"] == "[]"
    assert result.status is RunStatus.COMPLETED, result.reason
    (resumed,) = [r for r in records if isinstance(r, Resumed)]
    assert (resumed.outcome, resumed.by) == ("completed", "ops")
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert json.loads(finished.content) == {"paid": True, "amount": 19.99}
