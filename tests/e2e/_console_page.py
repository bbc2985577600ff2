"""What the console's browser tests against a real API share: the app with one API key of
the harness's tenant, signing in as a person does, and what the page logged as severe."""

from __future__ import annotations

import json

from fastapi import FastAPI
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.wait import WebDriverWait

from psych_runtime.workers.serve import ApiKey, AuthSettings, ServeSettings, create_app

from ._browser import browser_log
from .conftest import Harness

KEY = "console-test-key"
"""The API key a person of the harness's tenant signs in with (principal ``ops``)."""


def console_app(harness: Harness, query_timeout_seconds: float = 10.0) -> FastAPI:
    """``psych serve``'s app for the harness's client, accepting ``KEY``; an action no
    worker takes within ``query_timeout_seconds`` is a 503."""
    key = ApiKey.of(KEY, harness.scope.tenant, "ops")
    auth = AuthSettings(api_keys=(key,))
    return create_app(
        ServeSettings(harness.client, auth, query_timeout_seconds=query_timeout_seconds)
    )


def sign_in(driver: Chrome, base: str) -> WebDriverWait[Chrome]:
    """Open the console and sign in with ``KEY``; returns a wait for the page."""
    wait = WebDriverWait(driver, 30)
    driver.get(f"{base}/console")
    key = wait.until(ec.visibility_of_element_located((By.ID, "api-key")))
    key.send_keys(KEY)
    driver.find_element(By.CSS_SELECTOR, "form.sign-in button[type=submit]").click()
    wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "table.runs")))
    assert driver.execute_script("return sessionStorage.getItem('psych.apiKey')") == KEY
    return wait


def severe(driver: Chrome) -> str:
    """What the page logged at level SEVERE since the last read, as JSON."""
    return json.dumps([e for e in browser_log(driver) if e.get("level") == "SEVERE"])
