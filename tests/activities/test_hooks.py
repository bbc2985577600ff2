"""The interception plan and command hooks, without a worker: patterns, the chain, each
stage's rules, and command hooks over real subprocesses (deadline, process group, exit)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from psych_runtime.activities import CommandHook, Deny, HookCall, Hooks, blob_ref
from psych_runtime.activities.contract import Latency, ToolOutcome
from psych_runtime.activities.hooks import check_pattern
from psych_runtime.activities.hooks._calls import pattern_matches
from psych_runtime.activities.hooks._command import REAP_SECONDS, run_command
from psych_runtime.specs import Scope

PY = sys.executable


def call(tool: str = "send_email", **arguments: Any) -> HookCall:
    return HookCall(tool=tool, kind="code", arguments=arguments, call_id="c1", run_id="r1")


def py(code: str, timeout: float = 10.0) -> CommandHook:
    return CommandHook.of([PY, "-c", code], timeout_seconds=timeout)


@pytest.mark.parametrize(
    ("pattern", "tool", "expected"),
    [
        ("send_email", "send_email", True),
        ("send_email", "send_emails", False),
        ("send_*", "send_email", True),
        ("send_*", "resend", False),
        ("*", "anything", True),
        ("tools__*", "tools__lookup", True),
    ],
)
def test_pattern_matching(pattern: str, tool: str, expected: bool) -> None:
    assert pattern_matches(check_pattern(pattern), tool) is expected


@pytest.mark.parametrize("pattern", ["", "a*b", "**", "*x"])
def test_bad_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="invalid tool pattern"):
        check_pattern(pattern)
    with pytest.raises(ValueError, match="invalid tool pattern"):
        Hooks().pre(pattern, lambda c: None)


def deny_all(c: HookCall) -> Deny:
    return Deny("no")


def shout(c: HookCall, text: str) -> str:
    return text.upper()


def test_the_same_hook_declared_twice_is_one_entry_and_chains_are_immutable() -> None:
    empty = Hooks()
    once = empty.pre("send_*", deny_all)
    twice = once.pre("send_*", deny_all).merged(once)
    assert len(empty) == 0 and len(once) == 1
    assert twice == once and len(twice) == 1
    command = (
        Hooks().post("*", CommandHook.of(["/bin/true"])).post("*", CommandHook.of(["/bin/true"]))
    )
    assert len(command) == 1
    # Another pattern or stage is another hook.
    assert len(once.pre("*", deny_all).on_error("send_*", shout)) == 3
    assert [h.name for h in once.entries] == [f"{__name__}:deny_all"]


@dataclasses.dataclass
class OnlyDomain:
    """A hook holding its configuration: a dataclass instance, so unhashable."""

    domain: str

    def __call__(self, c: HookCall) -> Deny | None:
        return None if str(c.arguments.get("to", "")).endswith(self.domain) else Deny("outside")


async def test_a_hook_may_be_an_unhashable_callable() -> None:
    """A configured hook written as a dataclass with ``__call__`` is unhashable; declaring
    it raised ``TypeError: unhashable type`` from inside the chain's bookkeeping. Equal
    ones are still one hook, and chains holding them compare and hash."""
    hooks = Hooks().pre("send_*", OnlyDomain("@acme.com")).pre("send_*", OnlyDomain("@acme.com"))
    assert len(hooks) == 1
    assert hooks == Hooks().pre("send_*", OnlyDomain("@acme.com"))
    assert hash(hooks) == hash(Hooks().pre("send_*", OnlyDomain("@acme.com")))
    assert len(hooks.pre("send_*", OnlyDomain("@globex.com"))) == 2
    assert await hooks.plan(call(to="bob@acme.com")).before() is None
    denied = await hooks.plan(call(to="eve@evil.example")).before()
    assert denied is not None and denied.endswith("denied this call: outside")


def test_a_stage_runs_in_declaration_order_whatever_pattern_matched() -> None:
    def first(c: HookCall) -> None:
        return None

    def second(c: HookCall) -> None:
        return None

    hooks = Hooks().pre("send_*", first).pre("*", second).pre("other", deny_all)
    assert [h.action for h in hooks.for_tool("pre", "send_email")] == [first, second]
    assert hooks.plan(call("nothing_matches_send")).__class__.__name__ == "Interception"
    assert Hooks().pre("x", deny_all).plan(call("y")).__class__.__name__ == "_NoInterception"


async def test_pre_hooks_rewrite_in_turn_and_a_deny_stops_the_chain() -> None:
    seen: list[dict[str, Any]] = []

    def lower(c: HookCall) -> dict[str, Any]:
        seen.append(dict(c.arguments))
        return {**c.arguments, "to": str(c.arguments["to"]).lower()}

    async def domain(c: HookCall) -> Deny | None:
        seen.append(dict(c.arguments))
        return (
            Deny("outside acme.com") if not str(c.arguments["to"]).endswith("@acme.com") else None
        )

    plan = Hooks().pre("*", lower).pre("send_*", domain).plan(call(to="Bob@ACME.com"))
    assert await plan.before() is None
    assert plan.rewritten and plan.arguments == {"to": "bob@acme.com"}
    assert seen == [{"to": "Bob@ACME.com"}, {"to": "bob@acme.com"}]
    assert [(e.stage, e.effect) for e in plan.effects] == [("pre", "rewrote_arguments")]

    plan = Hooks().pre("*", lower).pre("send_*", domain).plan(call(to="eve@evil.com"))
    message = await plan.before()
    assert message is not None and "outside acme.com" in message
    assert plan.effects[-1].effect == "denied" and plan.effects[-1].detail == "outside acme.com"


async def test_a_failing_or_nonsensical_pre_hook_denies() -> None:
    def boom(c: HookCall) -> None:
        raise RuntimeError("checker down")

    def nonsense(c: HookCall) -> int:
        return 3

    for hook in (boom, nonsense):
        plan = Hooks().pre("*", hook).plan(call(to="a"))  # type: ignore[arg-type]
        message = await plan.before()
        assert message is not None and "the hook failed" in message


async def test_a_python_hook_past_its_deadline_denies(monkeypatch: pytest.MonkeyPatch) -> None:
    from psych_runtime.activities.hooks import _hooks

    monkeypatch.setattr(_hooks, "PYTHON_HOOK_SECONDS", 0.2)

    def slow(c: HookCall) -> None:
        time.sleep(1.0)

    async def slow_async(c: HookCall) -> None:
        await asyncio.sleep(5)

    for hook in (slow, slow_async):
        started = time.monotonic()
        message = await Hooks().pre("*", hook).plan(call(to="a")).before()
        assert message is not None and "did not answer within 0.2 s" in message
        assert time.monotonic() - started < 0.9


def test_a_placeholder_in_the_program_is_refused() -> None:
    with pytest.raises(ValueError, match="program cannot hold a placeholder"):
        CommandHook.of(["{cmd}", "--check"])


async def test_post_rewrites_and_on_error_replaces_or_lets_stand() -> None:
    def redact(c: HookCall, text: str) -> str:
        return text.replace("4111", "****")

    def broken(c: HookCall, text: str) -> str:
        raise ValueError("oops")

    def fallback(c: HookCall, error: str) -> str | None:
        return "cached: 42" if "timeout" in error else None

    hooks = Hooks().post("*", broken).post("*", redact).on_error("*", fallback)
    plan = hooks.plan(call())
    assert await plan.after("ok", "card 4111") == ("ok", "card ****")
    assert [e.effect for e in plan.effects] == ["failed", "rewrote_result"]
    plan = hooks.plan(call())
    assert await plan.after("error", "timeout after 3 s") == ("ok", "cached: 42")
    assert plan.effects[-1].effect == "replaced_error"
    assert plan.effects[-1].detail == "timeout after 3 s"
    plan = hooks.plan(call())
    assert await plan.after("error", "HTTP 500") == ("error", "HTTP 500")
    assert plan.effects == []
    # A wait or a denial is not a result: no post hook touches it.
    assert await hooks.plan(call()).after("wait", "card 4111") == ("wait", "card 4111")


# --- command hooks ------------------------------------------------------------------------


def test_a_shell_string_is_refused() -> None:
    with pytest.raises(TypeError, match="shell strings are refused"):
        CommandHook.of("check-order {order_id} | tee log")
    with pytest.raises(TypeError, match="shell strings are refused"):
        CommandHook("rm -rf /")  # type: ignore[arg-type]  # a str is a Sequence, not a tuple
    with pytest.raises(ValueError, match="non-empty"):
        CommandHook.of([])


async def test_command_pre_hook_gets_placeholders_and_stdin_and_rewrites() -> None:
    code = (
        "import json, sys; args = json.load(sys.stdin); "
        "print(json.dumps({**args, 'seen_argv': sys.argv[1], 'limit': 5}))"
    )
    hook = CommandHook.of([PY, "-c", code, "order={order_id}"])
    plan = Hooks().pre("lookup", hook).plan(call("lookup", order_id="A-7"))
    assert await plan.before() is None
    assert plan.arguments == {"order_id": "A-7", "seen_argv": "order=A-7", "limit": 5}


async def test_a_command_hook_is_told_which_call_it_runs_for() -> None:
    # A pre hook's stdin is the arguments alone: a hook on "*" could not tell the tools
    # apart (an audit); the call is named in its environment.
    code = (
        "import os, sys\n"
        "if os.environ['PSYCH_HOOK_TOOL'] == 'delete_user':\n"
        "    names = ('KIND', 'CALL_ID', 'RUN_ID')\n"
        "    said = ' '.join(os.environ['PSYCH_HOOK_' + name] for name in names)\n"
        "    sys.exit('no deletes: ' + said + ' ' + os.environ.get('PSYCH_HOOK_TENANT', '-'))\n"
    )
    hooks = Hooks().pre("*", py(code))
    assert await hooks.plan(call("lookup")).before() is None
    message = await hooks.plan(call("delete_user")).before()
    assert message is not None and message.endswith("no deletes: code c1 r1 -")


async def test_a_command_hook_is_told_whose_run_calls() -> None:
    # Principal and labels are passed through to ports (SEMANTICS, Scope): a hook deciding
    # by who asked, or by a label, had only the tenant.
    code = (
        "import os, sys\n"
        "said = [os.environ.get('PSYCH_HOOK_' + n, '-') for n in ('PRINCIPAL', 'LABELS')]\n"
        "sys.exit('told: ' + ' '.join(said))\n"
    )
    scope = Scope(tenant="acme", principal="ana", labels={"team": "ops"})
    told = HookCall.of("lookup", "code", {}, "c1", "r1", scope)
    assert (told.tenant, told.principal, told.labels) == ("acme", "ana", {"team": "ops"})
    message = await Hooks().pre("*", py(code)).plan(told).before()
    assert message is not None and message.endswith('told: ana {"team": "ops"}')
    nobody = HookCall.of("lookup", "code", {}, "c1", "r1", Scope(tenant="acme"))
    message = await Hooks().pre("*", py(code)).plan(nobody).before()
    assert message is not None and message.endswith("told: - {}")


async def test_a_command_hook_is_not_told_the_workers_own_hook_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "When known": a call without a tenant must not pass on one the worker's environment
    # happens to hold (a hook deciding by tenant would decide for another).
    monkeypatch.setenv("PSYCH_HOOK_TENANT", "acme")
    monkeypatch.setenv("PSYCH_HOOK_RUN_ID", "someone-elses-run")
    monkeypatch.setenv("PSYCH_HOOK_PRINCIPAL", "someone-else")
    monkeypatch.setenv("PSYCH_HOOK_LABELS", '{"team": "theirs"}')
    names = "('TENANT', 'RUN_ID', 'PRINCIPAL', 'LABELS')"
    code = (
        "import os, sys\n"
        f"said = [os.environ.get('PSYCH_HOOK_' + n, '-') for n in {names}]\n"
        "sys.exit('told: ' + ' '.join(said))\n"
    )
    bare = HookCall(tool="lookup", kind="builtin", arguments={}, call_id="c1")
    message = await Hooks().pre("*", py(code)).plan(bare).before()
    assert message is not None and message.endswith("told: - - - -")


async def test_a_call_a_later_pre_hook_denies_ran_with_no_arguments() -> None:
    # The first hook's rewrite was recorded as the arguments that ran, though none did.
    def narrow(c: HookCall) -> dict[str, Any]:
        return {**c.arguments, "limit": 5}

    plan = Hooks().pre("*", narrow).pre("*", deny_all).plan(call(order_id="A-7"))
    assert await plan.before() is not None
    ref = blob_ref(b"denied")
    latency = Latency(queue_wait_ms=0.0, duration_ms=1.0)
    denied = ToolOutcome(
        call_id="c1",
        status="denied",
        content="denied",
        truncated=False,
        size=6,
        result_ref=ref,
        message_ref=ref,
        latency=latency,
    )
    stamped = plan.stamp(denied)
    assert stamped.ran_arguments is None
    assert [(e.stage, e.effect) for e in stamped.hooks] == [
        ("pre", "rewrote_arguments"),
        ("pre", "denied"),
    ]


async def test_command_pre_hook_non_zero_exit_denies_with_its_stderr() -> None:
    hook = py("import sys; sys.stderr.write('order A-7 is frozen'); sys.exit(3)")
    plan = Hooks().pre("*", hook).plan(call(order_id="A-7"))
    message = await plan.before()
    assert message is not None and message.endswith("order A-7 is frozen")


async def test_command_pre_hook_that_cannot_start_or_lacks_a_placeholder_denies() -> None:
    missing = CommandHook.of(["/nonexistent/psych-hook"])
    message = await Hooks().pre("*", missing).plan(call()).before()
    assert message is not None and "could not start" in message
    unfilled = CommandHook.of(["/bin/echo", "{nope}"])
    message = await Hooks().pre("*", unfilled).plan(call()).before()
    assert message is not None and "{nope} names no argument" in message


async def test_command_pre_hook_that_prints_no_object_denies() -> None:
    message = await Hooks().pre("*", py("print('yes, fine')")).plan(call()).before()
    assert message is not None and "not a JSON object" in message


def _gone(pid: int) -> bool:
    """No such process, or only its zombie left for init to reap."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def test_command_hook_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    code = (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(60)\n"
    )
    hook = py(code, timeout=1.5)
    started = time.monotonic()
    result = await run_command(hook, call(), {})
    elapsed = time.monotonic() - started
    assert result.timed_out and not result.ok and "timed out after 1.5 s" in result.reason()
    assert elapsed < 1.5 + REAP_SECONDS
    parent, grandchild = (int(p) for p in pids.read_text().split())
    assert result.pid == parent
    # SIGKILL of the group is delivered at once; the grandchild, reparented, may take
    # its new parent a moment to reap.
    deadline = time.monotonic() + REAP_SECONDS
    while not (_gone(parent) and _gone(grandchild)) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    assert _gone(parent) and _gone(grandchild)
    with pytest.raises(ProcessLookupError):
        os.kill(parent, 0)  # reaped by us, not left a zombie


async def test_command_pre_hook_timeout_denies() -> None:
    message = await Hooks().pre("*", py("import time; time.sleep(30)", 0.5)).plan(call()).before()
    assert message is not None and "timed out after 0.5 s" in message


async def test_command_post_and_on_error_hooks_read_json_and_failures_are_ignored() -> None:
    redact = py(
        "import json, sys; doc = json.load(sys.stdin); "
        "print(json.dumps({'result': doc['result'].replace('secret', '[redacted]')}))"
    )
    failing = py("import sys; sys.stderr.write('redactor down'); sys.exit(1)")
    hooks = Hooks().post("*", failing).post("*", redact)
    plan = hooks.plan(call(q=1))
    assert await plan.after("ok", "the secret is 7") == ("ok", "the [redacted] is 7")
    assert [(e.effect, e.detail) for e in plan.effects] == [
        ("failed", "redactor down"),
        ("rewrote_result", ""),
    ]
    replace = py(
        "import json, sys; doc = json.load(sys.stdin); "
        "print(json.dumps({'result': {'fallback': True, 'was': doc['error']}}))"
    )
    plan = Hooks().on_error("*", replace).plan(call())
    status, text = await plan.after("error", "HTTP 503")
    assert status == "ok" and json.loads(text) == {"fallback": True, "was": "HTTP 503"}


async def test_sync_hooks_past_the_thread_cap_wait_for_a_thread_rather_than_deny() -> None:
    # More calls of one turn than there are sync-hook threads, each with a quick, healthy
    # pre hook: the hooks past the cap take a thread as one frees, within their deadline;
    # none is denied for the load alone (a pre hook's failure denies the call).
    from psych_runtime.activities.hooks._threads import SYNC_HOOK_THREADS

    calls = SYNC_HOOK_THREADS + 8
    release = threading.Event()
    entered = 0
    lock = threading.Lock()
    loop = asyncio.get_running_loop()
    all_taken = asyncio.Event()

    def check(c: HookCall) -> None:
        nonlocal entered
        with lock:
            entered += 1
            if entered == SYNC_HOOK_THREADS:
                loop.call_soon_threadsafe(all_taken.set)
        release.wait(timeout=9)

    hooks = Hooks().pre("*", check)
    verdicts = asyncio.gather(*(hooks.plan(call(to=str(n))).before() for n in range(calls)))
    taken = asyncio.ensure_future(all_taken.wait())
    try:
        # Every thread taken by a running hook (or, failing that, the hooks' deadline).
        either: set[asyncio.Future[Any]] = {taken, verdicts}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        taken.cancel()
        release.set()
    assert await verdicts == [None] * calls
    assert entered == calls


async def test_a_sync_hook_that_gets_no_thread_within_its_deadline_denies_saying_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from psych_runtime.activities.hooks import _hooks, _threads

    monkeypatch.setattr(_hooks, "PYTHON_HOOK_SECONDS", 0.2)
    monkeypatch.setattr(_threads, "_free", 0)  # every thread held by a hook not returned
    ran: list[str] = []

    def check(c: HookCall) -> None:
        ran.append(c.call_id)

    message = await Hooks().pre("*", check).plan(call(to="a")).before()
    assert message is not None and "did not start within 0.2 s" in message
    assert "threads for sync hooks were taken" in message
    assert ran == []
