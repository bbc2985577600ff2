"""The console's list of Runs a page at a time, in a real browser: with more Runs than
the limit, "More" loads the next page under the rows shown, until the last page, and
every Run is shown once, newest first."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec

from ._browser import in_browser, require_browser, served
from ._console_page import console_app, severe, sign_in
from ._listing import started_runs
from .conftest import Harness

pytestmark = pytest.mark.e2e


def _page_through(driver: Chrome, base: str, tenant: str, agent: str) -> dict[str, str]:
    """Open the list of ``agent``'s Runs two at a time and press "More" while it shows."""
    wait = sign_in(driver, base)
    driver.get(f"{base}/console/#/runs?agent={agent}&limit=2")
    # Only this agent's rows: the tenant's first list, before the filter, shows others.
    rows = f"table.runs tbody tr[data-run^='psych-{tenant}-{agent}-']"
    counts = []

    def shown(count: int) -> Callable[[Chrome], bool]:
        return lambda d: len(d.find_elements(By.CSS_SELECTOR, rows)) == count

    for expected in (2, 4, 5):
        wait.until(shown(expected))
        counts.append(len(driver.find_elements(By.CSS_SELECTOR, rows)))
        if expected < 5:
            more = driver.find_element(By.NAME, "more")
            wait.until(ec.element_to_be_clickable(more)).click()
    wait.until(ec.invisibility_of_element_located((By.NAME, "more")))
    return {
        "counts": json.dumps(counts),
        "runs": json.dumps(
            [row.get_attribute("data-run") for row in driver.find_elements(By.CSS_SELECTOR, rows)]
        ),
        "note": driver.find_element(By.CSS_SELECTOR, "main [role=status]").text,
        "console_errors": severe(driver),
    }


async def test_more_loads_the_next_page_until_the_last(harness: Harness, tmp_path: Path) -> None:
    require_browser()
    agent = f"console{uuid.uuid4().hex[:8]}"
    async with (
        started_runs(harness, harness.scope.tenant, agent, 5) as ids,
        served(console_app(harness)) as base,
    ):
        shown = await asyncio.to_thread(
            in_browser,
            tmp_path / "profile",
            lambda d: _page_through(d, base, harness.scope.tenant, agent),
        )

    assert json.loads(shown["counts"]) == [2, 4, 5]
    assert json.loads(shown["runs"]) == ids[::-1]
    assert shown["note"] == "5 Runs"
    assert shown["console_errors"] == "[]"
