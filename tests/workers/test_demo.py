"""``examples/demo.py`` (what ``make demo`` runs) as a child process, on its own ports."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

from tests._ports import free_port

from .conftest import EXAMPLES, ROOT


def test_demo_runs_the_support_agent_and_the_onboarding_workflow() -> None:
    dev_port, http_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PSYCH_"))}
    env.update(PSYCH_DEMO_PORT=str(dev_port), PSYCH_DEMO_HTTP_PORT=str(http_port))
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "demo.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert f"Temporal dev server at 127.0.0.1:{dev_port}\n" in out
    assert f"payments API at http://127.0.0.1:{http_port}\n" in out
    assert "Temporal Server:" not in out  # the server's banner stays out of the records
    assert "approval needed for: issue_refund\n" in out
    lines = out.splitlines()
    assert '  tool call lookup_order({"order_id": "42"}) ...' in lines
    # The refund waits for an approval; the demo shows the operator's command, approves
    # it through PsychClient as "ops", and only then does the refund run.
    run_id = re.search(r"^Run (psych-demo-\w+) on task queue", out, re.MULTILINE)
    assert run_id is not None, out
    waiting = re.compile(
        r'  suspended: waiting for approval of issue_refund\(\{"order_id": "42", '
        r'"reason": "arrived broken"\}\) until \d{4}-\d\d-\d\dT[\d:]+\+00:00 \(id (call_\w+)\)'
    )
    suspended = next((i for i, line in enumerate(lines) if waiting.fullmatch(line)), -1)
    assert suspended >= 0, out
    found = waiting.fullmatch(lines[suspended])
    assert found is not None
    call_id = found.group(1)
    command = f"    to resume: psych approve {run_id.group(1)} {call_id} --tenant demo"
    assert lines[suspended + 1].startswith(command), out
    assert lines[suspended + 2].startswith(f"    (the demo approves {call_id} itself"), out
    resumed = f"  resumed: approved by ops (approval {call_id}): order checked, refund it"
    assert lines[suspended + 3] == resumed, out
    refund = '  tool call issue_refund -> ok: {"refunded": true, "order_id": "42"'
    assert lines[suspended + 4].startswith(refund), out
    assert "settled completed: answered" in lines
    assert "status:       completed" in lines
    assert (
        "answer:       I refunded order 42 (19.90 EUR); refund rf-42 is on its way to you." in lines
    )
    assert "tool calls:   2 (2 ok)" in lines
    assert "cost:         unknown" in lines
    # Then the onboarding workflow: a tool step, then an agent step followed in place.
    assert 'step 1 create (tool), given {"plan": "starter"}' in lines
    assert 'step create -> ok: {"account": "acct-starter", "plan": "starter"}' in lines
    greeted = "Welcome aboard, Ada! Your account acct-starter is ready."
    assert any(line.startswith("    run admitted: agent greeter") for line in lines), out
    assert "settled completed: completed: 2 steps" in lines
    assert "workflow:     onboard-customer (sha256:" in out
    assert f'"welcome": "{greeted} Reply here whenever you need us."' in out
    assert "in all:       1 model calls, 1 tool calls (its steps' Runs included)" in lines
    # Everything it started is stopped: both ports can be bound again.
    for port in (dev_port, http_port):
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))


def _demo_with(**variables: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PSYCH_"))}
    env.update(variables)
    return subprocess.run(
        [sys.executable, str(EXAMPLES / "demo.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_port_variable_that_is_no_port_is_named_before_anything_starts() -> None:
    # Once a ValueError traceback ("invalid literal for int()") that named no variable.
    done = _demo_with(PSYCH_DEMO_PORT="seven")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "PSYCH_DEMO_PORT='seven' is not a port number" in done.stderr
    assert done.stdout == ""
    done = _demo_with(PSYCH_DEMO_HTTP_PORT="70000")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "PSYCH_DEMO_HTTP_PORT='70000' is not a port number" in done.stderr


def test_a_port_variable_naming_a_taken_port_is_named_before_anything_starts() -> None:
    # The payments API's port, taken, was an OSError traceback ("Address already in use")
    # after the dev server had started, naming neither the port nor the variable.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        for variable in ("PSYCH_DEMO_PORT", "PSYCH_DEMO_HTTP_PORT"):
            done = _demo_with(**{variable: str(port)})
            assert done.returncode == 2, done.stdout + done.stderr
            assert "Traceback" not in done.stderr
            assert f"{variable}={port}: port {port} on 127.0.0.1 is in use" in done.stderr
            assert done.stdout == ""
