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
lowered so that full collections stay near the default's rate: one considered about
every 130,000 allocations (a young collection every 10,001, a middle one every 4th, a
full one on the 13th), against about 93,000 under the default (701 x 133). With
10,000, 10, 10 it was about every 1.3 million, each freeing that much more: a worker
holding 10,000 suspended Runs grew from 348 to 579 MB, with pauses up to 3 s.
"""


def tune_gc_for_serving() -> None:
    """Collect, freeze what is left (``gc.freeze``: the start-up heap, never collected
    again) and set the collector's thresholds to ``SERVING_GC_THRESHOLDS``.

    For a process whose job is serving Runs, once it has built its workers: it changes the
    collector of the whole process, so a program embedding workers among other work decides
    for itself whether to call it. A process that chose its own collector keeps its
    thresholds: one whose young threshold is above ``SERVING_GC_THRESHOLDS[0]``, or 0
    (automatic collection off). Calling it again freezes what was made meanwhile too.
    """
    gc.collect()
    gc.freeze()
    # A full collection runs only once the objects promoted since the last one exceed a
    # quarter of what that one kept, and freezing does not reset that count: collected
    # again now (the frozen heap is not walked), it counts only what is left unfrozen, so
    # the first full collection is not held back by a heap it will never walk.
    gc.collect()
    young = gc.get_threshold()[0]
    if 0 < young <= SERVING_GC_THRESHOLDS[0]:
        gc.set_threshold(*SERVING_GC_THRESHOLDS)
