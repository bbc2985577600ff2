"""The suite's own hooks (tests/conftest.py)."""

from __future__ import annotations

import gc
import weakref

from temporalio.worker._workflow import _InterruptDeadlockError


class _Held:
    """Something a weakref can watch."""


def test_the_sdks_deadlock_interrupt_caught_in_a_weakref_callback_fails_no_test() -> None:
    """As when the SDK's interrupt lands in a garbage collector's callback of a slow
    workflow task: Python reports it unraisable; the suite passes over it (without the
    hook, pytest fails this test with PytestUnraisableExceptionWarning)."""
    held = _Held()

    def interrupted(_: object) -> None:
        raise _InterruptDeadlockError()

    watch = weakref.ref(held, interrupted)
    del held
    gc.collect()
    assert watch() is None
