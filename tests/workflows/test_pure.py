"""The kernel's pure parts, without a server: guards, model retries, Totals, input parsing,
mirrored child items, draining outcomes still being reported, and the report's children."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from temporalio.exceptions import ApplicationError, ChildWorkflowError

from psych_runtime.activities.contract import ErrorType, ModelFailure, Usage
from psych_runtime.activities.tools import drain_reports
from psych_runtime.activities.tools._reporting import _REPORTS
from psych_runtime.specs import LeftOut, Limits, Scope
from psych_runtime.workers.console import format_report
from psych_runtime.workers.console._report_children import child_fields, child_settled_line
from psych_runtime.workflows import (
    AgentRunInput,
    ChildSettled,
    Pending,
    RunAdmitted,
    RunState,
    RunStatus,
    Totals,
)
from psych_runtime.workflows.client._report import build_report
from psych_runtime.workflows.contract._contract import (
    MAX_TEXT_CHARS,
    AbortInput,
    ResumeInput,
    SteerInput,
    size_problem,
)
from psych_runtime.workflows.kernel._children import failed_totals
from psych_runtime.workflows.kernel._guards import (
    Guards,
    after_refusal,
    after_result,
    canonical_arguments,
    queued_repeats,
    repeat_refusal,
    seen_after,
)
from psych_runtime.workflows.kernel._handlers import parse_input
from psych_runtime.workflows.kernel._model_calls import budget_left, ready_model, retry_delay
from psych_runtime.workflows.kernel._record_log import RecordLog
from psych_runtime.workflows.kernel._suspensions import Suspensions

LIMITS = Limits(
    failure_streak_threshold=2,
    failure_streak_hard_stop=3,
    repeat_call_threshold=2,
    repeat_call_hard_stop=3,
)


def fail(guards: Guards, tool: str = "t", args: str = "{}") -> tuple[int | None, str | None]:
    verdict = after_result(
        guards, tool, args, ok=False, counts_as_failure=True, result_ref=None, limits=LIMITS
    )
    return verdict.withhold, verdict.hard_stop


def test_a_streak_withholds_then_stops_and_success_resets_it() -> None:
    guards = Guards()
    assert fail(guards) == (None, None)
    assert fail(guards) == (2, None)
    assert guards.withheld == ["t"]
    withhold, stop = fail(guards)
    assert withhold is None and stop == "failure_streak: t failed 3 times in a row"
    fresh = Guards()
    fail(fresh)
    after_result(fresh, "t", "{}", ok=True, counts_as_failure=False, result_ref="r", limits=LIMITS)
    assert fail(fresh) == (None, None)  # the ok call ended the streak


def test_denials_do_not_count_toward_the_streak() -> None:
    guards = Guards()
    for _ in range(5):
        verdict = after_result(
            guards, "t", "{}", ok=False, counts_as_failure=False, result_ref=None, limits=LIMITS
        )
        assert verdict.hard_stop is None and verdict.withhold is None
    assert guards.streaks == {}


def test_repeats_are_refused_after_the_threshold_and_stop_at_the_hard_stop() -> None:
    guards = Guards()
    args = '{"b": 1, "a": 2}'
    for _ in range(2):
        assert repeat_refusal(guards, "t", args, LIMITS) is None
        after_result(
            guards, "t", args, ok=True, counts_as_failure=False, result_ref="r1", limits=LIMITS
        )
    # Same arguments in another key order are the same call.
    refused = repeat_refusal(guards, "t", '{"a": 2, "b": 1}', LIMITS)
    assert refused is not None and "2 times" in refused
    assert after_refusal(guards, "t", args, LIMITS).hard_stop is not None
    assert canonical_arguments("not json") == "not json"


def test_identical_calls_of_a_turn_queue_only_where_the_guard_could_refuse_them() -> None:
    same, other = ("t", '{"a": 1}'), ("t", '{"a": 2}')
    # Threshold 2: the third identical call (and the fourth) could be refused once the
    # ones before it returned the same result; the first two, and another call, run now.
    calls = [same, same, other, ("t", '{ "a" : 1 }'), same]
    assert queued_repeats(Guards(), calls, LIMITS, skip=()) == {3: [0, 1], 4: [0, 1, 3]}
    # A call not run (its id repeated) is neither queued nor waited for.
    assert queued_repeats(Guards(), calls, LIMITS, skip={1}) == {4: [0, 3]}
    # Seen once in an earlier turn: the second identical call of this one queues.
    guards = Guards(repeats={("t", '{"a": 1}'): {"r": 1}})
    assert queued_repeats(guards, [same, same], LIMITS, skip=()) == {1: [0]}
    # At the threshold already, each is refused as it comes: none needs the others.
    guards = Guards(repeats={("t", '{"a": 1}'): {"r": 2}})
    assert queued_repeats(guards, [same, same, same], LIMITS, skip=()) == {}


def test_a_queued_call_reads_the_guard_as_the_calls_before_it_leave_it() -> None:
    guards = Guards()
    args = '{"a": 1}'
    seen = seen_after(guards, "t", args, [(False, "r1"), (False, "r1")], LIMITS)
    assert repeat_refusal(seen, "t", args, LIMITS) is not None
    assert guards.repeats == {}  # the Run's guards are updated after the batch, not here
    # Other results (or none, as a built-in's) are no repeat.
    seen = seen_after(guards, "t", args, [(False, "r1"), (False, "r2"), (False, None)], LIMITS)
    assert repeat_refusal(seen, "t", args, LIMITS) is None
    # A refusal before it counts toward the hard stop, as after the batch.
    seen = seen_after(guards, "t", args, [(False, "r1"), (False, "r1"), (True, None)], LIMITS)
    assert seen.repeats[("t", canonical_arguments(args))] == {"r1": 3}


def test_ready_model_prefers_the_next_ready_one_then_the_soonest() -> None:
    models = ["a", "b", "c"]
    assert ready_model(models, 0, {}, now=10.0) == "a"
    assert ready_model(models, 1, {"b": 20.0}, now=10.0) == "c"
    assert ready_model(models, 0, {"a": 30.0, "b": 15.0, "c": 40.0}, now=10.0) == "b"


def test_retry_delay_and_budget() -> None:
    transient = ModelFailure(transient=True, message="503")
    assert [retry_delay(transient, n) for n in (1, 2, 3, 10)] == [0.5, 1.0, 2.0, 30.0]
    assert retry_delay(transient.model_copy(update={"retry_after": 7.0}), 5) == 7.0
    assert budget_left(2, 1, transient) == 0
    assert budget_left(2, 2, transient) == -1
    assert budget_left(2, 2, ModelFailure(transient=False, message="400")) == 0


def test_totals_roll_up_and_unknown_cost_stays_unknown() -> None:
    usage = Usage(input_tokens=10, output_tokens=2)
    priced = Totals().plus(model_calls=1).with_usage(usage, 0.5, cost_unknown=False)
    assert priced.cost == 0.5 and not priced.cost_unknown
    unpriced = Totals().plus(model_calls=1).with_usage(usage, None, cost_unknown=True)
    assert unpriced.cost is None and unpriced.cost_unknown
    parent = priced.rolled_up(priced, cost_unknown=False)
    assert (parent.model_calls, parent.usage.input_tokens, parent.cost) == (2, 20, 1.0)
    assert priced.rolled_up(unpriced, cost_unknown=True).cost is None


def test_size_problem_names_the_field() -> None:
    big = "x" * (MAX_TEXT_CHARS + 1)
    assert size_problem(SteerInput(tenant="a", message="hi")) is None
    assert "message is" in (size_problem(SteerInput(tenant="a", message=big)) or "")
    assert "reason is" in (size_problem(AbortInput(tenant="a", reason=big)) or "")
    resume = ResumeInput(reason="external", id="t", tenant="a", payload=["y" * 300_000])
    assert "payload is" in (size_problem(resume) or "")


def test_parse_input_says_what_is_wrong() -> None:
    assert "given none" in str(parse_input([], AgentRunInput))
    assert "given 2" in str(parse_input([{}, {}], AgentRunInput))
    assert "not a valid AgentRunInput" in str(parse_input([{"run_id": 1}], AgentRunInput))


def _pending(item_id: str) -> Pending:
    return Pending(
        reason="approval",
        id=item_id,
        call_id=item_id,
        tool="t",
        expires_at=datetime(2030, 1, 1, tzinfo=UTC),
    )


def test_a_forwarded_answer_cannot_be_given_again_after_a_stale_report() -> None:
    changes: list[None] = []
    held = Suspensions(
        RecordLog(Scope(tenant="a")), changed=lambda: changes.append(None), aborted=lambda: None
    )
    held.set_child("child", (_pending("A"),))
    (mirrored,) = held.items()
    assert mirrored.run == "child" and held.child_of(mirrored) == "child"
    held.forward("child", mirrored, named=False)  # answered here, sent on to the child
    held.set_child("child", (_pending("A"), _pending("B")))  # sent before it saw the answer
    assert [item.id for item in held.items()] == ["B"]
    answer = ResumeInput(reason="approval", id="A", tenant="a", approved=False)
    with pytest.raises(ApplicationError) as again:
        held.check(answer)
    assert again.value.type == "AlreadyAnswered"
    held.set_child("child", (_pending("B"),))  # the child took it
    with pytest.raises(ApplicationError) as taken:
        held.check(answer)
    # Not "nothing pending with id 'A'" (UnknownPending), as it was until an audit.
    assert taken.value.type == "AlreadyAnswered"
    assert "'A' was already answered (forwarded to Run child)" in str(taken.value)
    held.set_child("child", (_pending("B"), _pending("A")))  # the id is free again
    assert [(item.id, item.run) for item in held.items()] == [("B", "child"), ("A", "child")]
    assert changes


def test_an_answer_by_id_alone_forwards_as_before_and_one_naming_its_holder_only_that_item() -> (
    None
):
    # One child mirrors its own A and a grandchild's A. Answered by id alone, both leave
    # the parent's list until the child reports again, as before answers could name a
    # holder (histories of that shape replay unchanged); named, only the one named leaves.
    def mirrored_twice() -> Suspensions:
        held = Suspensions(RecordLog(Scope(tenant="a")), changed=lambda: None, aborted=lambda: None)
        grandchild = _pending("A").model_copy(update={"run": "grandchild"})
        held.set_child("child", (_pending("A"), grandchild))
        return held

    by_id = mirrored_twice()
    first = by_id.items()[0]
    by_id.forward("child", first, named=False)
    assert by_id.items() == ()
    named = mirrored_twice()
    named.forward("child", named.items()[1], named=True)
    assert [(item.id, item.run) for item in named.items()] == [("A", "child")]
    named.set_child(
        "child", (_pending("A"), _pending("A").model_copy(update={"run": "grandchild"}))
    )
    assert [(item.id, item.run) for item in named.items()] == [("A", "child")]


def test_a_childs_older_report_arriving_late_is_not_taken() -> None:
    held = Suspensions(RecordLog(Scope(tenant="a")), changed=lambda: None, aborted=lambda: None)
    # Two reports of one workflow task, delivered in the other order.
    assert held.newer_report("child", 2)
    held.set_child("child", (_pending("A"), _pending("B")), working=True)
    assert not held.newer_report("child", 1)  # (A) alone, not working: stale
    assert [item.id for item in held.items()] == ["A", "B"]
    assert not held.waiting_only(0)  # the child works beside what it waits for
    assert held.newer_report("child", (1 << 32) + 1)  # its next execution's first report
    held.set_child("child", (_pending("A"),))
    assert held.waiting_only(0)
    assert held.newer_report("other", 0) and held.newer_report("other", 0)  # an old child's


async def test_drain_reports_waits_for_outcomes_still_on_their_way() -> None:
    release = asyncio.Event()
    task = asyncio.create_task(release.wait())
    _REPORTS.add(task)  # type: ignore[arg-type]  # any task stands for a report here
    task.add_done_callback(_REPORTS.discard)
    assert await drain_reports(0.05) == 1  # still unsent when the time ran out
    release.set()
    assert await drain_reports(1.0) == 0
    assert not _REPORTS


# --- subagents: the report's children and a failed child's totals --------------------------


def _stamp(seq: int) -> dict[str, object]:
    return {"seq": seq, "at": datetime(2030, 1, 1, tzinfo=UTC), "scope": Scope(tenant="a")}


def test_the_report_lists_each_child_and_what_a_subagent_was_not_granted() -> None:
    spent = Totals(model_calls=2, tool_calls=1, usage=Usage(input_tokens=7), cost=0.25)
    left = LeftOut(what="tool", name="orders", reason="tool 'orders' is not the same ...")
    admitted = RunAdmitted(
        **_stamp(1),
        version_hash="sha256:x",
        agent="lead",
        messages=("go",),
        system_prompt="",
        left_out=(left,),
    )
    settled = ChildSettled(
        **_stamp(2),
        turn=1,
        call_id="c1",
        run="psych-a-r-sub1",
        agent="researcher",
        via="delegate",
        version_hash="sha256:y",
        status=RunStatus.FAILED,
        reason="model: 400",
        totals=spent,
    )
    state = RunState(
        run_id="r",
        tenant="a",
        agent="lead",
        version_hash="sha256:x",
        status=RunStatus.RUNNING,
        turn=1,
        last_seq=2,
        totals=Totals(),
    )
    report = build_report("psych-a-r", state, [admitted, settled])
    (child,) = report.children
    assert (child.run, child.agent, child.via, child.status, child.reason, child.totals) == (
        "psych-a-r-sub1",
        "researcher",
        "delegate",
        RunStatus.FAILED,
        "model: 400",
        spent,
    )
    assert report.left_out == (left,)
    lines = dict(child_fields(report))
    assert lines["child 1"] == (
        "psych-a-r-sub1 (researcher, delegate) failed: 2 model calls, 1 tool calls, "
        "7 in / 0 out, cost 0.250000; model: 400"
    )
    assert lines["left out"].startswith("tool 'orders': ")
    assert "child 1:" in format_report(report)
    unpriced = spent.model_copy(update={"cost": None})
    assert "cost unknown" in child_settled_line(settled.model_copy(update={"totals": unpriced}))


def test_a_failed_childs_totals_come_from_its_run_failed_details() -> None:
    spent = Totals(model_calls=3, usage=Usage(output_tokens=4), cost=1.5)
    failed = ApplicationError("boom", spent.model_dump(mode="json"), type=ErrorType.RUN_FAILED)
    err = ChildWorkflowError(
        "child failed",
        namespace="n",
        workflow_id="w",
        run_id="r",
        workflow_type="AgentRun",
        initiated_event_id=1,
        started_event_id=2,
        retry_state=None,
    )
    err.__cause__ = failed
    assert failed_totals(err) == spent
    other = ChildWorkflowError(
        "child failed",
        namespace="n",
        workflow_id="w",
        run_id="r",
        workflow_type="AgentRun",
        initiated_event_id=1,
        started_event_id=2,
        retry_state=None,
    )
    other.__cause__ = ApplicationError("terminated", type="Terminated")
    assert failed_totals(other) is None
