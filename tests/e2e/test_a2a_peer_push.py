"""A peer whose card supports push notifications ends the Run's wait on its task at once:
the worker (``A2aSettings.push_url``) asks it to push to ``psych serve``'s push route with a
token of this call's own, the route (sharing the workers' token store) completes the wait,
and the Run reads the task through its own activity before its next poll. A push without
the token is refused. Real Runs on the dev server, ``a2a-sdk``'s server and push sender as
the peer, the served app on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
from urllib.parse import urlsplit

import httpx
import pytest

from psych_runtime.activities.a2a import A2aSettings
from psych_runtime.specs import AgentBuilder
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers.serve import SMALL_BODY_BYTES
from psych_runtime.workflows import Resumed, RunStatus
from tests.a2a.peer import serve_peer
from tests.a2a.served import serve_app

from ._waiting import eventually
from .conftest import Harness

pytestmark = pytest.mark.e2e


async def declared(url: str, length: int, headers: dict[str, str]) -> bytes:
    """The status line ``psych serve`` answers a POST to ``url`` declaring a body of
    ``length`` bytes, sent with none of it (what a client streaming that much would
    meet first)."""
    parts = urlsplit(url)
    assert parts.hostname == "127.0.0.1" and parts.port is not None
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        head = [f"POST {parts.path} HTTP/1.1", f"Host: {parts.netloc}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        head += [f"Content-Length: {length}", "Content-Type: application/json", "", ""]
        writer.write("\r\n".join(head).encode())
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), timeout=10)
    finally:
        writer.close()


async def test_a_peers_push_ends_the_wait_before_the_next_poll(harness: Harness) -> None:
    served = serve_app(harness.client, tokens=harness.settings.tokens)
    async with served as base, serve_peer(("book",), push=True) as peer:
        harness.settings = dataclasses.replace(
            harness.settings, a2a=A2aSettings(hold_seconds=0.5, push_url=f"{base}/a2a-push")
        )
        spec = AgentBuilder("pushed_booker").model("fake-model").a2a_peer("travel", peer.url)
        harness.fake.enqueue(
            # 3 s of work: polls read it after 2 s and then 4 s more; the push comes first.
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:3"})),
            Reply.text("Booked."),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec.build(), "Book it", scope=harness.scope)

            async def asked_to_push() -> bool:
                return bool(peer.requests)

            await eventually(asked_to_push, what="the message to reach the peer")
            [sent] = peer.requests
            assert sent.push_url.startswith(f"{base}/a2a-push/{harness.scope.tenant}/")
            async with httpx.AsyncClient() as http:
                body = {"statusUpdate": {"taskId": "task-1", "status": {"state": 3}}}
                forged = await http.post(
                    sent.push_url, json=body, headers={"X-A2A-Notification-Token": "guess"}
                )
                unknown = await http.post(f"{base}/a2a-push/acme/0123", json=body)
            assert (forged.status_code, unknown.status_code) == (403, 403)
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            records = (await harness.client.records(run, scope=harness.scope)).records
            report = await harness.client.report(run, scope=harness.scope)
            # Delivered again (a peer pushes at least once): taken as the first, not a 409.
            async with httpx.AsyncClient() as http:
                body = {"statusUpdate": {"taskId": "task-1", "status": {"state": 3}}}
                token = {"X-A2A-Notification-Token": sent.push_token}
                again = await http.post(sent.push_url, json=body, headers=token)
                # The token is bound to its tenant's path: the same id under another
                # tenant is unknown.
                tenant, push_id = sent.push_url.rsplit("/", 2)[-2:]
                assert tenant == harness.scope.tenant
                elsewhere = await http.post(
                    f"{base}/a2a-push/globex/{push_id}", json=body, headers=token
                )
                # Bounded far below the app's body limit (a peer pushes a task's state):
                # a body declared larger is refused before any of it is read.
                large = await declared(sent.push_url, SMALL_BODY_BYTES + 1, token)
                # Nesting past the JSON decoder's depth is a 400 naming it, not a 500.
                deep = await http.post(
                    sent.push_url, content=b"[" * 100_000 + b"]" * 100_000, headers=token
                )
            assert again.status_code == 204, again.text
            assert elsewhere.status_code == 403, elsewhere.text
            assert large.startswith(b"HTTP/1.1 413 "), large
            assert deep.status_code == 400, deep.text
            assert "not an A2A StreamResponse" in deep.json()["detail"]
    assert result.status is RunStatus.COMPLETED, result.reason
    # The wait was ended by the push (completed as the Run's principal), not by a poll.
    [resumed] = [r for r in records if isinstance(r, Resumed)]
    assert (resumed.id, resumed.by) == ("a2a:travel:task-1", harness.scope.principal)
    [call] = report.tool_calls
    assert call.status == "ok" and "done slowly" in (call.result or "")
    assert peer.texts() == ["slow:3"]


async def test_a_read_after_a_push_that_fails_leaves_the_run_waiting(harness: Harness) -> None:
    served = serve_app(harness.client, tokens=harness.settings.tokens)
    async with served as base, serve_peer(("book",), push=True) as peer:
        harness.settings = dataclasses.replace(
            harness.settings, a2a=A2aSettings(hold_seconds=0.5, push_url=f"{base}/a2a-push")
        )
        spec = AgentBuilder("pushed_unread").model("fake-model").a2a_peer("travel", peer.url)
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:3"})),
            Reply.text("Booked."),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec.build(), "Book it", scope=harness.scope)

            async def _sent() -> bool:
                return peer.texts() == ["slow:3"]

            await eventually(_sent, within=30, what="the message at the peer")
            # The peer pushes the task's end, then answers 503 to every read (restarting).
            peer.down = True

            async def _pushed() -> bool:
                records = (await harness.client.records(run, scope=harness.scope)).records
                return any(isinstance(r, Resumed) for r in records)

            await eventually(_pushed, within=60, what="the push to end the wait")

            # Refused: a read in the call's hold (1), the poller's read (3 attempts) and
            # the read the push asked for (3 attempts).
            async def _failed() -> bool:
                return peer.refused >= 7

            await eventually(_failed, within=60, what="the reads to fail")
            peer.down = False
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 120)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    # A failed read is no answer: the Run waited on and read the task's end.
    [call] = report.tool_calls
    assert call.status == "ok" and "done slowly" in (call.result or ""), call.result


@pytest.mark.timeout(60)
async def test_a_push_no_worker_takes_is_a_503_within_the_query_timeout(
    harness: Harness,
) -> None:
    # The route completed the Run's wait with an update no bound held: with no worker
    # polling, the peer's push waited for one for as long as its connection stayed open
    # (and the server's shutdown behind it); a failure of Temporal's was a 409 "conflict",
    # which a peer takes for a refusal not to send again.
    served = serve_app(harness.client, tokens=harness.settings.tokens, query_timeout_seconds=1)
    async with served as base, serve_peer(("book",), push=True) as peer:
        harness.settings = dataclasses.replace(
            harness.settings, a2a=A2aSettings(hold_seconds=0.5, push_url=f"{base}/a2a-push")
        )
        spec = AgentBuilder("pushed_unworked").model("fake-model").a2a_peer("travel", peer.url)
        # The peer works on it past the test: only the push sent here reaches the route.
        harness.fake.enqueue(Reply.tool_calls(ToolCall("travel__book", {"message": "slow:120"})))
        async with harness.worker():
            run = await harness.client.dispatch(spec.build(), "Book it", scope=harness.scope)

            async def waiting() -> bool:
                state = await harness.client.status(run, scope=harness.scope)
                return state.status is RunStatus.SUSPENDED

            await eventually(waiting, within=30, what="the Run to wait on the peer's task")
            [sent] = peer.requests
        async with httpx.AsyncClient(timeout=20) as http:
            body = {"statusUpdate": {"taskId": "task-1", "status": {"state": 3}}}
            token = {"X-A2A-Notification-Token": sent.push_token}
            async with asyncio.timeout(8):
                unworked = await http.post(sent.push_url, json=body, headers=token)
    assert unworked.status_code == 503, unworked.text
    problem = unworked.json()
    assert problem["type"] == "urn:psych:problem:no-worker"
    assert problem["detail"].startswith("no worker answered for the Run in time")
