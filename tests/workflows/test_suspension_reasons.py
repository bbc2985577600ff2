"""``SuspensionReason`` is the one definition of why a Run waits: every payload that carries
a reason accepts exactly its values (a resume exactly ``CallSuspensionReason``'s), and they
are the wire strings that recorded histories and the ``PsychSuspension`` search attribute
hold (pure, no server)."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest
from pydantic import BaseModel, ValidationError

from psych_runtime.workflows import (
    CallSuspensionReason,
    Pending,
    Resumed,
    ResumeInput,
    ResumeResult,
    Suspended,
    SuspensionExpired,
    SuspensionReason,
)

WIRE = {"approval", "question", "external", "children", "authorization"}
"""As committed histories spell them: changing one breaks their replay (``authorization``:
a person's consent to an MCP server's OAuth, issue 25)."""

_STAMP = {"seq": 1, "at": "2026-12-01T00:00:00Z", "scope": {"tenant": "t"}}
_PENDING = {"id": "c1", "call_id": "c1", "tool": "t", "expires_at": "2026-12-02T00:00:00Z"}
_CARRIERS: dict[type[BaseModel], dict[str, Any]] = {
    Pending: _PENDING,
    Resumed: {**_STAMP, "id": "c1", "outcome": "approved"},
    SuspensionExpired: {**_STAMP, "id": "c1"},
    ResumeInput: {"id": "c1", "tenant": "t"},
    ResumeResult: {"id": "c1", "outcome": "approved"},
}


def _accepted(model: type[BaseModel]) -> set[str]:
    """The reasons (of the wire ones and one more) ``model`` takes from JSON."""
    taken = set()
    for reason in [*sorted(WIRE), "elsewhere"]:
        try:
            model.model_validate_json(json.dumps({**_CARRIERS[model], "reason": reason}))
        except ValidationError:
            continue
        taken.add(reason)
    return taken


def test_the_reasons_are_the_wire_strings() -> None:
    assert {reason.value for reason in SuspensionReason} == WIRE
    resumable = {reason.value for reason in get_args(CallSuspensionReason)}
    assert resumable == WIRE - {"children"}


@pytest.mark.parametrize("model", [Pending, Resumed, SuspensionExpired])
def test_records_take_every_reason_and_no_other(model: type[BaseModel]) -> None:
    assert _accepted(model) == {reason.value for reason in SuspensionReason}


@pytest.mark.parametrize("model", [ResumeInput, ResumeResult])
def test_a_resume_takes_the_call_reasons_only(model: type[BaseModel]) -> None:
    assert _accepted(model) == {reason.value for reason in get_args(CallSuspensionReason)}


def test_a_reason_goes_back_on_the_wire_as_it_came() -> None:
    for reason in WIRE:
        raw = {**_STAMP, "pending": {**_PENDING, "reason": reason}}
        record = Suspended.model_validate_json(json.dumps(raw))
        assert record.pending.reason is SuspensionReason(reason)
        assert json.loads(record.model_dump_json())["pending"]["reason"] == reason
