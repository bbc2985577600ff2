"""``psych report RUN --inputs``: what each model call was sent (its system prompt as sent,
then its messages), read from the blob store the workers write, checked against what the
fake model received."""

from __future__ import annotations

import json

import pytest

from psych_runtime.activities.blobs import blob_key
from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import Reply, ToolCall

from .conftest import Cli, psych
from .test_transcript import client_of

SCOPE = Scope(tenant="acme")
PLAN = [{"title": "look up order 42"}]


async def test_report_prints_each_calls_inputs_when_asked(
    cli: Cli, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = AgentBuilder("planner").instructions("Plan, then act.").model("gpt-4o-mini")
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("update_tasks", {"tasks": PLAN}, id="plan-1")),
        Reply.text("Order 42 is on its way."),
    )
    client = client_of(cli)
    async with cli.worker():
        run = await client.dispatch(spec.tasks(True).build(), "Where is order 42?", scope=SCOPE)
        await client.result(run, scope=SCOPE)
        wid = run.workflow_id
        monkeypatch.setenv("PSYCH_BLOB_DIR", str(cli.home / "blobs"))
        status, text, err = await psych(capsys, "report", *cli.args(wid, "--inputs"))
        assert (status, err) == (0, "")
        status, one, err = await psych(capsys, "report", *cli.args(wid, "--inputs", "--turn", "2"))
        assert (status, err) == (0, "")
        status, plain, err = await psych(capsys, "report", *cli.args(wid))
        assert (status, err) == (0, "")
        status, as_json, err = await psych(capsys, "report", *cli.args(wid, "--inputs", "--json"))
        assert (status, err) == (0, "")
        status, _, err = await psych(capsys, "report", *cli.args(wid, "--turn", "2"))
        assert (status, err) == (1, "psych: --turn is for --inputs\n")
        # Another directory than the workers': refused, naming what is missing and where.
        monkeypatch.setenv("PSYCH_BLOB_DIR", str(cli.home / "elsewhere"))
        status, _, err = await psych(capsys, "report", *cli.args(wid, "--inputs"))
        assert status == 1
        assert err.startswith("psych: turn 1's model call input is not in this client's blob")

    first, second = cli.fake.requests
    assert "Inputs of model call" not in plain
    head = "Inputs of model call 1 (turn 1, gpt-4o-mini, attempt 1):"
    assert text.index(head) < text.index("Inputs of model call 2 (turn 2, gpt-4o-mini")
    shown = text[text.index(head) :]
    # Each call's system prompt as sent: the second's holds the task list the first's lacks.
    assert first["messages"][0]["content"] in shown
    assert second["messages"][0]["content"] in shown
    assert "look up order 42" in second["messages"][0]["content"]
    assert "look up order 42" not in first["messages"][0]["content"]
    assert "→ update_tasks [plan-1]" in shown and "── tool [plan-1] ──" in shown
    assert head not in one and "Inputs of model call 2 (turn 2" in one
    assert second["messages"][0]["content"] in one

    calls = json.loads(as_json)["model_calls"]
    assert [c["system_prompt"] for c in calls] == [
        first["messages"][0]["content"],
        second["messages"][0]["content"],
    ]
    assert [[m["role"] for m in c["messages"]] for c in calls] == [
        ["user"],
        ["user", "assistant", "tool"],
    ]


async def test_report_refuses_a_turn_with_no_model_call(
    cli: Cli, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A --turn no model call of the Run has (a typo, turn 0) printed the report and then
    # nothing, as if that turn's call had been sent nothing.
    spec = AgentBuilder("planner").instructions("Plan.").model("gpt-4o-mini").build()
    cli.fake.enqueue(Reply.text("Planned."))
    client = client_of(cli)
    async with cli.worker():
        run = await client.dispatch(spec, "Plan a refund", scope=SCOPE)
        await client.result(run, scope=SCOPE)
        monkeypatch.setenv("PSYCH_BLOB_DIR", str(cli.home / "blobs"))
        args = cli.args(run.workflow_id, "--inputs", "--turn", "1", "--turn", "0")
        status, out, err = await psych(capsys, "report", *args)
        assert (status, out) == (1, "")
        assert err == (
            "psych: --turn 0: the Run has no model call in turn 0 (its model calls are of turn 1)\n"
        )
        status, out, err = await psych(capsys, "report", *cli.args(run.workflow_id, "--inputs"))
        assert (status, err) == (0, "")


async def test_report_names_a_damaged_input_as_damaged_not_missing(
    cli: Cli, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A blob that is there but no longer matches its ref (altered, or torn by a crash)
    # was told as one the client's store does not hold: a wrong store to look for.
    spec = AgentBuilder("planner").instructions("Plan.").model("gpt-4o-mini").build()
    cli.fake.enqueue(Reply.text("Planned."))
    client = client_of(cli)
    async with cli.worker():
        run = await client.dispatch(spec, "Plan a refund", scope=SCOPE)
        await client.result(run, scope=SCOPE)
        ref = (await client.report(run, scope=SCOPE)).model_calls[0].system_ref
        assert ref is not None
        blobs = cli.home / "blobs"
        (blobs / blob_key(ref)).write_bytes(b"Plan. (altered)")
        monkeypatch.setenv("PSYCH_BLOB_DIR", str(blobs))
        status, out, err = await psych(capsys, "report", *cli.args(run.workflow_id, "--inputs"))
    assert (status, out) == (1, "")
    assert err == (
        "psych: turn 1's model call input is in the blob store but damaged: its bytes no "
        "longer match their ref (cut short by a crash, or altered)\n"
    )
