"""What a continued Run carries into its next execution (pure data, see ``_continue.py``).

Its own module because ``_contract.py`` (``RunInput.carry``, ``RecordsPage.earlier``)
needs it and is passed through the workflow sandbox: these models must be one class for
the converter and the workflow alike, so this module is passed through too, and the
workflow-side functions that fill and read the carry stay sandboxed in ``_continue.py``.
A feature's per-Run state travels in ``RunCarry.features`` under the feature's name, as
JSON its own ``restore`` reads back: the models are the features' own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from psych_runtime.activities.contract import ChatMessage, ToolCatalog
from psych_runtime.specs import drop_defaults
from psych_runtime.workflows.contract._records import CallSuspensionReason, Totals, Undelivered

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


class ResumeResult(_Frozen):
    """Answer of the ``psych.resume`` update."""

    reason: CallSuspensionReason
    id: str
    outcome: Literal["approved", "rejected", "answered", "completed", "authorized"]


class KeptAction(_Frozen):
    """An action a caller sent under an idempotency key, and the Run's answer to it: the
    same request sent again after the Run continued as new gets that answer, not a second
    action (Temporal keeps update ids per execution, ``RunCarry.actions``)."""

    update_id: str
    """The update's id: ``<update name>/<sha256 of the key>`` (``PsychClient``'s)."""
    answer: ResumeResult | None = None
    """A resume's answer; None for an abort or a steer (they answer nothing)."""


class JsonWithoutDefaults(_Frozen):
    """A payload whose JSON leaves out the fields at their defaults (read back with them):
    history bytes not spent, and a worker of the build before a field was added reads a
    payload that does not use it. Its Python dump keeps every field."""

    @model_serializer(mode="wrap")
    def _without_defaults(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return drop_defaults(self, data) if info.mode_is_json() else data


class RunCarry(JsonWithoutDefaults):
    """What a continued Run takes from the execution before it (``RunInput.carry``): an
    AgentRun at a turn boundary, a WorkflowRun between two steps."""

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
    """An AgentRun's turns taken; a WorkflowRun's steps done (the next one is ``turn + 1``)."""
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
    """What the next model call sends: the last turn's results and notes (or refs), then
    the ``unanswered`` messages."""
    unanswered: tuple[Undelivered, ...] = ()
    """The steer and follow-up messages taken after the last turn's answer, which end
    ``pending``: the next turn's input, not the last turn's (compaction's turn mark starts
    before them), and ``RunSettled.undelivered`` if no model call answers them."""
    context_ref: str | None = None
    """The head of the conversation's blob chain."""
    system_ref: str | None = None
    actions: tuple[KeptAction, ...] = ()
    """The last ``KEPT_ACTIONS`` actions sent under an idempotency key, oldest first."""
    features: dict[str, Any] = Field(default_factory=dict)
    """Each feature's ``carry()`` (JSON) under its name, for its ``restore()``; a feature
    with nothing to carry is absent."""
    outputs: dict[str, Any] | None = None
    """A WorkflowRun's outputs of the steps done, keyed by step name (never empty there:
    a worker of a build before this field refuses the carry as a bad input rather than
    running the workflow's steps again from the first)."""
    held: tuple[str, ...] = ()
    """A WorkflowRun's stored results its steps' children handed back (``RunView.held``),
    for its later steps to read and hand on."""
    cut_steps: tuple[str, ...] = ()
    """A WorkflowRun's steps done whose output is an answer cut at the model's output
    limit, in step order, for the Run's reason (``runs/_step_output.cut_note``)."""
    consents_refused: dict[str, str] = Field(default_factory=dict)
    """MCP server -> why a person refused its consent in this Run (``Suspensions``): the
    executions after the cut do not ask again, nor offer its tools."""
    catalog: ToolCatalog | None = None
    """A WorkflowRun's code and HTTP tools as its first execution resolved them (once per
    Run, as the catalogue is; a continued execution starts without a local activity,
    whose resolution a query can push into a later workflow task than its marker, which a
    replay of the execution then does not reproduce)."""
