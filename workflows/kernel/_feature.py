"""The feature protocol: how a capability plugs into the Run kernel.

A feature (MCP, threads, tasks, spawn, ...) is one class, instantiated once per Run with
the Run's ``RunView``; the Run kinds list the feature classes once, in an ordered tuple
(``features.FEATURES``), and the kernel calls every feature's hooks in that order. The
order is command order (a hook that schedules an activity or writes a record does so in
tuple order), so it is fixed in code, never a registry filled at import time. The kernel
imports no feature: what it knows of one is this module.

Every hook has a default that does nothing, so a feature overrides only what it uses. A
feature keeps its per-Run state on its own instance (workers may run workflows
unsandboxed: never module state) and reaches the Run only through the view.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        CatalogEntry,
        McpConsent,
        ModelCallInput,
        ModelCallResult,
        ToolCallRequest,
        ToolCatalog,
        ToolDefinition,
        Usage,
    )
    from psych_runtime.specs import (
        AgentSpec,
        DepthCap,
        Limits,
        SuspensionPolicy,
        Version,
        WorkflowSpec,
    )
    from psych_runtime.workflows.contract._contract import (
        ParentBounds,
        ResumeInput,
        RunInput,
        RunResult,
    )
    from psych_runtime.workflows.contract._records import CallSuspensionReason, Totals
    from psych_runtime.workflows.kernel._record_log import RecordLog
    from psych_runtime.workflows.kernel._tool_result import ToolResult

if TYPE_CHECKING:
    from psych_runtime.workflows.kernel._suspensions import Suspensions

ChildHandle = workflow.ChildWorkflowHandle[Any, RunResult]


class RunView(Protocol):
    """What a feature sees of its Run: its input and Spec, the log, the totals, suspending,
    children, abort, and which of the older patches it takes. Nothing else of the kernel's
    state is a feature's to touch."""

    @property
    def input(self) -> RunInput:
        """The Run's input (its id, scope, Version, depth, bounds, carry)."""

    @property
    def spec(self) -> AgentSpec | WorkflowSpec:
        """The admitted Spec."""

    @property
    def tools_ref(self) -> str | None:
        """The stored definitions of the Run's own catalogue (built-ins, code and HTTP
        tools), once resolved at the start of an agent's turns (None before, or none)."""

    @property
    def limits(self) -> Limits:
        """The Spec's limits, as a parent workflow narrows them (``ParentBounds``)."""

    @property
    def suspension(self) -> SuspensionPolicy:
        """The expiries in force (a parent's, where it imposes them)."""

    @property
    def log(self) -> RecordLog:
        """The Run's record log (``log.add(Record(**log.stamp(), ...))``)."""

    @property
    def totals(self) -> Totals:
        """The Run's totals so far."""

    @property
    def turn(self) -> int:
        """The last turn started (0 before the first)."""

    @property
    def suspensions(self) -> Suspensions:
        """The Run's pending items (hold a wait, mirror a child's items)."""

    @property
    def held(self) -> frozenset[str]:
        """Stored results its children handed back when they settled (``RunResult.handles``):
        the Run may read them and hand them on (``_handles.own_handles``)."""

    @property
    def aborted(self) -> bool:
        """Whether an abort was asked for."""

    @property
    def winding_down(self) -> str | None:
        """Why the Run, as its body is cancelled (by an operator or its parent, or past its
        deadline and grace), winds its running children down: aborts them and takes their
        totals (``kernel/_wind_down.py``); None when it does not (not cancelled, no child
        ran then, or a Run recorded before the patch ``psych-children-wind-down``)."""

    @property
    def conversation(self) -> str | None:
        """An agent's conversation head (the chain the next model call continues)."""

    @conversation.setter
    def conversation(self, head: str | None) -> None: ...

    def count(self, **increments: int) -> None:
        """Add to the totals' counters (``steps``, ``model_calls``, ...)."""

    def add_usage(self, usage: Usage, cost: float | None) -> None:
        """Add a model call's usage and cost to the totals."""

    def add_child_totals(self, totals: Totals) -> None:
        """Roll a child's totals into the Run's."""

    def cost_unknown(self) -> None:
        """Mark the Run's cost unknown (a child whose cost cannot be told)."""

    def check_abort(self) -> None:
        """Raise ``Stop`` ABORTED when an abort was asked for."""

    def patched(self, patch_id: str) -> bool:
        """Whether the Run takes the change of ``patch_id`` (``RunBase.patched``): a start
        patch (``kernel/_patches.py``) is what the Run's start answered; a feature's patch
        older than ``psych-local-resolution-safe`` is taken without asking by a Run that
        asked a start patch standing for it, and asked (``workflow.patched``) by a Run
        recorded before."""

    def abort_reason(self) -> str:
        """Why the Run is aborting."""

    def model_task(self, task: asyncio.Task[Any] | None) -> None:
        """Set (or clear) the model-role call in flight: the deadline clock runs while it
        does, and an abort cancels it."""

    async def await_consent(self, consent: McpConsent, call_id: str) -> str | None:
        """Suspend until a person consented to an MCP server's OAuth (None: then retry), or
        refused it (why, naming the server and the authorization server's error)."""

    async def suspend_call(
        self,
        call: ToolCallRequest,
        reason: CallSuspensionReason,
        seconds: float,
        *,
        id: str | None = None,
        question: str | None = None,
        arguments: str | None = None,
    ) -> ResumeInput:
        """Suspend on ``call`` until it is answered (or raise when it expires)."""

    async def start_reporting_child(
        self,
        run_id: str,
        version: Version,
        messages: tuple[str, ...],
        *,
        summary: str,
        bounds: ParentBounds,
        depth: int | None = None,
        depth_caps: tuple[DepthCap, ...] | None = None,
    ) -> ChildHandle:
        """Start a child Run whose pending items this Run mirrors."""

    async def adopt_child(
        self, workflow_id: str, start: Callable[[], Awaitable[ChildHandle]]
    ) -> ChildHandle:
        """Start a child with ``start`` and keep it as one of this Run's children (its
        reports are taken from before it starts)."""

    def child(self, workflow_id: str) -> ChildHandle | None:
        """A running child's handle."""

    def forget_child(self, workflow_id: str) -> None:
        """A child settled: stop mirroring and forwarding to it."""

    def forward(self, workflow_id: str, name: str, payload: Any) -> None:
        """Send a signal to a running child."""

    def children_started(self, turn: int) -> int:
        """How many children the Run's features started (or are starting) in ``turn``:
        what ``max_fanout_per_turn`` caps."""

    def batch_calls(self, turn: int) -> tuple[tuple[ToolCallRequest, asyncio.Task[Any]], ...]:
        """The calls of ``turn`` running together now, each with its task, in call order
        (none when no batch of ``turn`` runs)."""


Handler = Callable[[int, ToolCallRequest, dict[str, Any]], Awaitable[ToolResult]]


@dataclass(frozen=True)
class Builtin:
    """One built-in tool a feature offers."""

    name: str
    offer: Callable[[], ToolDefinition | None]
    """Its definition when the Run offers it, else None (the activity may offer it)."""
    handle: Handler
    """``(turn, call, arguments) -> result``."""
    executes: bool
    """True: runs as a call (an open call for the deadline, abort cancels it);
    False: suspends the Run instead of running."""


@dataclass(frozen=True)
class CallDone:
    """A finished model call, as the features see it."""

    turn: int
    call: ModelCallInput
    result: ModelCallResult
    carried: int
    """How many of the call's first messages are the turn before's results and notes."""


class Feature:
    """One capability of a Run (see the module docstring); every hook defaults to nothing."""

    name: ClassVar[str]
    """Its key in a continued Run's carry (``RunCarry.features``) and in logs."""

    def __init__(self, run: RunView) -> None:
        self.run = run

    def builtins(self) -> tuple[Builtin, ...]:
        """The built-in tools it adds, in the order they are offered."""
        return ()

    def admit(self) -> None:
        """The Run was admitted: take what the Spec and the input say (a continued Run's
        carry is restored after this)."""

    def carry(self) -> Any:
        """What a continued Run takes on (JSON-able; None: nothing)."""
        return None

    def restore(self, carried: Any) -> None:
        """Take back what ``carry`` gave (decoded from JSON)."""

    async def boundary(self) -> None:
        """An agent's turn boundary, before the next turn starts."""

    def into_call(self, call: ModelCallInput) -> ModelCallInput:
        """The next model call, with what this feature adds to it."""
        return call

    def after_call(self, done: CallDone) -> None:
        """A model call finished (before its tool calls run)."""

    def offered(self) -> Mapping[str, CatalogEntry]:
        """Tools it offers this turn beyond the Run's catalogue (by name)."""
        return {}

    def tool_kinds(self) -> Mapping[str, Handler]:
        """Catalogue entry kinds whose calls it runs (``kind -> handler``): its offered
        tools that no activity of the kernel knows (A2A skills)."""
        return {}

    async def before_step(self, turn: int, base: ToolCatalog) -> None:
        """A workflow's tool step is about to run (its turn boundary)."""

    def not_offered(self, tool: str) -> str | None:
        """Why ``tool``, one of those it offers when it can, is not offered now (None: no
        such reason): what a workflow's failed tool step says beyond "unknown tool"."""
        return None

    def open_items(self) -> int:
        """Items of its own still open, which keep the Run from continuing as new."""
        return 0

    async def settling(self) -> None:
        """The Run is about to settle (before its status is shown)."""

    async def cancelled(self) -> None:
        """The Run's workflow was cancelled and its body has ended; it settles ABORTED next
        (without ``settling``). Called only when the Run winds its children down
        (``RunView.winding_down``)."""

    def run_state(self) -> dict[str, Any]:
        """Fields it adds to ``RunState`` (the ``psych.state`` query)."""
        return {}

    def children_started(self, turn: int) -> int:
        """How many child Runs it started (or is starting) in ``turn``, toward the Run's
        ``max_fanout_per_turn``."""
        return 0


def overriding(features: tuple[Feature, ...], hook: str) -> tuple[Feature, ...]:
    """The features whose class overrides ``hook``: the turn loop calls only these, so a
    hook no feature of the Run uses costs nothing per turn."""
    default = getattr(Feature, hook)
    return tuple(f for f in features if getattr(type(f), hook) is not default)
