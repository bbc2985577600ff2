"""The HTTP API's own behaviour: credentials, problems, bounds, Specs, OpenAPI."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities.blobs import S3Location
from psych_runtime.activities.versions import FileVersionStore, S3VersionStore
from psych_runtime.specs import (
    AgentBuilder,
    AgentSpec,
    ModelRef,
    Permits,
    PermitSource,
    Scope,
    StaticPermits,
    ToolRegistry,
    Version,
    spec_to_data,
    spec_to_yaml,
)
from psych_runtime.workers.serve import _run_routes as run_routes
from psych_runtime.workflows import Record, TurnStarted
from tests._ports import free_port
from tests._s3_server import REGION, S3_ENV

from ._app import ACME_KEY, GLOBEX_KEY, api, bearer

SPEC = AgentBuilder("support").model("gpt-4o-mini").build()


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert {"type", "title", "detail"} <= set(body)
    return body


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({}, "no Authorization header"),
        ({"Authorization": f"Basic {ACME_KEY}"}, "must be 'Bearer <credential>'"),
        ({"Authorization": "Bearer not-a-key"}, "not a known API key"),
        ({"Authorization": f"Bearer {ACME_KEY}x"}, "not a known API key"),
    ],
)
async def test_a_request_without_an_accepted_credential_is_a_401_problem(
    tmp_path: Path, headers: dict[str, str], why: str
) -> None:
    async with api(tmp_path) as http:
        response = await http.get("/v1/runs/psych-acme-abc", headers=headers)
    body = assert_problem(response, 401)
    assert why in str(body["detail"])
    assert response.headers["www-authenticate"] == "Bearer"


async def test_another_tenants_run_is_answered_as_a_missing_one(tmp_path: Path) -> None:
    async with api(tmp_path) as http:
        theirs = await http.get("/v1/runs/psych-acme-abc", headers=bearer(GLOBEX_KEY))
        bogus = await http.get("/v1/runs/not-a-run", headers=bearer(GLOBEX_KEY))
        approve = await http.post(
            "/v1/runs/psych-acme-abc/approve",
            json={"call_id": "c1"},
            headers=bearer(GLOBEX_KEY),
        )
        events = await http.get("/v1/runs/psych-acme-abc/events", headers=bearer(GLOBEX_KEY))
    assert assert_problem(theirs, 404)["detail"] == "no Run psych-acme-abc"
    assert assert_problem(bogus, 404)["detail"] == "no Run not-a-run"
    assert assert_problem(approve, 404)["detail"] == "no Run psych-acme-abc"
    assert assert_problem(events, 404)["detail"] == "no Run psych-acme-abc"


async def test_an_invalid_body_names_each_field(tmp_path: Path) -> None:
    async with api(tmp_path) as http:
        empty = await http.post("/v1/runs", json={}, headers=bearer(ACME_KEY))
        both = await http.post(
            "/v1/runs",
            json={"version": "sha256:x", "spec": {}, "input": "hi"},
            headers=bearer(ACME_KEY),
        )
        steer = await http.post(
            "/v1/runs/psych-acme-abc/steer",
            json={"message": "", "mode": "later"},
            headers=bearer(ACME_KEY),
        )
        listed = await http.get("/v1/runs?limit=0&status=asleep", headers=bearer(ACME_KEY))
        keys = [
            await http.post(
                "/v1/runs/psych-acme-abc/abort",
                json={},
                headers={**bearer(ACME_KEY), "Idempotency-Key": key},
            )
            for key in ("", "k" * 257)
        ]
    assert {e["field"] for e in assert_problem(empty, 422)["errors"]} == {"body.input"}
    assert "exactly one of version" in str(assert_problem(both, 422)["detail"])
    fields = {e["field"] for e in assert_problem(steer, 422)["errors"]}
    assert fields == {"body.message", "body.mode"}
    fields = {e["field"] for e in assert_problem(listed, 422)["errors"]}
    assert fields == {"query.limit", "query.status"}
    for key in keys:
        assert [e["field"] for e in assert_problem(key, 422)["errors"]] == [
            "header.Idempotency-Key"
        ]


async def test_a_body_that_is_not_json_says_what_is_wrong_and_where(tmp_path: Path) -> None:
    # It said "body.1: JSON decode error": neither what was wrong nor that 1 is a position.
    async with api(tmp_path) as http:
        answer = await http.post(
            "/v1/runs/psych-acme-abc/approve",
            content=b'{"call_id": "c1",}',
            headers={**bearer(ACME_KEY), "content-type": "application/json"},
        )
    (error,) = assert_problem(answer, 422)["errors"]
    assert error["field"] == "body"
    assert error["message"] == (
        "not JSON at character 17: Expecting property name enclosed in double quotes"
    )


async def test_a_payload_or_text_the_run_cannot_take_is_a_413_not_a_conflict(
    tmp_path: Path,
) -> None:
    # Under the body bound (complete's is the app's, 4 MiB here) but over what a Run takes
    # (256 KiB of JSON, 65,536 characters): refused before anything is sent. It was a 409
    # "Conflict", which says the Run's state refused the request, as for an item answered.
    async with api(tmp_path, max_body_bytes=4 * 1024 * 1024) as http:
        payload = await http.post(
            "/v1/runs/psych-acme-abc/complete",
            json={"token": "pay-42", "payload": "x" * 300_000},
            headers=bearer(ACME_KEY),
        )
        message = await http.post(
            "/v1/runs/psych-acme-abc/steer",
            json={"message": "x" * 70_000},
            headers=bearer(ACME_KEY),
        )
    body = assert_problem(payload, 413)
    assert body["type"] == "urn:psych:problem:too-large"
    assert body["refusal"] == "TooLarge"
    assert "payload is 300002 bytes of JSON; at most 262144 are taken" in str(body["detail"])
    body = assert_problem(message, 413)
    assert "message is 70000 characters; at most 65536 are taken" in str(body["detail"])


async def test_a_body_over_the_bound_is_a_413_problem(tmp_path: Path) -> None:
    big = b'{"spec": "' + b"x" * 2000 + b'"}'

    async def chunked() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b"x" * 600

    async with api(tmp_path, max_body_bytes=1000) as http:
        declared = await http.post(
            "/v1/validate",
            content=big,
            headers={**bearer(ACME_KEY), "content-type": "application/json"},
        )
        streamed = await http.post(
            "/v1/validate",
            content=chunked(),
            headers={**bearer(ACME_KEY), "content-type": "application/json"},
        )
        small = await http.post(
            "/v1/validate", json={"spec": spec_to_data(SPEC)}, headers=bearer(ACME_KEY)
        )
    assert "declares 2012 bytes" in str(assert_problem(declared, 413)["detail"])
    assert "over 1000 bytes" in str(assert_problem(streamed, 413)["detail"])
    assert small.status_code == 200


async def test_validate_answers_problems_as_data_for_json_and_yaml(tmp_path: Path) -> None:
    registry = ToolRegistry()

    @registry.register
    def lookup(order_id: str) -> str:
        """Look an order up."""
        return order_id

    with_tool = AgentBuilder("orders", registry=registry).model("m").tool("lookup").build()
    async with api(tmp_path) as http:
        ok = await http.post(
            "/v1/validate", json={"spec": spec_to_data(SPEC)}, headers=bearer(ACME_KEY)
        )
        yaml = await http.post(
            "/v1/validate",
            content=spec_to_yaml(SPEC),
            headers={**bearer(ACME_KEY), "content-type": "application/yaml"},
        )
        unregistered = await http.post(
            "/v1/validate", json={"spec": spec_to_data(with_tool)}, headers=bearer(ACME_KEY)
        )
        malformed = await http.post(
            "/v1/validate",
            json={"spec": {"kind": "agent", "name": "x", "limits": {"max_turns": "many"}}},
            headers=bearer(ACME_KEY),
        )
        text = await http.post(
            "/v1/validate",
            content="kind: agent",
            headers={**bearer(ACME_KEY), "content-type": "text/plain"},
        )
    async with api(tmp_path, registry=registry) as http:
        registered = await http.post(
            "/v1/validate", json={"spec": spec_to_data(with_tool)}, headers=bearer(ACME_KEY)
        )
    assert ok.json() == {"ok": True, "problems": []}
    assert yaml.json() == {"ok": True, "problems": []}
    found = unregistered.json()
    assert found["ok"] is False
    assert any("lookup" in p["path"] + p["message"] for p in found["problems"])
    assert registered.json() == {"ok": True, "problems": []}
    paths = {p["path"] for p in malformed.json()["problems"]}
    assert "limits.max_turns" in paths
    assert "model" in paths
    assert "application/yaml" in str(assert_problem(text, 415)["detail"])


async def test_publish_answers_the_version_and_the_same_one_again(tmp_path: Path) -> None:
    async with api(tmp_path) as http:
        first = await http.post(
            "/v1/versions", json={"spec": spec_to_data(SPEC)}, headers=bearer(ACME_KEY)
        )
        again = await http.post(
            "/v1/versions",
            content=spec_to_yaml(SPEC),
            headers={**bearer(ACME_KEY), "content-type": "application/yaml"},
        )
        bad = await http.post(
            "/v1/versions", json={"spec": {"kind": "agent"}}, headers=bearer(ACME_KEY)
        )
    assert first.status_code == 201
    assert first.json()["hash"].startswith("sha256:")
    assert first.json()["spec"]["name"] == "support"
    assert again.json() == first.json()
    assert "invalid" in str(assert_problem(bad, 422)["detail"])


async def test_only_a_publisher_credential_publishes(tmp_path: Path) -> None:
    # A Version is every tenant's (an A2A agent is the newest Version of its name): a
    # tenant's key that could publish would change what other tenants' callers run.
    async with api(tmp_path) as http:
        refused = await http.post(
            "/v1/versions", json={"spec": spec_to_data(SPEC)}, headers=bearer(GLOBEX_KEY)
        )
        inline = await http.post(
            "/v1/runs",
            json={"spec": spec_to_data(SPEC), "input": "hi"},
            headers=bearer(GLOBEX_KEY),
        )
        validated = await http.post(
            "/v1/validate", json={"spec": spec_to_data(SPEC)}, headers=bearer(GLOBEX_KEY)
        )
    for answer in (refused, inline):
        problem = assert_problem(answer, 403)
        assert problem["type"] == "urn:psych:problem:not-publisher"
        assert "publisher" in str(problem["detail"])
    assert validated.json()["ok"] is True  # validating publishes nothing
    assert list((tmp_path / "versions").glob("*")) == []


async def test_the_openapi_document_has_every_route_and_the_bearer_scheme(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as http:
        document = (await http.get("/openapi.json")).json()
    routes = {(path, method) for path, item in document["paths"].items() for method in item}
    expected = {
        ("/v1/validate", "post"),
        ("/v1/versions", "post"),
        ("/v1/runs", "post"),
        ("/v1/runs", "get"),
        ("/v1/runs/{run_id}", "get"),
        ("/v1/runs/{run_id}/report", "get"),
        ("/v1/runs/{run_id}/transcript", "get"),
        ("/v1/runs/{run_id}/records", "get"),
        ("/v1/runs/{run_id}/events", "get"),
        *((f"/v1/runs/{{run_id}}/{verb}", "post") for verb in ("approve", "deny", "answer")),
        *((f"/v1/runs/{{run_id}}/{verb}", "post") for verb in ("complete", "abort", "steer")),
    }
    assert expected <= routes
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    validate = document["paths"]["/v1/validate"]["post"]["requestBody"]["content"]
    assert {"application/json", "application/yaml"} <= set(validate)


async def test_an_unknown_version_names_no_path_of_the_server(tmp_path: Path) -> None:
    async with api(tmp_path) as http:
        missing = await http.post(
            "/v1/runs",
            json={"version": "sha256:" + "0" * 64, "input": "hi"},
            headers=bearer(GLOBEX_KEY),
        )
    detail = str(assert_problem(missing, 404)["detail"])
    assert detail == "no Version sha256:" + "0" * 64
    assert str(tmp_path) not in missing.text


async def test_a_damaged_stored_version_is_the_servers_500_naming_no_path(tmp_path: Path) -> None:
    store = FileVersionStore(tmp_path / "versions")
    version = store.publish(AgentSpec(name="a", model=ModelRef(model="m")))
    (tmp_path / "versions" / f"{version.hash[7:]}.json").write_text('{"cut short')
    async with api(tmp_path) as http:
        run = await http.post(
            "/v1/runs", json={"version": version.hash, "input": "hi"}, headers=bearer(GLOBEX_KEY)
        )
    problem = assert_problem(run, 500)
    assert problem["type"] == "urn:psych:problem:store-damaged"
    assert str(problem["detail"]).startswith(f"the stored Version {version.hash} is damaged")
    assert str(tmp_path) not in run.text


async def test_a_version_store_that_does_not_answer_is_a_503_naming_no_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, StoreUnavailable (a PsychError) was answered 409 "conflict": a request that
    # sent again cannot succeed, though it can once the store answers.
    for name, value in {**S3_ENV, "AWS_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(name, value)
    nobody = f"http://127.0.0.1:{free_port()}"
    store = S3VersionStore(S3Location(bucket="versions-bucket", endpoint=nobody, region=REGION))
    version = "sha256:" + "1" * 64
    try:
        async with api(tmp_path, versions=store) as http:
            run = await http.post(
                "/v1/runs", json={"version": version, "input": "hi"}, headers=bearer(GLOBEX_KEY)
            )
    finally:
        store.close()
    problem = assert_problem(run, 503)
    assert problem["type"] == "urn:psych:problem:store-unavailable"
    assert problem["detail"] == (
        f"Version {version} cannot be read: the S3 version store did not answer "
        "(connection failed: EndpointConnectionError)"
    )
    assert nobody not in run.text and "versions-bucket" not in run.text


async def test_a_version_store_whose_disk_refuses_for_good_is_a_500_naming_no_directory(
    tmp_path: Path,
) -> None:
    # 37a79e4: the local store's disk error is LocalStoreFailed, a StoreUnavailable, no
    # longer a SpecError (422 invalid-spec, "cannot make the version store directory
    # <root>: ...", as if the caller's Spec were at fault). Until 12-06 every one was a 503
    # store-unavailable, which tells a client to send it again: a directory on a file's
    # path refuses every request until the server's deployment is mended.
    (tmp_path / "file").write_bytes(b"not a directory")
    store = FileVersionStore(tmp_path / "file" / "versions")
    async with api(tmp_path, versions=store) as http:
        published = await http.post(
            "/v1/versions", json={"spec": spec_to_data(SPEC)}, headers=bearer(ACME_KEY)
        )
    problem = assert_problem(published, 500)
    assert problem["type"] == "urn:psych:problem:store-failed"
    assert problem["detail"] == (
        f"Version {Version.of(SPEC).hash} cannot be published: the local version store failed "
        "(ENOTDIR: Not a directory)"
    )
    assert str(tmp_path) not in published.text


class _FailingWrites(FileVersionStore):
    """A version store whose disk fails every write with ``code``."""

    def __init__(self, root: Path, code: int) -> None:
        super().__init__(root)
        self.code = code

    def _write(self, version: Version, path: Path, *, replace: bool) -> bool:
        raise OSError(self.code, os.strerror(self.code), str(path))


@pytest.mark.parametrize(
    ("code", "status", "kind", "said"),
    [
        (errno.ENOSPC, 507, "store-full", "ENOSPC: No space left on device"),
        (errno.EDQUOT, 507, "store-full", "EDQUOT: Disk quota exceeded"),
        (errno.EIO, 503, "store-unavailable", "EIO: Input/output error"),
        (errno.EROFS, 500, "store-failed", "EROFS: Read-only file system"),
    ],
    ids=["ENOSPC", "EDQUOT", "EIO", "EROFS"],
)
async def test_a_version_store_whose_disk_fails_is_answered_after_its_errno(
    tmp_path: Path, code: int, status: int, kind: str, said: str
) -> None:
    # Until 12-06 each was a 503 store-unavailable: a full disk is freed by someone, not
    # within a client's retries (507 says not to repeat the request of itself), a
    # read-only one never by itself; an I/O error may pass (a shared volume back).
    store = _FailingWrites(tmp_path / "versions", code)
    async with api(tmp_path, versions=store) as http:
        published = await http.post(
            "/v1/versions", json={"spec": spec_to_data(SPEC)}, headers=bearer(ACME_KEY)
        )
    problem = assert_problem(published, status)
    assert problem["type"] == f"urn:psych:problem:{kind}"
    assert status != 507 or problem["title"] == "Insufficient storage"
    assert problem["detail"] == (
        f"Version {Version.of(SPEC).hash} cannot be published: the local version store failed "
        f"({said})"
    )
    assert str(tmp_path) not in published.text
    assert "Retry-After" not in published.headers


async def test_a_payload_json_cannot_carry_is_refused_not_sent_as_null(tmp_path: Path) -> None:
    async with api(tmp_path) as http:
        answer = await http.post(
            "/v1/runs/psych-acme-r1/complete",
            content=b'{"token": "t1", "payload": {"x": NaN, "y": Infinity}}',
            headers={**bearer(ACME_KEY), "content-type": "application/json"},
        )
    problem = assert_problem(answer, 409)
    assert problem["refusal"] == "BadResume"
    assert "NaN or Infinity" in str(problem["detail"])


@pytest.mark.parametrize(
    ("status", "expected"), [(RPCStatusCode.UNAVAILABLE, 503), (RPCStatusCode.NOT_FOUND, 404)]
)
async def test_temporal_unavailable_is_a_503_not_a_missing_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: RPCStatusCode, expected: int
) -> None:
    # The console follows a Run with this stream and gives up on a 4xx: an outage must
    # not read as "no such Run".
    async def describe(self: WorkflowHandle[Any, Any], **_: object) -> None:
        raise RPCError("the frontend is down", status, b"")

    monkeypatch.setattr(WorkflowHandle, "describe", describe)
    async with api(tmp_path) as http:
        answer = await http.get("/v1/runs/psych-acme-r1/events", headers=bearer(ACME_KEY))
    assert_problem(answer, expected)


async def test_a_stream_failing_on_the_servers_fault_ends_with_an_error_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # From an audit: an error other than psych's or Temporal's cut the stream with no
    # event, which a follower could not tell from the Run's end or a dropped connection.
    async def describe(self: WorkflowHandle[Any, Any], **_: object) -> None:
        return None

    async def events(*args: object, **kwargs: object) -> AsyncIterator[Record]:
        yield TurnStarted(seq=1, at=datetime.now(UTC), scope=Scope(tenant="acme"), turn=1)
        raise ValueError("a Record this server cannot read")

    monkeypatch.setattr(WorkflowHandle, "describe", describe)
    monkeypatch.setattr(run_routes, "run_events", events)
    async with api(tmp_path) as http:
        answer = await http.get("/v1/runs/psych-acme-r1/events", headers=bearer(ACME_KEY))
    assert answer.status_code == 200
    blocks = [block for block in answer.text.replace("\r\n", "\n").split("\n\n") if block]
    kinds = [
        line.removeprefix("event: ") for b in blocks for line in b.split("\n") if "event: " in line
    ]
    assert kinds == ["record", "error"]
    data = json.loads(blocks[-1].split("data: ", 1)[1])
    assert data["status"] == 500 and data["detail"] == run_routes.STREAM_FAILED
    assert "the event stream of psych-acme-r1 failed" in caplog.text
    assert "a Record this server cannot read" in caplog.text


async def test_a_run_using_what_its_tenant_is_not_permitted_is_a_403_naming_it(
    tmp_path: Path,
) -> None:
    registry = ToolRegistry()

    @registry.register
    def send_mail(to: str) -> str:
        """Send an email."""
        return "sent"

    spec = AgentBuilder("mailer", registry=registry).model("gpt-4o-mini").tool(send_mail).build()
    permits = StaticPermits({"acme": Permits(code_tools=("lookup_*",))})
    async with api(tmp_path, registry=registry, permits=permits) as http:
        refused = await http.post(
            "/v1/runs", json={"spec": spec_to_data(spec), "input": "hi"}, headers=bearer(ACME_KEY)
        )
    body = assert_problem(refused, 403)
    assert body["type"] == "urn:psych:problem:not-permitted"
    assert body["problems"] == [
        {
            "path": "tools[send_mail]",
            "message": "code tool 'send_mail' is not permitted to tenant 'acme'",
        }
    ]


class _Failing:
    """A permits port whose backing service is down."""

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        raise ConnectionError("tenant service down")


async def test_a_run_whose_permits_cannot_be_asked_is_a_503_naming_the_port(
    tmp_path: Path,
) -> None:
    # From a review: the port's own failure was an anonymous 500, though the caller's
    # request was fine and a retry once the port answers again starts the Run.
    registry = ToolRegistry()

    @registry.register
    def lookup(order: str) -> str:
        """Look an order up."""
        return "delivered"

    spec = AgentBuilder("looker", registry=registry).model("gpt-4o-mini").tool(lookup).build()
    async with api(tmp_path, registry=registry, permits=_Failing()) as http:
        refused = await http.post(
            "/v1/runs", json={"spec": spec_to_data(spec), "input": "hi"}, headers=bearer(ACME_KEY)
        )
    body = assert_problem(refused, 503)
    assert body["type"] == "urn:psych:problem:permits-unavailable"
    assert body["detail"] == (
        "the tenant permits for 'acme' could not be asked: ConnectionError: tenant service down"
    )
