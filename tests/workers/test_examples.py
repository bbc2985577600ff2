"""The offline examples (``examples/*.py`` beside the demo), each run as its own process as
a reader would run it: fake model, embedded dev server, exit status 0 when its Run
completed. Each asserts what the example is there to show."""

from __future__ import annotations

import os
import subprocess
import sys

from .conftest import EXAMPLES, ROOT


def _run(script: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PSYCH_"))}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Temporal Server:" not in done.stdout  # the server's banner stays out
    assert "status:       completed" in done.stdout.splitlines(), done.stdout
    return done.stdout.splitlines()


def _index(lines: list[str], start: str) -> int:
    found = [i for i, line in enumerate(lines) if line.startswith(start)]
    assert found, f"no line starts with {start!r}:\n" + "\n".join(lines)
    return found[0]


def test_approval_waits_for_the_operator_then_runs_the_tool() -> None:
    lines = _run("approval.py")
    waiting = _index(lines, "  suspended: waiting for approval of close_account(")
    approved = _index(lines, "    (operator ops approves call_close)")
    resumed = _index(lines, "  resumed: approved by ops (approval call_close): verified")
    ran = _index(lines, '  tool call close_account -> ok: {"account": "acct-7"')
    assert waiting < approved < resumed < ran
    assert "answer:       Account acct-7 is closed." in lines
    assert sum("tool call close_account -> ok" in line for line in lines) == 1


def test_mcp_tools_come_from_the_examples_own_server() -> None:
    lines = _run("mcp_tools.py")
    assert _index(lines, "MCP server 'inventory' at http://127.0.0.1:") == 0
    # Only the allowed tool is listed; its result came from the server.
    assert _index(lines, "  MCP inventory: 1 tools (fresh)") > 0
    assert "  tool call inventory__stock_level -> ok: 12 x oak-desk in stock" in " ".join(
        line.split(" [")[0] for line in lines
    )
    assert "answer:       We have 12 oak desks in stock." in lines


def test_workflow_runs_its_tool_step_then_its_agent_step() -> None:
    lines = _run("workflow.py")
    tool = _index(lines, 'step create -> ok: {"account": "acct-starter", "plan": "starter"}')
    agent = _index(lines, 'step welcome -> ok: "Welcome aboard, Ada!')
    assert tool < agent
    assert "settled completed: completed: 2 steps" in lines


def test_subagents_delegate_to_a_child_run() -> None:
    lines = _run("subagents.py")
    delegated = _index(lines, '  tool call delegate({"agent": "researcher"')
    child = _index(lines, "child psych-examples-")
    assert "(researcher, delegate) settled completed: 1 model calls" in lines[child]
    result = _index(lines, "  tool call delegate -> ok: Solid oak, oiled; 140 x 70 cm.")
    assert delegated < child < result
    assert "answer:       The oak desk is solid oiled oak and measures 140 x 70 cm." in lines
    assert _index(lines, "child 1:") > result
