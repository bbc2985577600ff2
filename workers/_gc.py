"""The garbage collector of a process that serves Runs (``psych worker``, ``psych dev``).

Why the start-up heap is frozen and young collections run less often, and what it saved:
docs/decisions/workers.md, "The collector of a serving process".
"""

from __future__ import annotations

import gc

SERVING_GEN0_THRESHOLD = 10_000
"""Allocations between young collections in a serving process (CPython's default: 700)."""


def tune_gc_for_serving() -> None:
    """Collect, freeze what is left (``gc.freeze``: the start-up heap, never collected
    again) and raise the young generation's threshold to ``SERVING_GEN0_THRESHOLD``.

    For a process whose job is serving Runs, once it has built its workers: it changes the
    collector of the whole process, so a program embedding workers among other work decides
    for itself whether to call it. Calling it again freezes what was made meanwhile too.
    """
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, SERVING_GEN0_THRESHOLD), middle, old)
