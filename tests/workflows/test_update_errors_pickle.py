"""An ``UpdateUnanswered`` pickled before its ``held`` attribute existed (a result kept by a
caller across an upgrade, a queue of failed requests) unpickles with ``held`` None, as one
made now without an answer from Temporal says: its ``__reduce__`` restores the pickled
``__dict__``, which has no ``held``. Before the class default, reading it raised
AttributeError."""

from __future__ import annotations

import pickle
from datetime import timedelta

from psych_runtime.workers.serve._problems import problem_of
from psych_runtime.workflows import UpdateUnanswered


def test_an_update_unanswered_pickled_before_held_existed_reads_held_as_none() -> None:
    err = UpdateUnanswered("psych-acme-4f2a", "the update psych.resume", timedelta(seconds=2), "k1")
    # The pickle of such an error made before ``held`` existed: its state without it.
    del err.__dict__["held"]
    old = pickle.dumps(err)
    assert b"held" not in old

    back = pickle.loads(old)
    assert type(back) is UpdateUnanswered
    assert "held" not in vars(back)
    assert back.held is None
    assert back.why == err.why and str(back) == str(err)
    problem = problem_of(back)
    assert problem is not None and (problem.status, problem.kind) == (503, "no-worker")
