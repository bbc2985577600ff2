"""The ``psych`` commands with a workflow: ``run``, ``status``, ``report`` of the onboarding
example, and ``list --suspended`` / ``approve`` of one whose tool step waits for approval
(``psych worker --ask create_account``), against the session dev server."""

from __future__ import annotations

import asyncio
import json
import re
import signal

import pytest

from psych_runtime.testing import Reply

from .conftest import EXAMPLES, TOOLS_REF, Cli, psych, read_until, spawn
from .test_cli_suspensions import PSYCH, listed_suspended

WORKFLOW_FILE = EXAMPLES / "onboarding-workflow.yaml"
RUN_LINE = re.compile(r"^Run (psych-acme-\w+) on task queue", re.MULTILINE)
WELCOME = "Welcome aboard, we are glad you are here."
OUTPUTS = {"create": {"account": "acct-starter", "plan": "starter"}, "welcome": WELCOME}


def run_argv(cli: Cli) -> list[str]:
    """``psych run`` of the onboarding workflow on this fixture's task queue."""
    return [
        "run",
        str(WORKFLOW_FILE),
        *cli.args("--input", "Onboard Ada"),
        "--task-queue",
        cli.task_queue,
        "--store",
        str(cli.home / "versions"),
        "--tools",
        TOOLS_REF,
    ]


def in_order(out: str, *prefixes: str) -> None:
    """Each of ``prefixes`` starts a line of ``out``, in this order."""
    lines = out.splitlines()
    position = 0
    for prefix in prefixes:
        position = next((i for i in range(position, len(lines)) if lines[i].startswith(prefix)), -1)
        assert position >= 0, f"{prefix!r} missing or out of order in:\n{out}"


async def test_run_status_and_report_of_the_onboarding_workflow(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.fake.enqueue(Reply.text(WELCOME))
    # Queries replay the Run on a worker, so status and report need one even once it settled.
    async with cli.worker():
        status, out, err = await psych(capsys, *run_argv(cli))
        assert status == 0, out + err
        found = RUN_LINE.search(out)
        assert found is not None, out
        wid = found.group(1)
        in_order(
            out[found.end() :],
            "run admitted: workflow onboard-customer",
            'step 1 create (tool), given {"plan": "starter"}',
            '  tool call create_account({"plan": "starter"}) ...',
            '  tool call create_account -> ok: {"account": "acct-starter", "plan": "starter"}',
            'step create -> ok: {"account": "acct-starter", "plan": "starter"}',
            f'step 2 welcome (agent) as {wid}-step2, given ["Onboard Ada", "Outputs of the',
            "    run admitted: agent greeter",
            f"      model call gpt-4o-mini -> text {WELCOME!r}",
            "    settled completed: answered",
            f'step welcome -> ok: "{WELCOME}"',
            "settled completed: completed: 2 steps",
            f"run:          {wid}",
            "workflow:     onboard-customer (sha256:",
            "status:       completed",
            "reason:       completed: 2 steps",
            "outputs:      {",
            "step 1:       create (tool) ok, ",
            "step 2:       welcome (agent) ok, ",
            f"              {wid}-step2: 1 model calls (0 failed), 0 tool calls, 0 steps",
            "tool calls:   1 (1 ok)",
            "in all:       1 model calls, 1 tool calls (its steps' Runs included)",
            "cost:         unknown",
        )

        status, out, err = await psych(capsys, "status", *cli.args(wid))
        assert status == 0, err
        in_order(
            out,
            f"run:          {wid}",
            "workflow:     onboard-customer (sha256:",
            "status:       completed",
            "reason:       completed: 2 steps",
            "outputs:      {",
            "step:         -",
        )
        assert "answer:" not in out  # a workflow has outputs, not an answer
        assert json.loads(out[out.index("{") : out.rindex("}") + 1]) == OUTPUTS

        status, out, _ = await psych(capsys, "status", *cli.args(wid, "--json"))
        state = json.loads(out)
        assert (state["kind"], state["status"], state["step"]) == ("workflow", "completed", None)
        assert state["outputs"] == OUTPUTS
        assert state["totals"]["model_calls"] == 1 and state["totals"]["tool_calls"] == 1

        status, out, _ = await psych(capsys, "report", *cli.args(wid))
        assert status == 0
        in_order(out, f"run:          {wid}", "status:       completed", "outputs:      {")
        assert "welcome (agent) ok, " in out

        status, out, _ = await psych(capsys, "report", *cli.args(wid, "--json"))
    assert status == 0
    report = json.loads(out)
    assert (report["workflow_id"], report["kind"], report["status"]) == (
        wid,
        "workflow",
        "completed",
    )
    assert report["outputs"] == OUTPUTS
    assert [(s["name"], s["kind"], s["ok"]) for s in report["steps"]] == [
        ("create", "tool", True),
        ("welcome", "agent", True),
    ]
    welcome = report["steps"][1]
    assert welcome["run"] == f"{wid}-step2"
    assert [c["text"] for c in welcome["child"]["model_calls"]] == [WELCOME]
    assert [(c["call_id"], c["tool"]) for c in report["tool_calls"]] == [
        ("create", "create_account")
    ]
    assert len(cli.fake.requests) == 1


async def test_a_tool_step_that_asks_is_listed_suspended_and_approved_by_step_name(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.fake.enqueue(Reply.text(WELCOME))
    env = cli.child_env(TEMPORAL_ADDRESS=cli.address, PSYCH_TASK_QUEUE=cli.task_queue)
    worker = await spawn(
        [*PSYCH, "worker", "--tools", TOOLS_REF, "--ask", "create_account"], env, cli.home
    )
    # Started together (each pays a Python start-up): the Run waits for the worker to poll.
    runner = await spawn([*PSYCH, *run_argv(cli)], env, cli.home)
    assert worker.stdout is not None and runner.stdout is not None
    try:
        await read_until(worker.stdout, "Ctrl-C to stop")
        followed = await read_until(runner.stdout, "to resume:")
        found = RUN_LINE.search(followed)
        assert found is not None, followed
        wid = found.group(1)
        in_order(
            followed,
            'step 1 create (tool), given {"plan": "starter"}',
            '  suspended: waiting for approval of create_account({"plan": "starter"}) until ',
            f"    to resume: psych approve {wid} create --tenant acme",
        )

        row, *pending = await listed_suspended(cli, capsys, wid)
        assert row.split()[1:3] == ["onboard-customer", "suspended"]
        assert pending[0] == (
            '  approval create: waiting for approval of create_account({"plan": "starter"})'
        )
        assert pending[1].endswith(
            f"; psych approve {wid} create --tenant acme (or: psych deny ... --note TEXT)"
        )

        status, out, err = await psych(capsys, "status", *cli.args(wid))
        assert status == 0, err
        assert "status:       suspended" in out and "step:         create" in out
        assert "outputs:      -" in out  # no step has finished yet
        assert "waiting for:  approval of create_account(" in out and "(id create)" in out

        status, out, err = await psych(
            capsys, "approve", *cli.args(wid, "create", "--principal", "alice", "--note", "ok")
        )
        assert status == 0, err
        assert out == f"{wid}: approval create approved by alice\n"
        async with asyncio.timeout(30):
            rest, errors = await runner.communicate()
        assert runner.returncode == 0, rest.decode() + errors.decode()
    finally:
        if runner.returncode is None:
            runner.send_signal(signal.SIGINT)
            async with asyncio.timeout(20):
                await runner.communicate()
        worker.send_signal(signal.SIGINT)
        async with asyncio.timeout(20):
            await worker.communicate()
    in_order(
        rest.decode(),
        "  resumed: approved by alice (approval create): ok",
        '  tool call create_account -> ok: {"account": "acct-starter", "plan": "starter"}',
        "step 2 welcome (agent)",
        "settled completed: completed: 2 steps",
        "status:       completed",
        "outputs:      {",
    )
    assert len(cli.fake.requests) == 1
