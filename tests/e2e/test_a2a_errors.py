"""What an A2A call of ``psych serve`` answers when it fails, driven by ``a2a-sdk``'s own
client (both bindings) against ``psych serve`` on loopback and the session's dev server:
the server's outage (a permits port down, a store that fails) is the protocol's internal
error carrying the problem REST answers with (its ``type`` and ``status``), never the
caller's invalid params; the caller's own fault stays invalid params; and what failed
inside is never named to the caller (a store's directory)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from a2a.types import GetTaskRequest, ListTaskPushNotificationConfigsRequest, TaskState
from a2a.utils.errors import InternalError, InvalidParamsError

from psych_runtime.activities.tokens import LocalTokenStore
from psych_runtime.specs import AgentBuilder, Permits, PermitSource, StaticPermits
from psych_runtime.testing import Reply

from ._permits import checking_client
from ._serve import ACME, asking_agent, served
from .conftest import Harness
from .test_a2a_serve import a2a_client, collect, user

pytestmark = pytest.mark.e2e


def send_mail(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


class PortDown:
    """A ``TenantPermits`` whose service does not answer."""

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        raise ConnectionError("tenant service down")


@pytest.mark.parametrize("rest", [False, True], ids=["jsonrpc", "http-json"])
async def test_a_permits_port_down_is_an_internal_error_and_a_tool_not_permitted_the_callers(
    harness: Harness, rest: bool
) -> None:
    # Every PsychError of starting a task was InvalidParams, the caller's fault: a permits
    # port that did not answer (REST: 503 permits-unavailable) told the caller its message
    # was wrong, and it was not sent again.
    agent = f"a2a_permits{uuid.uuid4().hex[:8]}"
    spec = AgentBuilder(agent, registry=harness.registry).model("fake-model").tool(send_mail)
    harness.client.publish(spec.build())
    down = checking_client(harness, PortDown())
    async with (
        served(harness, client=down) as base,
        a2a_client(base, agent, ACME, streaming=False, rest=rest) as client,
    ):
        with pytest.raises(InternalError) as unavailable:
            await collect(client.send_message(user("mail bob")))
    assert unavailable.value.message == (
        "the tenant permits for 'acme' could not be asked: ConnectionError: tenant service down"
    )
    assert unavailable.value.data == {
        "type": "urn:psych:problem:permits-unavailable",
        "status": "503",
    }
    lookups_only = StaticPermits(tenants={"acme": Permits(code_tools=("lookup*",))})
    narrow = checking_client(harness, lookups_only)
    async with (
        served(harness, client=narrow) as base,
        a2a_client(base, agent, ACME, streaming=False, rest=rest) as client,
    ):
        with pytest.raises(InvalidParamsError) as refused:
            await collect(client.send_message(user("mail bob")))
    assert "tenant 'acme' is not permitted what the Spec uses" in refused.value.message
    assert "send_mail" in refused.value.message
    assert refused.value.data == {"type": "urn:psych:problem:not-permitted", "status": "403"}


@pytest.mark.parametrize("rest", [False, True], ids=["jsonrpc", "http-json"])
async def test_a_push_store_that_fails_names_no_directory(
    harness: Harness, tmp_path: Path, rest: bool
) -> None:
    # A failure the handler did not map (the push store's OSError) reached the JSON-RPC
    # caller as its own text, the store's directory in it.
    agent = f"a2a_pushfail{uuid.uuid4().hex[:8]}"
    harness.client.publish(AgentBuilder(agent).model("fake-model").build())
    harness.fake.enqueue(Reply.text("Done."))
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    store = LocalTokenStore(blocked / "push-tokens")
    async with (
        harness.worker(),
        served(harness, push_tokens=store) as base,
        a2a_client(base, agent, ACME, streaming=False, rest=rest) as client,
    ):
        (sent,) = await collect(client.send_message(user("go")))
        with pytest.raises(InternalError) as failed:
            await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=sent.task.id)
            )
    # Since 37a79e4 the local store's disk error is a StoreUnavailable naming the record and
    # the errno, answered as REST answers it; never its path. A directory on a file's path
    # lasts: the server's 500 store-failed (until 12-06 a 503 store-unavailable, "retry").
    assert str(tmp_path) not in failed.value.message
    assert failed.value.message.endswith(
        "cannot be read: the local token store failed (ENOTDIR: Not a directory)"
    )
    assert failed.value.data == {"type": "urn:psych:problem:store-failed", "status": "500"}


async def test_a_task_no_worker_answers_for_is_an_internal_error_saying_so(
    harness: Harness,
) -> None:
    # It was an InternalError with no data: a caller could not tell REST's no-worker (503,
    # worth asking again) from a failure of the server's own.
    agent = asking_agent(harness, "a2a_noworker")
    async with (
        served(harness, query_timeout_seconds=1) as base,
        a2a_client(base, agent, ACME, streaming=False) as client,
    ):
        async with harness.worker():
            (sent,) = await collect(client.send_message(user("book it")))
        assert sent.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        with pytest.raises(InternalError) as unread:
            await client.get_task(GetTaskRequest(id=sent.task.id))
    assert unread.value.message == (
        "the Run could not be read: no worker answered for the Run in time"
    )
    assert unread.value.data == {"type": "urn:psych:problem:no-worker", "status": "503"}
