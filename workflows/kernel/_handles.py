"""Which stored results (blob refs) a Run may read back with ``read_tool_output``, and
hand on to a child it starts (``features/_results.py`` says why).

A Run owns a handle it was shown (its ``tool_call_finished`` records: a stored result's,
and the blobs stored beside one that it names, ``ToolCallFinished.handles``; carried across
continue-as-new), one its parent handed it (``ParentBounds.handed``), and one a child of
it handed back when it settled (``RunResult.handles``, kept as ``RunView.held``). Nothing
here reads a blob or the clock: each answer follows from the Run's history.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.workflows.contract._contract import RunInput
    from psych_runtime.workflows.contract._records import ToolCallFinished
    from psych_runtime.workflows.kernel._feature import RunView

RESULTS = "results"
"""The Results feature's name: its carry (``RunCarry.features``) holds the handles of the
Run's earlier executions."""

_REF = re.compile(r"sha256:[0-9a-f]{64}")


def refs_in(messages: Iterable[str]) -> set[str]:
    """Every blob ref the text of ``messages`` names."""
    return {ref for message in messages for ref in _REF.findall(message)}


def handed(input: RunInput) -> frozenset[str]:
    """The refs this Run's parent handed it (none for a Run a caller started)."""
    bounds = input.bounds
    if bounds is None:
        return frozenset()
    if bounds.handed is not None:
        return frozenset(bounds.handed)
    # A parent from before ParentBounds.handed: the child took every ref in its messages,
    # and a Run started then keeps reading as it did (its history replays).
    return frozenset(refs_in(input.messages))


def own_handles(run: RunView) -> frozenset[str]:
    """Every handle this Run was shown (in this execution or, carried, an earlier one),
    handed, or handed back by a child: what it may read back, and hand on."""
    carry = run.input.carry
    carried = carry.features.get(RESULTS) if carry is not None else None
    finished = [record for record in run.log if isinstance(record, ToolCallFinished)]
    shown = {record.result_ref for record in finished if record.truncated and record.result_ref}
    shown.update(ref for record in finished for ref in record.handles)
    return frozenset(carried or ()) | shown | handed(run.input) | run.held


def handed_on(run: RunView, messages: tuple[str, ...]) -> tuple[str, ...]:
    """What a child started with ``messages`` is handed: the refs in them this Run owns."""
    return tuple(sorted(refs_in(messages) & own_handles(run)))
