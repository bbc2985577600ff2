"""``tune_gc_for_serving``: what ``psych worker`` and ``psych dev`` do to the collector once
their workers are built."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from psych_runtime.workers import SERVING_GC_THRESHOLDS, tune_gc_for_serving


class Node:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """The collector as the test found it, whatever the test did."""
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_gc")
def test_the_start_up_heap_is_frozen_and_young_collections_run_less_often() -> None:
    gc.set_threshold(700, 10, 10)
    kept = Node()
    tune_gc_for_serving()
    assert gc.get_threshold() == SERVING_GC_THRESHOLDS
    assert SERVING_GC_THRESHOLDS[0] > 700
    assert gc.get_freeze_count() > 0
    # What lived at the call is frozen, out of every collection's sight.
    assert not any(obj is kept for obj in gc.get_objects())


def full_collections_while_allocating(count: int) -> int:
    """How many full collections start while ``count`` containers are made and kept."""
    fulls = 0

    def counted(phase: str, info: dict[str, int]) -> None:
        nonlocal fulls
        if phase == "start" and info["generation"] == 2:
            fulls += 1

    gc.callbacks.append(counted)
    try:
        kept: list[list[int]] = [[] for _ in range(count)]
    finally:
        gc.callbacks.remove(counted)
    del kept
    return fulls


@pytest.mark.usefixtures("restored_gc")
def test_full_collections_come_about_as_often_as_under_the_default() -> None:
    # Rarer full collections each free more: the heap of a worker holding many waiting
    # Runs grows between them, and one pause can outlast the SDK's 2 s deadlock limit.
    # A large start-up heap, frozen by the call, must not hold the first one back.
    start_up_heap: list[list[int]] = [[] for _ in range(1_200_000)]
    gc.set_threshold(700, 10, 10)
    tune_gc_for_serving()
    tuned = full_collections_while_allocating(450_000)
    gc.collect()
    gc.set_threshold(700, 10, 10)  # CPython's default, the heap as frozen as above
    default = full_collections_while_allocating(450_000)
    del start_up_heap
    assert default >= 3
    assert tuned * 2 >= default, (tuned, default)


@pytest.mark.usefixtures("restored_gc")
def test_garbage_made_before_the_call_is_collected_not_frozen() -> None:
    gc.disable()  # no collection of its own between here and the call
    try:
        cycle = Node()
        gone = weakref.ref(cycle)
        del cycle
        assert gone() is not None  # a cycle: only a collection frees it
        tune_gc_for_serving()
        assert gone() is None
    finally:
        gc.enable()


@pytest.mark.usefixtures("restored_gc")
@pytest.mark.parametrize("chosen", [(50_000, 20, 5), (0, 10, 10)], ids=["higher", "off"])
def test_a_collector_the_process_chose_is_kept(chosen: tuple[int, int, int]) -> None:
    gc.set_threshold(*chosen)
    tune_gc_for_serving()
    assert gc.get_threshold() == chosen


@pytest.mark.usefixtures("restored_gc")
def test_the_young_threshold_alone_is_not_a_choice_to_keep() -> None:
    # 10,000, 10, 10 (the first serving thresholds) makes full collections ~14x rarer.
    gc.set_threshold(SERVING_GC_THRESHOLDS[0], 10, 10)
    tune_gc_for_serving()
    assert gc.get_threshold() == SERVING_GC_THRESHOLDS
