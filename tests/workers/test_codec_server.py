"""``psych codec-server`` over real loopback HTTP: the protocol, CORS, the token, tenancy,
and the command itself as a subprocess."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.converter import WorkflowSerializationContext

from psych_runtime.specs import SpecError
from psych_runtime.workers import Key, Keyring, PsychCodec
from psych_runtime.workers.codec._server import CodecServer
from tests.forking import aio

UI = "http://localhost:8233"
TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ACME, GLOBEX = Key("acme-1", "acme", os.urandom(32)), Key("globex-1", "globex", os.urandom(32))
KEYS = Keyring([ACME, GLOBEX], {"acme": "acme-1", "globex": "globex-1"})


def plain(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


def as_json(payload: Payload) -> dict[str, Any]:
    return json_format.MessageToDict(payload)


async def sealed(text: str, tenant: str = "acme") -> dict[str, Any]:
    context = WorkflowSerializationContext(namespace="default", workflow_id=f"psych-{tenant}-r1")
    (payload,) = await PsychCodec(KEYS).with_context(context).encode([plain(text)])
    return as_json(payload)


def text_of(payload: dict[str, Any]) -> str:
    return str(json.loads(base64.b64decode(payload["data"])))


@pytest.fixture
async def server() -> AsyncIterator[CodecServer]:
    async with CodecServer(PsychCodec(KEYS), token=TOKEN, origins=[UI], tenant="acme") as s:
        yield s


async def test_decode_and_encode_round_trip_for_its_tenant(server: CodecServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as http:
        encoded = await http.post(
            "/encode", json={"payloads": [as_json(plain("hello"))]}, headers=AUTH
        )
        assert encoded.status_code == 200
        (payload,) = encoded.json()["payloads"]
        assert base64.b64decode(payload["metadata"]["encryption-key-id"]) == b"acme-1"
        assert b"hello" not in base64.b64decode(payload["data"])
        # The namespace segment the CLI's --codec-endpoint templating adds is served too.
        decoded = await http.post("/default/decode", json={"payloads": [payload]}, headers=AUTH)
        assert decoded.status_code == 200
        assert [text_of(p) for p in decoded.json()["payloads"]] == ["hello"]
        # History written before encryption was on is shown as it is.
        old = await http.post("/decode", json={"payloads": [as_json(plain("old"))]}, headers=AUTH)
        assert [text_of(p) for p in old.json()["payloads"]] == ["old"]


async def test_cors_answers_only_the_ui_origin(server: CodecServer) -> None:
    preflight = {"Access-Control-Request-Method": "POST"}
    async with httpx.AsyncClient(base_url=server.url) as http:
        other = await http.options("/decode", headers={"Origin": "http://evil.test", **preflight})
        assert other.status_code == 403
        assert "access-control-allow-origin" not in other.headers
        posted = await http.post(
            "/decode",
            json={"payloads": [await sealed("x")]},
            headers={"Origin": "http://evil.test", **AUTH},
        )
        # The token still works from a script; a browser on that origin cannot read it.
        assert posted.status_code == 200
        assert "access-control-allow-origin" not in posted.headers
        ours = await http.options("/decode", headers={"Origin": UI + "/", **preflight})
        assert ours.status_code == 204
        assert ours.headers["access-control-allow-methods"] == "POST, OPTIONS"


async def test_refusals_say_why(server: CodecServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as http:
        body = {"payloads": [await sealed("x")]}
        wrong = await http.post("/decode", json=body, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert (await http.post("/decode", json=body)).status_code == 401
        assert (await http.get("/decode", headers=AUTH)).status_code == 405
        assert (await http.post("/download", json=body, headers=AUTH)).status_code == 404
        for junk in (b"{not json", b'{"payloads": "\xff"}'):
            bad = await http.post("/decode", content=junk, headers=AUTH)
            assert bad.status_code == 400
        assert (await http.post("/a/b/decode", json=body, headers=AUTH)).status_code == 404
        globex = await http.post(
            "/decode", json={"payloads": [await sealed("y", "globex")]}, headers=AUTH
        )
        assert globex.status_code == 403
        assert "sealed for tenant 'globex'" in globex.json()["message"]


async def test_a_malformed_sealed_payload_is_refused_with_the_reason(
    server: CodecServer,
) -> None:
    """A payload marked encrypted whose data is cut short, or whose key id is not text, is
    refused (403) saying so; the server used to drop the connection unanswered (a
    ValueError or UnicodeDecodeError out of the codec), and a worker failed its workflow
    task with that error instead of an ``AccessDenied``."""
    good = await sealed("x")
    short = {**good, "data": base64.b64encode(b"abc").decode()}
    binary_id = {
        **good,
        "metadata": {**good["metadata"], "encryption-key-id": base64.b64encode(b"\xff").decode()},
    }
    async with httpx.AsyncClient(base_url=server.url) as http:
        cut = await http.post("/decode", json={"payloads": [short]}, headers=AUTH)
        assert cut.status_code == 403
        assert cut.json()["message"] == (
            "a payload sealed with key 'acme-1' for tenant 'acme' is cut short: 3 bytes, "
            "fewer than a nonce and an authentication tag"
        )
        odd = await http.post("/decode", json={"payloads": [binary_id]}, headers=AUTH)
        assert odd.status_code == 403
        assert odd.json()["message"] == (
            "refusing a payload marked encrypted whose key id or tenant is not UTF-8 text"
        )


async def test_without_a_tenant_it_decodes_every_tenant_it_holds_and_refuses_to_encode() -> None:
    async with (
        CodecServer(PsychCodec(KEYS), token=TOKEN, namespace="prod") as server,
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        both = {"payloads": [await sealed("a"), await sealed("g", "globex")]}
        decoded = await http.post("/decode", json=both, headers=AUTH)
        assert [text_of(p) for p in decoded.json()["payloads"]] == ["a", "g"]
        encode = await http.post("/encode", json={"payloads": []}, headers=AUTH)
        assert encode.status_code == 400
        assert "--tenant" in encode.json()["message"]
        other = await http.post("/decode", json=both, headers={"X-Namespace": "dev", **AUTH})
        assert other.status_code == 403
        assert (await http.post("/dev/decode", json=both, headers=AUTH)).status_code == 403
        assert (await http.post("/prod/decode", json=both, headers=AUTH)).status_code == 200


def test_it_will_not_start_open_or_for_a_tenant_without_keys() -> None:
    with pytest.raises(SpecError, match="needs an auth token"):
        CodecServer(PsychCodec(KEYS), token=" ")
    with pytest.raises(SpecError, match="no key that encrypts for tenant 'initech'"):
        CodecServer(PsychCodec(KEYS), token=TOKEN, tenant="initech")


async def test_the_psych_codec_server_command_serves_until_sigterm(tmp_path: Path) -> None:
    keys = {
        "current": {"acme": "acme-1"},
        "keys": [
            {"id": "acme-1", "tenant": "acme", "secret": base64.b64encode(ACME.secret).decode()}
        ],
    }
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    env = {**os.environ, "PSYCH_CODEC_KEY_FILE": str(tmp_path / "keys.json")}
    env["PSYCH_CODEC_TOKEN"] = TOKEN
    child = await aio.create_subprocess_exec(  # forked (tests.forking)
        sys.executable,
        "-m",
        "psych_runtime.workers.cli",
        "codec-server",
        "--port",
        "0",
        "--tenant",
        "acme",
        "--origin",
        UI,
        env=env,
        stdout=aio.PIPE,
        stderr=aio.PIPE,
    )
    try:
        assert child.stderr is not None
        async with asyncio.timeout(30):  # its info line, on the console (standard error)
            line = (await child.stderr.readline()).decode()
        assert "tenant: acme" in line, line
        url = line.split("codec server at ", 1)[1].split(" ", 1)[0]
        async with httpx.AsyncClient(base_url=url) as http:
            answer = await http.post(
                "/decode", json={"payloads": [await sealed("z")]}, headers=AUTH
            )
        assert [text_of(p) for p in answer.json()["payloads"]] == ["z"]
    finally:
        child.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            _, err = await child.communicate()
    assert child.returncode == 0, err.decode()
