"""A2A peers as tools end to end: real Runs on the dev server calling a scripted peer built
with ``a2a-sdk``'s own server classes on loopback (``tests.a2a.peer``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from psych_runtime.activities.egress import EgressSettings
from psych_runtime.activities.hooks import Deny, Hooks
from psych_runtime.activities.secrets import SecretNotFound
from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import AgentBuilder, RunFailed, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunStatus
from tests._ports import free_port
from tests.a2a.peer import serve_peer

from ._waiting import is_waiting, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e


def offered(request: dict[str, Any]) -> list[str]:
    """The tool names one model request offered (but ``read_tool_output``)."""
    names = (tool["function"]["name"] for tool in request.get("tools", []))
    return sorted(name for name in names if name != "read_tool_output")


class TenantSecrets:
    """A SecretResolver with one value per (tenant, name)."""

    def __init__(self, values: dict[tuple[str, str], str]) -> None:
        self.values = values

    async def resolve(self, scope: Scope, name: str) -> str:
        try:
            return self.values[(scope.tenant, name)]
        except KeyError:
            raise SecretNotFound(f"no secret {name!r} for tenant {scope.tenant!r}") from None


async def test_allowed_skills_offered_called_once_with_credential_and_tenant(
    harness: Harness,
) -> None:
    async with serve_peer(("echo", "ask", "wipe")) as peer:
        spec = (
            AgentBuilder("caller")
            .model("fake-model")
            .a2a_peer(
                "helper",
                peer.url,
                credential="orders-key",
                tenant="team-7",
                allow=("ask", "echo"),
                extensions=("https://example.test/ext/v1",),
            )
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("helper__echo", {"message": "hi"}, id="c1")),
            Reply.tool_calls(ToolCall("helper__ask", {"message": "ask:which colour?"}, id="c2")),
            # The model answers the peer's question in the task the result names.
            Reply.tool_calls(
                ToolCall("helper__ask", {"message": "blue", "task_id": "task-2"}, id="c3")
            ),
            Reply.tool_calls(ToolCall("helper__wipe", {"message": "everything"}, id="c4")),
            Reply.text("done"),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "go", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    # Narrowed by allow: wipe is on the card but never offered, and calling it fails.
    assert offered(harness.fake.requests[0]) == ["helper__ask", "helper__echo"]
    echo, ask, reply, wipe = report.tool_calls
    assert echo.status == "ok"
    assert "echo: hi" in (echo.result or "") and "notes on hi" in (echo.result or "")
    assert "state completed" in (echo.result or "")
    assert ask.status == "ok"
    assert "The peer asks: which colour?" in (ask.result or "")
    assert 'again with task_id "task-2"' in (ask.result or "")
    assert reply.status == "ok" and "answered: blue" in (reply.result or "")
    assert "task task-2, state completed" in (reply.result or "")
    assert wipe.status == "error" and "unknown tool" in (wipe.result or "")
    # Each call reached the peer exactly once, with the credential, tenant, extensions,
    # skill and a message id made of the Run and the call.
    assert peer.texts() == ["hi", "ask:which colour?", "blue"]
    assert peer.requests[2].task_id == "task-2"
    first = peer.requests[0]
    assert first.authorization == "Bearer s3cret"
    assert first.tenant == "team-7"
    assert first.skill == "echo"
    assert "https://example.test/ext/v1" in first.extensions
    assert first.message_id.endswith("/c1")
    # One card per turn boundary, fetched once then cached; the secret never in a record.
    assert [(p.turn, p.peer, p.status) for p in report.peers] == [
        (1, "helper", "ok"),
        (2, "helper", "ok"),
        (3, "helper", "ok"),
        (4, "helper", "ok"),
        (5, "helper", "ok"),
    ]
    assert report.peers[0].skills == ("ask", "echo")
    assert report.peers[0].cached is False and report.peers[1].cached is True
    assert "s3cret" not in report.model_dump_json()


async def test_the_tenant_the_cards_interface_names_is_sent_unless_the_spec_names_one(
    harness: Harness,
) -> None:
    async with serve_peer(("echo",), tenant="team-9") as peer:
        spec = (
            AgentBuilder("interface_tenant")
            .model("fake-model")
            .a2a_peer("helper", peer.url)
            .a2a_peer("named", peer.url, tenant="team-7")
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("helper__echo", {"message": "hi"}, id="c1")),
            Reply.tool_calls(ToolCall("named__echo", {"message": "hello"}, id="c2")),
            Reply.text("done"),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "go", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    # A2A: an interface's tenant is set in each request to it; the Spec's own wins.
    assert [(r.text, r.tenant) for r in peer.requests] == [("hi", "team-9"), ("hello", "team-7")]


async def test_an_unreachable_optional_peer_is_left_out_and_a_required_one_fails(
    harness: Harness,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with serve_peer(("echo",)) as peer:
        optional = (
            AgentBuilder("caller")
            .model("fake-model")
            .a2a_peer("live", peer.url)
            .a2a_peer("gone", dead, optional=True)
            .build()
        )
        required = AgentBuilder("strict").model("fake-model").a2a_peer("gone", dead).build()
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("live__echo", {"message": "still here"})), Reply.text("ok")
        )
        async with harness.worker():
            run = await harness.client.dispatch(optional, "go", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
            failing = await harness.client.dispatch(required, "go", scope=harness.scope)
            with pytest.raises(RunFailed) as failed:
                await harness.client.result(failing, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert offered(harness.fake.requests[0]) == ["live__echo"]
    notes = [m["content"] for m in harness.fake.requests[0]["messages"] if m["role"] == "user"]
    assert any("A2A peer 'gone' is unavailable" in note for note in notes)
    assert [p.status for p in report.peers if p.peer == "gone"] == ["unavailable"] * 2
    assert peer.texts() == ["still here"]
    assert "A2A peer 'gone' is unreachable" in str(failed.value)
    # The required peer's Run never called the model.
    assert len(harness.fake.requests) == 2


async def test_two_tenants_each_send_only_their_own_credential(harness: Harness) -> None:
    harness.settings = dataclasses.replace(
        harness.settings,
        secrets=TenantSecrets(
            {("acme", "peer-key"): "key-acme", ("globex", "peer-key"): "key-globex"}
        ),
    )
    async with serve_peer(("echo",)) as peer:
        spec = (
            AgentBuilder("caller")
            .model("fake-model")
            .a2a_peer("helper", peer.url, credential="peer-key")
            .build()
        )
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("helper__echo", {"message": "from acme"})),
            Reply.text("a"),
            Reply.tool_calls(ToolCall("helper__echo", {"message": "from globex"})),
            Reply.text("b"),
        )
        async with harness.worker():
            for tenant in ("acme", "globex"):
                scope = Scope(tenant=tenant)
                run = await harness.client.dispatch(spec, "go", scope=scope)
                result = await harness.client.result(run, scope=scope)
                assert result.status is RunStatus.COMPLETED, result.reason
    assert [(r.text, r.authorization) for r in peer.requests] == [
        ("from acme", "Bearer key-acme"),
        ("from globex", "Bearer key-globex"),
    ]


async def test_policy_approvals_and_hooks_apply_to_peer_skills(harness: Harness) -> None:
    harness.settings = dataclasses.replace(
        harness.settings,
        policy=RulePolicy(tools={"helper__echo": "ask"}),
        hooks=Hooks().pre("helper__w*", lambda call: Deny(f"{call.tool} is not allowed")),
    )
    async with serve_peer(("echo", "wipe")) as peer:
        spec = AgentBuilder("caller").model("fake-model").a2a_peer("helper", peer.url).build()
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("helper__echo", {"message": "approved"}, id="e1")),
            Reply.tool_calls(ToolCall("helper__wipe", {"message": "all"}, id="w1")),
            Reply.text("done"),
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "go", scope=harness.scope)
            state = await state_when(
                harness.client, run, harness.scope, is_waiting, what="the approval"
            )
            [pending] = state.pending
            assert (pending.reason, pending.id, pending.tool) == ("approval", "e1", "helper__echo")
            assert peer.requests == []  # nothing is sent before the approval
            await harness.client.approve(run, "e1", scope=harness.scope)
            result = await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert [(c.tool, c.status) for c in report.tool_calls] == [
        ("helper__echo", "ok"),
        ("helper__wipe", "denied"),
    ]
    assert "helper__wipe is not allowed" in (report.tool_calls[1].result or "")
    assert peer.texts() == ["approved"]


async def test_a_peer_the_egress_policy_refuses_is_unreachable_and_never_contacted(
    harness: Harness,
) -> None:
    # The worker's default policy (the suite allows loopback): a peer on loopback is refused.
    harness.settings = dataclasses.replace(harness.settings, egress=EgressSettings())
    async with serve_peer(("echo",)) as peer:
        spec = AgentBuilder("strict").model("fake-model").a2a_peer("local", peer.url).build()
        async with harness.worker():
            run = await harness.client.dispatch(spec, "go", scope=harness.scope)
            with pytest.raises(RunFailed) as failed:
                await harness.client.result(run, scope=harness.scope)
    assert str(failed.value) == (
        "A2A peer 'local' is unreachable: EgressDenied: egress refused: 127.0.0.1: loopback "
        "addresses are refused for URLs from a Spec unless the operator allows them (egress "
        "allow list: PSYCH_EGRESS_ALLOW or the settings file)"
    )
    assert peer.texts() == []
    assert harness.fake.requests == []
