"""Every committed history of a Run that failed replays to the very failure it recorded.

Temporal's replay compares commands, not the failure a workflow closes with: a Run whose
replay raised another error with the same commands (a bare ``TimeoutError`` where the live
Run read an ``ActivityError``, say) passes the replay gate with a different message. The
failure's message is what callers read of a failed Run (its status reason, REST, A2A), and
what the fixes for pre-patch timeouts (histories/README.md) claim they keep.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from psych_runtime.workers import PsychPlugin
from psych_runtime.workflows import AgentRun, WorkflowRun

from .test_replay import COMMITTED, load


def _recorded_failure(path: Path) -> str | None:
    last = json.loads(path.read_text())["events"][-1]
    failed = last.get("workflowExecutionFailedEventAttributes")
    return None if failed is None else str(failed["failure"]["message"])


FAILED = [path for path in COMMITTED if _recorded_failure(path) is not None]


class _Raised(Interceptor):
    """Keeps what each replayed workflow's execution raised."""

    def __init__(self) -> None:
        self.raised: list[BaseException] = []

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        raised = self.raised

        class Inbound(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                try:
                    return await super().execute_workflow(input)
                except BaseException as err:
                    raised.append(err)
                    raise

        return Inbound


def test_there_are_failed_histories_to_check() -> None:
    assert len(FAILED) >= 20, [path.stem for path in FAILED]


@pytest.mark.parametrize("path", FAILED, ids=lambda path: path.stem)
async def test_a_failed_history_replays_to_its_recorded_failure(path: Path) -> None:
    catch = _Raised()
    # Unsandboxed, as the workers run these workflows (the gate checks the sandbox).
    replayer = Replayer(
        workflows=[AgentRun, WorkflowRun],
        plugins=[PsychPlugin()],
        interceptors=[catch],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"
    assert catch.raised, f"{path.name}: the replayed Run raised nothing"
    got = catch.raised[-1]
    assert str(getattr(got, "message", got)) == _recorded_failure(path)
