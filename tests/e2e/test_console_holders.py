"""One call id pending in a parent and in its subagent, in a real browser: the console
shows both items, and what a person does to one reaches the Run that holds it.

From an audit of the console: it keyed pending items by reason and id, so the second
item of an id was never drawn, and it sent no holder, so the Run answered its own item
first; a person denying the subagent's deletion (order 2) denied the parent's (order 1).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import Resumed, RunState, RunStatus

from ._browser import in_browser, require_browser, served
from ._console_page import console_app, severe, sign_in
from ._waiting import all_records, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

NOTE = "order 2 stays: the customer changed their mind"
ITEMS = ".pending-item[data-reason=approval][data-id=c1]"


def _two_waiting(state: RunState) -> bool:
    return len([p for p in state.pending if p.id == "c1"]) == 2


def _deny_the_childs(driver: Chrome, base: str, run_id: str, child: str) -> dict[str, str]:
    wait = sign_in(driver, base)
    driver.get(f"{base}/console/#/runs/{run_id}")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ITEMS)) == 2)
    (item,) = [i for i in driver.find_elements(By.CSS_SELECTOR, ITEMS) if child in i.text]
    arguments = item.find_element(By.CSS_SELECTOR, ".arguments").text
    item.find_element(By.NAME, "note").send_keys(NOTE)
    item.find_element(By.NAME, "deny").click()
    wait.until(ec.staleness_of(item))
    (left,) = driver.find_elements(By.CSS_SELECTOR, ITEMS)
    return {
        "denied_arguments": arguments,
        "left_arguments": left.find_element(By.CSS_SELECTOR, ".arguments").text,
        "left_names_child": str(child in left.text),
        "console_errors": severe(driver),
    }


async def test_a_person_denies_the_subagents_call_not_the_parents_under_the_same_id(
    harness: Harness, tmp_path: Path
) -> None:
    require_browser()
    deleted: list[str] = []

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    harness.settings.policy = RulePolicy(destructive="ask")
    helper = AgentBuilder("helper", registry=harness.registry).model("fake-model")
    spec = (
        AgentBuilder("lead", registry=harness.registry)
        .model("fake-model")
        .tool("delete_order")
        .subagent(
            "helper",
            "Deletes the orders it is told to delete.",
            helper.tool("delete_order").build(),
        )
        .build()
    )

    def respond(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        if "delegate" in tools:  # the lead
            if last["role"] == "user":
                return Reply.tool_calls(
                    ToolCall("delete_order", {"order_id": "1"}, id="c1"),
                    ToolCall("delegate", {"agent": "helper", "task": "delete 2"}, id="d1"),
                )
            return Reply.text("lead done")
        if last["role"] == "user":  # the helper, under the same call id
            return Reply.tool_calls(ToolCall("delete_order", {"order_id": "2"}, id="c1"))
        return Reply.text("helper done")

    harness.fake.responder = respond
    async with harness.worker(), served(console_app(harness)) as base:
        run = await harness.client.dispatch(spec, "delete 1 and 2", scope=harness.scope)
        state = await state_when(
            harness.client, run, harness.scope, _two_waiting, what="both approvals"
        )
        (child,) = {p.run for p in state.pending if p.run is not None}
        assert child is not None
        shown = await asyncio.to_thread(
            in_browser,
            tmp_path / "profile",
            lambda d: _deny_the_childs(d, base, run.workflow_id, child),
        )
        after = await harness.client.status(run, scope=harness.scope)
        # The parent's own is still there to decide.
        assert [(p.id, p.run) for p in after.pending] == [("c1", None)]
        await harness.client.approve(run, "c1", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = await all_records(harness.client, run, harness.scope)
        child_records = (await harness.client.records(child, scope=harness.scope)).records

    assert '"2"' in shown["denied_arguments"]
    assert '"1"' in shown["left_arguments"] and shown["left_names_child"] == "False"
    assert shown["console_errors"] == "[]"
    assert result.status is RunStatus.COMPLETED, result.reason
    assert deleted == ["1"]
    decisions = [(r.outcome, r.by, r.detail) for r in records if isinstance(r, Resumed)]
    assert decisions == [("approved", "tester", None)]
    denials = [(r.outcome, r.by, r.detail) for r in child_records if isinstance(r, Resumed)]
    assert denials == [("rejected", "ops", NOTE)]
