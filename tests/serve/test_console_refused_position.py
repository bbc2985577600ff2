"""The console's live view stops on a stream that refuses its position
(``unknown-event-id``): the same Last-Event-ID would be refused again, so it shows the
problem instead of reconnecting with it every half second; an expired token's 401 event
is still reconnected."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from psych_runtime.workflows import RunState, RunStatus, Totals, TurnStarted
from tests.e2e._browser import in_browser, require_browser, served
from tests.serve._scripted_console import STAMP, admitted, event, open_run, scripted_app, until

RUN = "psych-acme-refused1"


def _error(status: int, kind: str, detail: str) -> bytes:
    body = {"type": f"urn:psych:problem:{kind}", "status": status, "detail": detail}
    return f"event: error\r\ndata: {json.dumps(body)}\r\n\r\n".encode()


def _running(*, turn: int, last_seq: int) -> Response:
    """The scripted Run's state: running, at ``turn``, its last record ``last_seq``."""
    state = RunState(
        run_id=RUN,
        tenant="acme",
        agent="writer",
        version_hash="sha256:abc",
        status=RunStatus.RUNNING,
        turn=turn,
        last_seq=last_seq,
        totals=Totals(turns=turn),
    )
    return JSONResponse(state.model_dump(mode="json"))


class ScriptedApi:
    """A stream cut after two records; resumed, it first says the token expired (401),
    then refuses the position (422) every time."""

    def __init__(self) -> None:
        self.resumed_from: list[str | None] = []

    async def first(self) -> AsyncIterator[bytes]:
        yield event("record", admitted("writer", "hi"), "1")
        yield event("record", TurnStarted(seq=2, **STAMP, turn=1), "2")

    async def resumed(self) -> AsyncIterator[bytes]:
        if len(self.resumed_from) == 2:
            yield _error(401, "unauthorized", "the token this stream was opened with has expired")
        else:
            yield _error(422, "unknown-event-id", "the event id '2' names record 2 (refused)")

    def app(self) -> Starlette:
        async def state(request: Request) -> Response:
            return _running(turn=1, last_seq=2)

        async def events(request: Request) -> Response:
            last = request.headers.get("last-event-id")
            self.resumed_from.append(last)
            body = self.first() if last is None else self.resumed()
            return StreamingResponse(body, media_type="text/event-stream")

        return scripted_app(RUN, state=state, events=events)


def _problem(driver: Chrome) -> str:
    return str(driver.find_element(By.ID, "run-problem").text)


def _refused(driver: Chrome, base: str, api: ScriptedApi) -> None:
    open_run(driver, base, RUN)
    until(driver, lambda d: "names record 2" in _problem(d))
    assert _problem(driver).startswith("422"), _problem(driver)
    # Reconnecting waits half a second after a stream that ended: three times that, and
    # nothing more was asked.
    time.sleep(1.5)
    assert api.resumed_from == [None, "2", "2"], api.resumed_from
    assert "names record 2" in driver.find_element(By.ID, "connection").text


async def test_a_refused_position_is_shown_not_retried(tmp_path: Path) -> None:
    require_browser()
    api = ScriptedApi()
    async with served(api.app()) as base:
        await asyncio.to_thread(in_browser, tmp_path / "profile", lambda d: _refused(d, base, api))


class FailingServerApi:
    """A stream that ends on the server's own failure (a 503 ``error`` event, which the
    console reconnects after); the reconnection is held unanswered until ``release``."""

    def __init__(self) -> None:
        self.opened = 0
        self.release = threading.Event()

    async def first(self) -> AsyncIterator[bytes]:
        yield event("record", admitted("writer", "hi"), "1")
        yield _error(503, "no-worker", "no worker answered for the Run in time")

    def app(self) -> Starlette:
        async def state(request: Request) -> Response:
            return _running(turn=0, last_seq=1)

        async def events(request: Request) -> Response:
            self.opened += 1
            if self.opened == 1:
                return StreamingResponse(self.first(), media_type="text/event-stream")
            await asyncio.to_thread(self.release.wait, 60)
            return Response(status_code=503)

        return scripted_app(RUN, state=state, events=events)


def _says_reconnecting(driver: Chrome, base: str, api: FailingServerApi) -> None:
    open_run(driver, base, RUN)
    connection = driver.find_element(By.ID, "connection")
    until(driver, lambda d: api.opened == 2 and "stream failed" in connection.text)
    # The reconnection is under way (held by the server): the line says so.
    assert connection.text == (
        "stream failed: no worker answered for the Run in time; reconnecting"
    ), connection.text


async def test_a_server_failure_event_says_it_reconnects(tmp_path: Path) -> None:
    require_browser()
    api = FailingServerApi()
    async with served(api.app()) as base:
        try:
            await asyncio.to_thread(
                in_browser, tmp_path / "profile", lambda d: _says_reconnecting(d, base, api)
            )
        finally:
            api.release.set()
