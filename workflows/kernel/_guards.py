"""The guards on a Run's tool calls, as pure functions over their bookkeeping.

Failure streak: consecutive ``error``/``refused`` outcomes of one tool; at
``failure_streak_threshold`` the tool is withheld (not offered, the model told), at
``failure_streak_hard_stop`` the Run fails. Repeat guard: the same tool with the same
canonical arguments returning the same result ``repeat_call_threshold`` times makes later
identical calls refused without running; refusals count toward ``repeat_call_hard_stop``.
Identical calls of one turn are held to it as calls of successive turns are: one that
could be refused once the identical calls before it have returned waits for them
(``queued_repeats``) and sees the guard as they leave it (``seen_after``).
Policy denials, rejections and aborts are not the tool failing and count toward nothing,
nor do calls the Run did not run past ``max_tool_calls_per_turn`` or ``max_steps``.
Repeated ids: a call whose id an earlier call of its turn has is not run.
Revoked: a tool whose call the tenant's permits refused is withdrawn, the model told
(``revoked_note``; the bookkeeping is ``ToolCalls._revoked``).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.specs import Limits


@dataclass
class Guards:
    """Failure-streak and repeat-call bookkeeping of one Run."""

    streaks: dict[str, int] = field(default_factory=dict)
    withheld: list[str] = field(default_factory=list)
    repeats: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    """(tool, canonical arguments) -> result ref -> times seen."""


@dataclass(frozen=True)
class Verdict:
    """What one finished call does to the Run: withhold its tool, or stop the Run."""

    withhold: int | None = None
    """The streak length at which the tool is withheld now (None: not withheld now)."""
    hard_stop: str | None = None
    """Why the Run fails now (None: it goes on)."""


def canonical_arguments(raw: str) -> str:
    """Arguments as a comparable key (sorted JSON; malformed text as it came)."""
    try:
        return json.dumps(json.loads(raw or "{}"), sort_keys=True)
    except json.JSONDecodeError:
        return raw


def withheld_message(tool: str, limits: Limits) -> str:
    """The refusal a call of a withheld tool gets."""
    return (
        f"{tool} is withheld: it failed {limits.failure_streak_threshold} times in a row. "
        "Use another approach."
    )


def repeat_refusal(guards: Guards, tool: str, arguments: str, limits: Limits) -> str | None:
    """The refusal of a call repeated past the threshold (None: let it run)."""
    seen = guards.repeats.get((tool, canonical_arguments(arguments)), {})
    if not seen or max(seen.values()) < limits.repeat_call_threshold:
        return None
    times = max(seen.values())
    if times == 1:
        return (
            f"not run: you called {tool} with these arguments already and have its result. "
            "Change approach instead of repeating the call."
        )
    return (
        f"not run: you called {tool} with these arguments {times} times and got the same "
        "result each time. Change approach instead of repeating the call."
    )


def after_refusal(guards: Guards, tool: str, arguments: str, limits: Limits) -> Verdict:
    """Count a repeat refusal; past ``repeat_call_hard_stop`` the Run stops."""
    seen = guards.repeats[(tool, canonical_arguments(arguments))]
    top = max(seen, key=lambda sig: seen[sig])
    seen[top] += 1
    if seen[top] >= limits.repeat_call_hard_stop:
        return Verdict(
            hard_stop=f"repeat_call: {tool} was called {seen[top]} times with the same "
            "arguments and result"
        )
    return Verdict()


def after_result(
    guards: Guards,
    tool: str,
    arguments: str,
    *,
    ok: bool,
    counts_as_failure: bool,
    result_ref: str | None,
    limits: Limits,
) -> Verdict:
    """Update the guards with one finished call (in call order)."""
    if result_ref is not None:
        seen = guards.repeats.setdefault((tool, canonical_arguments(arguments)), {})
        seen[result_ref] = seen.get(result_ref, 0) + 1
    if ok:
        guards.streaks.pop(tool, None)
        return Verdict()
    if not counts_as_failure:
        return Verdict()
    streak = guards.streaks.get(tool, 0) + 1
    guards.streaks[tool] = streak
    if streak >= limits.failure_streak_hard_stop:
        return Verdict(hard_stop=f"failure_streak: {tool} failed {streak} times in a row")
    if streak >= limits.failure_streak_threshold and tool not in guards.withheld:
        guards.withheld.append(tool)
        return Verdict(withhold=streak)
    return Verdict()


def queued_repeats(
    guards: Guards, calls: Sequence[tuple[str, str]], limits: Limits, *, skip: Collection[int]
) -> dict[int, list[int]]:
    """The calls of a turn that wait for the identical calls before them in it.

    Args:
        guards: the Run's guards, as the turns before this one left them.
        calls: the turn's calls that run, in call order: (tool, arguments as sent).
        limits: the Run's limits.
        skip: positions of calls that are not run (their id repeats an earlier one's).

    Returns:
        Per position of a call the repeat guard could refuse once the identical calls
        before it have returned (each adding at most one to the count it reads), their
        positions. A call the guard refuses already (or could not refuse) is not there:
        it needs no result of its turn.
    """
    before: dict[tuple[str, str], list[int]] = {}
    queued: dict[int, list[int]] = {}
    for index, (tool, arguments) in enumerate(calls):
        if index in skip:
            continue
        key = (tool, canonical_arguments(arguments))
        earlier = before.setdefault(key, [])
        prior = max(guards.repeats.get(key, {}).values(), default=0)
        if prior < limits.repeat_call_threshold <= prior + len(earlier):
            queued[index] = list(earlier)
        earlier.append(index)
    return queued


def seen_after(
    guards: Guards,
    tool: str,
    arguments: str,
    earlier: Sequence[tuple[bool, str | None]],
    limits: Limits,
) -> Guards:
    """The repeat guard of a queued call (``queued_repeats``) once the identical calls
    before it in its turn have returned, as their results will update it in call order
    (``earlier``: per call, whether it was a repeat refusal, and its result ref)."""
    key = (tool, canonical_arguments(arguments))
    seen = Guards(repeats={key: dict(guards.repeats.get(key, {}))})
    for refused, result_ref in earlier:
        if refused:
            after_refusal(seen, tool, arguments, limits)
        else:
            after_result(
                seen,
                tool,
                arguments,
                ok=True,
                counts_as_failure=False,
                result_ref=result_ref,
                limits=limits,
            )
    return seen


def withheld_note(tool: str, streak: int) -> str:
    """What the model is told when a tool is withheld."""
    return (
        f"[runtime] The tool {tool} failed {streak} times in a row and is withheld for the "
        "rest of this Run. Continue without it."
    )


def revoked_note(tool: str, refusal: str, *, told: bool) -> str:
    """What the model is told when a call of ``tool`` was refused by the tenant's permits
    (``refusal``, the worker's words): the tool is withdrawn. ``told`` (patch
    ``psych-unpermitted-told``): for as long as the permit is refused, which is what holds
    across continue-as-new (the next catalogue asks the permits again); a Run recorded
    before read "for the rest of this Run"."""
    if told:
        return (
            f"[runtime] The tool {tool} is no longer permitted ({refusal}) and is withdrawn: "
            "it is not offered again unless its permit is given back. Continue without it."
        )
    return (
        f"[runtime] The tool {tool} is no longer permitted ({refusal}) and is withdrawn for "
        "the rest of this Run. Continue without it."
    )


def repeated_ids(ids: Sequence[str]) -> set[int]:
    """The positions in ``ids`` (one turn's call ids, in call order) of the ids an earlier
    call has.

    A Run keys what it waits for by call id (a pending approval or question), and its
    open and interruptible calls too: two calls under one id would share one suspension
    (an answer releases one of them, the other waits unseen until its expiry) and one abort.
    """
    seen: set[str] = set()
    repeats: set[int] = set()
    for index, call_id in enumerate(ids):
        if call_id in seen:
            repeats.add(index)
        seen.add(call_id)
    return repeats


def repeated_id_message(call_id: str) -> str:
    """What the model reads of a call not run because an earlier call had its id."""
    return (
        f"not run: an earlier call of this turn has the same id {call_id!r}; each call "
        "needs an id of its own"
    )


def over_cap_reason(position: int, limits: Limits) -> str:
    """Why the call at ``position`` (0-based, in call order) of a turn's batch, past the
    Run's room, is not run: past ``max_tool_calls_per_turn`` when it is, else because
    ``max_steps`` is used up (a call within the per-turn cap that the steps left did not
    reach, in a batch that may be longer than the cap too)."""
    if position >= limits.max_tool_calls_per_turn:
        return (
            f"not run: more than max_tool_calls_per_turn ({limits.max_tool_calls_per_turn}) "
            "calls in one turn"
        )
    return f"not run: the Run's max_steps ({limits.max_steps}) is used up"
