"""Paging through a tenant's Runs over ``GET /v1/runs``: every Run once, in order, page
after page; a cursor bound to its tenant and filters; a damaged cursor a 422; suspended
Runs paged with what each waits for; a position Temporal cannot read a bad cursor.
Against ``psych serve`` on loopback and the session dev server."""

from __future__ import annotations

import base64
import hashlib
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RetryConfig

from psych_runtime.activities import FileVersionStore
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, BadCursor
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import PsychClient
from psych_runtime.workflows.client._cursor import ListingFilters, make_cursor

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


async def test_a_cursor_whose_position_temporal_cannot_read_is_refused_as_a_bad_cursor(
    harness: Harness, tmp_path: Path
) -> None:
    # What a made-up cursor with a fresh check holds, or one kept across a change of
    # visibility store: a token Temporal cannot read. Its retries off, so the refusal
    # comes at once (with them it comes after the client's retries, ~10 s).
    temporal = await Client.connect(
        harness.env.client.service_client.config.target_host,
        namespace=harness.env.client.namespace,
        data_converter=pydantic_data_converter,
        retry_config=RetryConfig(max_retries=0),
    )
    client = PsychClient(temporal, store=FileVersionStore(tmp_path / "versions"))
    cursor = make_cursor(harness.scope.tenant, ListingFilters(None, None, None, False), b"?")
    with pytest.raises(BadCursor, match="Temporal cannot read the position this cursor holds"):
        await client.list_page(scope=harness.scope, cursor=cursor)
    # The listing itself reads (this raises nothing): it is the position that is refused.
    await client.list_page(scope=harness.scope, limit=1)


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
