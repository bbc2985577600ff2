"""``psych replay``: committed histories replay; a changed history or changed workflow code
is caught, naming the Run and the event; histories fetched from a namespace replay."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from psych_runtime.activities import LocalBlobStore
from psych_runtime.activities.model import Endpoint, ModelEndpoints
from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder, Scope
from psych_runtime.testing import FakeModel, Reply
from psych_runtime.workers import PsychPlugin, start_dev_server
from psych_runtime.workers._worker import WorkerSettings, run_worker
from psych_runtime.workers.cli import main
from psych_runtime.workers.fleet import history_files, load_history, replay
from psych_runtime.workers.fleet._replay import replayer as fleet_replayer
from psych_runtime.workflows import AgentRun, PsychClient, WorkflowRun
from tests.forking import client as forking

from ._nondeterministic import TimerFirstAgentRun
from .conftest import ROOT, psych

HISTORIES = ROOT / "tests" / "workflows" / "histories"
PLAIN = HISTORIES / "plain_answer.json"
PSYCH_SCRIPT = Path(sys.executable).with_name("psych")


def sample(into: Path) -> Path:
    """A directory of every tenth committed history, both workflow types among them.

    The replay gate (tests/workflows/test_replay.py) replays every committed history with
    the same Replayer ``psych replay`` builds (``fleet.replayer``); these tests are of the
    command, which a sample exercises as well as all 147 (a minute and more of replay each
    under the suite's load)."""
    into.mkdir()
    for path in sorted(HISTORIES.glob("*.json"))[::10]:
        shutil.copy(path, into / path.name)
    texts = [path.read_text()[:2000] for path in into.iterdir()]
    assert any('"AgentRun"' in text for text in texts)
    assert any('"WorkflowRun"' in text for text in texts)
    return into


def test_the_command_replays_with_the_gates_replayer() -> None:
    # What makes a sample enough: the command's Replayer is configured as the gate's.
    gate = Replayer(workflows=[AgentRun, WorkflowRun], plugins=[PsychPlugin()]).config()
    command = fleet_replayer().config()
    assert list(command["workflows"]) == list(gate["workflows"]) == [AgentRun, WorkflowRun]
    for key in ("workflow_runner", "unsandboxed_workflow_runner", "data_converter"):
        assert type(command[key]) is type(gate[key]), key
    converter, expected = command["data_converter"], gate["data_converter"]
    assert type(converter.payload_converter) is type(expected.payload_converter)
    failures = command["workflow_failure_exception_types"]
    assert list(failures) == list(gate["workflow_failure_exception_types"])
    assert [type(i) for i in command["interceptors"]] == [type(i) for i in gate["interceptors"]]


async def test_committed_histories_replay(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    histories = sample(tmp_path / "sample")
    status, out, err = await psych(capsys, "replay", str(histories))
    count = len(list(histories.glob("*.json")))
    assert status == 0, out + err
    assert out.splitlines()[-1] == f"replayed {count} histories: 0 failed"
    assert sum(line.startswith("ok psych-") for line in out.splitlines()) == count


async def test_a_changed_history_fails_naming_the_run_and_the_event(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    history = json.loads(PLAIN.read_text())
    scheduled = next(
        event
        for event in history["events"]
        if event["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
    )
    scheduled["activityTaskScheduledEventAttributes"]["activityType"]["name"] = "psych.renamed"
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(history))
    run = load_history(PLAIN).workflow_id

    status, out, _ = await psych(capsys, "replay", str(PLAIN), str(changed))

    assert status == 1
    lines = out.splitlines()
    assert lines[0] == f"ok {run} ({PLAIN})"
    assert lines[1].startswith(f"FAILED {run} ({changed}): ")
    assert "Nondeterminism" in lines[1]
    assert "psych.renamed" in lines[1]
    assert f"event {scheduled['eventId']}" in lines[1] or scheduled["eventId"] in lines[1]
    assert lines[-1] == "replayed 2 histories: 1 failed"


async def test_changed_workflow_code_fails_on_the_committed_histories(tmp_path: Path) -> None:
    files = history_files([sample(tmp_path / "sample")])
    outcomes = await replay(
        ((load_history(path), str(path)) for path in files),
        workflows=(TimerFirstAgentRun, WorkflowRun),
    )
    agent_runs = [
        outcome
        for outcome, path in zip(outcomes, files, strict=True)
        if '"AgentRun"' in path.read_text()[:2000]
    ]
    assert agent_runs
    assert all(outcome.failure is not None for outcome in agent_runs)
    assert all("Nondeterminism" in (outcome.failure or "") for outcome in agent_runs)
    assert all(outcome.run.startswith("psych-") for outcome in agent_runs)


async def test_the_newest_runs_of_a_namespace_replay(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A server of its own: the session's holds other tests' Runs, some of test-only builds.
    env = await start_dev_server()
    try:
        target = env.client.service_client.config.target_host
        status, out, err = await psych(capsys, "replay", "--last", "5", "--address", target)
        assert (status, out.splitlines()[-1]) == (0, "replayed 0 histories: 0 failed"), err

        async with FakeModel(models=("fake-model",)) as fake:
            settings = WorkerSettings(
                task_queue="replay-source",
                blobs=LocalBlobStore(tmp_path / "blobs"),
                endpoints=ModelEndpoints(default=Endpoint(base_url=fake.base_url, api_key="k")),
            )
            client = PsychClient(
                env.client, store=FileVersionStore(tmp_path / "v"), task_queue="replay-source"
            )
            scope = Scope(tenant="acme", principal="tester")
            async with run_worker(env.client, settings):
                for answer in ("one", "two"):
                    fake.enqueue(Reply.text(answer))
                    spec = AgentBuilder("hello").model("fake-model").build()
                    await client.result(await client.dispatch(spec, "hi", scope=scope), scope=scope)

        status, out, err = await psych(capsys, "replay", "--last", "5", "--address", target)
    finally:
        await env.shutdown()
    assert status == 0, out + err
    assert out.splitlines()[-1] == "replayed 2 histories: 0 failed"
    assert all(line.endswith("(namespace default)") for line in out.splitlines()[:-1])


def _events() -> list[dict[str, object]]:
    events: list[dict[str, object]] = json.loads(PLAIN.read_text())["events"]
    return events


NOT_HISTORIES = {
    "not-json.json": ("not json at all", "not JSON"),
    "other.json": ('{"name": "a config file"}', "not a JSON object with an 'events' list"),
    "list.json": ("[1, 2]", "not a JSON object with an 'events' list"),
    "no-events.json": ('{"events": []}', "it has no events"),
    # The SDK's core panics in a thread on this one and waits forever.
    "no-start.json": (
        json.dumps({"events": _events()[1:]}),
        "its first event is EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, not WorkflowExecutionStarted",
    ),
}


@pytest.mark.parametrize("name", sorted(NOT_HISTORIES))
def test_a_file_that_is_not_a_history_is_one_line_naming_it(tmp_path: Path, name: str) -> None:
    text, problem = NOT_HISTORIES[name]
    path = tmp_path / name
    path.write_text(text)
    # The executable (forked: tests.forking), with a deadline: before the fix one of these
    # hung for ever.
    done = forking.run(
        [str(PSYCH_SCRIPT), "replay", str(PLAIN), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""  # checked before anything is replayed
    assert done.stderr.startswith(f"psych: {path}: not a Temporal history: {problem}")
    assert len(done.stderr.splitlines()) == 1, done.stderr


async def test_a_history_of_its_start_event_alone_replays() -> None:
    # Its first workflow task is not scheduled yet (a delayed start): nothing can disagree,
    # and the SDK's core would wait forever on it.
    history = WorkflowHistory.from_json("psych-acme-started", {"events": _events()[:1]})
    (outcome,) = await asyncio.wait_for(replay([(history, "started")]), timeout=30)
    assert outcome.failure is None


@pytest.mark.parametrize("count", ["0", "-3", "many"])
def test_last_takes_a_positive_number_of_runs(
    count: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--last 0` (or -3) replayed nothing and passed: a gate before promoting that checked
    # nothing. Port 9 (discard) has no server: reaching it would be a different error.
    with pytest.raises(SystemExit) as exited:
        main(["replay", "--last", count, "--address", "127.0.0.1:9"])
    assert exited.value.code == 2
    assert f"--last: {count!r} is not a number of Runs" in capsys.readouterr().err


def test_type_without_last_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # It was ignored: the AgentRun of the file replayed, and "ok", under --type WorkflowRun.
    assert main(["replay", str(PLAIN), "--type", "WorkflowRun"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "psych: --type chooses among the newest Runs of --last N; give --last too\n"
