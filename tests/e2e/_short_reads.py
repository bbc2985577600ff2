"""A shorter ``TEMPORAL_READ_TIMEOUT`` for the tests that hold a read unanswered to prove
its bound: each such hold waits the bound out, 10 s in the product, which made the three
bounded-read files ~240 s of the suite's waiting. ``shorten_reads`` sets ``SHORT_READ``
wherever psych's modules took the constant (imported by name, and ``Visibility``'s default
argument), so the product's code paths and wording are the same, only the wait shorter.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import pytest

from psych_runtime.workflows import HISTORY_LONG_POLL_TIMEOUT, TEMPORAL_READ_TIMEOUT
from psych_runtime.workflows.client._visibility import Visibility

SHORT_READ = timedelta(seconds=4)
"""The read bound the bounded-read tests run with (``shorten_reads``)."""


def shorten_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TEMPORAL_READ_TIMEOUT`` as ``SHORT_READ`` in every loaded psych module holding it
    (a module imported later would keep 10 s, and its test's wording would say so)."""
    for name, module in list(sys.modules.items()):
        if name.startswith("psych_runtime") and hasattr(module, "TEMPORAL_READ_TIMEOUT"):
            assert module.TEMPORAL_READ_TIMEOUT == TEMPORAL_READ_TIMEOUT, name
            monkeypatch.setattr(module, "TEMPORAL_READ_TIMEOUT", SHORT_READ)
    assert Visibility.__init__.__defaults__ == (TEMPORAL_READ_TIMEOUT,)
    monkeypatch.setattr(Visibility.__init__, "__defaults__", (SHORT_READ,))


SHORT_LONG_POLL = timedelta(seconds=4)
"""The history long polls' bound the tests holding one unanswered run with
(``shorten_long_polls``): Temporal answers a long poll empty 1 s before a caller's
deadline sooner than its own interval, so a poll it answers still ends in time."""


def shorten_long_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """``HISTORY_LONG_POLL_TIMEOUT`` (30 s) as ``SHORT_LONG_POLL`` in every loaded psych
    module holding it, as ``shorten_reads`` does for the reads."""
    for name, module in list(sys.modules.items()):
        if name.startswith("psych_runtime") and hasattr(module, "HISTORY_LONG_POLL_TIMEOUT"):
            assert module.HISTORY_LONG_POLL_TIMEOUT == HISTORY_LONG_POLL_TIMEOUT, name
            monkeypatch.setattr(module, "HISTORY_LONG_POLL_TIMEOUT", SHORT_LONG_POLL)
