"""The console's lines for a Run's A2A records, in a real browser: what a peer offered
(``peer_discovered``) and the cancel of its task when the Run was aborted
(``peer_task_canceled``) read as words, as their siblings do, not as JSON.

From an audit: both showed as their raw JSON. A real Run on the dev server, a scripted
``a2a-sdk`` peer on loopback, the API under uvicorn."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec

from psych_runtime.activities.a2a import A2aSettings
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from tests.a2a.peer import serve_peer

from ._browser import in_browser, require_browser, served
from ._console_page import console_app, severe, sign_in
from ._waiting import is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

LINE = "#records li[data-kind='{kind}']"


def _lines(driver: Chrome, base: str, run_id: str) -> dict[str, str]:
    wait = sign_in(driver, base)
    driver.get(f"{base}/console/#/runs/{run_id}")
    wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "aborted"))
    shown = {}
    for kind in ("peer_discovered", "peer_task_canceled"):
        line = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, LINE.format(kind=kind))))
        label = line.find_element(By.CSS_SELECTOR, ".label").text
        shown[kind] = f"{label} | {line.find_element(By.CSS_SELECTOR, '.text').text}"
        shown[f"{kind} elements"] = str(len(line.find_elements(By.CSS_SELECTOR, ".text *")))
        shown[f"{kind} line"] = line.text
    shown["console_errors"] = severe(driver)
    return shown


async def test_peer_records_read_as_words_not_json(harness: Harness, tmp_path: Path) -> None:
    require_browser()
    harness.settings = dataclasses.replace(harness.settings, a2a=A2aSettings(hold_seconds=0.5))
    async with serve_peer(("book",)) as peer:
        spec = (
            AgentBuilder("console_booker")
            .model("fake-model")
            .a2a_peer("travel", peer.url, credential="orders-key")
            .build()
        )
        harness.fake.enqueue(Reply.tool_calls(ToolCall("travel__book", {"message": "slow:60"})))
        async with harness.worker(), served(console_app(harness)) as base:
            run = await harness.client.dispatch(spec, "Book it", scope=harness.scope)
            await state_when(harness.client, run, harness.scope, is_waiting, what="the peer task")
            await harness.client.abort(run, scope=harness.scope, reason="changed my mind")
            await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            shown = await asyncio.to_thread(
                in_browser, tmp_path / "profile", lambda d: _lines(d, base, run.workflow_id)
            )

    assert shown["peer_discovered"] == "peer | travel: ok, 1 skills (fresh)"
    assert shown["peer_task_canceled"] == (
        "peer cancel | travel: asked to cancel task task-1 (call_1): canceled"
    )
    for kind in ("peer_discovered", "peer_task_canceled"):
        assert shown[f"{kind} elements"] == "0"  # text, no markup
        assert '"kind"' not in shown[f"{kind} line"]  # not the record's JSON
    assert shown["console_errors"] == "[]"
