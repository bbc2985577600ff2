"""What a WorkflowRun's tool step gives its later steps and its outputs, the bound on its
outputs' size, and what its reason says of outputs cut at a model's output limit."""

from __future__ import annotations

import json
import re
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import well_formed
    from psych_runtime.workflows.contract._status import CUT_HINT, CUT_SHORT
    from psych_runtime.workflows.kernel._run_base import RunBase

MAX_OUTPUTS_BYTES = 1024 * 1024
"""Most bytes a workflow's outputs (every step's output keyed by step name, as compact UTF-8
JSON) may take: a step whose output would take them past it fails the Run.

The outputs travel whole in the Run's result, in each continue-as-new carry and in each
later agent or workflow step's input, each one payload under Temporal's payload limit
(2 MiB by default): a Run whose result passes that limit is never settled (the server
refuses its completion and the workflow task fails until an operator terminates it). Half
of it leaves room for the rest of the result or carry, and for the quoting the outputs get
as text in a step's input. A tool result over ``large_result_bytes`` is stored, and its
output is a handle and a preview: keep large results out of outputs that way."""


def output_bytes(step: str, output: Any) -> int:
    """What the entry ``step: output`` adds to the outputs' JSON (compact and UTF-8, as the
    result carries it), with a comma: outputs of entries adding up to ``n`` take ``n + 1``
    bytes. A Run keeps the sum rather than dumping all its outputs at each step."""
    entry = json.dumps({step: output}, separators=(",", ":"), ensure_ascii=False)
    return len(entry.encode()) - 1  # less the braces, plus a comma


def past_bound(step: str, output: Any, before: int) -> tuple[int, str | None]:
    """The sum of ``output_bytes`` with ``step``'s output added to ``before``, and why the
    output fails the Run when the outputs would pass ``MAX_OUTPUTS_BYTES`` (None: they do
    not)."""
    added = output_bytes(step, output)
    total = before + added
    if total + 1 <= MAX_OUTPUTS_BYTES:
        return total, None
    size = len(json.dumps(output, separators=(",", ":"), ensure_ascii=False).encode())
    return total, (
        f"output too large: its {size} bytes would take the workflow's outputs to "
        f"{total + 1} bytes of JSON, past their bound of {MAX_OUTPUTS_BYTES} bytes (the "
        f"outputs travel whole in the Run's result, each continue-as-new and each later "
        f"step's input, under Temporal's payload limit); keep large results out of "
        f"outputs: a tool result over the workflow's limits.large_result_bytes is stored "
        f"and its output is a handle and a preview, so lower that limit, or have the step "
        f"return less"
    )


def step_output(content: str, run: RunBase) -> Any:
    """A tool step's output from its result's text (what ``outputs`` and later steps get).

    A result that is a JSON object or array is structured: the tool returned a mapping or
    a list (a code tool's dict, an HTTP API's JSON body), and the output is that value.
    Anything else is text and stays the text: ``"42"``, ``"true"`` or ``"null"`` is what a
    tool said, not a number, a boolean or nothing (the activity renders a tool's result as
    text, so a tool that returned the number 42 also gives ``"42"``). Runs recorded before
    this rule read any JSON value (a scalar too) as structured: they keep that reading
    (patch ``psych-workflow-text-step-output``, asked only when the two rules differ).

    JSON may escape half a surrogate pair alone (``"\\ud800"``, an emoji cut in two): such
    a half becomes U+FFFD, as in any text a tool returns, since no payload can carry it
    (the Run's result, a continue-as-new, a later step's input would fail to encode, and
    its workflow task with them, again and again).
    """
    try:
        value = json.loads(content)
    except json.JSONDecodeError:
        return content
    if _ESCAPED_HALF.search(content) is not None:
        value = _well_formed(value)
    if isinstance(value, dict | list):
        return value
    if run.patched("psych-workflow-text-step-output"):
        return content
    return value


_ESCAPED_HALF = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a surrogate half (a pair's halves too: they decode to one character)."""


def _well_formed(value: Any) -> Any:
    """``value`` (decoded JSON) with every string, keys too, made ``well_formed``."""
    if isinstance(value, str):
        return well_formed(value)
    if isinstance(value, dict):
        return {well_formed(k): _well_formed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_well_formed(v) for v in value]
    return value


def cut_note(steps: tuple[str, ...]) -> str:
    """What a WorkflowRun's reason adds for ``steps``, the agent (or nested workflow) steps
    whose output is an answer cut at the model's output limit, however it ends but FAILED
    (``WorkflowRun._settle``): the steps kept it, and their later steps read it, so the
    reason says so (empty: none was)."""
    if not steps:
        return ""
    names = ", ".join(repr(step) for step in steps)
    if len(steps) == 1:
        return f"; the output of step {names} was {CUT_SHORT} {CUT_HINT}"
    return f"; the outputs of steps {names} were {CUT_SHORT} {CUT_HINT}"
