"""``psych follow``: a live Run on a terminal to its end, a settled Run's records, and the
exit status of ``psych run``; against the session dev server with a real worker."""

from __future__ import annotations

import re

import pytest

from psych_runtime.activities import FileVersionStore, RulePolicy
from psych_runtime.specs import AgentSpec, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers._loading import load_spec_file
from psych_runtime.workflows import PsychClient

from .conftest import Cli, psych
from .test_cli_render import RUN_LINE, colours, in_terminal, piped, plain, terminal_env

SCOPE = Scope(tenant="acme")


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


async def test_follow_shows_a_live_run_to_its_end(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.settings.policy = RulePolicy(tools={"issue_refund": "ask"})
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"}, id="lookup-1")),
        Reply.tool_calls(
            ToolCall("issue_refund", {"order_id": "42", "reason": "broken"}, id="refund-1")
        ),
        Reply.text("I refunded order 42."),
    )
    client = client_of(cli)
    async with cli.worker():
        run = await client.dispatch(support_spec(cli), "Refund order 42", scope=SCOPE)
        wid = run.workflow_id
        argv = ["follow", wid, *cli.args()]
        async with in_terminal(argv, terminal_env(cli)) as shown:
            # The live line: the turn, the time so far, tokens and cost, and what the Run
            # waits on with the command that resumes it.
            seen = await shown.read_until(r"out tokens +cost unknown +suspended\n")
            assert re.search(
                r"turn 2 +[\d.]+ (s|min) +\d+ in / \d+ out tokens +cost unknown +suspended\n"
                r" +waiting for approval of issue_refund\(.*\) +psych approve",
                seen,
            ), seen
            # The record's resume command is printed just after the live line took the
            # suspension (RunView.record, then RunView.command): wait for it.
            seen = await shown.read_until(re.escape(f"to resume: psych approve {wid}"))
            assert f"psych approve {wid} refund-1 --tenant acme" in seen
            assert "to resume: psych approve" in seen  # the record line's command stays too
            status, _, err = await psych(capsys, "approve", *cli.args(wid, "refund-1"))
            assert status == 0, err
            exit_status, raw, err = await shown.finish()
    assert (exit_status, err) == (0, ""), plain(raw)
    assert colours(raw)
    text = plain(raw)
    order = [
        f"Run {wid} on task queue '{cli.task_queue}'",
        "turn 1",
        '  tool call lookup_order -> ok: {"order_id": "42"',
        "  suspended: waiting for approval of issue_refund",
        "  resumed: approved",
        '  tool call issue_refund -> ok: {"refunded": true',
        "settled completed: answered",
    ]
    position = 0
    for expected in order:
        position = text.find(expected, position)
        assert position >= 0, f"{expected!r} missing or out of order in:\n{text}"
    assert re.search(r"status +completed", text[position:])
    assert re.search(r"answer +I refunded order 42\.", text[position:])


async def test_follow_of_a_settled_run_prints_its_records_and_exits_as_run_does(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.fake.enqueue(Reply.text("Hello."))
    async with cli.worker():
        status, run_out, err = await psych(capsys, *cli.run_args("--input", "hi"))
        assert status == 0, err
        found = RUN_LINE.search(run_out)
        assert found is not None
        wid = found.group(1)
        status, out, err = await psych(capsys, "follow", *cli.args(wid))
        assert (status, err) == (0, "")
        # The same lines as `psych run` printed (the header names the Run's task queue).
        assert out == run_out

        cli.fake.enqueue(Reply.error(400, message="bad request, scripted"))
        status, failed_out, _ = await psych(capsys, *cli.run_args("--input", "hi"))
        assert status == 1
        found = RUN_LINE.search(failed_out)
        assert found is not None
        status, out, _ = await psych(capsys, "follow", *cli.args(found.group(1)))
        assert status == 1
        assert "settled failed: model_error" in out
        status, out, err = await psych(capsys, "follow", *cli.args(wid, "--json"))
        assert status == 0 and '"status": "completed"' in out and "settled completed" in err

        # Piped, the real executable prints the same plain lines, not one escape.
        status, out, err = await piped(["follow", wid, *cli.args()], terminal_env(cli))
    assert (status, err) == (0, "")
    assert "\x1b" not in out and "settled completed: answered\n" in out


async def test_follow_refuses_another_tenants_run_in_one_line(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = await psych(capsys, "follow", *cli.args("psych-acme-nope", tenant="other"))
    assert status == 1
    assert err == "psych: Run psych-acme-nope does not belong to tenant 'other'\n"
