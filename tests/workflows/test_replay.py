"""The replay gate: every committed history of a real Run replays on today's workflows.

A failure here means a change to AgentRun or WorkflowRun (or to a payload they decode)
would break Runs already in flight when workers are upgraded. Version the change with
``workflow.patched``; do not re-record the history (see histories/README.md).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from psych_runtime.workers import PsychPlugin
from psych_runtime.workflows import AgentRun, WorkflowRun

from .record_histories import HISTORIES, SHAPES

pytestmark = pytest.mark.long

COMMITTED = sorted(HISTORIES.glob("*.json"))


def test_every_shape_has_a_committed_history() -> None:
    committed = {path.stem for path in COMMITTED}
    missing = sorted({shape.name for shape in SHAPES} - committed)
    assert not missing, f"record them: python -m tests.workflows.record_histories ({missing})"


@pytest.fixture(scope="module")
def replayer() -> Replayer:
    # The plugin brings what the workers run with: pydantic's data converter, the sandbox
    # and its passthrough list, and the failure types that fail a Run instead of a task.
    return Replayer(workflows=[AgentRun, WorkflowRun], plugins=[PsychPlugin()])


def test_the_gate_replays_under_the_sandbox(replayer: Replayer) -> None:
    # Workers run psych's workflows unsandboxed (docs/decisions/workers.md, "The workflow sandbox"):
    # this gate is where a restricted (non-deterministic) call in them still fails.
    runner = replayer.config().get("workflow_runner")
    assert isinstance(runner, SandboxedWorkflowRunner)


def load(path: Path) -> WorkflowHistory:
    """The history under its Run's own workflow id (``psych-<tenant>-<run id>``, which
    AgentRun checks), read back from the input in its first event."""
    text = path.read_text()
    events = json.loads(text)["events"]
    payload = events[0]["workflowExecutionStartedEventAttributes"]["input"]["payloads"][0]
    run = json.loads(base64.b64decode(payload["data"]))
    return WorkflowHistory.from_json(f"psych-{run['scope']['tenant']}-{run['run_id']}", text)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda path: path.stem)
async def test_history_replays(replayer: Replayer, path: Path) -> None:
    history = load(path)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name} no longer replays: {result.replay_failure}"
