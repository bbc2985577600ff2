"""Compaction's trigger and cut as pure functions (``workflows/_compaction.py``)."""

from __future__ import annotations

from psych_runtime.activities.contract import CompactResult, Latency, TurnMark, Usage
from psych_runtime.specs import CompactionPolicy
from psych_runtime.workflows.features._compaction import (
    CompactionState,
    after_call,
    compacted,
    next_cut,
    prompt_tokens,
)

NODE = "sha256:" + "1" * 64
NEW = "sha256:" + "2" * 64


def turns(count: int, tokens: int) -> CompactionState:
    state = CompactionState()
    for _ in range(count):
        state = after_call(state, NODE, 1, Usage(input_tokens=tokens))
    return state


def test_the_trigger_counts_input_cache_read_and_cache_write_tokens() -> None:
    usage = Usage(input_tokens=10, cache_read_tokens=20, cache_write_tokens=30, output_tokens=99)
    assert prompt_tokens(usage) == 60
    policy = CompactionPolicy(trigger_tokens=60, keep_recent_turns=1)
    state = after_call(after_call(CompactionState(), NODE, 0, usage), NODE, 1, usage)
    assert next_cut(state, policy) == 2
    below = after_call(state, NODE, 1, usage.model_copy(update={"cache_write_tokens": 29}))
    assert next_cut(below, policy) is None


def test_the_cut_keeps_the_recent_turns_and_needs_more_than_them_past_the_last_cut() -> None:
    policy = CompactionPolicy(trigger_tokens=100, keep_recent_turns=2)
    assert next_cut(turns(2, 500), policy) is None  # two turns: both kept, nothing to cut
    assert next_cut(turns(3, 500), policy) == 2
    assert next_cut(turns(5, 500), policy) == 4


def test_the_cut_only_moves_forward() -> None:
    policy = CompactionPolicy(trigger_tokens=100, keep_recent_turns=2)
    state = turns(4, 500)
    assert next_cut(state, policy) == 3
    result = CompactResult(
        context_ref=NEW,
        marks=(TurnMark(node=NEW), TurnMark(node=NEW, offset=2)),
        summary_ref=NEW,
        summary_preview="s",
        replaced=5,
        model="m",
        usage=Usage(),
        latency=Latency(queue_wait_ms=0, duration_ms=0),
    )
    state = compacted(state, 3, result)
    assert (state.cut_turn, state.last_turn, state.last_tokens) == (3, 4, 0)
    # Over the trigger again, but only the two kept turns lie past the cut.
    state = after_call(state, NEW, 0, Usage(input_tokens=500))
    assert state.last_turn == 5
    assert next_cut(state, policy) == 4
    assert next_cut(state.model_copy(update={"marks": state.marks[:2]}), policy) is None
