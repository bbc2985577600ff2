"""A WorkflowRun started, awaited and queried with nothing but the ``temporal`` CLI.

The onboarding example's Version is what ``psych publish`` stores; a ``WorkflowRunInput``
built from it as plain JSON starts ``WorkflowRun`` on a psych worker's task queue, and the
``psych.state`` and ``psych.records`` queries read the settled workflow.
"""

from __future__ import annotations

import json

import pytest

from psych_runtime.activities import FileVersionStore
from psych_runtime.testing import Reply
from psych_runtime.workers._loading import load_spec_file

from .conftest import EXAMPLES, Cli, psych
from .test_temporal_cli import query, start, workflow_result

WELCOME = "Welcome aboard, we are glad you are here."
OUTPUTS = {"create": {"account": "acct-starter", "plan": "starter"}, "welcome": WELCOME}


async def test_start_and_query_a_workflow_run_with_the_temporal_cli(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.fake.enqueue(Reply.text(WELCOME))
    spec = load_spec_file(EXAMPLES / "onboarding-workflow.yaml")
    version = FileVersionStore(cli.home / "versions").publish(spec)
    async with cli.worker():
        run_id, workflow_id = await start(
            cli, "WorkflowRun", version, "Onboard Ada", agent="onboard-customer"
        )
        result = await workflow_result(cli, workflow_id)
        state = await query(cli, workflow_id, "psych.state")
        page = await query(cli, workflow_id, "psych.records", "--input", '{"after": 0}')
        # The psych CLI reads the same Run.
        status, out, _ = await psych(capsys, "report", *cli.args(workflow_id, "--json"))

    assert result["status"] == "COMPLETED"
    assert result["result"]["status"] == "completed"
    assert result["result"]["outputs"] == OUTPUTS

    assert state["kind"] == "workflow"
    assert state["run_id"] == run_id and state["tenant"] == "acme"
    assert state["agent"] == "onboard-customer" and state["version_hash"] == version.hash
    assert state["status"] == "completed"
    assert state["reason"] == "completed: 2 steps"
    assert state["outputs"] == OUTPUTS
    assert state["step"] is None
    assert state["totals"]["model_calls"] == 1 and state["totals"]["tool_calls"] == 1

    records = page["records"]
    assert page["settled"] is True and page["last_seq"] == len(records) == state["last_seq"]
    assert [r["kind"] for r in records] == [
        "run_admitted",
        "step_started",
        "tool_call_started",
        "tool_call_finished",
        "step_finished",
        "step_started",
        "step_finished",
        "run_settled",
    ]
    assert records[0]["spec_kind"] == "workflow" and records[0]["messages"] == ["Onboard Ada"]
    assert [(r["step"], r["step_kind"]) for r in records if r["kind"] == "step_finished"] == [
        ("create", "tool"),
        ("welcome", "agent"),
    ]
    assert records[5]["run"] == f"{workflow_id}-step2"

    assert status == 0
    report = json.loads(out)
    assert report["kind"] == "workflow" and report["outputs"] == OUTPUTS
