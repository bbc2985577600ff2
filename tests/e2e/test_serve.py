"""``psych serve`` end to end: the HTTP API, served by uvicorn on loopback, drives a Run
on a real dev server from dispatch through an approval to its report, followed over SSE
and resumed with Last-Event-ID; another tenant is refused throughout."""

from __future__ import annotations

import gc
import time
from typing import Any

import httpx
import pytest

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, spec_to_data
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows.client._live import LiveCall

from ._serve import ACME, GLOBEX, read_events, served
from ._waiting import eventually
from .conftest import Harness

pytestmark = pytest.mark.e2e


async def test_the_api_drives_a_run_through_an_approval_to_its_report(harness: Harness) -> None:
    deleted: list[str] = []

    @harness.registry.register(destructive=True)
    def delete_order(order_id: str) -> str:
        """Delete an order for good."""
        deleted.append(order_id)
        return f"order {order_id} deleted"

    harness.settings.policy = RulePolicy(destructive="ask")
    spec = AgentBuilder("orders", registry=harness.registry).model("fake-model")
    spec = spec.tool("delete_order")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("delete_order", {"order_id": "42"}, id="call-del")),
        Reply.text("Deleted."),
    )
    async with (
        harness.worker(),
        served(harness) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        published = await http.post(
            "/v1/versions", json={"spec": spec_to_data(spec.build())}, headers=ACME
        )
        assert published.status_code == 201, published.text
        version = published.json()["hash"]
        dispatched = await http.post(
            "/v1/runs", json={"version": version, "input": "delete 42"}, headers=ACME
        )
        assert dispatched.status_code == 201, dispatched.text
        run_id = dispatched.json()["run_id"]
        assert run_id.startswith("psych-acme-")
        assert dispatched.json()["version_hash"] == version

        # Follow until the Run suspends for the approval.
        first, _ = await read_events(http, f"/v1/runs/{run_id}/events", ACME, until="suspended")
        # Records, and the pieces of each model call as it was written.
        assert {event for event, _, _ in first} <= {"record", "delta"}
        seen = [id_ for event, id_, _ in first if event == "record"]
        assert [int(id_) for id_ in seen] == list(range(1, len(seen) + 1))
        suspended = first[-1][2]
        assert suspended["kind"] == "suspended"
        state = (await http.get(f"/v1/runs/{run_id}", headers=ACME)).json()
        assert state["status"] == "suspended"
        (pending,) = state["pending"]
        assert (pending["id"], pending["tool"]) == ("call-del", "delete_order")
        assert deleted == []
        # While it waits, a follower after its last record gets keep-alives, no records.
        idle, comments = await read_events(
            http,
            f"/v1/runs/{run_id}/events",
            {**ACME, "Last-Event-ID": first[-1][1]},
            until="keep-alive",
        )
        assert (idle, comments) == ([], 1)

        # Another tenant: the Run is answered as missing, and never listed.
        missing = (await http.get("/v1/runs/psych-globex-nothing", headers=GLOBEX)).json()
        for path in ("", "/report", "/transcript", "/records", "/events"):
            theirs = await http.get(f"/v1/runs/{run_id}{path}", headers=GLOBEX)
            assert theirs.status_code == 404, path
            assert theirs.json()["detail"] == f"no Run {run_id}"
        refused = await http.post(
            f"/v1/runs/{run_id}/approve", json={"call_id": "call-del"}, headers=GLOBEX
        )
        assert refused.status_code == 404
        assert missing["status"] == 404
        listed_mine: list[str] = []

        async def listed() -> bool:
            runs = (await http.get("/v1/runs?waiting=true", headers=ACME)).json()["runs"]
            listed_mine[:] = [run["workflow_id"] for run in runs]
            return run_id in listed_mine

        await eventually(listed, what="the suspended Run to be listed")
        globex = (await http.get("/v1/runs", headers=GLOBEX)).json()["runs"]
        assert run_id not in [run["workflow_id"] for run in globex]

        keyed = {**ACME, "Idempotency-Key": "approve-call-del-1"}
        approved = await http.post(
            f"/v1/runs/{run_id}/approve", json={"call_id": "call-del", "note": "ok"}, headers=keyed
        )
        assert approved.status_code == 200, approved.text
        assert approved.json()["outcome"] == "approved"
        # Sent again under its key (as after a 503): the first outcome, applied once.
        retried = await http.post(
            f"/v1/runs/{run_id}/approve", json={"call_id": "call-del", "note": "ok"}, headers=keyed
        )
        assert (retried.status_code, retried.json()) == (200, approved.json())
        again = await http.post(
            f"/v1/runs/{run_id}/approve", json={"call_id": "call-del"}, headers=ACME
        )
        assert again.status_code == 409
        assert again.json()["type"] == "urn:psych:problem:refused"

        # Resume the stream after the last event seen: no loss, no duplicate, then end.
        rest, _ = await read_events(
            http,
            f"/v1/runs/{run_id}/events",
            {**ACME, "Last-Event-ID": first[-1][1]},
            until="end",
        )
        assert rest[-1][0] == "end"
        seqs = [int(id_) for event, id_, _ in rest if event == "record"]
        assert seqs == list(range(len(seen) + 1, len(seen) + 1 + len(seqs)))
        assert rest[-2][2]["kind"] == "run_settled"
        assert rest[-1][2] == {"last_seq": seqs[-1]}
        by_query, _ = await read_events(
            http, f"/v1/runs/{run_id}/events?after={seqs[-3]}", ACME, until="end"
        )
        assert [int(id_) for event, id_, _ in by_query if event == "record"] == seqs[-2:]

        report = (await http.get(f"/v1/runs/{run_id}/report", headers=ACME)).json()
        transcript = (await http.get(f"/v1/runs/{run_id}/transcript", headers=ACME)).json()
        records = (await http.get(f"/v1/runs/{run_id}/records?after=2", headers=ACME)).json()
    assert deleted == ["42"]
    assert report["status"] == "completed"
    assert report["answer"] == "Deleted."
    assert report["tool_calls"][0]["status"] == "ok"
    roles = [entry["role"] for entry in transcript["entries"]]
    assert roles[-3:] == ["assistant", "tool", "assistant"]
    assert transcript["entries"][-2]["waits"][0]["outcome"] == "approved"
    assert records["records"][0]["seq"] == 3
    assert records["next"] == seqs[-1]


async def test_the_event_stream_carries_deltas_and_resumes_mid_attempt_from_last_event_id(
    harness: Harness,
) -> None:
    answer = "Streaming through the HTTP API, piece by piece, to whoever follows."
    spec = AgentBuilder("talker", registry=harness.registry).model("fake-model").build()
    harness.fake.enqueue(Reply.text(answer, chunk_size=5, chunk_seconds=0.05))
    async with harness.worker(), served(harness) as base, httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{base}/v1/runs",
            headers=ACME,
            json={"spec": spec_to_data(spec), "input": "talk"},
        )
        assert response.status_code == 201, response.text
        url = f"{base}/v1/runs/{response.json()['run_id']}/events"
        # The connection is lost after the third delta...
        first, _ = await read_events(http, url, ACME, until="delta")
        while sum(name == "delta" for name, _, _ in first) < 3:
            more, _ = await read_events(
                http, url, {**ACME, "Last-Event-ID": first[-1][1]}, until="delta"
            )
            first += more
        # ... and the follower comes back with the last id it saw.
        rest, _ = await read_events(http, url, {**ACME, "Last-Event-ID": first[-1][1]}, "end")

    events = first + rest
    ids = [event_id for _, event_id, _ in events if event_id]
    assert len(ids) == len(set(ids))  # nothing sent twice
    pieces = [data["text"] for name, _, data in events if name == "delta"]
    (finished,) = [
        data
        for name, _, data in events
        if name == "record" and data["kind"] == "model_call_finished"
    ]
    assert "".join(pieces) == finished["text"] == answer  # nothing lost
    names = [name for name, _, _ in events]
    # Every piece of the call comes before its record.
    assert max(i for i, name in enumerate(names) if name == "delta") < names.index("record", 3)
    assert names[-1] == "end"


async def test_without_a_worker_actions_and_reads_answer_503_within_the_bound(
    harness: Harness,
) -> None:
    # No worker polls the Run's queue: an update, or a transcript's queries, would wait for
    # ever; each answers 503 once the query timeout passed, and says what happened.
    spec = AgentBuilder("idle").model("fake-model").build()
    run = await harness.client.dispatch(spec, "hello", scope=harness.scope)
    async with served(harness, query_timeout_seconds=1.0) as base, httpx.AsyncClient() as http:
        url = f"{base}/v1/runs/{run.workflow_id}"
        started = time.monotonic()
        approve = await http.post(
            f"{url}/approve", json={"call_id": "c1"}, headers=ACME, timeout=30
        )
        transcript = await http.get(f"{url}/transcript", headers=ACME, timeout=30)
        took = time.monotonic() - started
    assert approve.status_code == 503, approve.text
    assert approve.json()["type"] == "urn:psych:problem:no-worker"
    assert "may still be applied" in approve.json()["detail"]
    assert transcript.status_code == 503, transcript.text
    assert took < 15  # two bounds of 1 s, with the server's own answers


async def test_an_action_no_worker_takes_answers_503_saying_temporal_holds_it(
    harness: Harness,
) -> None:
    # The update's wait (the query timeout) ran out and Temporal, asked then, said it
    # holds the update, no worker took it (``UpdateUnanswered.held``): the 503 said only
    # "no worker answered ...", the words it has when Temporal was not asked or did not
    # say, though a request Temporal never received is not a worker's silence.
    spec = AgentBuilder("idle").model("fake-model").build()
    run = await harness.client.dispatch(spec, "hello", scope=harness.scope)
    async with served(harness, query_timeout_seconds=1.0) as base, httpx.AsyncClient() as http:
        url = f"{base}/v1/runs/{run.workflow_id}"
        approve = await http.post(
            f"{url}/approve", json={"call_id": "c1"}, headers=ACME, timeout=30
        )
    assert approve.status_code == 503, approve.text
    problem = approve.json()
    assert problem["type"] == "urn:psych:problem:no-worker", problem
    assert problem["detail"] == (
        "no worker took the request in time (Temporal holds it: none polls the Run's task "
        "queue, or its worker is busy); it may still be applied when one does: read the Run "
        "before sending it again, or send it again under the same Idempotency-Key"
    ), problem


async def test_an_input_past_temporals_payload_limit_is_413_not_503(harness: Harness) -> None:
    # Under the API's body bound (4 MiB) but over the dev server's blob limit (2 MiB):
    # Temporal refuses the start, and a 503 would tell the caller to send it again.
    spec = AgentBuilder("idle").model("fake-model").build()
    version = harness.client.publish(spec).hash
    body = {"version": version, "input": "x" * (3 * 1024 * 1024)}
    async with served(harness) as base, httpx.AsyncClient(base_url=base) as http:
        answer = await http.post("/v1/runs", json=body, headers=ACME, timeout=30)
    assert answer.status_code == 413, answer.text
    assert answer.json()["type"] == "urn:psych:problem:too-large"
    assert "Temporal refused the request: Blob data size exceeds limit" in answer.json()["detail"]


def live_calls() -> list[LiveCall]:
    """The LiveCalls of this process still reading a call."""
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, LiveCall) and not o.done]


async def test_streams_cut_mid_call_leave_no_live_call_behind(harness: Harness) -> None:
    # A browser tab closed while the model streams: the server cancels the stream's task
    # at every await, and that used to interrupt the follower's clean-up, leaving its
    # LiveCall describing the Run four times a second for as long as the call lasted.
    spec = AgentBuilder("slow", registry=harness.registry).model("fake-model").build()
    harness.fake.enqueue(Reply.text("x" * 1200, chunk_size=4, chunk_seconds=0.02))
    async with harness.worker(), served(harness) as base, httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{base}/v1/runs", headers=ACME, json={"spec": spec_to_data(spec), "input": "go"}
        )
        run = response.json()["run_id"]
        url = f"{base}/v1/runs/{run}/events"
        for _ in range(5):
            seen, _ = await read_events(http, url, ACME, until="delta")
            assert seen[-1][0] == "delta"

        async def stopped() -> bool:
            return not harness.client.follows._runs and not live_calls()

        try:
            await eventually(stopped, what="every follower and its LiveCall to stop", within=5)
            state = await harness.client.status(run, scope=harness.scope)
        finally:
            await harness.client.temporal.get_workflow_handle(run).terminate("test over")
    assert state.status.value == "running"  # the call was still streaming all along


async def test_resuming_after_a_record_sent_mid_call_sends_no_delta_twice(
    harness: Harness,
) -> None:
    # A follower that joins while the model streams gets the call's deltas before the
    # Run's earlier records: resuming from such a record's id used to send them all again.
    answer = "".join(f"<{i:03d}>" for i in range(200))
    spec = AgentBuilder("writer", registry=harness.registry).model("fake-model").build()
    harness.fake.enqueue(Reply.text(answer, chunk_size=5, chunk_seconds=0.03))
    async with harness.worker(), served(harness) as base, httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{base}/v1/runs", headers=ACME, json={"spec": spec_to_data(spec), "input": "go"}
        )
        url = f"{base}/v1/runs/{response.json()['run_id']}/events"
        first: list[tuple[str, str, Any]] = []
        while not any(name == "delta" for name, _, _ in first):  # until the call streams
            first, _ = await read_events(http, url, ACME, until="record")
        # The first record after a delta: the connection is lost there...
        while not (first[-1][0] == "record" and any(n == "delta" for n, _, _ in first)):
            more, _ = await read_events(
                http, url, {**ACME, "Last-Event-ID": first[-1][1]}, until="record"
            )
            first += more
        # ... and the follower comes back with its id.
        rest, _ = await read_events(http, url, {**ACME, "Last-Event-ID": first[-1][1]}, "end")
    pieces = [(data["call"], data["n"]) for name, _, data in first + rest if name == "delta"]
    assert len(pieces) == len(set(pieces))  # nothing sent twice
    text = "".join(data["text"] for name, _, data in first + rest if name == "delta")
    assert text == answer  # nothing lost


async def test_a_dispatch_sent_again_under_its_idempotency_key_header_reaches_the_same_run(
    harness: Harness,
) -> None:
    # The header every action takes: on dispatch it was ignored, so a dispatch sent again
    # after a lost answer started a second Run.
    spec = AgentBuilder("idle").model("fake-model").build()
    version = harness.client.publish(spec).hash
    body = {"version": version, "input": "hello"}
    keyed = {**ACME, "Idempotency-Key": "order-42-refund"}
    async with served(harness) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        first = await http.post("/v1/runs", json=body, headers=keyed)
        again = await http.post("/v1/runs", json=body, headers=keyed)
        in_body = await http.post(
            "/v1/runs", json={**body, "idempotency_key": "order-42-refund"}, headers=ACME
        )
        both = await http.post(
            "/v1/runs", json={**body, "idempotency_key": "another"}, headers=keyed
        )
        other_input = await http.post(
            "/v1/runs", json={**body, "input": "something else"}, headers=keyed
        )
    assert (first.status_code, again.status_code) == (201, 201), (first.text, again.text)
    run_id = first.json()["run_id"]
    assert again.json()["run_id"] == in_body.json()["run_id"] == run_id
    assert both.status_code == 422, both.text
    assert both.json()["type"] == "urn:psych:problem:invalid-request"
    assert "Idempotency-Key" in both.json()["detail"]
    assert "idempotency_key" in both.json()["detail"]
    assert other_input.status_code == 409, other_input.text  # a key names one dispatch
    await harness.client.temporal.get_workflow_handle(run_id).terminate("test over")
