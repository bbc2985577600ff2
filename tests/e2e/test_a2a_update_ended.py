"""A reply to a task that Temporal ended with a timeout's status (a CANCELLED a server
under load answers, a DEADLINE_EXCEEDED of its own) says what REST's 503 says of it, but
names the ``messageId`` to send it again with, A2A's key, not REST's ``Idempotency-Key``
header, which an A2A caller has no way to send. Driven by ``a2a-sdk``'s client against
``psych serve`` whose client reaches the session dev server through a gRPC relay."""

from __future__ import annotations

import uuid

import grpc
import pytest
from a2a.utils.errors import InternalError

from ._serve import ACME, asking_agent, served
from .conftest import Harness
from .test_a2a_serve import a2a_client, collect, user
from .test_reads_bounded import relayed_client

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rest", [False, True], ids=["jsonrpc", "http-json"])
async def test_a_reply_temporal_ended_names_its_message_id_not_rests_header(
    harness: Harness, rest: bool
) -> None:
    # 4ece09b6 gave a reply whose wait ran out A2A's words; one Temporal ended first
    # (UpdateEndedByTemporal) still said "send it again under the same Idempotency-Key".
    agent = asking_agent(harness, f"a2a_ended{'_rest' if rest else ''}")
    async with (
        harness.worker(),
        relayed_client(harness) as (relay, client),
        served(harness, client=client) as base,
        a2a_client(base, agent, ACME, streaming=False, rest=rest) as a2a,
    ):
        task_id = (await collect(a2a.send_message(user("book it"))))[0].task.id
        relay.fail_next("UpdateWorkflowExecution", grpc.StatusCode.CANCELLED)
        reply = user("Monday", task_id=task_id, message_id=f"reply-{uuid.uuid4().hex[:8]}")
        with pytest.raises(InternalError) as ended:
            await collect(a2a.send_message(reply))
    assert relay.of("UpdateWorkflowExecution") == [grpc.StatusCode.CANCELLED]
    assert ended.value.data == {"type": "urn:psych:problem:temporal", "status": "503"}
    said = ended.value.message
    assert "Temporal ended the update" in said, said
    assert "Idempotency-Key" not in said, said
    assert said.endswith(
        "it may still be applied: read the Run before sending it again, or send it again "
        "with the same messageId"
    ), said
