"""The A2A mount without a Temporal server: the card where a company mounts the app, the
requests refused before any Run is touched (unknown agent, a field A2A requires missing,
file parts, a push URL that is not http(s), a task id that cannot be one), and a version
store that does not answer (``a2a-sdk``'s own client against a real uvicorn)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import InternalError
from fastapi import FastAPI
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from psych_runtime.activities.blobs import S3Location
from psych_runtime.activities.versions import FileVersionStore, S3VersionStore
from psych_runtime.specs import AgentBuilder
from psych_runtime.workers.serve import AuthSettings, ServeSettings, create_app
from psych_runtime.workers.serve.a2a import agent_card
from psych_runtime.workflows import PsychClient
from tests._ports import free_port
from tests._s3_server import REGION, S3_ENV

from ._app import ACME_KEY, KEYS, bearer, served

RPC_HEADERS = {**bearer(ACME_KEY), "A2A-Version": "1.0"}


@asynccontextmanager
async def mounted(home: Path) -> AsyncIterator[httpx.AsyncClient]:
    """A company's app with psych mounted at ``/psych``; the client never connects."""
    temporal = await Client.connect(
        "127.0.0.1:9", lazy=True, data_converter=pydantic_data_converter
    )
    client = PsychClient(temporal, store=FileVersionStore(home / "versions"))
    client.publish(AgentBuilder("helper").model("m").description("Helps.").build())
    company = FastAPI()
    company.mount("/psych", create_app(ServeSettings(client, AuthSettings(KEYS))))
    transport = httpx.ASGITransport(app=company)
    async with httpx.AsyncClient(transport=transport, base_url="http://company.test") as http:
        yield http


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def send(*parts: dict[str, Any], **configuration: Any) -> dict[str, Any]:
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": list(parts)}
    return rpc("SendMessage", {"message": message, "configuration": configuration})


async def test_the_card_names_where_the_app_is_mounted(tmp_path: Path) -> None:
    async with mounted(tmp_path) as http:
        card = (await http.get("/psych/a2a/helper/.well-known/agent-card.json")).json()
    urls = [(i["protocolBinding"], i["url"]) for i in card["supportedInterfaces"]]
    assert urls == [
        ("JSONRPC", "http://company.test/psych/a2a/helper/"),
        ("HTTP+JSON", "http://company.test/psych/a2a/helper"),
    ]
    assert card["description"] == "Helps."


async def test_requests_refused_before_any_run_is_touched(tmp_path: Path) -> None:
    async with mounted(tmp_path) as http:

        async def error(path: str, body: dict[str, Any]) -> dict[str, Any]:
            response = await http.post(f"/psych/a2a/{path}", json=body, headers=RPC_HEADERS)
            assert response.status_code == 200, response.text
            found: dict[str, Any] = response.json()["error"]
            return found

        unknown = await error("nobody/", send({"text": "hi"}))
        assert unknown["message"] == "no published agent 'nobody'"
        file_part = await error("helper/", send({"url": "https://example.com/f.pdf"}))
        assert "part 0: url parts are not accepted" in file_part["message"]
        hook = {"taskPushNotificationConfig": {"url": "ftp://example.com/hook"}}
        pushed = await error("helper/", send({"text": "hi"}, **hook))
        assert "only http and https" in pushed["message"]
        # A request missing a field A2A requires is refused naming it (never a Run
        # started, never another problem named in its place).
        missing = await error("helper/", rpc("SendMessage", {}))
        assert missing["code"] == -32602
        assert (
            missing["message"] == "the request lacks what A2A requires: message: field is required"
        )
        roleless = {"messageId": "m2", "parts": [{"text": "hi"}]}
        no_role = await error("helper/", rpc("SendMessage", {"message": roleless}))
        assert no_role["code"] == -32602 and "message.role: field is required" in no_role["message"]
        empty = await error("helper/", rpc("SendMessage", {"message": {"role": "ROLE_USER"}}))
        assert "message.message_id: field is required" in empty["message"]
        assert "message.parts: field must contain at least one element" in empty["message"]
        for method in ("GetTask", "CancelTask"):
            no_id = await error("helper/", rpc(method, {}))
            assert no_id["code"] == -32602, method
            assert no_id["message"] == "the request lacks what A2A requires: id: field is required"
        rest = await http.post("/psych/a2a/helper/message:send", json={}, headers=RPC_HEADERS)
        assert rest.status_code == 400
        assert "message: field is required" in rest.json()["error"]["message"]
        bad_id = await error("helper/", rpc("GetTask", {"id": "../psych-globex-x"}))
        assert bad_id["message"] == "no task '../psych-globex-x'"
        # Without a credential nothing but the card is served.
        anonymous = await http.post("/psych/a2a/helper/", json=rpc("GetTask", {"id": "x"}))
        assert anonymous.status_code == 401
        rest = await http.get("/psych/a2a/helper/tasks/x", headers={"A2A-Version": "1.0"})
        assert rest.status_code == 401


async def test_a_negative_history_length_is_refused_before_any_run_is_touched(
    tmp_path: Path,
) -> None:
    # A2A's historyLength is 0 or more (a2a-sdk's own handler refuses one below); a task
    # here carries no history, so any other is taken (a lower limit, which A2A allows).
    # Until 12-06 a negative one was taken too, as every other was ignored.
    async with mounted(tmp_path) as http:
        for method, params in (
            ("GetTask", {"id": "t1", "historyLength": -1}),
            ("ListTasks", {"historyLength": -1}),
            ("SendMessage", send({"text": "hi"}, historyLength=-1)["params"]),
        ):
            response = await http.post(
                "/psych/a2a/helper/", json=rpc(method, params), headers=RPC_HEADERS
            )
            error = response.json()["error"]
            assert error["code"] == -32602, (method, error)
            assert error["message"].startswith("historyLength -1 is negative"), method
        rest = await http.get("/psych/a2a/helper/tasks?historyLength=-2", headers=RPC_HEADERS)
        assert rest.status_code == 400, rest.text
        assert "historyLength -2 is negative" in rest.json()["error"]["message"]


@pytest.mark.parametrize("rest", [False, True], ids=["jsonrpc", "http-json"])
async def test_a_version_store_that_does_not_answer_is_an_internal_error_naming_no_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rest: bool
) -> None:
    # The catalogue's StoreUnavailable reached a2a-sdk unmapped: over JSON-RPC an internal
    # error without REST's problem (store-unavailable, 503), over HTTP+JSON a bare 500
    # "unknown exception"; REST's POST /v1/runs answers it 503.
    for name, value in {**S3_ENV, "AWS_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(name, value)
    nobody = f"http://127.0.0.1:{free_port()}"
    store = S3VersionStore(S3Location(bucket="versions-bucket", endpoint=nobody, region=REGION))
    # The card as the server gave it while the store answered.
    version = FileVersionStore(tmp_path / "elsewhere").publish(
        AgentBuilder("helper").model("m").build()
    )
    try:
        async with (
            served(tmp_path, versions=store) as (base, _),
            httpx.AsyncClient(headers=bearer(ACME_KEY), timeout=30) as http,
        ):
            binding = TransportProtocol.HTTP_JSON if rest else TransportProtocol.JSONRPC
            config = ClientConfig(
                streaming=False, httpx_client=http, supported_protocol_bindings=[binding.value]
            )
            card = agent_card(version, f"{base}/a2a/helper", jwt=False)
            client = ClientFactory(config).create(card)
            message = Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(text="hi")])
            with pytest.raises(InternalError) as failed:
                async for _ in client.send_message(SendMessageRequest(message=message)):
                    pass
            card_asked = await http.get(f"{base}/a2a/helper/.well-known/agent-card.json")
    finally:
        store.close()
    assert failed.value.message.endswith(
        "the S3 version store did not answer (connection failed: EndpointConnectionError)"
    )
    assert nobody not in failed.value.message and "versions-bucket" not in failed.value.message
    assert failed.value.data == {"type": "urn:psych:problem:store-unavailable", "status": "503"}
    # The card's route, as REST answers it.
    assert card_asked.status_code == 503
    assert card_asked.json()["type"] == "urn:psych:problem:store-unavailable"


async def test_a_version_directory_that_cannot_be_listed_is_the_servers_500_not_no_agent(
    tmp_path: Path,
) -> None:
    # Until 12-06 the local store's listing read as empty: the card 404 "no agent helper",
    # a message to it refused as the caller's mistake, the store's fault said nowhere.
    (tmp_path / "file").write_bytes(b"not a directory")
    store = FileVersionStore(tmp_path / "file" / "versions")
    version = FileVersionStore(tmp_path / "elsewhere").publish(
        AgentBuilder("helper").model("m").build()
    )
    async with (
        served(tmp_path, versions=store) as (base, _),
        httpx.AsyncClient(headers=bearer(ACME_KEY), timeout=30) as http,
    ):
        card_asked = await http.get(f"{base}/a2a/helper/.well-known/agent-card.json")
        config = ClientConfig(
            streaming=False,
            httpx_client=http,
            supported_protocol_bindings=[TransportProtocol.JSONRPC.value],
        )
        client = ClientFactory(config).create(agent_card(version, f"{base}/a2a/helper", jwt=False))
        message = Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(text="hi")])
        with pytest.raises(InternalError) as failed:
            async for _ in client.send_message(SendMessageRequest(message=message)):
                pass
    said = (
        "the Versions cannot be listed: the local version store failed (ENOTDIR: Not a directory)"
    )
    assert card_asked.status_code == 500, card_asked.text
    assert card_asked.json()["type"] == "urn:psych:problem:store-failed"
    assert card_asked.json()["detail"] == said
    assert failed.value.message.endswith(said)
    assert failed.value.data == {"type": "urn:psych:problem:store-failed", "status": "500"}
    assert str(tmp_path) not in card_asked.text + failed.value.message
