"""Tool-call hooks end to end: real Runs on the dev server, the fake model, psych's own
worker (``run_worker``), real code, HTTP and MCP tools, and command hooks as real
subprocesses.

Each tool kind gets one Run of three calls through the same plan: a pre hook denies the
first (the model reads why), rewrites the second's arguments (the tool sees the new ones,
the records keep both) and a post hook redacts its result, and an on_error hook replaces
the third's failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from psych_runtime.activities import Deny, HookCall, Hooks, ToolActivities
from psych_runtime.activities.a2a import A2aSettings
from psych_runtime.specs import AgentBuilder, AgentSpec, ExternalWait, Scope, SpecError
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers._settings import PROJECT_SETTINGS
from psych_runtime.workers._worker import activities_for, egress_for, run_worker
from psych_runtime.workflows import RunStatus, ToolCallFinished, ToolCallStarted
from tests.a2a.peer import serve_peer
from tests.mcp.fixture import McpTestServer, start_mcp_server

from ._http_server import CountingServer, Seen
from ._waiting import eventually, is_suspended, state_when
from .conftest import Harness

pytestmark = pytest.mark.e2e

Kind = Literal["code", "http", "mcp"]
SEEN_BY_CODE_TOOL: list[str] = []


def lookup(id: str) -> dict[str, str]:
    """Look a record up by its id.

    Args:
        id: The record's id.
    """
    SEEN_BY_CODE_TOOL.append(id)
    return {"id": id, "name": f"record {id}", "status": "active"}


def fail(reason: str) -> str:
    """Always fail, with the reason given.

    Args:
        reason: Why.
    """
    raise RuntimeError(reason)


def _respond(seen: Seen) -> tuple[int, str]:
    if seen.path.startswith("/fail"):
        return 503, "upstream down"
    record = seen.path.rsplit("/", 1)[-1]
    return 200, json.dumps({"id": record, "name": f"record {record}", "status": "active"})


@pytest.fixture
def records_api() -> Iterator[CountingServer]:
    server = CountingServer(respond=_respond).start()
    yield server
    server.stop()


def names(kind: Kind) -> tuple[str, str]:
    """The lookup and failing tools' model-facing names."""
    return ("tools__lookup", "tools__fail") if kind == "mcp" else ("lookup", "fail")


def agent(kind: Kind, harness: Harness, api: CountingServer, mcp: McpTestServer) -> AgentSpec:
    builder = AgentBuilder("hooked", registry=harness.registry).model("fake-model")
    if kind == "code":
        harness.registry.register(lookup)
        harness.registry.register(fail)
        builder = builder.tool(lookup).tool(fail)
    elif kind == "http":
        schema = {"type": "object", "properties": {"id": {"type": "string"}}}
        builder = builder.http_tool(
            "lookup",
            description="Look a record up.",
            url=api.url + "/records/{id}",
            method="GET",
            input_schema={**schema, "required": ["id"]},
        ).http_tool(
            "fail",
            description="Fails.",
            url=api.url + "/fail",
            method="GET",
            input_schema={"type": "object", "properties": {"reason": {"type": "string"}}},
        )
    else:
        builder = builder.mcp_server("tools", mcp.url, transport="http")
    return builder.build()


SEEN_BY_GUARD: list[tuple[str | None, str | None, dict[str, str]]] = []


def guard(call: HookCall) -> Deny | dict[str, Any] | None:
    SEEN_BY_GUARD.append((call.tenant, call.principal, dict(call.labels)))
    if call.arguments.get("id") == "blocked":
        return Deny("id blocked is on the deny list")
    if call.arguments.get("id") == "7":
        return {**call.arguments, "id": "42"}
    return None


async def redact(call: HookCall, result: str) -> str:
    return result.replace("active", "[redacted]")


def fallback(call: HookCall, error: str) -> str:
    return f"fallback answer (the tool failed: {error})"


@pytest.mark.parametrize("kind", ["code", "http", "mcp"])
async def test_pre_deny_rewrite_post_redact_and_on_error_replace(
    kind: Kind, harness: Harness, records_api: CountingServer, mcp_http_server: McpTestServer
) -> None:
    look, failing = names(kind)
    hooks = Hooks().pre(look, guard).post(look, redact).on_error(failing, fallback)
    harness.settings = dataclasses.replace(harness.settings, hooks=hooks)
    SEEN_BY_CODE_TOOL.clear()
    SEEN_BY_GUARD.clear()
    # Principal and labels are passed through to ports (SEMANTICS, Scope): hooks too.
    harness.scope = Scope(tenant=harness.scope.tenant, principal="ana", labels={"team": "ops"})
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall(look, {"id": "blocked"})),
        Reply.tool_calls(ToolCall(look, {"id": "7"})),
        Reply.tool_calls(ToolCall(failing, {"reason": "upstream down"})),
        Reply.text("done"),
    )
    spec = agent(kind, harness, records_api, mcp_http_server)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "look up", scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
    assert result.status is RunStatus.COMPLETED, result.reason

    denied, rewritten, replaced = report.tool_calls
    # 1. The pre hook denied: the tool never ran, and the model read the reason.
    assert denied.status == "denied"
    assert [(h.stage, h.effect, h.detail) for h in denied.hooks] == [
        ("pre", "denied", "id blocked is on the deny list")
    ]
    told = harness.fake.requests[1]["messages"][-1]
    assert told["role"] == "tool" and "id blocked is on the deny list" in told["content"]
    # 2. Rewritten: the tool saw id 42, the records keep the model's 7 and the 42 that ran;
    # the post hook redacted the result the model read.
    assert json.loads(rewritten.arguments) == {"id": "7"}
    assert rewritten.ran_arguments == {"id": "42"}
    assert [(h.stage, h.effect) for h in rewritten.hooks] == [
        ("pre", "rewrote_arguments"),
        ("post", "rewrote_result"),
    ]
    assert rewritten.status == "ok" and "record 42" in (rewritten.result or "")
    assert "[redacted]" in (rewritten.result or "") and "active" not in (rewritten.result or "")
    assert "active" not in harness.fake.requests[2]["messages"][-1]["content"]
    started = [r for r in records if isinstance(r, ToolCallStarted)]
    finished = [r for r in records if isinstance(r, ToolCallFinished)]
    assert json.loads(started[1].arguments) == {"id": "7"}
    assert finished[1].ran_arguments == {"id": "42"} and finished[0].status == "denied"
    # 3. The on_error hook replaced the failure with a result.
    assert replaced.status == "ok"
    assert (replaced.result or "").startswith("fallback answer (the tool failed:")
    assert "upstream down" in (replaced.result or "")
    assert [(h.stage, h.effect) for h in replaced.hooks] == [("on_error", "replaced_error")]
    if kind == "code":
        assert SEEN_BY_CODE_TOOL == ["42"]
    elif kind == "http":
        assert [s.path for s in records_api.seen] == ["/records/42", "/fail?reason=upstream+down"]
    else:
        assert mcp_http_server.calls("lookup") == 1 and mcp_http_server.calls("fail") == 1
    # A denial is not a failure: nothing counts towards the failure streak.
    assert report.totals is not None and report.totals.tool_calls == 3
    assert [(harness.scope.tenant, "ana", {"team": "ops"})] * 2 == SEEN_BY_GUARD


async def test_mcp_tools_found_mid_run_are_intercepted(
    harness: Harness, mcp_http_server: McpTestServer
) -> None:
    """A tool the server adds while the Run is under way is covered by a pattern hook."""
    mcp = mcp_http_server
    hooks = Hooks().pre("tools__f*", lambda call: Deny(f"{call.tool} is not allowed yet"))
    harness.settings = dataclasses.replace(harness.settings, hooks=hooks)
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("tools__slow", {"seconds": 2})),
        Reply.tool_calls(ToolCall("tools__fresh", {"text": "new"})),
        Reply.text("done"),
    )
    spec = agent("mcp", harness, CountingServer(), mcp)
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)

        async def slow_running() -> bool:
            return mcp.calls("slow") == 1

        await eventually(slow_running, within=30, what="the slow call to reach the server")
        assert mcp.add_tool("fresh") >= 1
        await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    assert [(c.tool, c.status) for c in report.tool_calls] == [
        ("tools__slow", "ok"),
        ("tools__fresh", "denied"),
    ]
    assert "tools__fresh is not allowed yet" in (report.tool_calls[1].result or "")
    assert mcp.calls("fresh") == 0


def _pid_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def test_command_hooks_from_a_settings_file(harness: Harness, tmp_path: Path) -> None:
    """Pre command hooks from the global settings file, as real subprocesses: a non-zero
    exit denies with its stderr, a JSON object rewrites, a timeout denies and leaves no
    process of its group behind."""
    harness.registry.register(lookup)
    pids = tmp_path / "pids"
    check = tmp_path / "check.py"
    check.write_text(
        "import json, os, subprocess, sys, time\n"
        "args = json.load(sys.stdin)\n"
        "if sys.argv[1] == 'frozen':\n"
        "    sys.stderr.write('record frozen is locked by compliance'); sys.exit(2)\n"
        "if sys.argv[1] == 'slow':\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"    open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "    time.sleep(60)\n"
        "print(json.dumps({**args, 'id': args['id'].upper()}))\n",
        encoding="utf-8",
    )
    settings = tmp_path / "settings.yaml"
    settings.write_text(
        "hooks:\n  pre:\n    lookup:\n"
        f"      command: [{json.dumps(sys.executable)}, {json.dumps(str(check))}, '{{id}}']\n"
        "      timeout_seconds: 1\n",
        encoding="utf-8",
    )
    harness.settings = dataclasses.replace(harness.settings, settings_file=settings)
    SEEN_BY_CODE_TOOL.clear()
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup", {"id": "frozen"})),
        Reply.tool_calls(ToolCall("lookup", {"id": "slow"})),
        Reply.tool_calls(ToolCall("lookup", {"id": "abc"})),
        Reply.text("done"),
    )
    spec = AgentBuilder("cmd", registry=harness.registry).model("fake-model").tool(lookup).build()
    async with harness.worker():
        run = await harness.client.dispatch(spec, "go", scope=harness.scope)
        await harness.client.result(run, scope=harness.scope)
        report = await harness.client.report(run, scope=harness.scope)
    frozen, slow, ok = report.tool_calls
    assert frozen.status == "denied" and "record frozen is locked by compliance" in (
        frozen.result or ""
    )
    assert slow.status == "denied" and "timed out after 1 s" in (slow.result or "")
    assert ok.status == "ok" and ok.ran_arguments == {"id": "ABC"}
    assert SEEN_BY_CODE_TOOL == ["ABC"]
    parent, grandchild = (int(p) for p in pids.read_text().split())
    deadline = time.monotonic() + 2.0
    while not (_pid_gone(parent) and _pid_gone(grandchild)) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    assert _pid_gone(parent) and _pid_gone(grandchild)


async def test_a_shell_string_and_an_untrusted_module_stop_the_worker(
    harness: Harness, tmp_path: Path
) -> None:
    shell = tmp_path / "shell.yaml"
    shell.write_text("hooks: {pre: {'*': {command: 'check-order | tee /tmp/log'}}}\n")
    with pytest.raises(SpecError, match="a shell string is refused"):
        async with run_worker(
            harness.env.client, dataclasses.replace(harness.settings, settings_file=shell)
        ):
            pass
    untrusted = tmp_path / "untrusted.yaml"
    untrusted.write_text(
        "trusted_modules: [acme]\nhooks: {post: {'*': tests.workers._hook_module:shout}}\n"
    )
    with pytest.raises(
        PermissionError, match=r"module 'tests\.workers\._hook_module' is not trusted"
    ):
        async with run_worker(
            harness.env.client, dataclasses.replace(harness.settings, settings_file=untrusted)
        ):
            pass


async def test_an_untrusted_project_file_is_not_loaded_and_a_trusted_one_is(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    (project / PROJECT_SETTINGS).parent.mkdir(parents=True)
    (project / PROJECT_SETTINGS).write_text(
        "hooks: {pre: {lookup: {command: [/bin/sh, -c, 'echo project says no >&2; exit 1']}}}\n"
    )
    monkeypatch.chdir(project)
    harness.registry.register(lookup)
    spec = AgentBuilder("proj", registry=harness.registry).model("fake-model").tool(lookup).build()
    statuses = []
    for trust in (False, True):
        harness.settings = dataclasses.replace(
            harness.settings,
            settings_file=tmp_path / "empty.yaml",
            trust_project_settings=trust,
        )
        (tmp_path / "empty.yaml").write_text("{}\n")
        harness.fake.enqueue(Reply.tool_calls(ToolCall("lookup", {"id": "1"})), Reply.text("ok"))
        async with harness.worker():
            run = await harness.client.dispatch(spec, "go", scope=harness.scope)
            await harness.client.result(run, scope=harness.scope)
            (call,) = (await harness.client.report(run, scope=harness.scope)).tool_calls
        statuses.append((call.status, call.result))
    assert statuses[0][0] == "ok"
    assert statuses[1] == (
        "denied",
        'A pre-call hook (command:["/bin/sh", "-c", "echo project says no >&2; exit 1"]) '
        "denied this call: project says no",
    )


async def test_building_the_worker_twice_gives_one_chain(harness: Harness, tmp_path: Path) -> None:
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(
        "trusted_modules: [tests.workers]\n"
        "hooks: {pre: {'*': tests.workers._hook_module:deny_everything},"
        " post: {'*': [{command: [/bin/cat]}]}}\n"
    )
    settings = dataclasses.replace(
        harness.settings, hooks=Hooks().post("lookup", redact), settings_file=settings_file
    )
    chains = []
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(2):
            egress = egress_for(settings)
            stack.push_async_callback(egress.aclose)
            built = activities_for(settings, egress)
            owners = {getattr(a, "__self__", None) for a in built}
            (tools,) = [o for o in owners if isinstance(o, ToolActivities)]
            chains.append(tools.hooks)
    first, second = chains
    assert first == second
    assert [h.name for h in first.entries] == [
        f"{__name__}:redact",
        "tests.workers._hook_module:deny_everything",
        'command:["/bin/cat"]',
    ]
    assert settings.hooks == Hooks().post("lookup", redact) and len(settings.hooks) == 1


def report_text() -> str:
    """A long result (stored whole, shown as a handle and a preview)."""
    return "".join(f"line {n:03d}: card 4111111111111111\n" for n in range(40))


async def test_built_ins_that_run_activities_are_intercepted(
    harness: Harness, tmp_path: Path
) -> None:
    """``read_tool_output`` (its arguments rewritten, its slice redacted) and
    ``search_mcp_tools`` (its query rewritten) go through the same plan."""
    harness.registry.register(report_text)

    def longer_reads(call: HookCall) -> dict[str, Any]:
        return {**call.arguments, "length": 64}

    def hide_cards(call: HookCall, result: str) -> str:
        return result.replace("4111111111111111", "****")

    def better_query(call: HookCall) -> dict[str, Any]:
        return {"query": "filler_007"}

    hooks = (
        Hooks()
        .pre("read_tool_output", longer_reads)
        .post("read_tool_output", hide_cards)
        .pre("search_mcp_tools", better_query)
    )
    harness.settings = dataclasses.replace(harness.settings, hooks=hooks)
    filler = start_mcp_server("streamable-http", filler=20)
    try:
        spec = (
            AgentBuilder("builtins", registry=harness.registry)
            .model("fake-model")
            .tool(report_text)
            .mcp_server("tools", filler.url, transport="http")
            .limits(large_result_bytes=256)
            .build()
        )
        async with harness.worker():
            harness.fake.enqueue(Reply.tool_calls(ToolCall("report_text", {})))
            run = await harness.client.dispatch(spec, "go", scope=harness.scope)

            async def first_answered() -> bool:
                return len(harness.fake.requests) >= 2

            await eventually(first_answered, within=30, what="the first tool result")
            handle = json.dumps(harness.fake.requests[1]["messages"][-1]["content"])
            ref = handle[handle.index("sha256:") : handle.index("sha256:") + 71]
            harness.fake.enqueue(
                Reply.tool_calls(
                    ToolCall("read_tool_output", {"handle": ref, "offset": 0, "length": 8})
                ),
                Reply.tool_calls(ToolCall("search_mcp_tools", {"query": "nothing like it"})),
                Reply.text("done"),
            )
            await harness.client.result(run, scope=harness.scope)
            report = await harness.client.report(run, scope=harness.scope)
    finally:
        filler.stop()
    _, read, search = report.tool_calls
    assert read.status == "ok" and read.ran_arguments == {"handle": ref, "offset": 0, "length": 64}
    assert "characters 0-64" in (read.result or "") and "****" in (read.result or "")
    assert "4111111111111111" not in (read.result or "")
    assert search.status == "ok" and search.ran_arguments == {"query": "filler_007"}
    assert "tools__filler_007" in (search.result or "")


async def test_post_hooks_on_a_waited_peer_task_see_the_arguments_that_were_sent(
    harness: Harness,
) -> None:
    """An A2A call whose peer works past the hold: the answer is read later by
    ``psych.a2a.poll``, whose post hooks see the arguments a pre hook rewrote (what the
    peer was sent), not the model's."""
    seen: list[dict[str, Any]] = []

    def slower(call: HookCall) -> dict[str, Any]:
        return {**call.arguments, "message": "slow:2"}

    def note(call: HookCall, result: str) -> str:
        seen.append(dict(call.arguments))
        return f"{result} (sent: {call.arguments['message']})"

    harness.settings = dataclasses.replace(
        harness.settings,
        a2a=A2aSettings(hold_seconds=0),
        hooks=Hooks().pre("travel__book", slower).post("travel__book", note),
    )
    async with serve_peer(("book",)) as peer:
        spec = AgentBuilder("waited").model("fake-model").a2a_peer("travel", peer.url).build()
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall("travel__book", {"message": "slow:1"})), Reply.text("ok")
        )
        async with harness.worker():
            run = await harness.client.dispatch(spec, "Book it", scope=harness.scope)
            result = await asyncio.wait_for(harness.client.result(run, scope=harness.scope), 90)
            report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert peer.texts() == ["slow:2"]
    assert seen == [{"message": "slow:2"}]
    (call,) = report.tool_calls
    assert "done slowly (sent: slow:2)" in (call.result or "")


def request_payment(order_id: str) -> ExternalWait:
    """Ask the payment provider to charge an order; it calls back when done.

    Args:
        order_id: The order.
    """
    return ExternalWait(token=f"pay-{order_id}", message="waiting for the payment webhook")


async def test_a_call_completed_through_a_wait_records_what_its_hooks_did(
    harness: Harness,
) -> None:
    """A pre hook rewrote the call's arguments, and the tool returned an external wait:
    the call's record, written when the wait is completed, keeps the arguments it ran with
    and the hook's effect. Before, that record had neither."""

    def charge_43(call: HookCall) -> dict[str, Any]:
        return {**call.arguments, "order_id": "43"}

    harness.registry.register(request_payment)
    harness.settings = dataclasses.replace(
        harness.settings, hooks=Hooks().pre("request_payment", charge_43)
    )
    spec = (
        AgentBuilder("payer", registry=harness.registry)
        .model("fake-model")
        .tool("request_payment")
        .build()
    )
    harness.fake.enqueue(
        Reply.tool_calls(ToolCall("request_payment", {"order_id": "42"})), Reply.text("Paid.")
    )
    async with harness.worker():
        run = await harness.client.dispatch(spec, "charge 42", scope=harness.scope)
        state = await state_when(
            harness.client, run, harness.scope, is_suspended, what="the Run to suspend"
        )
        assert state.pending[0].id == "pay-43"
        await harness.client.complete(run, "pay-43", {"paid": True}, scope=harness.scope)
        result = await harness.client.result(run, scope=harness.scope)
        records = (await harness.client.records(run, scope=harness.scope)).records
        report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    (finished,) = [r for r in records if isinstance(r, ToolCallFinished)]
    assert finished.status == "ok" and json.loads(finished.content) == {"paid": True}
    assert finished.ran_arguments == {"order_id": "43"}
    assert [(h.stage, h.effect) for h in finished.hooks] == [("pre", "rewrote_arguments")]
    assert report.tool_calls[0].ran_arguments == {"order_id": "43"}


class _VaultDown:
    """A SecretResolver whose store fails (not ``NotFound``) once it is armed."""

    def __init__(self) -> None:
        self.armed = False

    async def resolve(self, scope: Scope, name: str) -> str:
        if self.armed:
            self.armed = False
            raise RuntimeError("vault is down")
        return "s3cret"


@pytest.mark.parametrize("kind", ["http", "mcp", "a2a"])
async def test_an_unexpected_exception_is_an_error_the_on_error_hooks_see(
    kind: Literal["http", "mcp", "a2a"],
    harness: Harness,
    records_api: CountingServer,
    mcp_http_server: McpTestServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A SecretResolver raising something other than NotFound during the call (armed by a
    pre hook, so discovery and the cards are not affected): the model reads an error
    naming it, after the on_error hooks ran, and the worker logs its traceback."""
    vault = _VaultDown()

    def arm(call: HookCall) -> None:
        vault.armed = True

    tool = {"http": "lookup", "mcp": "tools__lookup", "a2a": "helper__echo"}[kind]
    harness.settings = dataclasses.replace(
        harness.settings, secrets=vault, hooks=Hooks().pre(tool, arm).on_error(tool, fallback)
    )
    builder = AgentBuilder(f"vault_{kind}").model("fake-model")
    async with contextlib.AsyncExitStack() as stack:
        if kind == "http":
            builder = builder.http_tool(
                "lookup",
                description="Look a record up.",
                url=records_api.url + "/records/{id}",
                method="GET",
                input_schema={"type": "object", "properties": {"id": {"type": "string"}}},
                credential="orders-key",
            )
        elif kind == "mcp":
            builder = builder.mcp_server(
                "tools", mcp_http_server.url, transport="http", credential="orders-key"
            )
        else:
            peer = await stack.enter_async_context(serve_peer(("echo",)))
            builder = builder.a2a_peer("helper", peer.url, credential="orders-key")
        harness.fake.enqueue(
            Reply.tool_calls(ToolCall(tool, {"id": "7", "message": "hi"})), Reply.text("done")
        )
        with caplog.at_level(logging.WARNING):
            async with harness.worker():
                run = await harness.client.dispatch(builder.build(), "go", scope=harness.scope)
                result = await harness.client.result(run, scope=harness.scope)
                report = await harness.client.report(run, scope=harness.scope)
    assert result.status is RunStatus.COMPLETED, result.reason
    (call,) = report.tool_calls
    assert call.status == "ok"
    assert call.result == f"fallback answer (the tool failed: {tool}: RuntimeError: vault is down)"
    assert [(h.stage, h.effect) for h in call.hooks] == [("on_error", "replaced_error")]
    told = harness.fake.requests[1]["messages"][-1]["content"]
    assert "RuntimeError: vault is down" in told
    # The bug still surfaces: the worker logs it with its traceback.
    logged = [r.getMessage() for r in caplog.records if f"tool {tool} failed" in r.getMessage()]
    assert len(logged) == 1 and "Traceback" in logged[0] and "vault is down" in logged[0]
    assert records_api.seen == []
