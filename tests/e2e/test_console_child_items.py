"""A subagent's approval appearing while a person watches its parent's page, in a real
browser: the item shows up without a reload, and approving it lets the Run finish.

From an audit of the console: the page read the Run's state again only after records
that change it, and a child's item reaches its parent by a signal that writes no record
there, so an approval the subagent asked for after the page opened never appeared.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus

from ._browser import in_browser, require_browser, served
from ._console_page import console_app, severe, sign_in
from .conftest import Harness

pytestmark = pytest.mark.e2e

CHILDREN = ".pending-item[data-reason=children]"
APPROVAL = ".pending-item[data-reason=approval][data-id=c-delete]"


def _approve_the_childs(
    driver: Chrome, base: str, run_id: str, opened: threading.Event
) -> dict[str, str]:
    wait = sign_in(driver, base)
    driver.get(f"{base}/console/#/runs/{run_id}")
    wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, CHILDREN)))
    driver.execute_script("window.__sameDocument = true")
    opened.set()  # only now does the subagent go on to ask
    item = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, APPROVAL)))
    arguments = item.find_element(By.CSS_SELECTOR, ".arguments").text
    item.find_element(By.NAME, "approve").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "completed"))
    return {
        "arguments": arguments,
        "same_document": str(driver.execute_script("return window.__sameDocument === true")),
        "console_errors": severe(driver),
    }


async def test_a_subagents_approval_asked_after_the_page_opened_appears_on_it(
    harness: Harness, tmp_path: Path
) -> None:
    require_browser()
    opened = threading.Event()
    deleted: list[str] = []

    @harness.registry.register
    def look_up(order_id: str) -> str:
        """Look an order up (here: until the test's page is open)."""
        assert opened.wait(60), "the page never opened"
        return f"order {order_id}: delivered"

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    harness.settings.policy = RulePolicy(destructive="ask")
    helper = (
        AgentBuilder("helper", registry=harness.registry)
        .model("fake-model")
        .tool("look_up")
        .tool("delete_order")
        .build()
    )
    spec = (
        AgentBuilder("lead", registry=harness.registry)
        .model("fake-model")
        .tool("look_up")  # a subagent has only tools its parent has
        .tool("delete_order")
        .subagent("helper", "Deletes the orders it is told to delete.", helper)
        .build()
    )

    def respond(body: dict[str, Any]) -> Reply:
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        said = [m for m in body["messages"] if m["role"] == "tool"]
        if "delegate" in tools:  # the lead
            if not said:
                return Reply.tool_calls(
                    ToolCall("delegate", {"agent": "helper", "task": "delete 7"}, id="d1")
                )
            return Reply.text("lead done")
        if not said:
            return Reply.tool_calls(ToolCall("look_up", {"order_id": "7"}, id="c-look"))
        if len(said) == 1:
            return Reply.tool_calls(ToolCall("delete_order", {"order_id": "7"}, id="c-delete"))
        return Reply.text("helper done")

    harness.fake.responder = respond
    async with harness.worker(), served(console_app(harness)) as base:
        run = await harness.client.dispatch(spec, "delete order 7", scope=harness.scope)
        shown = await asyncio.to_thread(
            in_browser,
            tmp_path / "profile",
            lambda d: _approve_the_childs(d, base, run.workflow_id, opened),
        )
        result = await harness.client.result(run, scope=harness.scope)

    assert '"7"' in shown["arguments"]
    assert shown["same_document"] == "True"
    assert shown["console_errors"] == "[]"
    assert result.status is RunStatus.COMPLETED, result.reason
    assert deleted == ["7"]
