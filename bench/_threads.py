"""Where this process's CPU goes, by thread, and what its garbage collector takes.

A 50-Run batch on two cores is bound by CPU, and in the worker process most of it is Python
run behind one interpreter lock: the event loop's thread (activities, the fake model, the
client) and the SDK's workflow threads (workflow activations) take turns at it, while the
SDK core's Rust threads do not need it. So a batch's CPU is split four ways, read from
Linux's ``/proc/self/task/<tid>/stat`` before and after it:

- ``event loop``: the main thread;
- ``workflows``: the Python threads named ``temporal_workflow*`` (the SDK's pool);
- ``core``: the threads named ``tokio-*`` (the SDK core's runtime);
- ``other``: the rest (the SDK's own Python helpers, the interpreter's).

and the collector's pauses are summed through ``gc.callbacks`` (``collector``: a part of
whichever thread allocated when it ran, mostly the first two). Elsewhere than Linux the
split is empty; the collector's part is taken everywhere.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._process import stat_cpu_seconds
from bench._table import median, table

GROUPS = ("event loop", "workflows", "core", "other", "collector")
"""The columns of ``ThreadMark.ms_per_turn``, in print order."""

THREADS_NOTE = (
    "This process's CPU per turn by thread (medians over the 50-Run batches): the event "
    "loop's thread and the SDK's workflow threads share one interpreter lock, the SDK "
    "core's do not; the collector's pauses are inside the first two."
)

_TASKS = Path("/proc/self/task")


class _Collector:
    """Seconds the garbage collector has paused this process so far (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began


_COLLECTOR = _Collector()


def watch_collector() -> None:
    """Start summing the collector's pauses (once per process; again is a no-op)."""
    if _COLLECTOR not in gc.callbacks:
        gc.callbacks.append(_COLLECTOR)


def _group(name: str, main: bool) -> str:
    if main:
        return "event loop"
    if name.startswith("temporal_workflow"):
        return "workflows"
    if name.startswith("tokio-"):
        return "core"
    return "other"


def _thread_seconds() -> dict[str, float]:
    """CPU seconds (user + system) of this process's live threads so far, by group."""
    if not _TASKS.is_dir():
        return {}
    python_names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for task in _TASKS.iterdir():
        seconds = stat_cpu_seconds(task / "stat")
        try:
            comm = (task / "comm").read_text().strip()
        except OSError:
            seconds = None
        if seconds is None:  # the thread ended meanwhile
            continue
        tid = int(task.name)
        group = _group(python_names.get(tid, comm), tid == os.getpid())
        out[group] = out.get(group, 0.0) + seconds
    return out


@dataclass(frozen=True)
class ThreadMark:
    """The CPU of this process's threads by group, and the collector's pauses, so far."""

    seconds: dict[str, float]

    @staticmethod
    def now() -> ThreadMark:
        """Read them now."""
        return ThreadMark({**_thread_seconds(), "collector": _COLLECTOR.seconds})

    def ms_per_turn(self, later: ThreadMark, turns: int) -> dict[str, float]:
        """Milliseconds per turn in each group from this mark to ``later``. A thread that
        ended between the two marks takes its whole CPU with it, so a group can come out
        slightly low; never below 0."""
        return {
            group: max(0.0, later.seconds.get(group, 0.0) - self.seconds.get(group, 0.0))
            * 1000
            / turns
            for group in GROUPS
            if group in later.seconds
        }


def thread_table(
    title: str, kinds: Sequence[str], by_kind: dict[str, list[dict[str, float]]]
) -> str:
    """Per kind, the median over its batches of each group's ms per turn, and their sum
    without the collector (which is inside the others)."""
    rows = []
    for kind in kinds:
        batches = [b for b in by_kind.get(kind, []) if b]
        if not batches:
            continue
        cells = [median([b.get(group, float("nan")) for b in batches]) for group in GROUPS]
        threads = sum(c for g, c in zip(GROUPS, cells, strict=True) if g != "collector")
        rows.append([kind, *cells, threads])
    if not rows:
        return ""
    return table([title, *GROUPS, "threads"], rows)
