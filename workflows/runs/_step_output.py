"""What a WorkflowRun's tool step gives its later steps and its outputs."""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.workflows.kernel._run_base import RunBase


def step_output(content: str, run: RunBase) -> Any:
    """A tool step's output from its result's text (what ``outputs`` and later steps get).

    A result that is a JSON object or array is structured: the tool returned a mapping or
    a list (a code tool's dict, an HTTP API's JSON body), and the output is that value.
    Anything else is text and stays the text: ``"42"``, ``"true"`` or ``"null"`` is what a
    tool said, not a number, a boolean or nothing (the activity renders a tool's result as
    text, so a tool that returned the number 42 also gives ``"42"``). Runs recorded before
    this rule read any JSON value (a scalar too) as structured: they keep that reading
    (patch ``psych-workflow-text-step-output``, asked only when the two rules differ).
    """
    try:
        value = json.loads(content)
    except json.JSONDecodeError:
        return content
    if isinstance(value, dict | list):
        return value
    if run.patched("psych-workflow-text-step-output"):
        return content
    return value
