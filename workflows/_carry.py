"""What a continued AgentRun carries into its next execution (pure data, see ``_continue.py``).

Its own module because ``_contract.py`` (``RunInput.carry``, ``RecordsPage.earlier``)
needs it and is passed through the workflow sandbox: these models must be one class for
the converter and the workflow alike, so this module is passed through too, and the
workflow-side functions that fill and read the carry stay sandboxed in ``_continue.py``.
Adding a feature's per-Run state is one field here (with a default, so carries already in
flight still decode), one line in ``_continue.carry_of`` and one in ``_continue.restore``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from psych_runtime.activities.contract import CatalogEntry, ChatMessage, McpServerStatus, TurnMark
from psych_runtime.specs import Task
from psych_runtime.workflows._records import RunStatus, Totals

CONTINUE_AFTER_EVENTS = 10_000
"""Default ``RunInput.continue_after_events``. Temporal refuses an execution past 51,200
events; a turn of 256 calls (the ``max_tool_calls_per_turn`` maximum), each with an
approval, adds under 4,000, so a Run that crosses this at the start of such a turn still
has ample room. Temporal's own suggestion (a dev server's default is 4 Ki events or 4 MB)
usually comes first; this bound holds where a server suggests late or never."""
MAX_CONTINUE_AFTER_EVENTS = 40_000
"""Highest ``continue_after_events`` a Run takes (room for one more maximal turn)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Segment(_Frozen):
    """Which earlier execution of a continued Run holds which records."""

    run_id: str
    """The Temporal run id of the execution (query it by this id to read them)."""
    first_seq: int = Field(ge=1)
    last_seq: int = Field(ge=0)


class RepeatCount(_Frozen):
    """One entry of the repeat guard: a call and how often it returned one result."""

    tool: str
    arguments: str
    """Canonical arguments (``_guards.canonical_arguments``)."""
    result_ref: str
    times: int


class GuardsCarry(_Frozen):
    """The failure-streak and repeat-call bookkeeping (``_guards.Guards``)."""

    streaks: dict[str, int] = Field(default_factory=dict)
    withheld: tuple[str, ...] = ()
    repeats: tuple[RepeatCount, ...] = ()


class McpCarry(_Frozen):
    """What the Run knows of its MCP servers (``_mcp.McpState`` without the servers, which
    come from the Spec again)."""

    catalog_hash: str | None = None
    tools_ref: str | None = None
    entries: dict[str, CatalogEntry] = Field(default_factory=dict)
    loaded: tuple[str, ...] = ()
    unavailable: tuple[str, ...] = ()
    deferred: tuple[str, ...] = ()
    catalogs: dict[str, str] = Field(default_factory=dict)
    statuses: tuple[McpServerStatus, ...] = ()


# --- features' per-Run state (defined here so the carry and the workflow share one class) --


class TaskList(BaseModel):
    """A Run's task list and how many times it changed (0: never set)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: tuple[Task, ...] = ()
    revision: int = 0


class CompactionState(BaseModel):
    """What a compacting Run knows between turns."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cut_turn: int = 1
    """The first turn the model still sees verbatim (1: nothing summarised yet)."""
    marks: tuple[TurnMark, ...] = ()
    """Where each turn from ``cut_turn`` on starts in the current chain, in turn order."""
    last_tokens: int = 0
    """The last model call's input + cache-read + cache-write tokens (0 once a
    compaction was tried after it)."""
    summary_ref: str | None = None
    """The summary message the model sees now (None before the first compaction)."""

    @property
    def last_turn(self) -> int:
        """The last turn with a mark (``cut_turn - 1`` before any)."""
        return self.cut_turn + len(self.marks) - 1


class SpawnedChild(BaseModel):
    """One child this Run spawned, as plain data (what continue-as-new would carry)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run: str
    """The child's workflow id."""
    agent: str
    turn: int
    call_id: str
    """The ``spawn`` call that started it."""
    state: Literal["starting", "running", "settled", "collected", "failed"]
    """starting: being published and started; running: alive; settled: ended, not yet
    returned by ``wait_children``; collected: returned; failed: never started."""
    version_hash: str = ""
    status: RunStatus | None = None
    reason: str | None = None
    answer: str | None = None

    @property
    def alive(self) -> bool:
        """Whether it counts toward ``max_alive``."""
        return self.state in ("starting", "running")

    def ending(self) -> dict[str, Any]:
        """What ``wait_children`` returns for it: the answer, or the typed ending."""
        assert self.status is not None
        ending: dict[str, Any] = {"status": self.status.value, "run": self.run, "agent": self.agent}
        if self.status is RunStatus.COMPLETED:
            ending["answer"] = self.answer or ""
        else:
            ending["reason"] = self.reason or ""
        return ending


class RunCarry(_Frozen):
    """What a continued AgentRun takes from the execution before it (``RunInput.carry``)."""

    previous_run_id: str
    """The Temporal run id of the execution that continued."""
    history_length: int
    """Its history's events at the cut."""
    history_size: int
    """Its history's bytes at the cut."""
    earlier: tuple[Segment, ...]
    """Every earlier execution, oldest first, with the records it holds."""
    next_seq: int = Field(ge=1)
    turn: int = Field(ge=0)
    totals: Totals
    """The whole chain's so far (the transient retry budget spent is in them)."""
    cost_unknown: bool = False
    deadline_used: float = Field(default=0.0, ge=0)
    """Seconds of the deadline clock used so far (suspended time does not count)."""
    not_before: dict[str, float] = Field(default_factory=dict)
    """Model -> workflow time before which it is not tried again (Retry-After, backoff)."""
    model_failures: dict[str, int] = Field(default_factory=dict)
    """Model -> consecutive transient failures (its backoff exponent)."""
    guards: GuardsCarry = GuardsCarry()
    steer: tuple[str, ...] = ()
    follow_up: tuple[str, ...] = ()
    next_run: tuple[str, ...] = ()
    pending: tuple[ChatMessage | str, ...] = ()
    """What the next model call sends: the last turn's results and notes (or refs)."""
    context_ref: str | None = None
    """The head of the conversation's blob chain."""
    system_ref: str | None = None
    mcp: McpCarry = McpCarry()
    delegations: dict[int, int] = Field(default_factory=dict)
    """Turn -> subagents started in it (their sum numbers the next one, so ids never
    repeat)."""
    tasks: TaskList = TaskList()
    """The task list (``update_tasks``)."""
    compaction: CompactionState = CompactionState()
    """Compaction's cut, turn marks, last prompt tokens and summary."""
    spawned: tuple[SpawnedChild, ...] = ()
    """Every child ``spawn`` started, in spawn order (none running at a cut: a running
    child delays it; ended ones wait to be collected by ``wait_children``)."""
