"""The system's headless Chromium (Debian's chromium and chromium-driver) for browser
tests, and ``psych serve``'s app under uvicorn on loopback.

No browser is ever downloaded: selenium is handed both paths, so its driver manager does
not run. The flags keep Chromium from reaching any host (no background networking,
component updates, sync or QUIC) and give it a fresh profile.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from starlette.applications import Starlette

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
)


def require_browser(browser: Path = CHROMIUM, driver: Path = CHROMEDRIVER) -> None:
    """Skip (fail under ``PSYCH_REQUIRE_BROWSER=1``, as CI sets) without the browser."""
    missing = [str(path) for path in (browser, driver) if not path.exists()]
    if missing:
        why = (
            f"no system Chromium ({', '.join(missing)} missing): install Debian's packages "
            "with `apt-get install -y chromium chromium-driver`"
        )
        if os.environ.get("PSYCH_REQUIRE_BROWSER") == "1":
            pytest.fail(f"PSYCH_REQUIRE_BROWSER=1 and {why}")
        pytest.skip(why)


@contextmanager
def chromium(profile: Path) -> Iterator[webdriver.Chrome]:
    """A headless Chromium with a fresh profile in ``profile``."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


T = TypeVar("T")


def in_browser(profile: Path, act: Callable[[webdriver.Chrome], T]) -> T:
    """``act`` in a fresh headless Chromium; a wait that timed out fails with what the page
    showed and logged (and a screenshot beside the profile, ``page.png``)."""
    with chromium(profile) as driver:
        try:
            return act(driver)
        except TimeoutException as err:
            driver.save_screenshot(str(profile.parent / "page.png"))
            page = driver.find_element(By.TAG_NAME, "body").text
            raise AssertionError(
                f"the page showed:\n{page}\nbrowser log: {browser_log(driver)}"
            ) from err


def browser_log(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    """What the page logged (console messages, failed loads) since the last call."""
    # selenium leaves get_log unannotated.
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return entries


@asynccontextmanager
async def served(app: Starlette) -> AsyncIterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 (a free port) in this event loop; yields its
    base URL."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, lifespan="off", ws="none", log_level="warning"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                await task  # raises what stopped it
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=10)
