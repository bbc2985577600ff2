"""How ``psych serve``, ``oauth-callback`` and ``codec-server`` log: on their console as
``worker`` does (``workers/cli/_logging.py``), one line per record (time, level, message)
with a failure's traceback after it, warnings and worse; ``--verbose`` adds the info
records (uvicorn's among them) and psych's debug ones. Each runs as the executable is, a
subprocess, until SIGTERM."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from tests._ports import free_port

from .conftest import read_until

LINE = r"\d\d:\d\d:\d\d {level}: {message}"
INVALID = "Invalid HTTP request received."
"""What uvicorn logs, a warning, for a request that is not HTTP."""
STARTED = "Application startup complete."
"""What uvicorn logs, at info, once its app has started."""
API_KEY = "serving-logging-test-key"
CODE = "an-authorization-code-never-logged"
# The codec server logs nothing of its own: this entry logs one record of each level
# once its logging is set up (as its serving starts), one with an exception.
CODEC_ENTRY = """
import logging
import psych_runtime.workers.codec._server as codec_server
from psych_runtime.workers.cli._main import entry
serve = codec_server._serve
async def logging_serve(server):
    log = logging.getLogger("psych_runtime.workers.codec.probe")
    log.debug("probe debug")
    log.info("probe info")
    log.warning("probe warning")
    log.error("probe error", exc_info=ValueError("probe failure"))
    return await serve(server)
codec_server._serve = logging_serve
entry()
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PSYCH_"))}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")  # no global settings file there
    env["PSYCH_TOKEN_DIR"] = str(tmp_path / "tokens")
    env["PSYCH_BLOB_DIR"] = str(tmp_path / "blobs")
    return {**env, **extra}


async def _served(
    argv: list[str], env: dict[str, str], ready: str, port: int | None, *, python: list[str]
) -> str:
    """Start the command, wait for ``ready`` on its stderr, send ``port`` a request that is
    not HTTP (when given), stop it by SIGTERM; its whole stderr."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        *python,
        *argv,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stderr is not None
        stream = child.stderr if port is not None else child.stdout
        seen = await read_until(stream, ready)
        if port is not None:
            await asyncio.to_thread(_not_http, port)
            # A request's query is not logged (no access log): the callback's holds the
            # authorization code.
            async with httpx.AsyncClient() as http:
                await http.get(f"http://127.0.0.1:{port}/oauth/callback?code={CODE}&state=x")
    finally:
        child.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            _, err = await child.communicate()
    return (seen if port is not None else "") + err.decode()


def _not_http(port: int) -> None:
    """Send ``port`` a request that is not HTTP, once it listens (its ready line is printed
    just before), and read uvicorn's answer (400, sent once it has logged)."""
    for _ in range(100):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        except ConnectionRefusedError:
            time.sleep(0.1)
            continue
        with sock:
            sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            sock.recv(1024)
        return
    raise AssertionError(f"nothing listens on port {port}")


@pytest.mark.parametrize("verbose", [False, True])
@pytest.mark.parametrize("command", ["serve", "oauth-callback"])
async def test_the_uvicorn_commands_log_as_the_worker_does(
    dev_env: WorkflowEnvironment, tmp_path: Path, command: str, verbose: bool
) -> None:
    port = free_port()
    address = dev_env.client.service_client.config.target_host
    argv = [command, "--listen", f"127.0.0.1:{port}", "--address", address]
    if command == "serve":
        argv += ["--store", str(tmp_path / "versions")]
    argv += ["--verbose"] * verbose
    keys = [{"sha256": hashlib.sha256(API_KEY.encode()).hexdigest(), "tenant": "acme"}]
    env = _env(tmp_path, PSYCH_SERVE_API_KEYS=json.dumps(keys))
    err = await _served(
        argv, env, f"psych {command}: http://", port, python=["-m", "psych_runtime.workers.cli"]
    )
    lines = err.splitlines()
    warning = LINE.format(level="warning", message=re.escape(INVALID))
    assert len([line for line in lines if re.fullmatch(warning, line)]) == 1, err
    assert not [line for line in lines if INVALID in line and not re.fullmatch(warning, line)]
    assert CODE not in err
    started = [line for line in lines if STARTED in line]
    if verbose:
        assert re.fullmatch(LINE.format(level="info", message=re.escape(STARTED)), started[0]), err
    else:
        assert not started, err


@pytest.mark.parametrize("verbose", [False, True])
async def test_the_codec_server_logs_as_the_worker_does(tmp_path: Path, verbose: bool) -> None:
    secret = base64.b64encode(b"k" * 32).decode()
    keys = {"current": {"acme": "a1"}, "keys": [{"id": "a1", "tenant": "acme", "secret": secret}]}
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    argv = ["codec-server", "--port", "0", "--keys", str(tmp_path / "keys.json")]
    env = _env(tmp_path, PSYCH_CODEC_TOKEN="codec-token")
    err = await _served(
        [*argv, *["--verbose"] * verbose], env, "codec server at", None, python=["-c", CODEC_ENTRY]
    )
    lines = [line for line in err.splitlines() if "probe" in line]
    if verbose:
        debug, info, *lines = lines
        assert re.fullmatch(LINE.format(level="debug", message="probe debug"), debug), err
        assert re.fullmatch(LINE.format(level="info", message="probe info"), info), err
    warning, error, traceback = lines
    assert re.fullmatch(LINE.format(level="warning", message="probe warning"), warning), err
    # A failure's traceback follows its line, --verbose or not: its details are there.
    assert re.fullmatch(
        LINE.format(level="error", message="probe error: ValueError: probe failure"), error
    ), err
    assert traceback == "ValueError: probe failure", err
