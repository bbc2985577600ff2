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
from pathlib import Path

import httpx
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.converter import WorkflowSerializationContext
from temporalio.testing import WorkflowEnvironment

from psych_runtime.workers import Key, Keyring, PsychCodec
from tests._ports import free_port
from tests.forking import aio

from .conftest import SIGINT_IGNORED, read_until

LINE = r"\d\d:\d\d:\d\d {level}: {message}"
INVALID = "Invalid HTTP request received."
"""What uvicorn logs, a warning, for a request that is not HTTP."""
STARTED = "Application startup complete."
"""What uvicorn logs, at info, once its app has started."""
BAD_BODY = 'the body is not {"payloads": [...]}'
"""The reason the codec server logs for a body it cannot read (the answer's quotes it)."""
STARTING_SECONDS = 90
"""How long a command may take to listen (or to answer) before the test gives up on it."""
API_KEY = "serving-logging-test-key"
CODE = "an-authorization-code-never-logged"
# This entry logs one record of each level once the codec server's logging is set up (as
# its serving starts), one with an exception.
CODEC_ENTRY = """
import logging
import psych_runtime.workers.codec._server as codec_server
from psych_runtime.workers.cli._main import entry
serve = codec_server._serve
async def logging_serve(server):
    log = logging.getLogger("psych_runtime.workers.codec.probe")
    log.debug("probe debug")
    log.info("probe info")
    logging.getLogger("a_library").info("probe library info")
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


async def serving(command: str, port: int, address: str, tmp_path: Path) -> aio.Process:
    """``psych serve`` (its Versions under ``tmp_path``, one API key) or ``psych
    oauth-callback`` on 127.0.0.1:``port`` against Temporal at ``address``, as a
    subprocess (forked: ``tests.forking``), its output piped."""
    argv = [command, "--listen", f"127.0.0.1:{port}", "--address", address]
    if command == "serve":
        argv += ["--store", str(tmp_path / "versions")]
    keys = [{"sha256": hashlib.sha256(API_KEY.encode()).hexdigest(), "tenant": "acme"}]
    return await aio.create_subprocess_exec(
        sys.executable,
        "-m",
        "psych_runtime.workers.cli",
        *argv,
        env=_env(tmp_path, PSYCH_SERVE_API_KEYS=json.dumps(keys)),
        stdin=aio.DEVNULL,
        stdout=aio.PIPE,
        stderr=aio.PIPE,
    )


async def _served(
    argv: list[str], env: dict[str, str], ready: str | None, port: int | None, *, python: list[str]
) -> str:
    """Start the command, wait for ``ready`` on its stderr (None: for nothing printed; a
    request waits for ``port`` to listen), send ``port`` a request that is not HTTP (when
    given), stop it by SIGTERM; its whole stderr. ``python -m`` is forked
    (``tests.forking``), ``python -c`` executed."""
    start = aio.create_subprocess_exec if python[0] == "-m" else asyncio.create_subprocess_exec
    child: aio.Child = await start(
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
        seen = "" if ready is None else await read_until(child.stderr, ready)
        if port is not None:
            await _not_http(child, port)
            # A request's query is not logged (no access log): the callback's holds the
            # authorization code.
            async with httpx.AsyncClient() as http:
                await http.get(f"http://127.0.0.1:{port}/oauth/callback?code={CODE}&state=x")
    finally:
        if child.returncode is None:
            child.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            _, err = await child.communicate()
    return seen + err.decode()


async def _not_http(child: aio.Child, port: int) -> None:
    """Send ``port`` a request that is not HTTP, once ``child`` listens there (at once after
    its ready line, which is printed once it listens; with ``--quiet`` none is, so its port
    is tried until it answers), and read uvicorn's answer (400, sent once it has logged).

    The child exiting first fails with its stderr. Starting took over 10 s on a loaded
    2-core machine: the bound is only the test's own wait for a child that neither listens
    nor exits.
    """
    try:
        async with asyncio.timeout(STARTING_SECONDS):
            reader, writer = await _connected(child, port)
    except TimeoutError:
        raise AssertionError(f"nothing listens on port {port} after {STARTING_SECONDS} s") from None
    try:
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        async with asyncio.timeout(STARTING_SECONDS):
            await reader.read(1024)
    finally:
        writer.close()
        await writer.wait_closed()


async def _connected(
    child: aio.Child, port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``port`` once ``child`` listens there; ``child`` exiting first fails
    with its stderr."""
    while child.returncode is None:
        try:
            return await asyncio.open_connection("127.0.0.1", port)
        except ConnectionRefusedError:
            await asyncio.sleep(0.1)
    assert child.stderr is not None
    err = (await child.stderr.read()).decode()
    raise AssertionError(f"exited {child.returncode} before it listened on port {port}: {err}")


@pytest.mark.parametrize("level", ["", "--verbose", "--quiet"])
@pytest.mark.parametrize("command", ["serve", "oauth-callback"])
async def test_the_uvicorn_commands_log_as_the_worker_does(
    dev_env: WorkflowEnvironment, tmp_path: Path, command: str, level: str
) -> None:
    port = free_port()
    address = dev_env.client.service_client.config.target_host
    argv = [command, "--listen", f"127.0.0.1:{port}", "--address", address]
    if command == "serve":
        argv += ["--store", str(tmp_path / "versions")]
    argv += [level] if level else []
    keys = [{"sha256": hashlib.sha256(API_KEY.encode()).hexdigest(), "tenant": "acme"}]
    env = _env(tmp_path, PSYCH_SERVE_API_KEYS=json.dumps(keys))
    # Where it listens is psych's info line, not printed with --quiet.
    ready = None if level == "--quiet" else f"psych {command}: http://127.0.0.1:{port}"
    err = await _served(argv, env, ready, port, python=["-m", "psych_runtime.workers.cli"])
    lines = err.splitlines()
    warning = LINE.format(level="warning", message=re.escape(INVALID))
    assert len([line for line in lines if re.fullmatch(warning, line)]) == 1, err
    assert not [line for line in lines if INVALID in line and not re.fullmatch(warning, line)]
    assert CODE not in err
    started = [line for line in lines if STARTED in line]
    if level == "--verbose":
        assert re.fullmatch(LINE.format(level="info", message=re.escape(STARTED)), started[0]), err
    else:
        assert not started, err
    listening = [line for line in lines if f"psych {command}: http://" in line]
    if level == "--quiet":
        assert not listening and " info: " not in err, err
    else:
        assert re.fullmatch(LINE.format(level="info", message=".*Ctrl-C to stop.*"), listening[0])


@pytest.mark.parametrize("level", ["", "--verbose", "--quiet"])
async def test_the_codec_server_logs_as_the_worker_does(tmp_path: Path, level: str) -> None:
    secret = base64.b64encode(b"k" * 32).decode()
    keys = {"current": {"acme": "a1"}, "keys": [{"id": "a1", "tenant": "acme", "secret": secret}]}
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    argv = ["codec-server", "--port", "0", "--keys", str(tmp_path / "keys.json")]
    env = _env(tmp_path, PSYCH_CODEC_TOKEN="codec-token")
    # --quiet prints no line of where it listens: the probe's failure's last line, then,
    # once logged (the warning alone raced the error and its traceback against SIGTERM).
    ready = "ValueError: probe failure" if level == "--quiet" else "codec server at"
    err = await _served(
        [*argv, *[level] * bool(level)], env, ready, None, python=["-c", CODEC_ENTRY]
    )
    lines = [line for line in err.splitlines() if "probe" in line]
    if level == "--verbose":
        debug, *lines = lines
        assert re.fullmatch(LINE.format(level="debug", message="probe debug"), debug), err
    if level != "--quiet":  # psych's info records; a library's only with --verbose
        info, *lines = lines
        assert re.fullmatch(LINE.format(level="info", message="probe info"), info), err
    if level == "--verbose":
        library, *lines = lines
        assert re.fullmatch(LINE.format(level="info", message="probe library info"), library)
    warning, error, traceback = lines
    assert re.fullmatch(LINE.format(level="warning", message="probe warning"), warning), err
    # A failure's traceback follows its line, --verbose or not: its details are there.
    assert re.fullmatch(
        LINE.format(level="error", message="probe error: ValueError: probe failure"), error
    ), err
    assert traceback == "ValueError: probe failure", err
    assert ("codec server at" in err) is (level != "--quiet"), err


async def test_the_codec_server_logs_where_it_listens_and_each_refusal(tmp_path: Path) -> None:
    secret = base64.b64encode(os.urandom(32)).decode()
    keys = {"current": {"acme": "a1"}, "keys": [{"id": "a1", "tenant": "acme", "secret": secret}]}
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    # A payload sealed for a tenant whose keys the server does not hold.
    globex = Keyring([Key("g1", "globex", os.urandom(32))], {"globex": "g1"})
    context = WorkflowSerializationContext(namespace="default", workflow_id="psych-globex-r1")
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'"globex-plaintext"')
    (payload,) = await PsychCodec(globex).with_context(context).encode([plain])
    sealed = json_format.MessageToDict(payload)
    port = free_port()
    argv = ["codec-server", "--port", str(port), "--keys", str(tmp_path / "keys.json")]
    argv += ["--tenant", "acme", "--origin", "http://localhost:8233"]
    child = await aio.create_subprocess_exec(
        *[sys.executable, "-m", "psych_runtime.workers.cli", *argv],
        env=_env(tmp_path, PSYCH_CODEC_TOKEN="codec-token-never-logged"),
        stdin=aio.DEVNULL,
        stdout=aio.DEVNULL,
        stderr=aio.PIPE,
    )
    good = {"Authorization": "Bearer codec-token-never-logged"}
    try:
        assert child.stderr is not None
        seen = await read_until(child.stderr, "codec server at")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            wrong = {"Authorization": "Bearer a-wrong-token-never-logged"}
            assert (await http.post("/decode", json={}, headers=wrong)).status_code == 401
            body = b'{"a-body-field-never-logged": 1}'
            assert (await http.post("/decode", content=body, headers=good)).status_code == 400
            refused = await http.post("/decode", json={"payloads": [sealed]}, headers=good)
            assert refused.status_code == 403
    finally:
        child.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            _, err = await child.communicate()
    logged = seen + err.decode()
    listening = (
        f"codec server at http://127.0.0.1:{port} (tenant: acme; browser origins: "
        "http://localhost:8233; namespace: any); Ctrl-C to stop"
    )
    assert re.fullmatch(LINE.format(level="info", message=re.escape(listening)), seen.strip())
    refusal = LINE.format(
        level="warning", message=r"codec server refused POST '/decode' \({}\): {}"
    )
    warnings = [line for line in logged.splitlines() if " warning: " in line]
    assert len(warnings) == 3, logged
    assert re.fullmatch(refusal.format(401, "missing or wrong .*token"), warnings[0]), logged
    assert re.fullmatch(refusal.format(400, re.escape(BAD_BODY)), warnings[1]), logged
    assert re.fullmatch(refusal.format(403, ".*tenant 'globex'.*"), warnings[2]), logged
    for never in ("never-logged", secret, "globex-plaintext", sealed["data"]):
        assert never not in logged, never


@pytest.mark.parametrize("command", ["serve", "oauth-callback"])
async def test_a_uvicorn_command_whose_port_is_taken_never_says_it_listens(
    dev_env: WorkflowEnvironment, tmp_path: Path, command: str
) -> None:
    """Its "Ctrl-C to stop" line is printed once it listens: it was printed before the
    bind, so a caller that waited for it could be refused (seen under load) and a command
    whose port was taken printed it, then exited."""
    address = dev_env.client.service_client.config.target_host
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        child = await serving(command, port, address, tmp_path)
        async with asyncio.timeout(60):
            out, err = await child.communicate()
    assert child.returncode != 0, err
    assert "address already in use" in err.decode().lower(), err
    assert "Ctrl-C to stop" not in (out + err).decode(), err


@pytest.mark.parametrize("sigint", ["handled", "ignored"])
async def test_serve_stopped_by_sigint_says_it_was_interrupted(
    dev_env: WorkflowEnvironment, tmp_path: Path, sigint: str
) -> None:
    # "ignored": started with SIGINT ignored (a script's background job), uvicorn still
    # stopped on it, but its raising it again did nothing: the command exited 0, silently.
    port = free_port()
    address = dev_env.client.service_client.config.target_host
    launch = SIGINT_IGNORED if sigint == "ignored" else (sys.executable,)
    argv = ["serve", "--listen", f"127.0.0.1:{port}", "--address", address, "--quiet"]
    argv += ["--store", str(tmp_path / "versions")]
    keys = [{"sha256": hashlib.sha256(API_KEY.encode()).hexdigest(), "tenant": "acme"}]
    child = await aio.create_subprocess_exec(
        *launch,
        *["-m", "psych_runtime.workers.cli", *argv],
        env=_env(tmp_path, PSYCH_SERVE_API_KEYS=json.dumps(keys)),
        stdin=aio.DEVNULL,
        stdout=aio.PIPE,
        stderr=aio.PIPE,
    )
    try:
        async with asyncio.timeout(STARTING_SECONDS):
            _, writer = await _connected(child, port)
        writer.close()
        await writer.wait_closed()
    finally:
        if child.returncode is None:
            child.send_signal(signal.SIGINT)
        async with asyncio.timeout(60):
            _, raw = await child.communicate()
    err = raw.decode()
    assert child.returncode == 130, err
    assert "psych: interrupted" in err, err
