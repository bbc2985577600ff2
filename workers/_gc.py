"""The garbage collector of a process that serves Runs (``psych worker``, ``psych dev``).

Why the start-up heap is frozen, why young collections run less often while full ones do
not, and what each saved or cost: docs/decisions/workers.md, "The collector of a serving
process".
"""

from __future__ import annotations

import gc

SERVING_GC_THRESHOLDS = (10_000, 2, 2)
"""The collector's thresholds in a serving process (CPython's default: 700, 10, 10).

A young collection every 10,000 allocations instead of 700; the middle and old thresholds
lowered so that a full collection is still considered about every 90,000 allocations
(10,000 x 3 x 3) as under the default (700 x 11 x 11). With 10,000, 10, 10 full
collections came 14 times less often, each freeing 14 times more: a worker holding
10,000 suspended Runs grew from 348 to 579 MB and stopped for 3 s at a time.
"""


def tune_gc_for_serving() -> None:
    """Collect, freeze what is left (``gc.freeze``: the start-up heap, never collected
    again) and set the collector's thresholds to ``SERVING_GC_THRESHOLDS``.

    For a process whose job is serving Runs, once it has built its workers: it changes the
    collector of the whole process, so a program embedding workers among other work decides
    for itself whether to call it. A process whose young threshold is already at least
    ``SERVING_GC_THRESHOLDS[0]`` has tuned its own collector: its thresholds are kept.
    Calling it again freezes what was made meanwhile too.
    """
    gc.collect()
    gc.freeze()
    if gc.get_threshold()[0] < SERVING_GC_THRESHOLDS[0]:
        gc.set_threshold(*SERVING_GC_THRESHOLDS)
