"""Paging through a tenant's Runs over ``GET /v1/runs``: every Run once, in order, page
after page; a cursor bound to its tenant and filters; a damaged cursor a 422; suspended
Runs paged with what each waits for; a position Temporal cannot read a bad cursor, at
once, while a page the server fails is asked again.
Against ``psych serve`` on loopback and the session dev server."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import uuid
from typing import Any
from urllib.parse import quote

import grpc
import httpx
import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RetryConfig, RPCError, RPCStatusCode

from psych_runtime.activities import FileVersionStore
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, BadCursor
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import PsychClient

from ._grpc_relay import Relay, relayed
from ._listing import started_runs
from ._serve import ACME, GLOBEX, served
from ._waiting import eventually, is_suspended, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


async def walk(
    http: httpx.AsyncClient, query: str, headers: dict[str, str]
) -> tuple[list[list[str]], str | None]:
    """Every page of ``/v1/runs?<query>``, following ``next_cursor``; the ids of each page,
    and the last cursor answered before the end (None if the first page was the last)."""
    pages: list[list[str]] = []
    cursor: str | None = None
    last: str | None = None
    while True:
        answer = await http.get(f"/v1/runs?{query}{with_cursor(cursor)}", headers=headers)
        assert answer.status_code == 200, answer.text
        pages.append([run["workflow_id"] for run in answer.json()["runs"]])
        cursor = answer.json()["next_cursor"]
        if cursor is None:
            return pages, last
        last = cursor


def with_cursor(cursor: str | None) -> str:
    """The query's part that gives ``cursor`` (httpx's ``params`` would replace the rest)."""
    return "" if cursor is None else f"&cursor={quote(cursor)}"


def assert_bad_cursor(answer: httpx.Response, words: str) -> None:
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["type"] == "urn:psych:problem:bad-cursor"
    assert words in problem["detail"]


async def test_pages_show_every_run_once_in_order_and_a_cursor_keeps_to_its_listing(
    harness: Harness,
) -> None:
    agent = f"pager{uuid.uuid4().hex[:8]}"
    async with (
        started_runs(harness, harness.scope.tenant, agent, 5) as ids,
        started_runs(harness, "globex", agent, 1) as theirs,
        served(harness) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        whole = await http.get(f"/v1/runs?agent={agent}", headers=ACME)
        assert whole.json()["next_cursor"] is None
        in_order = [run["workflow_id"] for run in whole.json()["runs"]]
        # Newest first: started one after another, on no worker, none closed.
        assert in_order == ids[::-1]

        pages, last = await walk(http, f"agent={agent}&limit=2", ACME)
        assert [len(page) for page in pages] == [2, 2, 1]
        assert [run for page in pages for run in page] == in_order
        # A page exactly full at the end says it is the last (no empty page after it).
        exact, _ = await walk(http, f"agent={agent}&limit=5", ACME)
        assert exact == [in_order]
        # The limit may change from page to page.
        first = (await http.get(f"/v1/runs?agent={agent}&limit=1", headers=ACME)).json()
        rest = await http.get(
            f"/v1/runs?agent={agent}&limit=10{with_cursor(first['next_cursor'])}",
            headers=ACME,
        )
        assert [r["workflow_id"] for r in first["runs"] + rest.json()["runs"]] == in_order
        assert rest.json()["next_cursor"] is None

        assert last is not None
        # Another tenant's caller with acme's cursor: refused, and globex's own Run is not
        # what it shows either.
        foreign = await http.get(
            f"/v1/runs?agent={agent}&limit=2{with_cursor(last)}", headers=GLOBEX
        )
        assert_bad_cursor(foreign, "another tenant's listing, not tenant 'globex'")
        globex = (await http.get(f"/v1/runs?agent={agent}", headers=GLOBEX)).json()["runs"]
        assert [run["workflow_id"] for run in globex] == theirs
        # Other filters than the cursor was made with.
        for changed in (f"agent={agent}x", f"agent={agent}&status=running", "", "waiting=true"):
            other = await http.get(f"/v1/runs?{changed}{with_cursor(last)}", headers=ACME)
            assert_bad_cursor(other, "a listing with other filters")
        # Damaged, cut short, or made up: a 422 saying so, never a 500.
        for damaged in (last[:-1], last[:20], "nonsense", f"x{last}", last.replace(".", ". ")):
            answer = await http.get(f"/v1/runs?agent={agent}{with_cursor(damaged)}", headers=ACME)
            assert_bad_cursor(answer, "damaged")
        empty = await http.get(f"/v1/runs?agent={agent}&cursor=", headers=ACME)
        assert empty.status_code == 422
        assert [e["field"] for e in empty.json()["errors"]] == ["query.cursor"]


async def test_suspended_runs_page_with_what_each_waits_for(harness: Harness) -> None:
    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        return f"order {order_id} deleted"

    harness.settings.policy = RulePolicy(destructive="ask")
    agent = f"waiter{uuid.uuid4().hex[:8]}"
    spec = AgentBuilder(agent, registry=harness.registry).model("fake-model").tool("delete_order")
    async with (
        harness.worker(),
        served(harness) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        runs = []
        for index in range(3):
            call = ToolCall("delete_order", {"order_id": str(index)}, id=f"call-{index}")
            harness.fake.enqueue(Reply.tool_calls(call))
            handle = await harness.client.dispatch(spec.build(), "delete it", scope=harness.scope)
            await state_when(harness.client, handle, harness.scope, is_suspended, what="approval")
            runs.append(handle.workflow_id)

        async def listed() -> bool:
            answer = await http.get(f"/v1/runs?waiting=true&agent={agent}", headers=ACME)
            return len(answer.json()["runs"]) == 3

        await eventually(listed, within=60, what="the 3 suspended Runs listed")
        pages: list[list[dict[str, Any]]] = []
        cursor: str | None = None
        while not pages or cursor is not None:
            answer = await http.get(
                f"/v1/runs?waiting=true&agent={agent}&limit=2{with_cursor(cursor)}", headers=ACME
            )
            assert answer.status_code == 200, answer.text
            pages.append(answer.json()["runs"])
            cursor = answer.json()["next_cursor"]
        for workflow_id in runs:
            await harness.client.abort(workflow_id, scope=harness.scope, reason="test over")

    assert [len(page) for page in pages] == [2, 1]
    listed_runs = [run for page in pages for run in page]
    assert [run["workflow_id"] for run in listed_runs] == runs[::-1]
    for run in listed_runs:
        (pending,) = run["pending"]
        assert pending["tool"] == "delete_order"
        assert pending["id"] == f"call-{runs.index(run['workflow_id'])}"


LIST = "ListWorkflowExecutions"


def forged(cursor: str, token: bytes) -> str:
    """``cursor`` holding ``token`` instead of its own, with a fresh check: what anyone can
    make of a cursor they were given (its check is a digest of its payload, no secret)."""
    payload = cursor.partition(".")[0]
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    data["token"] = base64.urlsafe_b64encode(token).decode()
    raw = json.dumps(data, separators=(",", ":")).encode()
    payload = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    check = hashlib.sha256(b"psych-list-cursor\0check\0" + payload.encode()).hexdigest()[:16]
    return f"{payload}.{check}"


def token_of(cursor: str) -> bytes:
    payload = cursor.partition(".")[0]
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return base64.urlsafe_b64decode(data["token"])


async def relayed_client(harness: Harness, relay: Relay, **connect: Any) -> PsychClient:
    """A client of the harness's server through ``relay`` (the client's own retries, unless
    ``connect`` says otherwise)."""
    temporal = await Client.connect(
        relay.target,
        namespace=harness.env.client.namespace,
        data_converter=pydantic_data_converter,
        **connect,
    )
    return PsychClient(temporal, store=FileVersionStore(harness.home / "versions"))


async def test_a_cursor_holding_a_position_temporal_cannot_read_is_refused_at_once(
    harness: Harness,
) -> None:
    # From the known defects: the dev server's SQL visibility refuses a page token it
    # cannot read as UNKNOWN, which the client retries as transient: the 422 came after
    # ~10 s and ~9 failing queries. Refused now after one, one more that reads the
    # listing from its start (so the position, not the server, is to blame), and the
    # position asked again (so not one failure of the server's by chance).
    agent = f"forged{uuid.uuid4().hex[:8]}"
    target = harness.env.client.service_client.config.target_host
    async with started_runs(harness, harness.scope.tenant, agent, 3), relayed(target) as relay:
        client = await relayed_client(harness, relay)
        async with (
            served(dataclasses.replace(harness, client=client)) as base,
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            first = await http.get(f"/v1/runs?agent={agent}&limit=1", headers=ACME)
            cursor = first.json()["next_cursor"]
            # SQL visibility's token is JSON (close time, start time, run id): edited so
            # its time does not parse, or no JSON at all.
            edited = token_of(cursor).replace(b'"StartTime":"2', b'"StartTime":"X')
            assert edited != token_of(cursor)
            for token in (edited, b"?"):
                asked = len(relay.of(LIST))
                answer = await http.get(
                    f"/v1/runs?agent={agent}{with_cursor(forged(cursor, token))}", headers=ACME
                )
                assert_bad_cursor(answer, "Temporal cannot read the position this cursor holds")
                assert "start the listing again without a cursor" in answer.json()["detail"]
                unknown, ok = grpc.StatusCode.UNKNOWN, grpc.StatusCode.OK
                # Refused, the listing read from its start, refused again (not by chance).
                assert relay.of(LIST)[asked:] == [unknown, ok, unknown]
            # PsychClient.list_page the same, and the cursor as it was still reads.
            with pytest.raises(BadCursor, match="it answered UNKNOWN"):
                await client.list_page(
                    scope=harness.scope, agent=agent, cursor=forged(cursor, b"?")
                )
            page = await client.list_page(scope=harness.scope, agent=agent, cursor=cursor)
            assert len(page.runs) == 2


async def test_a_cursors_page_the_server_fails_is_asked_again_as_any_page(
    harness: Harness,
) -> None:
    # Only a position Temporal refuses while the listing reads is the cursor's fault: a
    # page the server fails transiently is retried as ever, and one it fails every query
    # of (UNKNOWN with or without the cursor) is the server's failure, not a bad cursor.
    agent = f"flaky{uuid.uuid4().hex[:8]}"
    target = harness.env.client.service_client.config.target_host
    async with (
        started_runs(harness, harness.scope.tenant, agent, 3) as ids,
        relayed(target) as relay,
    ):
        client = await relayed_client(harness, relay)
        first = await client.list_page(scope=harness.scope, agent=agent, limit=1)
        assert first.next_cursor is not None
        asked = len(relay.of(LIST))
        relay.fail_next(LIST, grpc.StatusCode.UNAVAILABLE, times=2)
        page = await client.list_page(
            scope=harness.scope, agent=agent, limit=1, cursor=first.next_cursor
        )
        assert [run.workflow_id for run in page.runs] == [ids[1]]
        unavailable, ok = grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.OK
        # Asked once, then with the client's retries; then the look ahead.
        assert relay.of(LIST)[asked:] == [unavailable, unavailable, ok, ok]

        # One UNKNOWN (what SQL visibility answers for any internal error) on a real
        # cursor's page, while the listing reads: the cursor was refused as made up.
        asked = len(relay.of(LIST))
        relay.fail_next(LIST, grpc.StatusCode.UNKNOWN)
        page = await client.list_page(
            scope=harness.scope, agent=agent, limit=1, cursor=first.next_cursor
        )
        assert [run.workflow_id for run in page.runs] == [ids[1]]
        # The page, the listing from its start, the page again; then the look ahead.
        assert relay.of(LIST)[asked:] == [grpc.StatusCode.UNKNOWN, ok, ok, ok]

        quick = RetryConfig(initial_interval_millis=10, max_retries=2)
        failing = await relayed_client(harness, relay, retry_config=quick)
        asked = len(relay.of(LIST))
        relay.fail_next(LIST, grpc.StatusCode.UNKNOWN, times=10)
        with pytest.raises(RPCError) as raised:
            await failing.list_page(scope=harness.scope, agent=agent, cursor=first.next_cursor)
        assert not isinstance(raised.value, BadCursor)
        assert raised.value.status == RPCStatusCode.UNKNOWN
        # Asked once, the listing without the cursor once, then with the client's retries.
        statuses = relay.of(LIST)[asked:]
        assert len(statuses) > 2
        assert set(statuses) == {grpc.StatusCode.UNKNOWN}


async def test_a_made_up_cursor_of_deeply_nested_json_is_a_bad_cursor_not_a_500(
    harness: Harness,
) -> None:
    # The check is no secret (anyone can compute it), so a caller can send any payload
    # with a fresh one: JSON nested past the parser's recursion limit, well within the
    # route's MAX_CURSOR, must be refused as any payload that does not read as a cursor.
    raw = ("[" * 1200).encode()
    payload = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    check = hashlib.sha256(b"psych-list-cursor\0check\0" + payload.encode()).hexdigest()[:16]
    cursor = f"{payload}.{check}"
    assert len(cursor) < 4096
    async with served(harness) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        answer = await http.get(f"/v1/runs?{with_cursor(cursor)[1:]}", headers=ACME)
    assert_bad_cursor(answer, "the cursor does not read as one")
