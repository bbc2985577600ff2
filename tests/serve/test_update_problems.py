"""REST's 503 for an update whose wait ran out says what ``UpdateUnanswered.held`` knows:
how far Temporal, asked as the wait ran out, had the update. Before, every such 503 said
"no worker answered for the Run in time", ``no-worker``, also of an update Temporal held
no record of (its silence, not a worker's) or one the worker answered (its answer lost).
The serve raises it as ``NotTakenInTime`` from the ``UpdateUnanswered`` (``bounded``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from a2a.utils.errors import InternalError

from psych_runtime.workers._bounded import NOT_TAKEN_IN_TIME, NotTakenInTime
from psych_runtime.workers.serve._problems import problem_of
from psych_runtime.workers.serve.a2a._errors import a2a_error
from psych_runtime.workflows import UpdateUnanswered

AGAIN = "or send it again under the same Idempotency-Key"


def _ran_out(held: str | None) -> NotTakenInTime:
    """The serve's error for an update whose wait ran out, Temporal having said ``held``."""
    cause = UpdateUnanswered(
        "psych-acme-4f2a", "the update psych.approve", timedelta(seconds=10), "k1", held=held
    )
    try:
        raise NotTakenInTime from cause
    except NotTakenInTime as err:
        return err


@pytest.mark.parametrize(
    ("held", "kind", "starts"),
    [
        ("admitted", "no-worker", "no worker took the request in time (Temporal holds it: "),
        ("accepted", "no-worker", "the Run's worker took the request but did not answer it"),
        ("completed", "temporal", "the Run's worker answered the request, but its answer"),
        ("unknown", "temporal", "Temporal did not answer the request in time and, asked "),
        ("not-ready", "no-worker", "Temporal refused the request as not ready ("),
        (None, "no-worker", NOT_TAKEN_IN_TIME),
    ],
)
def test_an_update_whose_wait_ran_out_is_a_503_saying_how_far_temporal_had_it(
    held: str | None, kind: str, starts: str
) -> None:
    for err in (_ran_out(held), _ran_out(held).__cause__):
        assert isinstance(err, Exception)
        problem = problem_of(err)
        assert problem is not None
        assert (problem.status, problem.kind) == (503, kind), problem
        assert problem.detail.startswith(starts), problem.detail
        assert "Idempotency-Key" in problem.detail, problem.detail
    bare = problem_of(NotTakenInTime())
    assert bare is not None and bare == problem_of(_ran_out(None))
    assert bare.detail == f"{NOT_TAKEN_IN_TIME}, {AGAIN}"


@pytest.mark.parametrize(
    ("held", "kind"),
    [
        ("admitted", "no-worker"),
        ("accepted", "no-worker"),
        ("completed", "temporal"),
        ("unknown", "temporal"),
        ("not-ready", "no-worker"),
    ],
)
def test_a2a_says_of_it_what_rest_says_naming_its_message_id(held: str, kind: str) -> None:
    # A2A answers the same failure as REST does (``_errors.py``): it said "no worker
    # answered ..." with the type no-worker whatever Temporal had said of the update.
    err = _ran_out(held)
    rest = problem_of(err)
    assert rest is not None
    answer = a2a_error(err, "approving")
    assert isinstance(answer, InternalError)
    assert answer.data == {"type": f"urn:psych:problem:{kind}", "status": "503"}
    said = rest.detail.replace("under the same Idempotency-Key", "with the same messageId")
    assert answer.message == f"approving: {said}"
    assert "Idempotency-Key" not in answer.message


def test_a2a_says_the_old_words_when_temporal_was_not_asked() -> None:
    answer = a2a_error(_ran_out(None))
    assert isinstance(answer, InternalError)
    assert answer.message == NOT_TAKEN_IN_TIME
    assert answer.data == {"type": "urn:psych:problem:no-worker", "status": "503"}
