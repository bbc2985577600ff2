"""A psych agent calling a psych agent served over A2A, on two workers (issue 24's done-when).

The peer is a published agent served by ``psych serve``'s app under uvicorn on loopback,
its Runs on the harness's worker; the caller is a psych agent whose Runs run on a ``psych
worker`` process of another task queue (``_psych_peer.psych_sides``), with the serve API
key of its tenant as its credential: allow narrowing, a long peer task across a kill -9 of
the caller's worker, ``input-required`` answered by the caller's person, an unreachable
optional peer left out and a required one failing the Run, two tenants isolated.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from a2a.types import GetTaskRequest, ListTasksRequest, TaskState
from a2a.utils.errors import TaskNotFoundError

from psych_runtime.specs import AgentBuilder, RunFailed, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import RunState, RunStatus, RunSummary
from tests._ports import free_port

from ._psych_peer import psych_sides
from ._waiting import eventually, is_waiting, state_when
from .conftest import Harness
from .test_a2a import offered
from .test_a2a_serve import a2a_client

pytestmark = pytest.mark.e2e

TENANT_A = f"p2pa{uuid.uuid4().hex[:8]}"
TENANT_B = f"p2pb{uuid.uuid4().hex[:8]}"
KEY_A = f"key-a-{uuid.uuid4().hex}"
KEY_B = f"key-b-{uuid.uuid4().hex}"
KEYS = {"key-a": (KEY_A, TENANT_A), "key-b": (KEY_B, TENANT_B)}
"""Credential name -> (serve API key, its tenant on the peer side)."""
A = Scope(tenant=TENANT_A, principal="caller")
B = Scope(tenant=TENANT_B, principal="caller")
RESULT_WITHIN = 120.0
"""Wall seconds a Run has to settle (two cores shared by several suites)."""


def of(harness: Harness, model: str) -> list[dict[str, Any]]:
    """The fake model's requests naming ``model``: the peer's are ``fake-other``."""
    return [r for r in harness.fake.requests if r.get("model") == model]


async def served_runs(
    harness: Harness, scope: Scope, agent: str, count: int, *, settled: bool = True
) -> list[RunSummary]:
    """The peer side's Runs of ``agent`` in ``scope``'s tenant, once ``count`` are listed
    (and, with ``settled``, none is running): listing reads Temporal's visibility store,
    which lags."""
    runs: list[RunSummary] = []

    async def listed() -> bool:
        nonlocal runs
        runs = await harness.client.list(scope=scope, agent=agent)
        done = all(r.status != RunStatus.RUNNING for r in runs)
        return len(runs) >= count and (done or not settled)

    await eventually(listed, within=60, what=f"{count} served Runs of {agent} (now {runs})")
    return runs


def task_id(run: RunSummary, scope: Scope) -> str:
    """The A2A task id of a served Run (its workflow id without ``psych-<tenant>-``)."""
    prefix = f"psych-{scope.tenant}-"
    assert run.workflow_id.startswith(prefix), run.workflow_id
    return run.workflow_id.removeprefix(prefix)


async def test_the_caller_offers_only_the_served_skill_it_allows(harness: Harness) -> None:
    harness.client.publish(
        AgentBuilder("p2p_desk")
        .description("Knows capitals.")
        .model("fake-other")
        .skill("capitals", "Capitals of countries.", body="Paris is the capital of France.")
        .build()
    )
    harness.fake.enqueue(Reply.text("Paris."), model="fake-other")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("desk__p2p_desk_capitals", {"message": "France?"})),
        Reply.text("It is Paris."),
        model="fake-model",
    )
    async with psych_sides(harness, KEYS) as sides, httpx.AsyncClient(timeout=30) as http:
        card = (await http.get(f"{sides.url('p2p_desk')}/.well-known/agent-card.json")).json()
        caller = (
            AgentBuilder("p2p_narrow")
            .model("fake-model")
            .a2a_peer(
                "desk", sides.url("p2p_desk"), credential="key-a", allow=("p2p_desk.capitals",)
            )
            .build()
        )
        run = await sides.caller.dispatch(caller, "Ask the desk", scope=A)
        result = await asyncio.wait_for(sides.caller.result(run, scope=A), RESULT_WITHIN)
        report = await sides.caller.report(run, scope=A)
        [served] = await served_runs(harness, A, "p2p_desk", 1)
    # The served card lists the agent and its one Spec skill; the caller allowed only one.
    assert [skill["id"] for skill in card["skills"]] == ["p2p_desk", "p2p_desk.capitals"]
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "It is Paris."
    [first, _] = of(harness, "fake-model")
    assert offered(first) == ["desk__p2p_desk_capitals"]
    assert [(p.peer, p.status, p.skills) for p in report.peers] == [
        ("desk", "ok", ("p2p_desk.capitals",)),
        ("desk", "ok", ("p2p_desk.capitals",)),
    ]
    [call] = report.tool_calls
    assert (call.tool, call.status) == ("desk__p2p_desk_capitals", "ok")
    assert "Paris." in (call.result or "") and "state completed" in (call.result or "")
    assert served.status == RunStatus.COMPLETED
    assert [s.authorization for s in sides.seen.sends("p2p_desk")] == [f"Bearer {KEY_A}"]


async def test_a_long_peer_task_survives_a_kill_of_the_callers_worker(harness: Harness) -> None:
    looked_up: list[str] = []

    @harness.registry.register
    async def slow_lookup(city: str) -> str:
        """Look a city up, slowly."""
        looked_up.append(city)
        # Past the caller's 5 s hold, and long enough to kill and restart its worker.
        await asyncio.sleep(15)
        return f"{city} is the capital of France"

    harness.client.publish(
        AgentBuilder("p2p_slow", registry=harness.registry)
        .description("Knows capitals, slowly.")
        .model("fake-other")
        .tool("slow_lookup")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("slow_lookup", {"city": "Paris"})),
        Reply.text("Paris is the capital of France."),
        model="fake-other",
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("desk__p2p_slow", {"message": "Capital of France?"})),
        Reply.text("It is Paris."),
        model="fake-model",
    )
    async with psych_sides(harness, KEYS) as sides:
        caller = (
            AgentBuilder("p2p_patient")
            .model("fake-model")
            .a2a_peer("desk", sides.url("p2p_slow"), credential="key-a")
            .build()
        )
        run = await sides.caller.dispatch(caller, "Ask the desk", scope=A)
        state = await state_when(
            sides.caller, run, A, is_waiting, what="the caller to wait on the peer", within=60
        )
        [pending] = state.pending
        assert pending.id.startswith("a2a:desk:")
        # The peer's task is still working when the caller's worker dies.
        assert "is working" in (pending.question or "")
        await sides.kill_caller()
        await sides.restart_caller()
        result = await asyncio.wait_for(sides.caller.result(run, scope=A), RESULT_WITHIN)
        report = await sides.caller.report(run, scope=A)
        [served] = await served_runs(harness, A, "p2p_slow", 1)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "It is Paris."
    [call] = report.tool_calls
    assert call.status == "ok", call.result
    assert "Paris is the capital of France." in (call.result or "")
    assert "state completed" in (call.result or "")
    # One message, one served Run, one lookup: the restarted worker only read the task.
    assert len(sides.seen.sends("p2p_slow")) == 1
    assert served.status == RunStatus.COMPLETED
    assert looked_up == ["Paris"]
    assert pending.id == f"a2a:desk:{task_id(served, A)}"


async def test_the_peers_question_is_answered_by_the_callers_person(harness: Harness) -> None:
    harness.client.publish(
        AgentBuilder("p2p_scheduler")
        .description("Books meetings.")
        .model("fake-other")
        .suspension(may_ask_questions=True)
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which day?"}, id="q1")),
        Reply.text("Booked for Tuesday."),
        model="fake-other",
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("desk__p2p_scheduler", {"message": "Book a meeting"}, id="c1")),
        Reply.text("Your meeting is on Tuesday."),
        model="fake-model",
    )
    async with psych_sides(harness, KEYS) as sides:
        caller = (
            AgentBuilder("p2p_delegator")
            .model("fake-model")
            .suspension(may_ask_questions=True)
            .a2a_peer("desk", sides.url("p2p_scheduler"), credential="key-a")
            .build()
        )
        run = await sides.caller.dispatch(caller, "Set up a meeting", scope=A)

        def asks(state: RunState) -> bool:
            return is_waiting(state) and state.pending[0].reason == "question"

        state = await state_when(
            sides.caller, run, A, asks, what="the peer's question", within=60, unsettled=True
        )
        [pending] = state.pending
        [asking] = await served_runs(harness, A, "p2p_scheduler", 1, settled=False)
        assert (pending.id, pending.tool) == ("c1", "desk__p2p_scheduler")
        assert pending.question == (f"A2A peer 'desk' asks (task {task_id(asking, A)}): Which day?")
        await sides.caller.answer(run, pending.id, "Tuesday", scope=A)
        result = await asyncio.wait_for(sides.caller.result(run, scope=A), RESULT_WITHIN)
        report = await sides.caller.report(run, scope=A)
        [served] = await served_runs(harness, A, "p2p_scheduler", 1)
        served_result = await harness.client.result(served.workflow_id, scope=A)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "Your meeting is on Tuesday."
    [call] = report.tool_calls
    assert call.status == "ok", call.result
    assert "Booked for Tuesday." in (call.result or "")
    assert "state completed" in (call.result or "")
    # The served Run got the person's answer to its question, and completed.
    assert served_result.status is RunStatus.COMPLETED, served_result.reason
    assert served_result.answer == "Booked for Tuesday."
    [_, answered] = of(harness, "fake-other")
    tool_results = [m["content"] for m in answered["messages"] if m["role"] == "tool"]
    assert any("Tuesday" in str(content) for content in tool_results)
    # The caller's model was asked twice: the person, not the model, answered the peer.
    assert len(of(harness, "fake-model")) == 2
    sends = sides.seen.sends("p2p_scheduler")
    assert len(sends) == 2


async def test_an_unreachable_optional_peer_is_left_out_and_a_required_one_fails(
    harness: Harness,
) -> None:
    harness.client.publish(
        AgentBuilder("p2p_live").description("Echoes.").model("fake-other").build()
    )
    harness.fake.enqueue(Reply.text("still here"), model="fake-other")
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("desk__p2p_live", {"message": "are you there?"})),
        Reply.text("The desk is there."),
        model="fake-model",
    )
    dead = f"http://127.0.0.1:{free_port()}/a2a/p2p_gone"
    async with psych_sides(harness, KEYS) as sides:
        optional = (
            AgentBuilder("p2p_tolerant")
            .model("fake-model")
            .a2a_peer("desk", sides.url("p2p_live"), credential="key-a")
            .a2a_peer("gone", dead, credential="key-a", optional=True)
            .build()
        )
        required = (
            AgentBuilder("p2p_strict")
            .model("fake-model")
            .a2a_peer("gone", dead, credential="key-a")
            .build()
        )
        run = await sides.caller.dispatch(optional, "Check the desk", scope=A)
        result = await asyncio.wait_for(sides.caller.result(run, scope=A), RESULT_WITHIN)
        report = await sides.caller.report(run, scope=A)
        failing = await sides.caller.dispatch(required, "Check", scope=A)
        with pytest.raises(RunFailed) as failed:
            await asyncio.wait_for(sides.caller.result(failing, scope=A), RESULT_WITHIN)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.answer == "The desk is there."
    requests = of(harness, "fake-model")
    assert offered(requests[0]) == ["desk__p2p_live"]
    assert [p.status for p in report.peers if p.peer == "gone"] == ["unavailable"] * 2
    assert "A2A peer 'gone' is unreachable" in str(failed.value)
    # The required peer's Run never called the model.
    assert len(requests) == 2


async def test_two_tenants_see_only_their_own_tasks(harness: Harness) -> None:
    harness.client.publish(
        AgentBuilder("p2p_shared").description("Serves both.").model("fake-other").build()
    )
    # One at a time: each tenant's served Run takes the next reply.
    async with psych_sides(harness, KEYS) as sides:
        for scope, credential, word in ((A, "key-a", "alpha"), (B, "key-b", "beta")):
            harness.fake.enqueue(Reply.text(f"answer {word}"), model="fake-other")
            harness.fake.enqueue(
                Reply.tool_calls(ToolCall("desk__p2p_shared", {"message": word})),
                Reply.text(f"done {word}"),
                model="fake-model",
            )
            caller = (
                AgentBuilder("p2p_tenant")
                .model("fake-model")
                .a2a_peer("desk", sides.url("p2p_shared"), credential=credential)
                .build()
            )
            run = await sides.caller.dispatch(caller, f"Say {word}", scope=scope)
            result = await asyncio.wait_for(sides.caller.result(run, scope=scope), RESULT_WITHIN)
            assert result.status is RunStatus.COMPLETED, result.reason
            assert result.answer == f"done {word}"
        [ours] = await served_runs(harness, A, "p2p_shared", 1)
        [theirs] = await served_runs(harness, B, "p2p_shared", 1)
        ours_id, theirs_id = task_id(ours, A), task_id(theirs, B)
        headers_a = {"Authorization": f"Bearer {KEY_A}"}
        headers_b = {"Authorization": f"Bearer {KEY_B}"}
        async with a2a_client(sides.base, "p2p_shared", headers_a, streaming=False) as client_a:
            got = await client_a.get_task(GetTaskRequest(id=ours_id))
            listed_a = await client_a.list_tasks(ListTasksRequest())
            with pytest.raises(TaskNotFoundError):
                await client_a.get_task(GetTaskRequest(id=theirs_id))
        async with a2a_client(sides.base, "p2p_shared", headers_b, streaming=False) as client_b:
            with pytest.raises(TaskNotFoundError, match=f"no task '{ours_id}'"):
                await client_b.get_task(GetTaskRequest(id=ours_id))
            listed_b = await client_b.list_tasks(ListTasksRequest())
        ours_result = await harness.client.report(ours.workflow_id, scope=A)
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert [task.id for task in listed_a.tasks] == [ours_id]
    assert [task.id for task in listed_b.tasks] == [theirs_id]
    assert ours_result.answer == "answer alpha"
    # Each caller sent its own tenant's key, once.
    assert [s.authorization for s in sides.seen.sends("p2p_shared")] == [
        f"Bearer {KEY_A}",
        f"Bearer {KEY_B}",
    ]
