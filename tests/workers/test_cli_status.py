"""``psych status`` and ``report`` never hang when no worker polls the Run's queue: they say
so within seconds and print what Temporal itself knows; a waiting Run's current details
(what the Temporal UI shows) say what it waits for. The real ``psych`` executable in
subprocesses, against the session dev server.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Interceptor, OutboundInterceptor, QueryWorkflowInput

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers._loading import load_spec_file
from psych_runtime.workers.cli import _runs
from psych_runtime.workers.cli._parser import build_parser
from psych_runtime.workers.cli._run_facts import QUERY_TIMEOUT
from psych_runtime.workflows import PsychClient, RunHandle
from tests.forking import aio

from ..e2e._waiting import is_waiting, only_pending, state_when
from .conftest import Cli, registry
from .test_cli_runs import script_refund

PSYCH = str(Path(sys.executable).parent / "psych")


async def psych_process(*argv: str) -> tuple[int, str, str, float]:
    """Run the ``psych`` executable (forked: ``tests.forking``); (status, stdout, stderr,
    seconds it took)."""
    started = time.monotonic()
    child = await aio.create_subprocess_exec(PSYCH, *argv, stdout=aio.PIPE, stderr=aio.PIPE)
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode(), time.monotonic() - started


async def startup_seconds(cli: Cli, workflow_id: str) -> float:
    """How long ``psych status`` takes here now before its first RPC: starting (forked, its
    imports done; seconds on a loaded 2-core machine all the same) and connecting, which is
    not what is bounded. Asked as another tenant, the command is refused right there.
    (``psych --help`` imports no command, so it does not measure this.)"""
    status, _, err, seconds = await psych_process(
        "status", *cli.args(workflow_id, tenant="someone_else")
    )
    assert status == 1, err
    assert "does not belong to tenant 'someone_else'" in err, err
    return seconds


async def dispatch_unpolled(cli: Cli) -> RunHandle:
    """A Run started on a task queue no worker has ever polled."""
    client = PsychClient(
        cli.env.client,
        store=FileVersionStore(cli.home / "versions"),
        task_queue=f"nobody-{uuid.uuid4().hex[:12]}",
    )
    spec = AgentBuilder("support").instructions("Help.").model("gpt-4o-mini").build()
    return await client.dispatch(spec, "Hello", scope=Scope(tenant="acme"))


async def test_status_with_no_worker_sends_no_query_and_says_what_temporal_knows(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = await dispatch_unpolled(cli)
    argv = ("status", *cli.args(run.workflow_id))
    status, out, err, queries = await psych_in_process(monkeypatch, capsys, *argv)
    assert status == 0, err
    # Never waits on a query nobody would answer: none is sent (timed against the
    # command's start-up before, "< 5 s", which a loaded machine stretched past).
    assert queries == []
    assert "cannot answer: no worker polls task queue 'nobody-" in err
    lines = dict(line.split(":", 1) for line in out.splitlines())
    assert lines["run"].strip() == run.workflow_id
    assert lines["status"].strip() == "running"
    assert lines["temporal"].strip() == "RUNNING (AgentRun)"
    assert lines["agent"].strip() == f"support ({run.version_hash})"
    assert lines["task queue"].strip().endswith("(no worker polls it)")
    assert lines["started"].strip().startswith("20")


class _QueriesSeen(Interceptor):
    """A client interceptor that keeps the name of each query the client sends."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _QueryOutbound(next, self.queries)


class _QueryOutbound(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, queries: list[str]) -> None:
        super().__init__(next)
        self._queries = queries

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self._queries.append(input.query)
        return await super().query_workflow(input)


async def psych_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, str, str, list[str]]:
    """Run the ``psych`` command ``argv`` in this process (a thread: it runs its own event
    loop), its Temporal client's queries kept; (status, stdout, stderr, queries sent)."""
    seen = _QueriesSeen()
    connect = functools.partial(_runs.temporal_client, interceptors=[seen])
    monkeypatch.setattr(_runs, "temporal_client", connect)
    args = build_parser().parse_args(argv)
    capsys.readouterr()
    status = await asyncio.wait_for(asyncio.to_thread(args.func, args), 60)
    out, err = capsys.readouterr()
    return status, out, err, seen.queries


async def test_status_json_with_no_worker_is_the_facts(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = await dispatch_unpolled(cli)
    argv = ("status", *cli.args(run.workflow_id), "--json")
    status, out, err, queries = await psych_in_process(monkeypatch, capsys, *argv)
    assert status == 0, err
    # Never waits on a query nobody would answer (until its deadline): none is sent. (Timed
    # against the command's start-up before, which a loaded machine stretched past 5 s.)
    assert queries == []
    assert "cannot answer: no worker polls task queue 'nobody-" in err
    facts = json.loads(out)
    assert facts["worker_polling"] is False
    assert facts["status"] == "running"
    assert facts["execution_status"] == "RUNNING"
    assert facts["closed_at"] is None


async def test_report_with_no_worker_sends_no_query_and_exits_1_with_the_facts(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = await dispatch_unpolled(cli)
    argv = ("report", *cli.args(run.workflow_id))
    status, out, err, queries = await psych_in_process(monkeypatch, capsys, *argv)
    assert status == 1
    assert queries == []
    assert "cannot answer: no worker polls task queue" in err
    assert "status:       running" in out


async def test_status_of_a_run_whose_worker_stopped_falls_back_after_the_query_timeout(
    cli: Cli,
) -> None:
    # The server lists a stopped worker's poller for a while, so the query is tried and
    # bounded by QUERY_TIMEOUT rather than the client's default (a minute and more).
    script_refund(cli)
    client = PsychClient(
        cli.env.client,
        store=FileVersionStore(cli.home / "versions"),
        task_queue=cli.task_queue,
        registry=registry(),
    )
    scope = Scope(tenant="acme")
    async with cli.worker():
        run = await client.dispatch(load_spec_file(cli.spec_file), "Refund order 42", scope=scope)
        await client.result(run, scope=scope)
    startup = await startup_seconds(cli, run.workflow_id)
    status, out, err, seconds = await psych_process("status", *cli.args(run.workflow_id))
    assert status == 0, err
    assert seconds - startup < QUERY_TIMEOUT.total_seconds() + 5
    assert "answered within" in err or "no worker polls" in err
    assert "status:       completed" in out
    assert "closed:       20" in out


@pytest.mark.parametrize("shown", [(), ("--transcript",)], ids=["report", "transcript"])
async def test_report_of_a_run_whose_worker_stopped_falls_back_after_the_query_timeout(
    cli: Cli, shown: tuple[str, ...]
) -> None:
    # --transcript waited ~31 s (the client's default deadline) where the report took ~4.
    script_refund(cli)
    client = PsychClient(
        cli.env.client,
        store=FileVersionStore(cli.home / "versions"),
        task_queue=cli.task_queue,
        registry=registry(),
    )
    scope = Scope(tenant="acme")
    async with cli.worker():
        run = await client.dispatch(load_spec_file(cli.spec_file), "Refund order 42", scope=scope)
        await client.result(run, scope=scope)
    startup = await startup_seconds(cli, run.workflow_id)
    status, out, err, seconds = await psych_process("report", *cli.args(run.workflow_id), *shown)
    assert status == 1, err
    assert seconds - startup < QUERY_TIMEOUT.total_seconds() + 5
    assert "answered within" in err or "no worker polls" in err
    assert "status:       completed" in out


async def test_a_suspended_runs_current_details_say_what_it_waits_for(
    cli: Cli, tmp_path: Path
) -> None:
    cli.settings.policy = RulePolicy(tools={"issue_refund": "ask"})
    script_refund(cli)
    client = PsychClient(
        cli.env.client,
        store=FileVersionStore(tmp_path / "versions"),
        task_queue=cli.task_queue,
        registry=registry(),
    )
    scope = Scope(tenant="acme")
    async with cli.worker():
        run = await client.dispatch(load_spec_file(cli.spec_file), "Refund order 42", scope=scope)
        handle = cli.env.client.get_workflow_handle(run.workflow_id)
        state = await state_when(client, run, scope, is_waiting, what="the approval", within=30)
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        pending = only_pending(state)
        details = metadata.current_details
        assert details.startswith(
            'waiting for approval of issue_refund({"order_id": "42", "reason": "broken"}) until '
        )
        assert details.endswith(f"(approval {pending.id})")
        assert pending.expires_at.isoformat(timespec="seconds") in details
        # `temporal workflow metadata` (the CLI's face of that query) shows them too.
        child = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).parent / "temporal"),
            "workflow",
            "metadata",
            "--address",
            cli.address,
            "--workflow-id",
            run.workflow_id,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(child.communicate(), 30)
        assert child.returncode == 0, err.decode()
        described = out.decode()
        await client.approve(run, pending.id, scope=Scope(tenant="acme", principal="ops"))
        await client.result(run, scope=scope)
        after = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "waiting for approval of issue_refund" in described, described
    assert after.current_details == "completed"


async def test_current_details_escape_what_the_model_wrote(cli: Cli, tmp_path: Path) -> None:
    """A pending call's arguments reach an operator's screen through the Temporal UI: a
    bidirectional override, DEL and a C1 CSI in them are shown as their escapes."""
    cli.settings.policy = RulePolicy(tools={"issue_refund": "ask"})
    written = '{"order_id": "42", "reason": "\u202ebroken\u2066 \x9b2J\x7f"}'
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("issue_refund", written)), Reply.text("I refunded it.")
    )
    client = PsychClient(
        cli.env.client,
        store=FileVersionStore(tmp_path / "versions"),
        task_queue=cli.task_queue,
        registry=registry(),
    )
    scope = Scope(tenant="acme")
    async with cli.worker():
        run = await client.dispatch(load_spec_file(cli.spec_file), "Refund order 42", scope=scope)
        handle = cli.env.client.get_workflow_handle(run.workflow_id)
        state = await state_when(client, run, scope, is_waiting, what="the approval", within=30)
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        assert only_pending(state).arguments == written  # the data keeps the exact string
        await client.deny(run, only_pending(state).id, scope=Scope(tenant="acme", principal="ops"))
        await client.result(run, scope=scope)
    assert metadata.current_details.startswith(
        'waiting for approval of issue_refund({"order_id": "42", '
        '"reason": "\\u202ebroken\\u2066 \\x9b2J\\x7f"}) until '
    ), metadata.current_details


async def test_a_settled_run_with_a_worker_answers_from_its_state(cli: Cli) -> None:
    cli.fake.enqueue(Reply.tool_calls(ToolCall("lookup_order", {"order_id": "42"})))
    cli.fake.enqueue(Reply.text("Order 42 is delivered."))
    client = PsychClient(
        cli.env.client,
        store=FileVersionStore(cli.home / "versions"),
        task_queue=cli.task_queue,
        registry=registry(),
    )
    scope = Scope(tenant="acme")
    async with cli.worker():
        run = await client.dispatch(load_spec_file(cli.spec_file), "About order 42", scope=scope)
        await client.result(run, scope=scope)
        status, out, err, _ = await psych_process("status", *cli.args(run.workflow_id))
    assert status == 0, err
    assert "cannot answer" not in err
    assert "Order 42 is delivered." in out


@pytest.mark.parametrize("command", ["status", "report", "abort"])
async def test_a_namespace_the_server_lacks_is_named_not_a_missing_run(
    cli: Cli, command: str
) -> None:
    # It said "no Run psych-acme-..." though the Run was never looked for.
    run = await dispatch_unpolled(cli)
    status, _, err, _ = await psych_process(
        command, *cli.args(run.workflow_id), "--namespace", "no-such-namespace"
    )
    assert status == 1
    assert err == (
        f"psych: namespace 'no-such-namespace' (--namespace) does not exist on the Temporal "
        f"server at {cli.address} (`temporal operator namespace list` lists them)\n"
    )
