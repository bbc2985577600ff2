"""``psych serve`` and ``psych oauth-callback`` keep an idle keep-alive connection past the
usual clients' and load balancers' idle timeouts (``KEEP_ALIVE_SECONDS``): uvicorn's own
5 s equals httpx's ``keepalive_expiry``, so a request sent on a connection idle for about
5 s met the server closing it (``httpx.ReadError``: seen in a whole-suite run, an A2A
``send_message`` after the Agent Card's read and a worker's start). The real executable,
a subprocess, until SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from psych_runtime.workers.cli._logging import KEEP_ALIVE_SECONDS
from tests._ports import free_port

from .conftest import read_until
from .test_cli_serving_logging import serving

IDLE_SECONDS = 7.0
"""Past uvicorn's default 5 s (the server's close then arrives within the wait), well within
``KEEP_ALIVE_SECONDS``."""


@pytest.mark.parametrize("command", ["serve", "oauth-callback"])
async def test_an_idle_connection_is_kept_past_five_seconds(
    dev_env: WorkflowEnvironment, tmp_path: Path, command: str
) -> None:
    assert KEEP_ALIVE_SECONDS > 60  # past AWS ALB's default idle timeout, at least
    port = free_port()
    address = dev_env.client.service_client.config.target_host
    child = await serving(command, port, address, tmp_path)
    try:
        assert child.stderr is not None
        await read_until(child.stderr, "Ctrl-C to stop")
        path = "/livez" if command == "serve" else "/oauth/callback?code=c&state=s"
        limits = httpx.Limits(keepalive_expiry=60)
        async with httpx.AsyncClient(limits=limits, timeout=30) as http:
            ends = []
            for wait in (0.0, IDLE_SECONDS):
                await asyncio.sleep(wait)
                answer = await http.get(f"http://127.0.0.1:{port}{path}")
                assert answer.status_code in (200, 400), answer.text
                stream = answer.extensions["network_stream"]
                ends.append(stream.get_extra_info("client_addr"))
        # One connection, not a second after the server closed the first.
        assert ends[0] == ends[1], ends
    finally:
        if child.returncode is None:
            child.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            await child.communicate()
