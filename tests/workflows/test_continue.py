"""Continue-as-new's pure parts: the carry survives JSON, the chain walk reads the right
execution, and a continued log's pages go on from the carried seq."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from psych_runtime.activities.contract import ChatMessage, Usage
from psych_runtime.specs import AgentBuilder, Limits, Scope, Version
from psych_runtime.workflows import (
    AgentRunInput,
    RecordsPage,
    RecordsQuery,
    ResumeResult,
    RunCarry,
    Segment,
    SuspensionReason,
    Totals,
    TurnStarted,
)
from psych_runtime.workflows.client._chain import chain_page
from psych_runtime.workflows.contract._carry import GuardsCarry, KeptAction, RepeatCount
from psych_runtime.workflows.kernel._continue import CARRIED_SINGLE_CALLS, carried_repeats
from psych_runtime.workflows.kernel._guards import Guards, after_result

SCOPE = Scope(tenant="acme")
AT = datetime(2026, 1, 1, tzinfo=UTC)


def turn(seq: int) -> TurnStarted:
    return TurnStarted(seq=seq, at=AT, scope=SCOPE, turn=seq)


def test_a_carry_survives_the_json_the_next_execution_decodes() -> None:
    carry = RunCarry(
        previous_run_id="run-1",
        history_length=120,
        history_size=40_000,
        earlier=(Segment(run_id="run-1", first_seq=1, last_seq=30),),
        next_seq=31,
        turn=4,
        totals=Totals(turns=4, model_calls=5, transient_failures=1, usage=Usage(input_tokens=7)),
        deadline_used=12.5,
        not_before={"fake-model": 1.5},
        model_failures={"fake-model": 2},
        guards=GuardsCarry(
            streaks={"t": 2},
            withheld=("w",),
            repeats=(RepeatCount(tool="t", arguments="{}", result_ref="r", times=3),),
        ),
        steer=("s",),
        follow_up=("f",),
        next_run=("n",),
        pending=(ChatMessage(role="tool", content="x", tool_call_id="c1"), "sha256:" + "a" * 64),
        features={"subagents": {"3": 2}, "tasks": {"tasks": [], "revision": 1}},
        actions=(
            KeptAction(
                update_id="psych.resume/" + "b" * 64,
                answer=ResumeResult(reason=SuspensionReason.APPROVAL, id="c1", outcome="approved"),
            ),
            KeptAction(update_id="psych.steer/" + "c" * 64),
        ),
    )
    back = RunCarry.model_validate_json(carry.model_dump_json())
    assert back == carry
    assert isinstance(back.pending[0], ChatMessage)
    assert back.features["subagents"] == {"3": 2}
    # The fields at their defaults are left out: an older worker reads what it knows.
    bare = RunCarry(
        previous_run_id="run-1",
        history_length=1,
        history_size=1,
        earlier=(),
        next_seq=1,
        turn=0,
        totals=Totals(),
    )
    assert "actions" not in json.loads(bare.model_dump_json())
    assert RunCarry.model_validate_json(bare.model_dump_json()) == bare
    # Every field at its default is left out (cut_steps, consents_refused... of 12-06):
    # a workflow without cut steps continues as new into an input an old worker reads.
    required = {name for name, field in RunCarry.model_fields.items() if field.is_required()}
    assert set(json.loads(bare.model_dump_json())) == required
    cut = bare.model_copy(update={"cut_steps": ("draft", "notes")})
    assert RunCarry.model_validate_json(cut.model_dump_json()).cut_steps == ("draft", "notes")


@pytest.mark.parametrize("events", [0, 40_001])
def test_the_threshold_is_bounded(events: int) -> None:
    version = Version.of(AgentBuilder("a").model("m").build())
    with pytest.raises(ValidationError, match="continue_after_events"):
        AgentRunInput(
            run_id="r", version=version, scope=SCOPE, messages=("hi",), continue_after_events=events
        )


async def test_the_chain_walk_reads_earlier_records_from_the_execution_that_holds_them() -> None:
    earlier = (
        Segment(run_id="one", first_seq=1, last_seq=3),
        Segment(run_id="two", first_seq=4, last_seq=6),
    )
    held = {"one": [turn(s) for s in (1, 2, 3)], "two": [turn(s) for s in (4, 5, 6)]}
    current = [turn(s) for s in (7, 8)]
    asked: list[str | None] = []

    async def query_execution(run_id: str | None, query: RecordsQuery) -> RecordsPage:
        asked.append(run_id)
        records = held[run_id] if run_id is not None else current
        mine = [r for r in records if r.seq > query.after]
        if run_id is None and query.after < 6:
            mine = []  # what RecordLog.page answers for seqs before its first
        last = records[-1].seq
        return RecordsPage(
            records=tuple(mine[: query.limit]),
            last_seq=last,
            settled=run_id is None,
            earlier=earlier if run_id is None else earlier[: 1 if run_id == "two" else 0],
        )

    page = await chain_page(query_execution, RecordsQuery(after=0))
    assert [r.seq for r in page.records] == [1, 2, 3]
    assert (page.last_seq, page.settled, page.earlier) == (8, True, earlier)
    page = await chain_page(query_execution, RecordsQuery(after=4))
    assert [r.seq for r in page.records] == [5, 6]
    page = await chain_page(query_execution, RecordsQuery(after=6))
    assert [r.seq for r in page.records] == [7, 8]
    assert asked == [None, "one", None, "two", None]


def test_the_carried_repeat_counts_are_bounded_and_keep_every_repeated_call() -> None:
    guards = Guards()
    for n in range(CARRIED_SINGLE_CALLS + 100):
        after_result(
            guards,
            "t",
            f'{{"n": {n}}}',
            ok=True,
            counts_as_failure=False,
            result_ref=f"r{n}",
            limits=Limits(),
        )
    for _ in range(2):  # the oldest call, repeated: a loop the guard must still see
        after_result(
            guards,
            "t",
            '{"n": 0}',
            ok=True,
            counts_as_failure=False,
            result_ref="r0",
            limits=Limits(),
        )
    carried = carried_repeats(guards)
    assert len(carried) == CARRIED_SINGLE_CALLS + 1
    assert carried[0] == RepeatCount(tool="t", arguments='{"n": 0}', result_ref="r0", times=3)
    assert carried[-1].arguments == f'{{"n": {CARRIED_SINGLE_CALLS + 99}}}'
