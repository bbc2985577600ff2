"""Tool-call hooks: the one interception plan every tool activity runs a call through.

A worker's ``Hooks`` is an immutable chain of ``Hook`` entries, each a stage (``pre``,
``post`` or ``on_error``), a tool pattern (a name, a ``prefix*`` or ``*``) and an action (a
Python callable, sync or async, or a ``CommandHook``). The code, HTTP, MCP and A2A tool
activities and ``read_tool_output`` each open an ``Interception`` for their call and run it
in this order, after the workflow's policy decision (which may have suspended for
approval):

1. pre hooks, in chain order: each may deny (the model reads the reason; the outcome's
   status is ``denied``) or rewrite the arguments the next hook and the tool see;
2. the call;
3. on success, post hooks (each may rewrite the result); on a failure (an ``error``
   outcome), on_error hooks: the first that returns a result replaces the failure
   (status ``ok``), else it stands.

A pre hook that fails (raises, answers nonsense, a command hook that exits non-zero, does
not start or times out) denies: a check that cannot run must not let the call through. A
post or on_error hook that fails is logged and ignored. The outcome carries what happened
(``ToolOutcome.ran_arguments``, ``ToolOutcome.hooks``), which the workflow records.

Hooks run inside the tool activity, so the exactly-once rules are the activity's: a call
not safe to repeat whose worker dies between a pre hook and the call is UNKNOWN.
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from psych_runtime.activities.hooks._calls import (
    STAGES,
    Deny,
    HookAction,
    HookCall,
    HookStage,
    PreHook,
    ResultHook,
    check_pattern,
    pattern_matches,
)
from psych_runtime.activities.hooks._command import CommandHook, CommandResult, run_command
from psych_runtime.activities.hooks._effects import hook_effect

if TYPE_CHECKING:
    from psych_runtime.activities.contract import HookEffect, ToolOutcome

_HEARTBEAT_SECONDS = 1.0
_T = TypeVar("_T")
_O = TypeVar("_O")
_log = logging.getLogger(__name__)


def _callable_name(action: Callable[..., Any]) -> str:
    module = getattr(action, "__module__", None) or "?"
    name = getattr(action, "__qualname__", None) or type(action).__qualname__
    return f"{module}:{name}"


@dataclass(frozen=True)
class Hook:
    """One entry of a chain.

    Attributes:
        stage: ``pre``, ``post`` or ``on_error``.
        pattern: the tools it covers: a name, ``prefix*`` or ``*``.
        action: a Python callable (``PreHook`` or ``ResultHook``) or a ``CommandHook``.
        name: how records and ``psych hooks check`` name it (default: ``module:qualname``
            of a callable, ``command:[argv...]`` of a command).
    """

    stage: HookStage
    pattern: str
    action: HookAction
    name: str = ""

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"invalid hook stage {self.stage!r}: one of {', '.join(STAGES)}")
        check_pattern(self.pattern)
        if not isinstance(self.action, CommandHook) and not callable(self.action):
            raise TypeError(f"a hook is a callable or a CommandHook, not {self.action!r}")
        if not self.name:
            name = (
                self.action.name
                if isinstance(self.action, CommandHook)
                else _callable_name(self.action)
            )
            object.__setattr__(self, "name", name)

    @property
    def key(self) -> tuple[str, str, object]:
        """What makes two entries the same hook: stage, pattern and the action itself
        (the same function object, or an equal command)."""
        return (self.stage, self.pattern, self.action)


class Hooks:
    """An immutable chain of hooks; every method returns a new chain.

    ::

        hooks = Hooks().pre("send_*", check_recipient).post("*", redact_emails)

    Declaring the same hook (stage, pattern, action) again adds nothing, so binding the
    same declarations twice yields the same chain. For one tool, a stage's hooks run in
    the order they were declared, whatever pattern matched them.
    """

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[Hook] = ()) -> None:
        """A chain of ``entries``, each kept once (the first of equal ones)."""
        kept: list[Hook] = []
        for entry in entries:
            if not isinstance(entry, Hook):
                raise TypeError(f"a Hooks chain holds Hook entries, not {entry!r}")
            # Compared, not hashed: an action may be unhashable (a dataclass with __call__).
            if all(entry.key != other.key for other in kept):
                kept.append(entry)
        self._entries = tuple(kept)

    @property
    def entries(self) -> tuple[Hook, ...]:
        """Every hook, in chain order."""
        return self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hooks) and other._entries == self._entries

    def __hash__(self) -> int:
        return hash(tuple((e.stage, e.pattern, e.name) for e in self._entries))

    def __repr__(self) -> str:
        return f"Hooks({list(self._entries)!r})"

    def add(self, stage: HookStage, pattern: str, action: HookAction, name: str = "") -> Hooks:
        """This chain with one more hook (itself when that hook is already in it)."""
        return Hooks((*self._entries, Hook(stage, pattern, action, name)))

    def pre(self, pattern: str, action: PreHook | CommandHook, name: str = "") -> Hooks:
        """Add a pre hook for the tools ``pattern`` covers."""
        return self.add("pre", pattern, action, name)

    def post(self, pattern: str, action: ResultHook | CommandHook, name: str = "") -> Hooks:
        """Add a post hook for the tools ``pattern`` covers."""
        return self.add("post", pattern, action, name)

    def on_error(self, pattern: str, action: ResultHook | CommandHook, name: str = "") -> Hooks:
        """Add an on_error hook for the tools ``pattern`` covers."""
        return self.add("on_error", pattern, action, name)

    def merged(self, other: Hooks) -> Hooks:
        """This chain followed by ``other``'s hooks that it does not hold already."""
        return Hooks((*self._entries, *other._entries))

    def for_tool(self, stage: HookStage, tool: str) -> tuple[Hook, ...]:
        """The hooks of ``stage`` that cover ``tool``, in chain order."""
        return tuple(
            e for e in self._entries if e.stage == stage and pattern_matches(e.pattern, tool)
        )

    def plan(self, call: HookCall) -> Interception:
        """The interception of one call (a no-op when no hook covers its tool)."""
        if not any(pattern_matches(e.pattern, call.tool) for e in self._entries):
            return _NO_HOOKS
        return Interception(self, call)


class Interception:
    """One call's way through the hooks: ``before`` the call, ``after`` it, then
    ``stamp`` the stored outcome with what the hooks did."""

    def __init__(self, hooks: Hooks, call: HookCall) -> None:
        """Intercept ``call`` with ``hooks``."""
        self._hooks = hooks
        self.call = call
        self.arguments: dict[str, Any] = dict(call.arguments)
        self.rewritten = False
        self.effects: list[HookEffect] = []

    async def before(self) -> str | None:
        """Run the pre hooks; the message the model reads when one denies, else None
        (``arguments`` then holds the arguments the tool is to run with)."""
        for hook in self._hooks.for_tool("pre", self.call.tool):
            verdict = await _heartbeating(_run_pre(hook, self._call()))
            if isinstance(verdict, Deny):
                self.rewritten = False  # nothing ran: no arguments ran (the effects say more)
                self.effects.append(
                    hook_effect(stage="pre", hook=hook.name, effect="denied", detail=verdict.reason)
                )
                return f"A pre-call hook ({hook.name}) denied this call: {verdict.reason}"
            if verdict is not None and verdict != self.arguments:
                self.arguments = verdict
                self.rewritten = True
                self.effects.append(
                    hook_effect(stage="pre", hook=hook.name, effect="rewrote_arguments")
                )
        return None

    async def after(
        self, status: Literal["ok", "error", "wait", "denied"], text: str
    ) -> tuple[Literal["ok", "error", "wait", "denied"], str]:
        """Run the post hooks on a result, or the on_error hooks on a failure; the status
        and text to store (a wait or a denial is neither, and passes untouched)."""
        if status == "ok":
            for hook in self._hooks.for_tool("post", self.call.tool):
                changed = await self._result_hook(hook, text, "result")
                if changed is not None and changed != text:
                    text = changed
                    self.effects.append(
                        hook_effect(stage="post", hook=hook.name, effect="rewrote_result")
                    )
        elif status == "error":
            for hook in self._hooks.for_tool("on_error", self.call.tool):
                replaced = await self._result_hook(hook, text, "error")
                if replaced is not None:
                    self.effects.append(
                        hook_effect(
                            stage="on_error", hook=hook.name, effect="replaced_error", detail=text
                        )
                    )
                    return "ok", replaced
        return status, text

    def stamp(self, outcome: ToolOutcome) -> ToolOutcome:
        """``outcome`` with the arguments that ran (when rewritten) and the hooks' effects."""
        if not self.effects:
            return outcome
        return outcome.model_copy(
            update={
                "ran_arguments": self.arguments if self.rewritten else None,
                "hooks": tuple(self.effects),
            }
        )

    def _call(self) -> HookCall:
        """The call as the next hook sees it: a deep copy of the arguments as they stand.

        A hook that changes the arguments it was given in place (a nested value of a
        shallow ``dict(call.arguments)``, say) changes only its copy: what runs, and what
        the records say ran, is what a pre hook returns.
        """
        arguments, labels = copy.deepcopy(self.arguments), dict(self.call.labels)
        return HookCall(**{**self.call.__dict__, "arguments": arguments, "labels": labels})

    async def _result_hook(
        self, hook: Hook, text: str, key: Literal["result", "error"]
    ) -> str | None:
        call = self._call()
        try:
            return await _heartbeating(_run_result(hook, call, text, key))
        except Exception as err:
            # A post or on_error hook's failure must not cost the call its result.
            _log.warning(
                "%s hook %s failed for %s", hook.stage, hook.name, call.tool, exc_info=True
            )
            self.effects.append(
                hook_effect(stage=hook.stage, hook=hook.name, effect="failed", detail=_say(err))
            )
            return None


class _NoInterception(Interception):
    """The plan of a call no hook covers: nothing to run, nothing to record."""

    def __init__(self) -> None:
        super().__init__(Hooks(), HookCall(tool="", kind="code", arguments={}, call_id=""))

    async def before(self) -> str | None:
        return None

    async def after(
        self, status: Literal["ok", "error", "wait", "denied"], text: str
    ) -> tuple[Literal["ok", "error", "wait", "denied"], str]:
        return status, text

    def stamp(self, outcome: ToolOutcome) -> ToolOutcome:
        return outcome


_NO_HOOKS = _NoInterception()


class _HookFailed(Exception):
    """A hook answered something other than what its stage takes."""


def _say(err: BaseException) -> str:
    return str(err) if isinstance(err, _HookFailed) else f"{type(err).__name__}: {err}"


PYTHON_HOOK_SECONDS = 10.0
"""How long a Python hook may take, as a command hook's deadline: past it the hook counts
as failed (a pre hook denies, a post or on_error hook is ignored). A sync hook's thread
cannot be stopped; it is left to finish (on the hooks' own threads, ``_threads``) and its
answer is dropped."""


async def _call(action: Callable[..., Any], *args: Any) -> Any:
    """Call a Python hook within ``PYTHON_HOOK_SECONDS``: an async one awaited, a sync one
    in a thread (so the activity keeps heartbeating while it runs)."""
    # Here, as in _heartbeating: declaring hooks (psych validate does) needs no asyncio.
    import asyncio

    from psych_runtime.activities.hooks._threads import SYNC_HOOK_THREADS, Start, run_sync_hook

    start = Start()

    async def answer() -> Any:
        if inspect.iscoroutinefunction(action):
            result = await action(*args)
        else:
            result = await run_sync_hook(action, *args, start=start)
        if inspect.isawaitable(result):  # a callable object with an async __call__
            result = await result
        return result

    try:
        async with asyncio.timeout(PYTHON_HOOK_SECONDS) as deadline:
            return await answer()
    except TimeoutError:
        if deadline.expired():
            if inspect.iscoroutinefunction(action) or start.started:
                raise _HookFailed(f"it did not answer within {PYTHON_HOOK_SECONDS:g} s") from None
            raise _HookFailed(
                f"it did not start within {PYTHON_HOOK_SECONDS:g} s: all {SYNC_HOOK_THREADS} "
                "threads for sync hooks were taken by hooks that had not returned"
            ) from None
        raise


async def _run_pre(hook: Hook, call: HookCall) -> Deny | dict[str, Any] | None:
    """One pre hook's verdict; its failure is a denial naming what failed."""
    try:
        if isinstance(hook.action, CommandHook):
            return _command_pre(await run_command(hook.action, call, call.arguments))
        answer = await _call(hook.action, call)
        if answer is None or isinstance(answer, Deny):
            return answer
        if isinstance(answer, Mapping):
            return _arguments(answer)
        raise _HookFailed(
            f"it returned {type(answer).__name__}, not a Deny, a dict of arguments or None"
        )
    except Exception as err:
        _log.warning("pre hook %s failed for %s", hook.name, call.tool, exc_info=True)
        return Deny(f"the hook failed: {_say(err)}")


def _command_pre(result: CommandResult) -> Deny | dict[str, Any] | None:
    if not result.ok:
        return Deny(result.reason())
    out = result.stdout.strip()
    if not out:
        return None
    try:
        parsed = json.loads(out)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        # Fail closed: a check whose answer cannot be read has not said yes.
        raise _HookFailed("it printed something that is not a JSON object of arguments")
    return _arguments(parsed)


def _arguments(answer: Mapping[str, Any]) -> dict[str, Any]:
    """Rewritten arguments as the JSON object the tool receives."""
    try:
        parsed = json.loads(json.dumps(dict(answer), allow_nan=False))
    except (TypeError, ValueError) as err:
        raise _HookFailed(f"its arguments are not a JSON object: {err}") from err
    if not isinstance(parsed, dict):  # pragma: no cover - dict(answer) dumps to an object
        raise _HookFailed("its arguments are not a JSON object")
    return parsed


async def _run_result(
    hook: Hook, call: HookCall, text: str, key: Literal["result", "error"]
) -> str | None:
    """A post hook's new result, or an on_error hook's replacement (None: no change)."""
    if isinstance(hook.action, CommandHook):
        stdin = {"tool": call.tool, "arguments": dict(call.arguments), key: text}
        result = await run_command(hook.action, call, stdin)
        if not result.ok:
            raise _HookFailed(result.reason())
        out = result.stdout.strip()
        if not out:
            return None
        try:
            parsed = json.loads(out)
        except json.JSONDecodeError as err:
            raise _HookFailed(f"it printed something that is not JSON: {err}") from err
        if not isinstance(parsed, dict):
            raise _HookFailed("it printed JSON that is not an object")
        if "result" not in parsed:
            return None
        value = parsed["result"]
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    answer = await _call(hook.action, call, text)
    if answer is None or isinstance(answer, str):
        return answer
    raise _HookFailed(f"it returned {type(answer).__name__}, not a str or None")


async def _heartbeating(work: Awaitable[_O]) -> _O:
    """Await a hook, heartbeating the running activity meanwhile (a command hook may take
    its 10 s, longer than a heartbeat timeout)."""
    # Imported here: hook declarations are read (settings files, ``psych validate``) by
    # processes that never run an activity and need not load asyncio or the Temporal SDK.
    import asyncio

    from temporalio import activity

    if not activity.in_activity():
        return await work
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=_HEARTBEAT_SECONDS)
            if done:
                return task.result()
            activity.heartbeat()
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task})
        raise
