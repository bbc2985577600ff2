"""``ContextProvided`` is built from a model call's ``ContextTurn`` field by field."""

from __future__ import annotations

from datetime import UTC, datetime

from psych_runtime.activities import ContextShown, ContextTurn
from psych_runtime.specs import Scope
from psych_runtime.workers import SANDBOX_PASSTHROUGH
from psych_runtime.workflows import ContextProvided


class LaterContextTurn(ContextTurn):
    """A ContextTurn as a later worker might return it, with a field the record lacks."""

    cached: bool = False


def test_a_field_added_to_the_context_turn_does_not_break_the_record() -> None:
    shown = ContextShown(provider="crm", ref="sha256:" + "0" * 64, tokens=3)
    context = LaterContextTurn(shown=(shown,), budget_tokens=200, cached=True)
    record = ContextProvided.of(
        2, context, seq=5, at=datetime(2026, 1, 1, tzinfo=UTC), scope=Scope(tenant="acme")
    )
    assert (record.seq, record.turn, record.shown, record.skipped, record.budget_tokens) == (
        5,
        2,
        (shown,),
        (),
        200,
    )


def test_the_context_result_models_are_passed_through_the_sandbox() -> None:
    # The records (passed through) and the report projection hold ContextShown and
    # ContextSkipped: a sandbox re-import would give the workflow classes of its own.
    assert "psych_runtime.activities.contract" in SANDBOX_PASSTHROUGH
