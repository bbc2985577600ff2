"""``psych serve``'s event stream at its boundaries: resuming from a drop's id, rejoining
the follower other streams of the Run share, a JWT expiring while a stream is open, a Run
whose worker died.

Real uvicorn on loopback, real dev server and worker (a worker process killed with its
relay, for a drop nobody can read again), the fake model streaming at a pace."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from temporalio.client import WorkflowFailureError
from temporalio.service import RPCError

from psych_runtime.specs import AgentBuilder, spec_to_data
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import AGENT_RUN, ModelCallFailed

from ._crash import doomed_worker
from ._serve import ACME, jwks, jwt_bearer, jwt_settings, read_events, served
from ._waiting import eventually
from ._worker_proc import REGISTRY
from .conftest import Harness

pytestmark = pytest.mark.e2e

ANSWER = "Order 42 was delivered on Tuesday, left with the neighbour at number 7. "
Events = list[tuple[str, str, Any]]


def named(events: Events, name: str) -> Events:
    return [event for event in events if event[0] == name]


async def followers_stopped(harness: Harness) -> None:
    """Wait until no stream follows a Run through the API's client (the next stream gets
    a follower of its own)."""

    async def stopped() -> bool:
        return not harness.client.follows._runs

    await eventually(stopped, what="the streams' followers to stop", within=10)


async def ended(harness: Harness, workflow_id: str) -> None:
    """Terminate the Run unless it has ended already."""
    with contextlib.suppress(RPCError):  # already completed
        await harness.client.temporal.get_workflow_handle(workflow_id).terminate("test over")


async def test_resuming_from_a_drops_id_does_not_send_the_drop_again(harness: Harness) -> None:
    # The worker dies mid-call, its relay with it: until the call's heartbeat timeout the
    # Run still shows the dead attempt pending, so every new follower reads its relay,
    # fails, and drops the attempt. A stream resumed from the drop's id had already been
    # sent that drop.
    harness.fake.enqueue(Reply.text(ANSWER * 8, chunk_size=6, chunk_seconds=0.1))
    queue = harness.settings.task_queue
    async with (
        doomed_worker(harness.env.client, queue, harness.home, harness.fake.base_url) as doomed,
        served(harness) as base,
        httpx.AsyncClient(timeout=30) as http,
    ):
        spec = AgentBuilder("talker", registry=REGISTRY).model("fake-model").build()
        run = await doomed.psych.dispatch(spec, "talk", scope=harness.scope)
        url = f"{base}/v1/runs/{run.workflow_id}/events"
        try:
            first, _ = await read_events(http, url, ACME, until="delta")
            await followers_stopped(harness)
            await doomed.kill_when(lambda: True)
            # A worker answers the Run's queries; the call stays pending until its timeout.
            async with doomed.survivor():
                dropped, _ = await read_events(
                    http, url, {**ACME, "Last-Event-ID": first[-1][1]}, until="deltas_dropped"
                )
                assert dropped[-1][0] == "deltas_dropped"
                await followers_stopped(harness)

                async def end_the_run() -> None:
                    await asyncio.sleep(3)  # ample for a new follower to read the dead relay
                    await ended(harness, run.workflow_id)

                ending = asyncio.create_task(end_the_run())
                rest, _ = await read_events(
                    http, url, {**ACME, "Last-Event-ID": dropped[-1][1]}, until="end"
                )
                await ending
        finally:
            await ended(harness, run.workflow_id)
    assert named(rest, "deltas_dropped") == []
    assert named(rest, "delta") == []  # nothing of the dropped attempt either
    assert rest[-1][0] == "end", rest


async def test_a_stream_rejoining_a_shared_follower_gets_the_drop_it_missed(
    harness: Harness,
) -> None:
    # Another stream keeps the Run's follower: a stream that comes back joins it, and
    # skipped the drop of the attempt it had pieces of, as if the attempt had ended
    # before it ever joined.
    spec = AgentBuilder("talker", registry=harness.registry).model("fake-model").build()
    harness.fake.enqueue(
        Reply.abort(after_chunks=12, chunk_seconds=0.1),
        Reply.text(ANSWER, chunk_size=6, chunk_seconds=0.04),
    )
    async with harness.worker(), served(harness) as base, httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{base}/v1/runs", headers=ACME, json={"spec": spec_to_data(spec), "input": "go"}
        )
        run_id = response.json()["run_id"]
        url = f"{base}/v1/runs/{run_id}/events"
        other: Events = []
        whole = asyncio.create_task(read_events(http, url, ACME, until="end", into=other))

        async def other_follows() -> bool:
            return run_id in harness.client.follows._runs

        await eventually(other_follows, what="the other stream to follow the Run")
        first, _ = await read_events(http, url, ACME, until="delta")  # then it goes away

        async def other_saw_the_drop() -> bool:
            return bool(named(other, "deltas_dropped"))

        await eventually(other_saw_the_drop, what="the attempt to be dropped", within=30)
        rest, _ = await read_events(http, url, {**ACME, "Last-Event-ID": first[-1][1]}, "end")
        await whole
    events = first + rest
    ((_, _, drop),) = named(events, "deltas_dropped")
    assert named(other, "deltas_dropped")[0][2] == drop
    assert drop["call"] == named(first, "delta")[-1][2]["call"]
    kept = "".join(
        data["text"] for _, _, data in named(events, "delta") if data["call"] != drop["call"]
    )
    (finished,) = [
        data for _, _, data in named(events, "record") if data["kind"] == "model_call_finished"
    ]
    assert kept == finished["text"] == ANSWER
    ids = [event_id for _, event_id, _ in events if event_id]
    assert len(ids) == len(set(ids))


async def test_a_stream_opened_with_a_jwt_ends_when_the_token_expires(harness: Harness) -> None:
    # The token is checked once, when the stream opens: it used to go on being sent the
    # Run's events for as long as the Run lasted, its token long expired.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def bearer(expires: int) -> dict[str, str]:
        return jwt_bearer(key, harness.scope.tenant, expires)

    spec = AgentBuilder("talker", registry=harness.registry).model("fake-model").build()
    answer = ANSWER * 6  # about 7 s of text
    harness.fake.enqueue(Reply.text(answer, chunk_size=6, chunk_seconds=0.1))
    with jwks(key, "k1") as jwks_url:
        async with (
            harness.worker(),
            served(harness, jwt_settings=jwt_settings(jwks_url)) as base,
            httpx.AsyncClient(timeout=30) as http,
        ):
            run = await harness.client.dispatch(spec, "talk", scope=harness.scope)
            url = f"{base}/v1/runs/{run.workflow_id}/events"
            expires = int(time.time() + 3)
            short = bearer(expires)
            async with asyncio.timeout(15):
                first, _ = await read_events(http, url, short, until="error")
            ended_at = time.time()
            refused = await http.get(url, headers={**short, "Last-Event-ID": first[-2][1]})
            rest, _ = await read_events(
                http, url, {**bearer(expires + 300), "Last-Event-ID": first[-2][1]}, until="end"
            )
    name, event_id, problem = first[-1]
    assert (name, event_id) == ("error", "")
    assert (problem["status"], problem["type"]) == (401, "urn:psych:problem:unauthorized")
    assert "reconnect with a fresh one" in problem["detail"]
    assert problem["expired_at"] == expires
    assert expires <= ended_at < expires + 2  # at the token's exp, not the Run's end
    assert named(first, "delta") and not named(first, "end")  # it ended mid-call
    # The same token is refused from then on; a fresh one resumes with no loss.
    assert refused.status_code == 401, refused.text
    assert refused.headers["www-authenticate"] == "Bearer"
    events = first[:-1] + rest
    ids = [event_id for _, event_id, _ in events if event_id]
    assert len(ids) == len(set(ids))
    assert "".join(data["text"] for _, _, data in named(events, "delta")) == answer
    assert rest[-1][0] == "end"


async def test_a_stream_of_a_run_whose_worker_died_waits_for_a_worker(harness: Harness) -> None:
    # Its worker died mid-call (no goodbye): a records query waits for it, and after about
    # 30 s the server refuses it ("no poller seen for task queue recently", FAILED
    # PRECONDITION). The stream used to end there, with a 503 error event, though it is
    # to go on across worker restarts; it waits for a worker instead, as it does for one
    # slow to answer.
    harness.fake.enqueue(Reply.text(ANSWER * 8, chunk_size=6, chunk_seconds=0.1))
    queue = harness.settings.task_queue
    async with (
        doomed_worker(harness.env.client, queue, harness.home, harness.fake.base_url) as doomed,
        served(harness) as base,
        httpx.AsyncClient(timeout=30) as http,
    ):
        spec = AgentBuilder("talker", registry=REGISTRY).model("fake-model").build()
        run = await doomed.psych.dispatch(spec, "talk", scope=harness.scope)
        url = f"{base}/v1/runs/{run.workflow_id}/events"
        try:
            first, _ = await read_events(http, url, ACME, until="delta")
            await followers_stopped(harness)
            await doomed.kill_when(lambda: True)
            events: Events = []
            resumed = {**ACME, "Last-Event-ID": first[-1][1]}
            reading = asyncio.create_task(read_events(http, url, resumed, until="end", into=events))
            await asyncio.sleep(40)  # past the server's refusal
            # Keep-alives meanwhile; the dead attempt's drop is read off the Run's pending
            # call, not queried.
            assert [name for name, _, _ in events] == ["deltas_dropped"]
            async with doomed.survivor():
                # A worker answers: the records come, up to the Run's end.
                await ended(harness, run.workflow_id)
                async with asyncio.timeout(30):
                    await reading
        finally:
            await ended(harness, run.workflow_id)
    assert events[-1][0] == "end"


async def test_a_stream_of_an_aborted_run_sends_its_records_and_no_deltas(
    harness: Harness,
) -> None:
    # An abort cancels the model call without waiting for it, and the closed Run goes on
    # listing it as pending: a follower that came after the Run settled read that call's
    # pieces from the relay (all of them, and its drop, before run_admitted), or a drop
    # for the relay's 404 once the relay forgot it.
    spec = AgentBuilder("talker", registry=harness.registry).model("fake-model").build()
    harness.fake.enqueue(Reply.text(ANSWER * 8, chunk_size=6, chunk_seconds=0.05))
    async with harness.worker(), served(harness) as base, httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{base}/v1/runs", headers=ACME, json={"spec": spec_to_data(spec), "input": "go"}
        )
        run_id = response.json()["run_id"]
        url = f"{base}/v1/runs/{run_id}/events"
        await read_events(http, url, ACME, until="delta")  # the relay holds pieces
        aborted = await http.post(f"{base}/v1/runs/{run_id}/abort", headers=ACME, json={})
        assert aborted.status_code == 202, aborted.text
        await harness.client.result(run_id, scope=harness.scope)
        events, _ = await read_events(http, url, ACME, until="end")
    assert [name for name, _, _ in events] == ["record"] * (len(events) - 1) + ["end"]
    assert events[-2][2]["kind"] == "run_settled"
    assert events[-2][2]["status"] == "aborted"


async def test_a_stream_back_after_its_attempt_failed_gets_the_drop(harness: Harness) -> None:
    # No other stream kept the Run's follower: the one that comes back has a follower of
    # its own, which never saw the attempt, and it was sent the failed call's record and
    # the retry's pieces but never the drop of the pieces it held.
    spec = AgentBuilder("talker", registry=harness.registry).model("fake-model").build()
    harness.fake.enqueue(
        Reply.abort(after_chunks=12, chunk_seconds=0.1),
        Reply.text(ANSWER, chunk_size=6, chunk_seconds=0.04),
    )
    async with harness.worker(), served(harness) as base, httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{base}/v1/runs", headers=ACME, json={"spec": spec_to_data(spec), "input": "go"}
        )
        run_id = response.json()["run_id"]
        url = f"{base}/v1/runs/{run_id}/events"
        first, _ = await read_events(http, url, ACME, until="delta")
        await followers_stopped(harness)

        async def failed() -> bool:
            records = (await harness.client.records(run_id, scope=harness.scope)).records
            return any(isinstance(record, ModelCallFailed) for record in records)

        await eventually(failed, what="the first attempt to fail", within=30)
        rest, _ = await read_events(http, url, {**ACME, "Last-Event-ID": first[-1][1]}, "end")
    held = named(first, "delta")[-1][2]["call"]
    names = [(name, data.get("kind")) for name, _, data in rest]
    assert names[:2] == [("deltas_dropped", "deltas_dropped"), ("record", "model_call_failed")]
    assert rest[0][2]["call"] == held
    kept = "".join(data["text"] for _, _, data in named(rest, "delta"))
    assert kept == ANSWER
    assert rest[-1][0] == "end"


async def test_a_stream_back_after_its_call_answered_gets_no_drop_when_the_run_is_aborted(
    harness: Harness,
) -> None:
    # Every record after a call's pieces keeps the last piece in its id, so a stream back
    # from a Run waiting on a question names the call that asked it, answered long before.
    # Its new follower never saw that call: the Run's abort (run_settled aborted) was
    # taken for the call's end, and the stream was sent a drop of an answered call.
    spec = (
        AgentBuilder("asker", registry=harness.registry)
        .model("fake-model")
        .suspension(may_ask_questions=True)
        .build()
    )
    question = ToolCall("ask_question", {"question": "Which order?"}, id="q1")
    harness.fake.enqueue(Reply.tool_calls(question, content=ANSWER * 2, chunk_seconds=0.1))
    async with harness.worker(), served(harness) as base, httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{base}/v1/runs", headers=ACME, json={"spec": spec_to_data(spec), "input": "go"}
        )
        run_id = response.json()["run_id"]
        url = f"{base}/v1/runs/{run_id}/events"
        first, _ = await read_events(http, url, ACME, until="suspended")
        await followers_stopped(harness)
        aborted = await http.post(f"{base}/v1/runs/{run_id}/abort", headers=ACME, json={})
        assert aborted.status_code == 202, aborted.text
        await harness.client.result(run_id, scope=harness.scope)
        rest, _ = await read_events(http, url, {**ACME, "Last-Event-ID": first[-1][1]}, "end")
    held = named(first, "delta")[-1][2]["call"]
    assert held in first[-1][1]  # the suspended record's id names the answered call
    assert "model_call_finished" in [data.get("kind") for _, _, data in first]
    assert [name for name, _, _ in rest] == ["record"] * (len(rest) - 1) + ["end"]
    assert rest[-2][2]["kind"] == "run_settled"
    assert rest[-2][2]["status"] == "aborted"


async def test_a_stream_back_after_an_abort_cut_its_call_gets_the_drop(harness: Harness) -> None:
    # The other side of the test above: the call the stream had pieces of was in flight
    # when the Run was aborted; no record of its own ends it, the run_settled does.
    spec = AgentBuilder("talker", registry=harness.registry).model("fake-model").build()
    harness.fake.enqueue(Reply.text(ANSWER * 8, chunk_size=6, chunk_seconds=0.05))
    async with harness.worker(), served(harness) as base, httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{base}/v1/runs", headers=ACME, json={"spec": spec_to_data(spec), "input": "go"}
        )
        run_id = response.json()["run_id"]
        url = f"{base}/v1/runs/{run_id}/events"
        first, _ = await read_events(http, url, ACME, until="delta")
        await followers_stopped(harness)
        aborted = await http.post(f"{base}/v1/runs/{run_id}/abort", headers=ACME, json={})
        assert aborted.status_code == 202, aborted.text
        await harness.client.result(run_id, scope=harness.scope)
        rest, _ = await read_events(http, url, {**ACME, "Last-Event-ID": first[-1][1]}, "end")
    names = [(name, data.get("kind")) for name, _, data in rest]
    assert names[-3:] == [
        ("deltas_dropped", "deltas_dropped"),
        ("record", "run_settled"),
        ("end", None),
    ]
    assert rest[-3][2]["call"] == first[-1][2]["call"]


async def test_a_stream_of_a_run_with_a_malformed_input_names_its_failure(
    harness: Harness,
) -> None:
    # Started by hand with an argument that is no AgentRunInput, the Run fails and its
    # records query refuses, saying why: the stream ended with a 500 "internal" error that
    # said nothing of it.
    workflow_id = f"psych-acme-malformed-{time.monotonic_ns()}"
    async with harness.worker(), served(harness) as base, httpx.AsyncClient(timeout=30) as http:
        handle = await harness.env.client.start_workflow(
            AGENT_RUN,
            {"run_id": "r1", "scope": {"tenant": "acme"}, "messages": []},
            id=workflow_id,
            task_queue=harness.settings.task_queue,
        )
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        events, _ = await read_events(http, f"{base}/v1/runs/{workflow_id}/events", ACME, "end")
    ((name, _, problem),) = events
    assert name == "error"
    assert problem["status"] == 409, problem
    assert "not a valid AgentRunInput" in problem["detail"]


async def test_a_stream_joining_a_continued_run_gets_its_call_in_flight(harness: Harness) -> None:
    # Each execution numbers its activities from 1, so the model call of every execution
    # of a continued Run was the same attempt, "2#1": a stream that joined the Run's
    # follower once the first had ended skipped every later call's pieces as "ended".
    @harness.registry.register
    def step(n: int) -> str:
        """One step."""
        return f"step {n} done"

    spec = AgentBuilder("steps", registry=harness.registry).model("fake-model").tool("step")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("step", {"n": 1}), content="first ", chunk_seconds=0.02),
        Reply.text(ANSWER * 2, chunk_size=6, chunk_seconds=0.1),
    )
    async with harness.worker(), served(harness) as base, httpx.AsyncClient(timeout=60) as http:
        run = await harness.client.dispatch(
            spec.build(), "take the step", scope=harness.scope, continue_after_events=1
        )
        url = f"{base}/v1/runs/{run.workflow_id}/events"
        whole: Events = []
        keeping = asyncio.create_task(read_events(http, url, ACME, until="end", into=whole))

        async def second_call_streams() -> bool:
            return any(data.get("turn") == 2 for _, _, data in named(whole, "delta"))

        await eventually(second_call_streams, what="the continued Run's call to stream")
        joined, _ = await read_events(http, url, ACME, until="end")
        await keeping
    (last,) = [
        data
        for _, _, data in named(joined, "record")
        if data["kind"] == "model_call_finished" and data["turn"] == 2
    ]
    pieces = [data for _, _, data in named(joined, "delta") if data["turn"] == 2]
    assert "".join(piece["text"] for piece in pieces) == last["text"] == ANSWER * 2
    first_call = {data["call"] for _, _, data in named(whole, "delta") if data["turn"] == 1}
    assert {piece["call"] for piece in pieces}.isdisjoint(first_call)
    ids = [event_id for _, event_id, _ in whole if event_id]
    assert len(ids) == len(set(ids))
