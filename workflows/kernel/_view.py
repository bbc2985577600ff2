"""The kernel's side of the feature protocol: the ``RunView`` every feature sees.

Thin accessors over the kernel's state and calls, so a feature never touches a private
attribute of the Run (``_feature.RunView`` is the contract; mypy checks this class meets it
where the tool-call kernel hands itself to its features).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import McpConsent, ToolCallRequest
    from psych_runtime.specs import (
        AgentSpec,
        Limits,
        SuspensionPolicy,
        WorkflowSpec,
    )
    from psych_runtime.workflows.contract._contract import ResumeInput, RunInput
    from psych_runtime.workflows.contract._records import CallSuspensionReason, Pending, Totals
    from psych_runtime.workflows.kernel._consent import await_consent
    from psych_runtime.workflows.kernel._feature import ChildHandle
    from psych_runtime.workflows.kernel._handlers import Handlers
    from psych_runtime.workflows.kernel._handles import own_handles, refs_in
    from psych_runtime.workflows.kernel._record_log import RecordLog
    from psych_runtime.workflows.kernel._suspensions import Suspensions, expires_at


class FeatureView(Handlers):
    """Handlers with the accessors of ``RunView`` (see the module docstring)."""

    _spec: AgentSpec | WorkflowSpec
    _suspension: SuspensionPolicy
    _base_tools_ref: str | None = None

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
        """Suspend the Run on ``call`` (an approval, a question, an external wait) until it
        is answered; the item's id is the call id unless given (a wait token)."""
        return await self._suspensions.suspend(
            Pending(
                reason=reason,
                id=id or call.id,
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments if arguments is None else arguments,
                question=question,
                expires_at=expires_at(seconds),
            ),
            seconds,
        )

    async def await_consent(self, consent: McpConsent, call_id: str) -> str | None:
        """Suspend until a person consented to ``consent``'s MCP server and the code was
        exchanged (``_consent``): None, and the caller retries what needed the token; or
        why the consent was refused, which the caller tells instead of retrying."""
        return await await_consent(
            self._suspensions,
            consent,
            call_id=call_id,
            seconds=self._suspension.approval_expires_seconds,
            run_id=self._input.run_id,
            scope=self._input.scope,
            patched=self.patched,
        )

    def why_not_offered(self, tool: str) -> tuple[str, ...]:
        """Why ``tool`` is not offered, where a feature knows: what an agent's model reads
        beside "unknown tool" (a workflow's failed step says it itself, ``_workflow_run``)."""
        if self.KIND != "agent":
            return ()
        return tuple(why for f in self._features if (why := f.not_offered(tool)) is not None)

    @property
    def input(self) -> RunInput:
        """The Run's input."""
        return self._input

    @property
    def spec(self) -> AgentSpec | WorkflowSpec:
        """The admitted Spec."""
        return self._spec

    @property
    def tools_ref(self) -> str | None:
        """The stored definitions of the Run's own catalogue (built-ins, code, HTTP)."""
        return self._base_tools_ref

    @property
    def limits(self) -> Limits:
        """The Spec's limits, as a parent workflow narrows them (``ParentBounds``)."""
        return self._limits

    @property
    def suspension(self) -> SuspensionPolicy:
        """The expiries in force."""
        return self._suspension

    @property
    def log(self) -> RecordLog:
        """The record log."""
        return self._log

    @property
    def totals(self) -> Totals:
        """The totals so far."""
        return self._totals

    @property
    def turn(self) -> int:
        """The last turn started."""
        return self._turn

    @property
    def suspensions(self) -> Suspensions:
        """The pending items."""
        return self._suspensions

    @property
    def held(self) -> frozenset[str]:
        """Stored results children handed back."""
        return frozenset(self._held)

    def _settled_handles(self) -> tuple[str, ...]:
        # Only those its answer or outputs name: what a parent hands on is what the next
        # child's messages name, and a Run may own thousands (the result stays small).
        named = refs_in((self._answer or "", json.dumps(self._outputs or {}, sort_keys=True)))
        return tuple(sorted(own_handles(self) & named))

    @property
    def aborted(self) -> bool:
        """Whether an abort was asked for."""
        return self._abort is not None

    @property
    def winding_down(self) -> str | None:
        """Why the Run winds its running children down as it is cancelled (or None)."""
        return self._winding_down

    @property
    def conversation(self) -> str | None:
        """The conversation head the next model call continues."""
        return self._context_ref

    @conversation.setter
    def conversation(self, head: str | None) -> None:
        self._context_ref = head

    def cost_unknown(self) -> None:
        """Mark the Run's cost unknown."""
        self._cost_unknown = True
        self._totals = self._totals.model_copy(update={"cost": None})

    def model_task(self, task: asyncio.Task[Any] | None) -> None:
        """Set or clear the model-role call in flight."""
        self._model_task = task

    def child(self, workflow_id: str) -> ChildHandle | None:
        """A running child's handle."""
        return self._children.get(workflow_id)

    def batch_calls(self, turn: int) -> tuple[tuple[ToolCallRequest, asyncio.Task[Any]], ...]:
        """The running batch's calls of ``turn`` with their tasks (``ToolBatches`` knows)."""
        return ()

    def children_started(self, turn: int) -> int:
        """Children every feature started (or is starting) in ``turn``."""
        return sum(feature.children_started(turn) for feature in self._features)
