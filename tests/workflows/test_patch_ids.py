"""Every ``workflow.patched`` (and ``deprecate_patch``) the workflows ask is a listed patch.

The baseline asked none: a new Run of a fleet on one queue recorded no patch marker
(histories/README.md, "Compatibility policy"); since ``psych-local-resolution-safe`` every
new Run records the newest start patch's marker, which stands for the older ones
(``kernel/_patches.py``; now ``psych-unpermitted-told``), until the policy's step 3
removes it. A later change that breaks replay of a committed history adds its id to
``PATCHES`` here with the release that added it, beside the ``workflow.patched`` call;
removing the id (policy step c) removes it here. An id asked but not listed, or asked in a
form this scan cannot read, fails.
"""

from __future__ import annotations

import ast
import base64
import json
from pathlib import Path

PATCHES: dict[str, str] = {
    "psych-roles-apart": "0.1.0",
    "read-own-results": "0.1.0",
    # A Run settling while it waits on an A2A peer task asks the peer to cancel it
    # (features/_a2a.py, ``settling``); a Run recorded before settled without asking.
    "psych-a2a-cancel-peer-task": "0.1.0",
    "psych-fanout-counts-spawn": "0.1.0",
    # A consent wait that ends without consent has psych.mcp.authorize forget the parked
    # flow (kernel/_consent.py); a Run recorded before ended without the call.
    "psych-consent-forget": "0.1.0",
    # A workflow whose max_steps is used up fails an agent or workflow step instead of
    # starting it (runs/_workflow_run.py); a Run recorded before started it.
    "psych-workflow-steps-bound-children": "0.1.0",
    # An abort that came during a workflow's last step settles it ABORTED, not COMPLETED.
    "psych-workflow-abort-after-last-step": "0.1.0",
    # A child tells its parent when it executes a call beside what it waits for (its
    # parent's deadline clock runs then); a child recorded before sent no such signal.
    "psych-child-reports-working": "0.1.0",
    # A workflow's tool step whose result is a JSON scalar ("42", "true") keeps it as text;
    # a Run recorded before read it as a number, boolean or null (runs/_step_output.py).
    "psych-workflow-text-step-output": "0.1.0",
    # A psych.steer signal to a workflow while its nested workflow runs is recorded
    # steer_refused (kernel/_handlers.py); a Run recorded before forwarded it.
    "psych-signal-steer-target-refused": "0.1.0",
    # A WorkflowRun continues as new between two steps once its history is long
    # (runs/_workflow_run.py); a Run recorded before ran in one execution.
    "psych-workflow-continue-as-new": "0.1.0",
    # A local activity can resolve in the workflow a task after its marker, live only (an
    # SDK race with queries, kernel/_deadline.py): the deadline clock's timers are never
    # cancelled, and continue-as-new reads the history's length where a model call
    # answered. A Run recorded before cancelled them and read it at the turn boundary.
    "psych-local-resolution-safe": "0.1.0",
    # A Run on one queue whose catalogue (a local activity) fails settles FAILED with
    # run_settled and its status (workflows/kernel/_catalog.py); a Run recorded before
    # failed unsettled. Asked at every Run's start, before psych-local-resolution-safe (the
    # change follows a local resolution, where patched() answers otherwise on replay); a
    # Run that asked it also takes the features' older patches without asking
    # (RunBase.patched).
    "psych-catalog-failure-settles": "0.1.0",
    # A turn's call whose id an earlier call of the turn has is not run (kernel/_guards.py,
    # ``repeated_ids``); a Run recorded before ran it, and two approvals under one id hung.
    "psych-unique-call-ids": "0.1.0",
    # Calls past max_tool_calls_per_turn or max_steps count toward no failure streak, and a
    # Run force-settled or cancelled mid-batch records the batch's finished calls with their
    # results (workflows/kernel/_tool_calls.py); a Run recorded before counted them (and
    # could withhold the tool, or fail) and left the finished calls without a record. Asked
    # at every Run's start since, before psych-catalog-failure-settles, which it stands for.
    "psych-batch-accounting": "0.1.0",
    # A child Run is bounded as its parent is: a subagent gets only its parent's A2A peers
    # (by definition, as its tools), delegate refuses a call without a task, and a next Run
    # keeps the spawn depth of the Run it follows (features/_subagents.py,
    # kernel/_run_base.py). Asked at every Run's start, before psych-catalog-failure-settles,
    # which it stands for (kernel/_patches.py); a Run recorded before asks that one.
    "psych-children-bounded": "0.1.0",
    # A workflow cancelled (or past its deadline and grace) while an agent or workflow step
    # runs aborts the step's Run, waits for it within a bound and takes its totals
    # (runs/_workflow_run.py, kernel/_wind_down.py); a Run recorded before cancelled it and
    # its totals were lost. Asked as the cancellation reaches the running step.
    "psych-workflow-step-winds-down": "0.1.0",
    # A model-call attempt that made no request (its MCP discovery asked for a consent, or
    # a required server did not answer) counts as no model call and no step
    # (kernel/_turns.py); a Run recorded before counted it.
    "psych-uncounted-attempts": "0.1.0",
    # The polls of an A2A peer task the Run waits on carry the arguments a pre hook rewrote
    # (what was sent), so the post hooks on the answer see them (features/_a2a.py); a Run
    # recorded before polled with the model's arguments. Asked only when they differ.
    "psych-a2a-poll-ran-arguments": "0.1.0",
    # A model retry is a step: none is made once max_steps is used up, the Run stops
    # (workflows/kernel/_turns.py); a Run recorded before retried past max_steps.
    "psych-retries-within-max-steps": "0.1.0",
    # An agent whose workflow is cancelled (or past its deadline and grace) while its
    # children run aborts them, waits for them within a bound and takes their totals: a
    # subagent delegate waits for, its live spawned children (kernel/_children.py,
    # features/_subagents.py, features/_spawn_collect.py); a Run recorded before left them
    # to their close policy and their totals were lost. Asked as the cancellation arrives.
    "psych-children-wind-down": "0.1.0",
    # A compacting Run whose max_steps a parent workflow narrows leaves room for its next
    # model call within that bound (features/_compaction.py); a Run recorded before checked
    # the Spec's max_steps, and its summariser could take the bound's last step.
    "psych-compaction-within-bounds": "0.1.0",
    # A workflow step whose output would take the outputs past MAX_OUTPUTS_BYTES fails the
    # Run (runs/_step_output.py); a Run recorded before kept it, and outputs past Temporal's
    # payload limit left it unsettled. Asked at every Run's start (the check follows a tool
    # step, often a local activity), before psych-children-bounded, which it stands for
    # with the older start patches (kernel/_patches.py); an AgentRun records it too.
    "psych-workflow-outputs-bounded": "0.1.0",
    # A failure of the A2A cards (a local activity) at a boundary settles the Run FAILED
    # (features/_a2a.py, ``boundary``); a Run recorded before failed unsettled on a
    # non-retryable one. Asked at every Run's start (it follows a local activity's
    # resolution), before psych-workflow-outputs-bounded, which it stands for with the older
    # start patches (kernel/_patches.py).
    "psych-a2a-cards-failure-settles": "0.1.0",
    # What the model reads of a tool the tenant's permits refuse is true across
    # continue-as-new (kernel/_guards.py ``revoked_note``, kernel/_tool_calls.py
    # ``_told_unpermitted``); a Run recorded before read "withdrawn for the rest of this
    # Run", and a call of a tool its catalogue left out as an unknown tool's. Asked at every
    # Run's start (the note follows a tool call, maybe a local activity), before
    # psych-a2a-cards-failure-settles, which it stands for with the older start patches.
    "psych-unpermitted-told": "0.1.0",
    # A final answer the model cut at its output limit (finish_reason length) completes
    # the Run with a reason saying so (kernel/_turns.py ``_answered``); a Run recorded
    # before completed as "answered". Asked only for such an answer, after the model
    # call's activity (never a local one) resolves.
    "psych-cut-answer-named": "0.1.0",
    # A cut final answer a stopped Run keeps (input waited for a turn max_turns or
    # max_steps left none for) is named in its reason too (kernel/_turns.py ``_kept_cut``);
    # a Run recorded before said only the bound. Asked only for such an answer, after the
    # model call's activity resolves.
    "psych-cut-answer-stopped-named": "0.1.0",
    # A workflow's agent (or nested workflow) step whose output is an answer cut at the
    # model's output limit is named in the workflow's reason (runs/_workflow_run.py,
    # ``_child_step``); a Run recorded before said "completed: N steps". Asked only for
    # such a step, as its child's end arrives.
    "psych-workflow-cut-step-named": "0.1.0",
    # A child's answer cut at its model's output limit is told to the lead's model: a
    # ``[runtime]`` note ahead of a delegate result, ``cut_short`` in a wait_children ending
    # (features/_subagents.py ``cut_told``); a Run recorded before showed the cut text as a
    # whole answer. Asked only for such an answer, as the child's ending reaches the model.
    "psych-child-cut-answer-told": "0.1.0",
    # A Run settling while its person has not answered an A2A peer's question asks the peer
    # to cancel the task waiting there (features/_a2a.py, ``settling``); a Run recorded
    # before left it waiting at the peer.
    "psych-a2a-cancel-asked-peer-task": "0.1.0",
    # A read of a waited A2A peer task that fails (the peer down, restarting) is made again
    # on the poller's timer (features/_a2a.py, ``_poll``); a Run recorded before ended its
    # wait with the failure.
    "psych-a2a-poll-through-failures": "0.1.0",
    # The read a peer's push asks for that fails leaves the Run waiting on the task, its
    # poller reading again (features/_a2a.py, ``_wait_on_task``); a Run recorded before
    # ended the call with the failure.
    "psych-a2a-pushed-read-through-failures": "0.1.0",
    # An agent's deadline clock runs while a subagent or spawned child of its works
    # (kernel/_handlers.py, ``adopt_child``; kernel/_suspensions.py); a Run recorded before
    # stopped it while it waited on the child. Asked as the child's start resolves.
    "psych-clock-runs-with-children": "0.1.0",
    # A child's answer over large_result_bytes (delegate's, wait_children's endings) is
    # stored by psych.tool.store_result and shown as a handle with a preview
    # (features/_subagents.py, ``answer_result``); a Run recorded before showed it whole.
    # Asked only for such an answer, as the child's ending arrives.
    "psych-child-answers-stored": "0.1.0",
    # The payload completing a code tool's external wait goes through the call's post hooks
    # and is stored (psych.tool.finish_external; kernel/_external_result.py); a Run recorded
    # before showed it as sent. Asked as the completion arrives, for a code tool's wait.
    "psych-external-result-hooked": "0.1.0",
    # The same for an A2A peer's task an operator completes by hand (its ``a2a:`` token):
    # the payload goes through the call's post hooks and is stored (features/_a2a.py); a
    # Run recorded before showed it as sent. Asked as the completion arrives.
    "psych-a2a-completion-hooked": "0.1.0",
    # A waited A2A peer task's answer the poller read is recorded as that read's outcome
    # (features/_a2a.py, ``_wait_on_task``): a failed task stays an error unless an
    # on_error hook replaced it, and the hooks' effects are kept; a Run recorded before
    # recorded it ok, with no effects. Asked as the poller's answer reaches the call.
    "psych-a2a-polled-answer-as-read": "0.1.0",
    # An expiry ends the Run's other waits (calls of the same turn) at once, and the Run
    # settles ABANDONED (workflows/kernel/_suspensions.py, ``hold``); a Run recorded before
    # waited each out. Asked at the expiry, only where another wait is held.
    "psych-expiry-ends-waits": "0.1.0",
    # An ask_question call whose question is missing or not text is an error the model
    # reads (workflows/features/_questions.py); a Run recorded before suspended on it.
    # Asked only for such a call.
    "psych-question-needs-text": "0.1.0",
    # A delegate or spawn call past max_fanout_per_turn counts toward no failure streak
    # (workflows/features/_fanout.py, ``over_fanout``); a Run recorded before counted it
    # (and could withhold the tool, or fail). Asked only with such a refusal.
    "psych-fanout-no-failure": "0.1.0",
    # A delegate or spawn call refused for spawn.max_alive, spawn.max_depth or a
    # max_delegation_depth counts toward no failure streak (workflows/features/
    # _child_limits.py, ``refused_child``); a Run recorded before counted it. Not
    # psych-fanout-no-failure: Runs recorded with that marker counted these refusals.
    # Asked only with such a refusal.
    "psych-limit-refusals-no-failure": "0.1.0",
    # Identical calls of one turn are held to the repeat guard as calls of successive turns
    # are: one the guard could refuse once those before it returned waits for them
    # (workflows/kernel/_tool_batch.py, ``_queued_tool``); a Run recorded before ran them
    # all at once. Asked only for a turn with such a call, as its batch starts.
    "psych-repeat-calls-in-a-turn": "0.1.0",
    # A call queued behind identical calls of its turn starts nothing once the Run was
    # aborted or an expiry settles it (workflows/kernel/_tool_batch.py, ``_queued_tool``);
    # a Run recorded before asked its policy, and ran it after another call's expiry.
    # Asked with psych-repeat-calls-in-a-turn, as a batch with a queued call starts.
    "psych-queued-calls-stop": "0.1.0",
    # A consent the authorization server refused (the callback answers the item
    # approved=False) is told: a tool call rejected, a discovery fails the Run
    # (workflows/kernel/_consent.py); a Run recorded before took it as a consent, had the
    # code exchanged, and asked again. Asked only where a refusal arrives.
    "psych-consent-refused": "0.1.0",
    # A psych.resume signal answering the model's question with blank text is logged and
    # ignored, the question still waits (workflows/kernel/_handlers.py), as the update's
    # validator refuses it; a Run recorded before took it. Asked only for such a signal.
    "psych-signal-blank-answer": "0.1.0",
    # An optional MCP server whose consent was refused at a turn's discovery is told to the
    # model: a note on the attempt made without it (workflows/kernel/_turns.py). The
    # workflow derives that attempt's conversation head from its messages
    # (activities/contract/_slim.py), so a Run recorded before, sent no note, must not be
    # given one on replay. Asked only where such a refusal arrives.
    "psych-consent-refused-note": "0.1.0",
    # load_skill's arguments that do not fit its schema and an unknown skill name are
    # errors naming what is wrong, and a body over large_result_bytes is stored and shown
    # as a handle with a preview (workflows/features/_skills.py); a Run recorded before
    # answered every such call ok, the body whole. Asked only for such a call, as its
    # turn's calls start.
    "psych-load-skill-checked": "0.1.0",
    # wait_children lets the spawn calls of its own turn start their children first
    # (workflows/features/_spawn_collect.py); a Run recorded before answered "none is
    # open" while they were starting. Asked only when such a spawn is still running.
    "psych-wait-children-same-turn": "0.1.0",
    # An ask_question answer over large_result_bytes is stored and shown as a handle with
    # a preview (workflows/features/_questions.py); a Run recorded before showed it whole.
    # Asked only for such an answer, as it arrives.
    "psych-answer-bounded": "0.1.0",
    # A psych.resume signal answering a wait the Run's abort ended (its own, or a workflow's
    # running step's), in the abort's own activation, is refused as the abort's
    # (kernel/_handlers.py); a Run recorded before took it. Asked only for such an answer.
    "psych-abort-ends-answers": "0.1.0",
    # An approver's rejection note over large_result_bytes is stored and shown as a handle
    # with a preview (workflows/kernel/_tool_result.py, ``rejected``); a Run recorded
    # before showed it whole. Asked only for such a note, as it arrives.
    "psych-rejection-note-bounded": "0.1.0",
    # Likewise an answer to a lead's subagent's or spawned child's item after the lead's
    # abort (kernel/_handlers.py); a Run recorded before forwarded it to the child. Asked
    # only for such an answer.
    "psych-abort-ends-child-answers": "0.1.0",
    # A refusal of an MCP server's consent by signal whose note is over
    # MAX_CONSENT_NOTE_CHARS is ignored, the item still waiting, as the update's validator
    # refuses it (workflows/kernel/_handlers.py); a Run recorded before took it and told the
    # model the whole note. Asked only for such a signal.
    "psych-consent-note-bounded": "0.1.0",
    # Such a note the blob store could not store (store_result failing through its
    # retries) is read cut at the bound, the Run going on (workflows/kernel/_tool_calls.py,
    # ``_authorize``); a Run recorded before failed. Asked only on that failure.
    "psych-rejection-unstored-read": "0.1.0",
    # An answer to ask_question over large_result_bytes the blob store could not store is
    # read cut at the bound, the Run going on (workflows/features/_questions.py); a Run
    # recorded before failed. Asked only on that failure.
    "psych-answer-unstored-read": "0.1.0",
    # A child's answer (delegate, wait_children) over large_result_bytes the blob store
    # could not store is read cut at the bound, the Run going on
    # (workflows/features/_subagents.py, ``answer_result``); a Run recorded before failed.
    # Asked only on that failure.
    "psych-child-answer-unstored-read": "0.1.0",
    # An A2A peer's artifact stored as its own blob (over its share of large_result_bytes)
    # is on the call's record (workflows/kernel/_tool_result.py, ``stored_handles``), so
    # read_tool_output reads it as the Run's own; a Run recorded before refused it. Asked
    # only for an outcome naming such a blob, as its record is made.
    "psych-a2a-artifact-handles": "0.1.0",
}
"""Patch id -> the release that added it. ``psych-roles-apart`` records a fact (the fleet
runs roles apart, ``workflows/kernel/_activity_calls.py``), not a code change: it is never
deprecated."""

WORKFLOWS = Path(__file__).parents[2] / "workflows"
HISTORIES = Path(__file__).parent / "histories"
_PATCH_CALLS = frozenset({"patched", "deprecate_patch"})


def asked_patches(source: str, where: str) -> dict[str, str]:
    """Every id passed to ``patched``/``deprecate_patch`` in ``source`` -> where.

    Any call of a function of those names counts (``workflow.patched``, ``patched``
    imported bare); its id must be a string literal.
    """
    asked: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name not in _PATCH_CALLS:
            continue
        (arg,) = node.args
        forwards = where.endswith(("_run_base.py", "_patches.py"))
        if isinstance(arg, ast.Name) and arg.id == "patch_id" and forwards:
            # RunBase.patched (and StartPatches.answers for it) forwards its callers' ids,
            # which the scan reads there.
            continue
        assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), (
            f"{where}:{node.lineno}: the patch id must be a string literal, not {ast.unparse(arg)}"
        )
        asked[arg.value] = f"{where}:{node.lineno}"
    return asked


def test_the_scan_finds_patch_calls() -> None:
    source = (
        "from temporalio import workflow\n"
        "from temporalio.workflow import patched\n"
        "if workflow.patched('psych-a'): pass\n"
        "workflow.deprecate_patch('psych-b')\n"
        "if patched('psych-c'): pass\n"
    )
    assert set(asked_patches(source, "sample")) == {"psych-a", "psych-b", "psych-c"}


def test_every_patch_the_workflows_ask_is_listed() -> None:
    asked: dict[str, str] = {}
    for path in sorted(WORKFLOWS.rglob("*.py")):
        asked |= asked_patches(path.read_text(), str(path.relative_to(WORKFLOWS)))
    unlisted = {patch: where for patch, where in asked.items() if patch not in PATCHES}
    assert not unlisted, f"patches not listed in PATCHES (see the policy): {unlisted}"
    unused = sorted(set(PATCHES) - set(asked))
    assert not unused, f"listed patches no workflow asks (remove them): {unused}"


def test_committed_histories_record_only_listed_patches() -> None:
    recorded: dict[str, str] = {}
    for path in sorted(HISTORIES.glob("*.json")):
        for event in json.loads(path.read_text())["events"]:
            marker = event.get("markerRecordedEventAttributes")
            if marker is None or marker["markerName"] != "core_patch":
                continue
            (payload,) = marker["details"]["patch-data"]["payloads"]
            recorded[json.loads(base64.b64decode(payload["data"]))["id"]] = path.name
    unlisted = {patch: where for patch, where in recorded.items() if patch not in PATCHES}
    assert not unlisted, f"histories record patches not in PATCHES: {unlisted}"
