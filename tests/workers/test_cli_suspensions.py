"""``psych list --suspended``, ``approve``, ``deny``, ``answer``, ``complete``, ``abort`` and
``steer`` against the session dev server, and the approval policy of ``psych worker``."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from argparse import Namespace

import pytest

from psych_runtime.activities import FileVersionStore, RulePolicy
from psych_runtime.specs import AgentBuilder, AgentSpec, ExternalWait, Scope, ToolRegistry
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers._loading import load_spec_file
from psych_runtime.workers.cli._processes import settings_from
from psych_runtime.workflows import (
    AbortRequested,
    PsychClient,
    Resumed,
    RunHandle,
    RunStatus,
    SteerReceived,
)

from .conftest import TOOLS_REF, Cli, psych, read_until, spawn

SCOPE = Scope(tenant="acme")
PSYCH = (sys.executable, "-m", "psych_runtime.workers.cli")
UNTIL = re.compile(r"until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 \(in 23 h 59 min\)")


def client_of(cli: Cli) -> PsychClient:
    return PsychClient(
        cli.env.client,
        store=FileVersionStore(cli.home / "versions"),
        task_queue=cli.task_queue,
        registry=cli.settings.registry,
    )


def support_spec(cli: Cli) -> AgentSpec:
    spec = load_spec_file(cli.spec_file)
    assert isinstance(spec, AgentSpec)
    return spec


def ask_before_refunds(cli: Cli, *after: Reply) -> None:
    """The worker asks before ``issue_refund``; the model looks order 42 up, then refunds it
    (call ``refund-1``), then replies ``after``."""
    cli.settings.policy = RulePolicy(tools={"issue_refund": "ask"})
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"}, id="lookup-1")),
        Reply.tool_calls(
            ToolCall("issue_refund", {"order_id": "42", "reason": "broken"}, id="refund-1")
        ),
        *after,
    )


async def suspended_run(client: PsychClient, spec: AgentSpec, message: str) -> RunHandle:
    """Dispatch a Run and wait until it is suspended."""
    run = await client.dispatch(spec, message, scope=SCOPE)
    async with asyncio.timeout(15):
        while True:
            if (await client.status(run, scope=SCOPE)).status is RunStatus.SUSPENDED:
                return run
            await asyncio.sleep(0.05)


async def listed_suspended(
    cli: Cli, capsys: pytest.CaptureFixture[str], workflow_id: str
) -> list[str]:
    """``psych list --suspended`` once it shows ``workflow_id`` (visibility lags a little):
    the Run's row and the lines under it."""
    for _ in range(60):
        status, out, err = await psych(capsys, "list", *cli.args("--suspended"))
        assert status == 0, err
        if workflow_id in out:
            lines = out.splitlines()
            start = next(i for i, line in enumerate(lines) if line.startswith(workflow_id))
            end = next(
                (i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")),
                len(lines),
            )
            return lines[start:end]
        await asyncio.sleep(0.25)
    raise AssertionError(f"{workflow_id} never listed as suspended:\n{out}")


async def test_list_suspended_shows_the_approval_and_approve_runs_the_call(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    ask_before_refunds(cli, Reply.text("I refunded order 42."))
    client = client_of(cli)
    async with cli.worker():
        run = await suspended_run(client, support_spec(cli), "Refund order 42")
        wid = run.workflow_id
        row, *pending = await listed_suspended(cli, capsys, wid)
        assert row.split()[1:3] == ["support", "suspended"]
        assert pending[0] == (
            "  approval refund-1: waiting for approval of "
            'issue_refund({"order_id": "42", "reason": "broken"})'
        )
        assert UNTIL.search(pending[1]), pending
        assert pending[1].endswith(
            f"; psych approve {wid} refund-1 --tenant acme (or: psych deny ... --note TEXT)"
        )
        assert cli.payments.count("POST", "/orders/42/refund") == 0  # nothing ran yet

        status, out, _ = await psych(capsys, "status", *cli.args(wid))
        assert status == 0
        assert "status:       suspended" in out
        assert "waiting for:  approval of issue_refund(" in out and "(id refund-1)" in out

        named = ("--principal", "alice", "--note", "ok", "--idempotency-key", "ticket-7")
        status, out, err = await psych(capsys, "approve", *cli.args(wid, "refund-1", *named))
        assert status == 0, err
        assert out == f"{wid}: approval refund-1 approved by alice\n"
        result = await client.result(run, scope=SCOPE)
        records = (await client.records(run, scope=SCOPE)).records

        # The same request run again under its id prints its first outcome.
        status, again, err = await psych(capsys, "approve", *cli.args(wid, "refund-1", *named))
        assert (status, again) == (0, out), err

        # `psych report` shows what the Run waited for and who resumed it.
        status, shown, err = await psych(capsys, "report", *cli.args(wid))
        assert status == 0, err
        waited = re.search(r"^waited: +(.*)$", shown, re.MULTILINE)
        assert waited is not None, shown
        assert re.fullmatch(
            r'approval of issue_refund\(\{"order_id": "42", "reason": "broken"\}\): '
            r"approved by alice after \d+\.\d\d s",
            waited.group(1),
        ), waited.group(1)

        # Approving again, now that the Run settled, is refused in one line.
        status, out, err = await psych(capsys, "approve", *cli.args(wid, "refund-1"))
    assert status == 1 and out == ""
    assert err == f"psych: refused (NotSuspended): {wid} has settled completed: answered\n"
    assert result.status is RunStatus.COMPLETED
    assert cli.payments.count("POST", "/orders/42/refund") == 1
    resumed = [r for r in records if isinstance(r, Resumed)]
    assert [(r.by, r.outcome, r.detail) for r in resumed] == [("alice", "approved", "ok")]


async def test_deny_with_a_note_rejects_the_call(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    ask_before_refunds(cli, Reply.text("I did not refund order 42."))
    client = client_of(cli)
    async with cli.worker():
        run = await suspended_run(client, support_spec(cli), "Refund order 42")
        status, out, err = await psych(
            capsys, "deny", *cli.args(run.workflow_id, "refund-1", "--note", "needs a manager")
        )
        assert status == 0, err
        assert out.startswith(f"{run.workflow_id}: approval refund-1 rejected by ")
        result = await client.result(run, scope=SCOPE)
        report = await client.report(run, scope=SCOPE)
    assert result.answer == "I did not refund order 42."
    assert cli.payments.count("POST", "/orders/42/refund") == 0
    assert [(c.tool, c.status) for c in report.tool_calls][-1] == ("issue_refund", "rejected")
    told = cli.fake.requests[-1]["messages"][-1]
    assert told["tool_call_id"] == "refund-1" and "needs a manager" in told["content"]


async def test_answer_answers_a_question(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    asker = AgentBuilder("asker").model("gpt-4o-mini").suspension(may_ask_questions=True).build()
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("ask_question", {"question": "Which order?"}, id="q1")),
        Reply.text("Order 42 it is."),
    )
    client = client_of(cli)
    async with cli.worker():
        run = await suspended_run(client, asker, "Refund my order")
        _, *pending = await listed_suspended(cli, capsys, run.workflow_id)
        assert pending[0] == "  question q1: waiting for an answer to 'Which order?'"
        assert pending[1].endswith(f"; psych answer {run.workflow_id} q1 TEXT --tenant acme")
        status, out, err = await psych(capsys, "answer", *cli.args(run.workflow_id, "q1", "42"))
        assert status == 0, err
        assert out.startswith(f"{run.workflow_id}: question q1 answered")
        result = await client.result(run, scope=SCOPE)
    assert result.answer == "Order 42 it is."
    assert cli.fake.requests[-1]["messages"][-1] == {
        "role": "tool",
        "content": "42",
        "tool_call_id": "q1",
    }


async def test_complete_hands_the_json_payload_to_the_waiting_tool(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = ToolRegistry()

    @registry.register
    def request_payment(order_id: str) -> ExternalWait:
        """Ask the payment provider to charge an order; it calls back when done."""
        return ExternalWait(token=f"pay-{order_id}", message="waiting for the payment webhook")

    cli.settings.registry = registry
    payer = AgentBuilder("payer", registry=registry).model("gpt-4o-mini")
    spec = payer.tool("request_payment").build()
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("request_payment", {"order_id": "42"}, id="p1")),
        Reply.text("Paid."),
    )
    client = client_of(cli)
    async with cli.worker():
        run = await suspended_run(client, spec, "charge order 42")
        wid = run.workflow_id
        _, *pending = await listed_suspended(cli, capsys, wid)
        assert pending[0] == (
            '  external pay-42: waiting for completion of request_payment({"order_id": "42"}): '
            "waiting for the payment webhook"
        )
        assert pending[1].endswith(f"; psych complete {wid} pay-42 --payload JSON --tenant acme")

        # Invalid JSON is refused before anything is sent, naming the option.
        status, out, err = await psych(
            capsys, "complete", *cli.args(wid, "pay-42", "--payload", "{paid: yes}")
        )
        assert status == 1 and out == ""
        assert err.startswith("psych: --payload is not valid JSON: Expecting property name")
        assert err.count("\n") == 1

        payload = '{"paid": true, "amount": 19.9}'
        status, out, err = await psych(
            capsys, "complete", *cli.args(wid, "pay-42", "--payload", payload)
        )
        assert status == 0, err
        assert out.startswith(f"{wid}: external pay-42 completed")
        result = await client.result(run, scope=SCOPE)
    assert result.answer == "Paid."
    told = cli.fake.requests[-1]["messages"][-1]
    assert told["tool_call_id"] == "p1"
    assert json.loads(told["content"]) == {"paid": True, "amount": 19.9}


async def test_abort_settles_a_suspended_run_aborted(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    ask_before_refunds(cli)
    client = client_of(cli)
    async with cli.worker():
        run = await suspended_run(client, support_spec(cli), "Refund order 42")
        status, out, err = await psych(
            capsys,
            "abort",
            *cli.args(run.workflow_id, "--reason", "customer withdrew", "--principal", "bob"),
        )
        assert status == 0, err
        assert out.startswith(f"{run.workflow_id}: abort requested")
        result = await client.result(run, scope=SCOPE)
        records = (await client.records(run, scope=SCOPE)).records
    assert result.status is RunStatus.ABORTED
    assert result.reason == "aborted by bob: customer withdrew"
    aborts = [(r.by, r.reason) for r in records if isinstance(r, AbortRequested)]
    assert aborts == [("bob", "customer withdrew")]
    assert cli.payments.count("POST", "/orders/42/refund") == 0


async def test_steer_follow_up_adds_a_turn(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    ask_before_refunds(cli, Reply.text("I refunded order 42."), Reply.text("Order 43 is fine."))
    client = client_of(cli)
    async with cli.worker():
        run = await suspended_run(client, support_spec(cli), "Refund order 42")
        wid = run.workflow_id
        status, out, err = await psych(
            capsys, "steer", *cli.args(wid, "Also check order 43.", "--mode", "follow_up")
        )
        assert status == 0, err
        assert (
            out == f"{wid}: follow_up message taken; the model sees it when the model would "
            "otherwise end on an answer, as a new turn\n"
        )
        status, _, err = await psych(capsys, "approve", *cli.args(wid, "refund-1"))
        assert status == 0, err
        result = await client.result(run, scope=SCOPE)
        records = (await client.records(run, scope=SCOPE)).records
    assert result.answer == "Order 43 is fine."
    assert cli.fake.requests[-1]["messages"][-1] == {
        "role": "user",
        "content": "Also check order 43.",
    }
    steered = [(r.mode, r.message) for r in records if isinstance(r, SteerReceived)]
    assert steered == [("follow_up", "Also check order 43.")]


async def test_refusals_are_one_line_and_exit_1(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    ask_before_refunds(cli, Reply.text("done"))
    client = client_of(cli)
    async with cli.worker():
        run = await suspended_run(client, support_spec(cli), "Refund order 42")
        wid = run.workflow_id
        status, out, err = await psych(capsys, "approve", *cli.args(wid, "nope"))
        assert (status, out) == (1, "")
        assert err == (
            f"psych: refused (UnknownPending): {wid}: nothing pending with id 'nope' "
            "(pending: refund-1)\n"
        )
        status, _, err = await psych(capsys, "answer", *cli.args(wid, "refund-1", "yes"))
        assert status == 1
        assert err == (
            f"psych: refused (WrongReason): {wid}: 'refund-1' waits for approval, not question\n"
        )
        status, _, err = await psych(capsys, "approve", *cli.args(wid, "refund-1", tenant="other"))
        assert status == 1
        assert err == f"psych: Run {wid} does not belong to tenant 'other'\n"
        # Nothing of that touched the Run: it still waits, and an approval goes through.
        status, _, err = await psych(capsys, "approve", *cli.args(wid, "refund-1"))
        assert status == 0, err
        await client.result(run, scope=SCOPE)


def test_ask_options_and_psych_ask_build_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    def args(*ask: str, destructive: bool = False) -> Namespace:
        return Namespace(
            tools=None, task_queue=None, ask=list(ask) or None, ask_destructive=destructive
        )

    monkeypatch.setenv("PSYCH_ASK", "issue_refund, delete_*")
    policy = settings_from(args()).policy
    assert isinstance(policy, RulePolicy)
    assert policy.tools == {"issue_refund": "ask", "delete_*": "ask"}
    assert policy.by_effect["destructive"] == "allow"

    policy = settings_from(args("wipe_*", "drop", destructive=True)).policy
    assert isinstance(policy, RulePolicy)
    assert policy.tools == {"wipe_*": "ask", "drop": "ask"}  # --ask replaces PSYCH_ASK
    assert policy.by_effect == {"read_only": "allow", "write": "allow", "destructive": "ask"}

    monkeypatch.delenv("PSYCH_ASK")
    policy = settings_from(args()).policy
    assert isinstance(policy, RulePolicy)
    assert policy.tools == {} and set(policy.by_effect.values()) == {"allow"}


async def test_worker_ask_makes_refunds_wait(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("issue_refund", {"order_id": "42"}, id="r1")),
        Reply.text("Refunded."),
    )
    env = cli.child_env(TEMPORAL_ADDRESS=cli.address, PSYCH_TASK_QUEUE=cli.task_queue)
    argv = [*PSYCH, "worker", "--tools", TOOLS_REF, "--ask", "issue_*"]
    child = await spawn(argv, env, cli.home)
    assert child.stdout is not None
    try:
        started = await read_until(child.stdout, "Ctrl-C to stop")
        assert "approval needed for: issue_* (psych list --suspended; psych approve)" in started
        client = client_of(cli)
        run = await suspended_run(client, support_spec(cli), "Refund order 42")
        (pending,) = (await client.status(run, scope=SCOPE)).pending
        assert (pending.reason, pending.id, pending.tool) == ("approval", "r1", "issue_refund")
        status, _, err = await psych(capsys, "approve", *cli.args(run.workflow_id, "r1"))
        assert status == 0, err
        assert (await client.result(run, scope=SCOPE)).answer == "Refunded."
    finally:
        child.send_signal(signal.SIGINT)
        async with asyncio.timeout(20):
            await child.communicate()
    assert cli.payments.count("POST", "/orders/42/refund") == 1

    # A malformed pattern is refused before the worker connects anywhere.
    status, _, err = await psych(capsys, "worker", "--ask", "is*sue")
    assert status == 1
    assert err == ("psych: invalid tool pattern 'is*sue': a tool name, or a prefix ending in '*'\n")
