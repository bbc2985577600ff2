"""``psych run``, ``status``, ``report`` and ``list`` against the session dev server."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

import pytest

from psych_runtime.activities import FileVersionStore, PolicyDecision, ToolInfo
from psych_runtime.specs import Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workflows import PsychClient
from tests._ports import free_port

from .conftest import PAYMENTS_KEY, Cli, psych

RUN_LINE = re.compile(r"^Run (psych-acme-\w+) on task queue", re.MULTILINE)


def script_refund(cli: Cli) -> None:
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})),
        Reply.tool_calls(ToolCall("issue_refund", {"order_id": "42", "reason": "broken"})),
        Reply.text("I refunded order 42."),
    )


async def test_run_prints_the_live_records_then_the_report(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    script_refund(cli)
    async with cli.worker():
        status, out, err = await psych(capsys, *cli.run_args("--input", "Refund order 42"))
    assert status == 0, err
    found = RUN_LINE.search(out)
    assert found is not None, out
    lines = out[found.end() :].splitlines()
    expected_in_order = [
        "run admitted: agent support",
        "turn 1",
        "  model call gpt-4o-mini ...",
        "  model call gpt-4o-mini -> 1 tool call(s): lookup_order",
        '  tool call lookup_order({"order_id": "42"}) ...',
        '  tool call lookup_order -> ok: {"order_id": "42", "status": "delivered"',
        "turn 2",
        '  tool call issue_refund({"order_id": "42", "reason": "broken"}) ...',
        '  tool call issue_refund -> ok: {"refunded": true, "path": "/orders/42/refund"}',
        "turn 3",
        "  model call gpt-4o-mini -> text 'I refunded order 42.'",
        "settled completed: answered",
        "status:       completed",
        "reason:       answered",
        "answer:       I refunded order 42.",
        "model calls:  3 (0 failed)",
        "tool calls:   2 (2 ok)",
        "turns:        3",
        "cost:         unknown",
    ]
    position = 0
    for prefix in expected_in_order:
        position = next((i for i in range(position, len(lines)) if lines[i].startswith(prefix)), -1)
        assert position >= 0, f"{prefix!r} missing or out of order in:\n{out}"
    usage = next(line for line in lines if line.startswith("usage:"))
    assert re.fullmatch(r"usage: +\d+ input, \d+ output, 0 cache read, .*tokens", usage)
    assert cli.payments.count("POST", "/orders/42/refund") == 1
    assert cli.payments.seen[0].headers["authorization"] == f"Bearer {PAYMENTS_KEY}"


async def test_status_report_and_list(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    script_refund(cli)
    # Queries replay the Run on a worker, so status and report need one even once it settled.
    async with cli.worker():
        await status_report_and_list(cli, capsys)


async def status_report_and_list(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = await psych(capsys, *cli.run_args("--input", "Refund order 42"))
    assert status == 0
    found = RUN_LINE.search(out)
    assert found is not None
    workflow_id = found.group(1)

    status, out, err = await psych(capsys, "status", *cli.args(workflow_id))
    assert status == 0, err
    assert f"run:          {workflow_id}" in out
    assert "status:       completed" in out and "turn:         3" in out

    status, out, _ = await psych(capsys, "status", *cli.args(workflow_id, "--json"))
    assert json.loads(out)["totals"]["tool_calls"] == 2

    status, out, _ = await psych(capsys, "report", *cli.args(workflow_id, "--json"))
    assert status == 0
    report = json.loads(out)
    assert report["workflow_id"] == workflow_id and report["status"] == "completed"
    assert [(c["tool"], c["status"]) for c in report["tool_calls"]] == [
        ("lookup_order", "ok"),
        ("issue_refund", "ok"),
    ]
    assert report["totals"]["cost"] is None

    status, out, _ = await psych(capsys, "report", *cli.args(workflow_id))
    assert "answer:       I refunded order 42." in out

    # Listing reads the visibility store, which catches up with the Run shortly after.
    listing = ["list", *cli.args("--agent", "support", "--status", "completed")]
    for _ in range(40):
        status, out, _ = await psych(capsys, *listing)
        if workflow_id in out:
            break
        await asyncio.sleep(0.25)
    assert status == 0
    header, *rows = out.splitlines()
    assert header.split() == ["RUN", "ID", "AGENT", "STATUS", "STARTED"]
    row = next(r for r in rows if r.startswith(workflow_id))
    assert row.split()[1:3] == ["support", "completed"]

    status, out, err = await psych(capsys, "list", *cli.args("--status", "failed"))
    assert workflow_id not in out

    # Another tenant's Run is refused, in one line.
    status, out, err = await psych(capsys, "status", *cli.args(workflow_id, tenant="other"))
    assert status == 1
    assert err == f"psych: Run {workflow_id} does not belong to tenant 'other'\n"


async def test_run_json_and_idempotency_key(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    script_refund(cli)
    # Keys are per tenant on the whole (session) server: a fresh one per test.
    key = f"key-{uuid.uuid4().hex}"
    argv = cli.run_args("--input", "Refund order 42", "--idempotency-key", key, "--json")
    async with cli.worker():
        status, out, err = await psych(capsys, *argv)
        assert status == 0
        first = json.loads(out)  # the whole of stdout is the report
        assert "settled completed" in err
        # The same key reaches the same, settled, Run: no model call is made.
        status, out, _ = await psych(capsys, *argv)
    assert status == 0
    assert json.loads(out)["workflow_id"] == first["workflow_id"]
    assert len(cli.fake.requests) == 3


async def test_run_starts_the_run_with_its_principal_and_labels(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    # Until 12-06 `psych run` took only --tenant: its Runs' Scope had no principal and no
    # labels, though every other entry point takes them.
    seen: list[Scope] = []

    class Recording:
        def fixed(self, tool: ToolInfo) -> PolicyDecision | None:
            return None  # ask decide, with the call's Scope, for every call

        async def decide(
            self, scope: Scope, tool: ToolInfo, arguments: Mapping[str, Any]
        ) -> PolicyDecision:
            seen.append(scope)
            return PolicyDecision(decision="allow", reason="recorded")

    cli.settings.policy = Recording()
    script_refund(cli)
    labels = ("--label", "team=billing", "--label", "ticket=T-1=2")
    argv = cli.run_args("--input", "Refund order 42", "--principal", "ada", *labels, "--json")
    async with cli.worker():
        status, out, err = await psych(capsys, *argv)
        assert status == 0, err
        workflow_id = json.loads(out)["workflow_id"]
        client = PsychClient(cli.env.client, store=FileVersionStore(cli.home / "versions"))
        page = await client.records(workflow_id, scope=Scope(tenant="acme"))
    expected = Scope(tenant="acme", principal="ada", labels={"team": "billing", "ticket": "T-1=2"})
    assert page.records and all(record.scope == expected for record in page.records)
    assert seen and all(scope == expected for scope in seen)  # and the Policy port's calls

    with pytest.raises(SystemExit) as refused:
        await psych(capsys, *cli.run_args("--input", "hi", "--label", "team"))
    assert refused.value.code == 2
    assert "'team' is not KEY=VALUE" in capsys.readouterr().err
    twice = cli.run_args("--input", "hi", "--label", "a=1", "--label", "a=2")
    status, _, err = await psych(capsys, *twice)
    assert status == 1 and "label 'a' is given twice" in err
    long = cli.run_args("--input", "hi", "--label", "a=" + "v" * 257)
    status, _, err = await psych(capsys, *long)
    assert status == 1
    assert "invalid --label: label 'a': its value is 257 characters, at most 256" in err


async def test_run_exits_1_when_the_run_does_not_complete(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.fake.enqueue(Reply.error(400, message="bad request, scripted"))
    async with cli.worker():
        status, out, _ = await psych(capsys, *cli.run_args("--input", "hi"))
    assert status == 1, out
    failed = "  model call gpt-4o-mini failed (permanent, HTTP 400): model gpt-4o-mini: HTTP 400"
    assert f"{failed} Bad Request: bad request, scripted\n" in out, out
    assert "settled failed: model_error: " in out
    assert "status:       failed" in out
    assert "model calls:  1 (1 failed)" in out


async def test_run_refuses_an_invalid_spec_before_dispatching(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = await psych(capsys, *cli.run_args("--input", "hi", tools=False))
    assert status == 1
    assert "code tool 'lookup_order' is not registered" in err
    assert out == ""


@pytest.mark.parametrize(
    ("argv", "tenant", "message"),
    [
        (["status", "psych-acme-nope"], "acme", "psych: no Run psych-acme-nope\n"),
        (["status", "not-a-run"], "acme", "psych: 'not-a-run' is not a psych Run id"),
        (["list"], "a-b", "psych: invalid tenant 'a-b'"),
    ],
)
async def test_errors_are_one_line(
    cli: Cli, capsys: pytest.CaptureFixture[str], argv: list[str], tenant: str, message: str
) -> None:
    status, _, err = await psych(capsys, *cli.args(*argv, tenant=tenant))
    assert status == 1
    assert err.startswith(message) and err.count("\n") == 1


async def test_unreachable_server_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    status, _, err = await psych(capsys, "list", "--address", f"127.0.0.1:{port}")
    assert status == 1
    assert err == (
        f"psych: cannot connect to Temporal at 127.0.0.1:{port}: Connection refused "
        "(is a server running? `psych dev` starts one)\n"
    )
