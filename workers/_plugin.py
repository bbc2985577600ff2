"""The psych Temporal plugin: data converter, sandbox passthrough, failure types."""

from __future__ import annotations

from pydantic import ValidationError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.plugin import SimplePlugin
from temporalio.worker import WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from psych_runtime.specs import PsychError

SANDBOX_PASSTHROUGH = (
    # Pure data models shared by workflow and activity code; re-importing them per Run
    # would cost time and give the converter and the workflow different classes.
    "psych_runtime.specs",
    "psych_runtime.activities._payloads",
    "psych_runtime.workflows._records",
    # Libraries those models are built on (deterministic, no I/O at import).
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "yaml",
)
"""Modules the workflow sandbox imports once instead of per Run (the only such list)."""


def _runner(existing: WorkflowRunner | None) -> WorkflowRunner:
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*SANDBOX_PASSTHROUGH)
    )


class PsychPlugin(SimplePlugin):
    """Install on the Temporal client (it then applies to workers built from it).

    Sets pydantic's data converter (every payload is a pydantic model), the sandbox
    passthrough list above, and makes PsychError and pydantic's ValidationError fail the
    workflow rather than the workflow task (which Temporal would retry forever): a Run
    started with a malformed input (by hand, with the plain ``temporal`` CLI) fails at
    once, saying which field is wrong. A malformed signal is still only logged and
    dropped by the SDK, and a malformed update rejected.
    """

    def __init__(self) -> None:
        super().__init__(
            "psych_runtime.PsychPlugin",
            data_converter=pydantic_data_converter,
            workflow_runner=_runner,
            workflow_failure_exception_types=[PsychError, ValidationError],
        )
