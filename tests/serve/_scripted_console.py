"""What the console's browser tests against a scripted API share: the served app (the
console's files and the three API routes its run page reads), the event stream's framing,
a Run's first record, and opening the run page as a signed-in person."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from pydantic import BaseModel
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.wait import WebDriverWait
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from psych_runtime.specs import Scope
from psych_runtime.workers.serve.console import console_routes
from psych_runtime.workflows import RunAdmitted

SCOPE = Scope(tenant="acme", principal="ops")
AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
STAMP = {"at": AT, "scope": SCOPE}
"""Every scripted record's time and Scope."""

Handler = Callable[[Request], Awaitable[Response]]


def event(kind: str, item: BaseModel, event_id: str) -> bytes:
    """One server-sent event of the Run's stream."""
    return f"event: {kind}\r\nid: {event_id}\r\ndata: {item.model_dump_json()}\r\n\r\n".encode()


def admitted(agent: str, message: str) -> RunAdmitted:
    """The Run's first record (seq 1)."""
    return RunAdmitted(
        seq=1,
        **STAMP,
        version_hash="sha256:abc",
        agent=agent,
        messages=(message,),
        system_prompt="",
    )


def scripted_app(run_id: str, *, state: Handler, events: Handler) -> Starlette:
    """The console and the API its run page reads: no Runs listed, ``run_id``'s state and
    event stream from the given handlers."""

    async def runs(request: Request) -> Response:
        return JSONResponse({"runs": []})

    return Starlette(
        routes=[
            Route("/v1/runs", runs),
            Route(f"/v1/runs/{run_id}", state),
            Route(f"/v1/runs/{run_id}/events", events),
            console_routes(),
        ]
    )


def until(driver: Chrome, what: Callable[[Chrome], bool]) -> None:
    """Wait (up to 20 s) until ``what`` holds on the page."""
    WebDriverWait(driver, 20).until(what)


def open_run(driver: Chrome, base: str, run_id: str) -> None:
    """Sign in with the API key ``k`` and open ``run_id``'s page."""
    driver.get(f"{base}/console/")
    WebDriverWait(driver, 20).until(ec.visibility_of_element_located((By.ID, "api-key")))
    driver.find_element(By.ID, "api-key").send_keys("k")
    driver.find_element(By.CSS_SELECTOR, "form.sign-in button[type=submit]").click()
    until(driver, lambda d: bool(d.find_elements(By.CSS_SELECTOR, "table.runs")))
    driver.get(f"{base}/console/#/runs/{run_id}")
