"""A Run page's address whose escapes are malformed (a link cut short, mistyped), in a real
browser: the console says the address names no Run, instead of leaving the last page up.

From an audit of the console: ``decodeURIComponent`` threw on the address, the route
stopped half-way (an uncaught URIError) and the page went on showing the Run opened before,
under an address naming another.
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
from psych_runtime.testing import Reply

from ._browser import in_browser, require_browser, served
from ._console_page import console_app, severe, sign_in
from .conftest import Harness

pytestmark = pytest.mark.e2e

CUT = "psych-acme-%E0%A4%A"


def _open_cut_link(driver: Chrome, base: str, run_id: str) -> dict[str, str]:
    wait = sign_in(driver, base)
    driver.get(f"{base}/console/#/runs/{run_id}")
    wait.until(ec.text_to_be_present_in_element((By.ID, "run-status"), "completed"))
    driver.get(f"{base}/console/#/runs/{CUT}")
    problem = wait.until(ec.visibility_of_element_located((By.ID, "run-problem"))).text
    return {
        "problem": problem,
        "page": driver.find_element(By.TAG_NAME, "main").text,
        "console_errors": severe(driver),
    }


async def test_an_address_with_malformed_escapes_is_said_to_name_no_run(
    harness: Harness, tmp_path: Path
) -> None:
    require_browser()
    spec = AgentBuilder("greeter").model("fake-model").build()
    harness.fake.enqueue(Reply.text("Hello."))
    async with harness.worker(), served(console_app(harness)) as base:
        run = await harness.client.dispatch(spec, "hi", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        shown = await asyncio.to_thread(
            in_browser, tmp_path / "profile", lambda d: _open_cut_link(d, base, run.workflow_id)
        )

    assert "names no Run" in shown["problem"] and CUT in shown["problem"]
    assert run.workflow_id not in shown["page"]
    assert json.loads(shown["console_errors"]) == []
