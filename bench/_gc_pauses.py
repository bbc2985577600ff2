"""Full collections of Python's cyclic garbage collector in a process, as it logs them.

A full (generation 2) collection stops the whole process: a worker's event loop, its
heartbeats and its workflow activations wait for it. ``log_full_collections`` makes a
process append one line per full collection to a file (its end, wall-clock seconds, and
its length); ``pauses_between`` sums those of a time window, read from another process.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def log_full_collections(path: Path) -> None:
    """Append ``<end unix s> <ms>`` to ``path`` after each full collection of this process."""
    began = [0.0]

    def observe(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            began[0] = time.perf_counter()
            return
        took_ms = (time.perf_counter() - began[0]) * 1000
        with path.open("a") as log:
            log.write(f"{time.time():.3f} {took_ms:.1f}\n")

    gc.callbacks.append(observe)


@dataclass(frozen=True)
class Pauses:
    """The full collections that ended within a window."""

    count: int
    total_s: float
    longest_ms: float


def pauses_between(path: Path, start: float, end: float) -> Pauses:
    """The full collections ``path`` logged as ending from ``start`` to ``end`` (unix s)."""
    lengths: list[float] = []
    if path.exists():
        for line in path.read_text().splitlines():
            ended, took_ms = (float(part) for part in line.split())
            if start <= ended <= end:
                lengths.append(took_ms)
    return Pauses(len(lengths), sum(lengths) / 1000, max(lengths, default=0.0))
