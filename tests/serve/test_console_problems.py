"""The console shows the API's problem texts with a bidirectional override (U+202E,
CVE-2021-42574) as its escape, in a real browser: a problem's detail may quote what a
model or a caller wrote. Each place a refusal is shown: the sign-in, the Runs list, the
run page's state and its stream, and an action's result (steer, approve); ``dom.js``
``visible``. The model-written text itself: ``tests/serve/test_console_bidi.py``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.wait import WebDriverWait
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from psych_runtime.workers.serve.console import console_routes
from psych_runtime.workflows import Pending, RunState, RunStatus, SuspensionReason, Totals
from tests.e2e._browser import in_browser, require_browser, served
from tests.serve._scripted_console import AT, until

RUN = "psych-acme-problem1"
WAITING = "psych-acme-problem2"
"""A Run whose state reads, waiting for an approval its approve is refused."""
RLO = "\u202e"


def problem(status: int, detail: str) -> Response:
    """A refusal as the API answers one (RFC 9457), its detail quoting model text."""
    body = {"type": "about:blank", "title": "Refused", "status": status, "detail": detail}
    return JSONResponse(body, status_code=status, media_type="application/problem+json")


async def runs(request: Request) -> Response:
    if request.headers.get("authorization") == "Bearer bad":
        return problem(401, f"key {RLO}gnp.exe")
    if request.query_params.get("limit") == "1":  # the sign-in's check of the key
        return JSONResponse({"runs": []})
    return problem(503, f"list {RLO}gnp.exe")


async def state(request: Request) -> Response:
    return problem(503, f"state {RLO}gnp.exe")


async def events(request: Request) -> Response:
    return problem(503, f"stream {RLO}gnp.exe")


async def steer(request: Request) -> Response:
    return problem(409, f"steer {RLO}gnp.exe")


async def waiting(request: Request) -> Response:
    approval = Pending(
        reason=SuspensionReason.APPROVAL,
        id="call-refund",
        call_id="call-refund",
        tool="refund",
        arguments='{"order_id": "42"}',
        expires_at=AT + timedelta(days=1),
    )
    state = RunState(
        run_id=WAITING,
        tenant="acme",
        agent="refunds",
        version_hash="sha256:abc",
        status=RunStatus.SUSPENDED,
        turn=1,
        last_seq=3,
        totals=Totals(turns=1),
        pending=(approval,),
    )
    return JSONResponse(state.model_dump(mode="json"))


async def approve(request: Request) -> Response:
    return problem(409, f"approve {RLO}gnp.exe")


def app() -> Starlette:
    return Starlette(
        routes=[
            Route("/v1/runs", runs),
            Route(f"/v1/runs/{RUN}", state),
            Route(f"/v1/runs/{RUN}/events", events),
            Route(f"/v1/runs/{RUN}/steer", steer, methods=["POST"]),
            Route(f"/v1/runs/{WAITING}", waiting),
            Route(f"/v1/runs/{WAITING}/events", events),
            Route(f"/v1/runs/{WAITING}/approve", approve, methods=["POST"]),
            console_routes(),
        ]
    )


def _texts(driver: Chrome, css: str) -> list[str]:
    """The text of each node ``css`` selects, read at once (the page redraws as it loads)."""
    script = "return [...document.querySelectorAll(arguments[0])].map((n) => n.innerText)"
    texts: list[str] = driver.execute_script(script, css)
    return texts


def _shown(driver: Chrome, css: str, said: str) -> str:
    """The text of ``css`` once it says ``said``."""
    until(driver, lambda d: any(said in text for text in _texts(d, css)))
    return next(text for text in _texts(driver, css) if said in text)


def _refusals(driver: Chrome, base: str) -> None:
    driver.get(f"{base}/console/")
    WebDriverWait(driver, 20).until(ec.visibility_of_element_located((By.ID, "api-key")))
    key = driver.find_element(By.ID, "api-key")
    key.send_keys("bad")
    driver.find_element(By.CSS_SELECTOR, "form.sign-in button[type=submit]").click()
    assert _shown(driver, "p.bad", "key ") == "401 Refused — key \\u202egnp.exe"

    key.clear()
    key.send_keys("k")
    driver.find_element(By.CSS_SELECTOR, "form.sign-in button[type=submit]").click()
    assert _shown(driver, "p.bad", "list ") == "503 Refused — list \\u202egnp.exe"

    driver.get(f"{base}/console/#/runs/{RUN}")
    shown = _shown(driver, "#run-problem", "state ")
    assert shown == "503 Refused — state \\u202egnp.exe"
    shown = _shown(driver, "#connection", "stream ")
    assert shown == "reconnecting: 503 Refused — stream \\u202egnp.exe"

    driver.find_element(By.CSS_SELECTOR, "details.controls summary").click()
    driver.find_element(By.NAME, "message").send_keys("go on")
    driver.find_element(By.CSS_SELECTOR, "details.controls form button[type=submit]").click()
    assert _shown(driver, ".result.bad", "steer ") == "409 Refused — steer \\u202egnp.exe"
    assert RLO not in driver.find_element(By.TAG_NAME, "body").text

    driver.get(f"{base}/console/#/runs/{WAITING}")
    until(driver, lambda d: bool(d.find_elements(By.CSS_SELECTOR, ".pending-item")))
    driver.find_element(By.CSS_SELECTOR, ".pending-item button[name=approve]").click()
    shown = _shown(driver, ".pending-item .result", "approve ")
    assert shown == "409 Refused — approve \\u202egnp.exe"
    assert RLO not in driver.find_element(By.TAG_NAME, "body").text


async def test_the_console_shows_a_problems_bidi_override_escaped(tmp_path: Path) -> None:
    require_browser()
    async with served(app()) as base:
        await asyncio.to_thread(in_browser, tmp_path / "profile", lambda d: _refusals(d, base))
