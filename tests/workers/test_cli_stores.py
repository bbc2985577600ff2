"""``psych worker``, ``dev``, ``oauth-callback``, ``validate --check-connections`` and ``psych
report --inputs`` close the S3 stores they open, on a normal
exit and on an error exit, as ``psych serve`` does at its shutdown; ``close_stores`` ends an
S3 version store's connections too.

An S3 store's client (an aiohttp session and its connection pool) opens on first use; one
never closed is reported when it is collected: "Unclosed client session" on the
process's error output (and a ``ResourceWarning``). That is what these tests look for.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import signal
import sys
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from psych_runtime.activities.blobs import S3BlobStore, S3Location
from psych_runtime.activities.versions import S3VersionStore
from psych_runtime.specs import AgentBuilder, NotFound, Scope
from psych_runtime.testing import Reply
from psych_runtime.workers.cli._stores import close_stores
from tests._ports import free_port
from tests._s3_server import S3_ENV, S3Server, s3_server
from tests.mcp.oauth_fixture import start_oauth_server

from .conftest import SIGINT_IGNORED, TOOLS_REF, Cli, psych, read_until, spawn
from .test_cli_oauth_check import CLIENT, REDIRECT, spec_file
from .test_cli_processes import script_lookup, stop
from .test_transcript import client_of

SCOPE = Scope(tenant="acme")
UNCLOSED = "Unclosed"
"""What aiohttp says of a session or connector collected open."""
COLLECTED = (sys.executable, str(Path(__file__).with_name("_main_collected.py")))
"""``psych``, then what it left open told (a worker's start-up heap is frozen, so its
stores are never collected otherwise: see ``_main_collected``)."""


@pytest.fixture(scope="module")
async def s3() -> AsyncIterator[S3Server]:
    async with s3_server() as server:
        yield server


@contextmanager
def unclosed_clients() -> Iterator[list[str]]:
    """The ``ResourceWarning`` of each client collected open while the block runs (``psych``
    in a thread of this process: the warnings filters are the process's), once the block
    is left and what it left unreachable is collected."""
    found: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield found
        gc.collect()
    found.extend(
        str(w.message)
        for w in caught
        if issubclass(w.category, ResourceWarning) and UNCLOSED in str(w.message)
    )


async def test_report_inputs_closes_its_s3_blob_store_on_success_and_on_error(
    cli: Cli,
    s3: S3Server,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = s3.url(await s3.new_bucket(versioned=False))
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PSYCH_BLOB_DIR", raising=False)
    monkeypatch.setenv("PSYCH_BLOB_URL", url)
    spec = AgentBuilder("planner").instructions("Plan.").model("gpt-4o-mini").build()
    cli.fake.enqueue(Reply.text("Planned."))
    client = client_of(cli)
    async with S3BlobStore.from_url(url) as workers_blobs:
        cli.settings = dataclasses.replace(cli.settings, blobs=workers_blobs)
        async with cli.worker():
            run = await client.dispatch(spec, "Plan a refund", scope=SCOPE)
            await client.result(run, scope=SCOPE)
            wid = run.workflow_id
            with unclosed_clients() as unclosed:
                status, out, err = await psych(capsys, "report", *cli.args(wid, "--inputs"))
            assert (status, err) == (0, ""), err
            assert "Plan." in out  # the system prompt, read from the bucket
            assert unclosed == []
            # Turn 1's inputs read (the store's client opened), then refused for turn 0.
            args = cli.args(wid, "--inputs", "--turn", "1", "--turn", "0")
            with unclosed_clients() as unclosed:
                status, out, err = await psych(capsys, "report", *args)
            assert (status, out) == (1, "")
            assert err.startswith("psych: --turn 0: the Run has no model call in turn 0")
            assert unclosed == []


async def test_worker_closes_its_s3_blob_store_when_it_stops(
    cli: Cli, s3: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    script_lookup(cli)
    env = cli.child_env(
        TEMPORAL_ADDRESS=cli.address,
        PSYCH_TASK_QUEUE=cli.task_queue,
        PSYCH_BLOB_URL=s3.url(await s3.new_bucket(versioned=False)),
        **S3_ENV,
    )
    del env["PSYCH_BLOB_DIR"]
    child = await spawn([*COLLECTED, "worker", "--tools", TOOLS_REF], env, cli.home)
    assert child.stdout is not None
    try:
        await read_until(child.stdout, "Ctrl-C to stop")
        # A Run's conversation is stored in the bucket: the store's client is opened.
        status, out, err = await psych(capsys, *cli.run_args("--input", "Where is order 7?"))
        assert status == 0, out + err
        assert "answer:       Order 7 was delivered." in out
    finally:
        code, rest, errors = await stop(child, signal.SIGINT)
    assert code == 0, errors
    assert rest.strip() == "worker stopped"
    assert "unclosed" not in errors, errors


async def test_dev_closes_its_s3_blob_store_when_it_stops(
    cli: Cli, s3: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    script_lookup(cli)
    port = free_port()
    env = cli.child_env(
        PSYCH_TOOLS=TOOLS_REF, PSYCH_BLOB_URL=s3.url(await s3.new_bucket(versioned=False)), **S3_ENV
    )
    del env["PSYCH_BLOB_DIR"]
    child = await spawn([*COLLECTED, "dev", "--port", str(port)], env, cli.home)
    assert child.stdout is not None
    try:
        await read_until(child.stdout, "Ctrl-C to stop")
        argv = ["run", str(cli.spec_file), "--input", "Where is order 7?"]
        argv += ["--address", f"127.0.0.1:{port}", "--tools", TOOLS_REF]
        status, out, err = await psych(capsys, *argv, "--store", str(cli.home / "versions"))
        assert status == 0, out + err
        assert "settled completed: answered" in out
    finally:
        code, rest, errors = await stop(child, signal.SIGTERM)
    assert code == 0, errors
    assert "worker and dev server stopped" in rest
    assert "unclosed" not in errors, errors


@pytest.mark.parametrize("sigint", ["handled", "ignored"])
async def test_oauth_callback_closes_its_s3_token_store_when_it_stops(
    cli: Cli, s3: S3Server, sigint: str
) -> None:
    # "ignored": started with SIGINT ignored (a script's background job), uvicorn's raising
    # it again did nothing, and the command exited 0, saying nothing.
    port = free_port()
    env = cli.child_env(PSYCH_BLOB_URL=s3.url(await s3.new_bucket(versioned=False)), **S3_ENV)
    del env["PSYCH_BLOB_DIR"]
    launch = SIGINT_IGNORED if sigint == "ignored" else (sys.executable,)
    argv = [*launch, *COLLECTED[1:], "oauth-callback", "--listen", f"127.0.0.1:{port}"]
    child = await spawn([*argv, "--address", cli.address], env, cli.home)
    assert child.stderr is not None
    try:
        await read_until(child.stderr, "Ctrl-C to stop")
        # A redirect whose state no Run waits on: looked up in the bucket (the store's
        # client opened), and refused. Its answer took over httpx's default 5 s on a
        # loaded 2-core machine: the bound is the test's own wait.
        async with httpx.AsyncClient(timeout=60) as http:
            answer = await http.get(
                f"http://127.0.0.1:{port}/oauth/callback", params={"code": "c", "state": "s"}
            )
        assert answer.status_code == 400, answer.text
    finally:
        code, _, errors = await stop(child, signal.SIGINT)
    assert code == 130, errors
    assert "psych: interrupted" in errors, errors
    assert "unclosed" not in errors, errors


async def test_validate_check_connections_closes_its_s3_token_store(
    cli: Cli, tmp_path: Path, s3: S3Server
) -> None:
    env = cli.child_env(PSYCH_BLOB_URL=s3.url(await s3.new_bucket(versioned=False)), **S3_ENV)
    del env["PSYCH_BLOB_DIR"]
    env.pop("PSYCH_TOKEN_DIR", None)
    server = start_oauth_server(
        "streamable-http", {CLIENT: REDIRECT}, module="tests.mcp.consent_server"
    )
    try:
        env["PSYCH_MCP_OAUTH_ISSUERS"] = f"{CLIENT}={server.issuer}"
        file = spec_file(tmp_path, server)
        # The token held for the Scope is looked up in the bucket (the client opened).
        argv = ["validate", str(file), "--check-connections", "--tenant", "acme"]
        child = await spawn([*COLLECTED, *argv], env, cli.home)
        async with asyncio.timeout(90):
            _, raw = await child.communicate()
    finally:
        server.stop()
    errors = raw.decode()
    assert child.returncode == 0, errors
    assert "no usable token is held for tenant 'acme'" in errors
    assert "unclosed" not in errors, errors


async def test_close_stores_ends_an_s3_version_stores_connections() -> None:
    # botocore's synchronous client (the version store's) keeps its keep-alive connection
    # until the client is collected, and urllib3 then closes it without a warning: nothing
    # a child process would report. What closing shows is the server seeing the
    # connection end. Before, close_stores passed over an S3VersionStore (and `psych
    # serve`, `worker`, `dev`, `run` and `publish` never closed theirs).
    ended = asyncio.Event()
    body = b"<Error><Code>NoSuchKey</Code><Message>none</Message></Error>"

    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = f"HTTP/1.1 404 Not Found\r\nContent-Length: {len(body)}\r\n\r\n"
        writer.write(head.encode() + body)
        await writer.drain()
        await reader.read()  # b"" once the client closes its side
        ended.set()
        writer.close()

    port = free_port()
    server = await asyncio.start_server(keep_alive, "127.0.0.1", port)
    env = {**S3_ENV, "AWS_MAX_ATTEMPTS": "1"}
    try:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            store = S3VersionStore(
                S3Location(bucket="b", endpoint=f"http://127.0.0.1:{port}", region="us-east-1")
            )
            with pytest.raises(NotFound):
                await asyncio.to_thread(store.get, "sha256:" + "ab" * 32)
        assert not ended.is_set()  # the connection is kept for the next request
        await close_stores(store)
        async with asyncio.timeout(10):
            await ended.wait()
    finally:
        server.close()
        await server.wait_closed()
