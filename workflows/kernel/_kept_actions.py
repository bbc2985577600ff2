"""Actions sent under an idempotency key, kept across continue-as-new.

``PsychClient`` sends an approve, deny, answer, complete, abort or steer under a key as a
Temporal update whose id is ``<update name>/<sha256 of the key>``. Temporal answers the
same id again with the first outcome, but only within one execution: after the Run
continues as new, the id is new to the server and the same steer would be a second
message, the same approval a refusal (its item is gone). So a Run keeps the ids of the
last ``KEPT_ACTIONS`` keyed actions with their answers and hands them on in its carry;
an update whose id is among them is answered as it was the first time, and changes
nothing. ``psych.kept_action`` reads them, for a client whose update the server no longer
routes to a handler (the Run settled in a later execution) and for ``PsychClient.taken``.
A refusal is not kept: a request refused is checked again when it comes again.
"""

from __future__ import annotations

import re

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.workflows.contract._carry import KeptAction, ResumeResult
    from psych_runtime.workflows.contract._contract import ABORT, RESUME, STEER

KEPT_ACTIONS = 100
"""How many keyed actions a Run hands on when it continues as new (the newest): a retry
comes within seconds or minutes of the first send, and a Run continues as new every
thousands of events, so only the last few can meet a retry."""

_KEYED = re.compile(
    "(?:" + "|".join(re.escape(n) for n in (RESUME, ABORT, STEER)) + ")/[0-9a-f]{64}"
)


class KeptActions:
    """The keyed actions a Run has answered (and those its earlier executions had)."""

    def __init__(self, carried: tuple[KeptAction, ...] = ()) -> None:
        self._kept = {action.update_id: action for action in carried}

    def earlier(self) -> KeptAction | None:
        """The current update's kept action, if its id was answered before."""
        info = workflow.current_update_info()
        return None if info is None else self._kept.get(info.id)

    def get(self, update_id: str) -> KeptAction | None:
        """The kept action of ``update_id`` (``psych.kept_action``)."""
        return self._kept.get(update_id)

    def keep(self, answer: ResumeResult | None = None) -> None:
        """Keep the current update with ``answer`` if it was sent under a key."""
        info = workflow.current_update_info()
        if info is None or not _KEYED.fullmatch(info.id):
            return
        self._kept.pop(info.id, None)
        self._kept[info.id] = KeptAction(update_id=info.id, answer=answer)
        while len(self._kept) > KEPT_ACTIONS:
            del self._kept[next(iter(self._kept))]

    def carry(self) -> tuple[KeptAction, ...]:
        """What the next execution takes (``RunCarry.actions``), oldest first."""
        return tuple(self._kept.values())
