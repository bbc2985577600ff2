"""One tool call's pipeline, shared by an agent's calls and a workflow's tool steps.

Parse, guards (withheld tool, repeat refusal), the Policy (allow, deny, or ask: an
approval suspension), then the call: a built-in from ``_builtins.BUILTINS``, or the code
or HTTP tool activity, with exactly-once rules (a tool not safe to repeat whose worker
died mid-call is UNKNOWN, never run twice), abort and deadline handling, and a tool that
returns an external wait suspending the Run. A turn's calls run as one batch
(``_tool_batch``), which records their results and updates the guards in call order.

A code tool registered quick and safe to repeat runs as a local activity (``runs_local``);
while one runs, the calls that ended wait for it (``_local_hold``): commands replay in order.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from psych_runtime.activities.contract import (
        CatalogEntry,
        CodeToolCall,
        ErrorType,
        HttpToolCall,
        McpInputAnswers,
        McpInputRequired,
        McpToolCall,
        PolicyInput,
        ToolCallRequest,
        ToolDefinition,
        ToolOutcome,
        unpermitted_message,
    )
    from psych_runtime.specs import (
        AgentSpec,
        CodeTool,
        HttpTool,
        McpServer,
        SuspensionPolicy,
        WorkflowSpec,
    )
    from psych_runtime.workflows.contract._contract import RunInput
    from psych_runtime.workflows.contract._records import (
        SuspensionReason,
    )
    from psych_runtime.workflows.kernel import _activity_calls as calls
    from psych_runtime.workflows.kernel import _guards as guards
    from psych_runtime.workflows.kernel import _mcp_input as mcp_input
    from psych_runtime.workflows.kernel._consent import consent_of
    from psych_runtime.workflows.kernel._external_result import external_result
    from psych_runtime.workflows.kernel._feature import Builtin, Handler, overriding
    from psych_runtime.workflows.kernel._local_hold import LocalHold
    from psych_runtime.workflows.kernel._run_base import cause_text
    from psych_runtime.workflows.kernel._tool_result import (
        ToolResult,
        arguments_of,
        consent_refused,
        failure_text,
        from_outcome,
        inline,
        rejected,
        rejection_text,
        unknown_tool,
        unstored,
    )
    from psych_runtime.workflows.kernel._tracing import RunTrace
    from psych_runtime.workflows.kernel._view import FeatureView

UNKNOWN_OUTCOME = (
    "The outcome of this call is unknown: no word of it reached the Run in time (the "
    "worker running it stopped, or lost contact with the Temporal server for longer than "
    "the call's heartbeat timeout), and the tool is not safe to repeat, so it was not run "
    "again. It may or may not have taken effect; check before relying on either."
)
RESULT_LOST = (
    "This call ran, but its result was lost: the store that keeps tool results did not "
    "answer when it was to be kept. The tool is not safe to repeat, so it was not run "
    "again. Whatever it did has happened; check before calling it again or relying on it."
)
"""What the model reads of a call not safe to repeat whose activity ran it and failed
``ResultNotKept`` (``store_outcome``): recorded ``unknown`` like a call lost, not an error
inviting a retry. No earlier worker sent that error: no recorded history takes this path."""
ABORTED_CALL = "The call was cancelled: the Run was aborted."


class ToolCalls(FeatureView):
    """The tool-call pipeline of a Run kind that calls tools (both kinds do)."""

    def _batch_size(self) -> int:
        """How many calls the running batch holds (``ToolBatches`` knows; 1 outside one)."""
        return 1

    def __init__(self, input: RunInput | str) -> None:
        super().__init__(input)
        self._spec: AgentSpec | WorkflowSpec
        self._tools: dict[str, CodeTool | HttpTool] = {}
        self._suspension = SuspensionPolicy()
        self._servers: dict[str, McpServer] = {}
        self._trace = RunTrace()
        self._local_hold = LocalHold()
        self._revoked: dict[str, str] = {}
        """Code and HTTP tools a call found no longer permitted to the tenant (a permit
        revoked since the catalogue offered them), with the refusal: not offered again, a
        call of one refused here. Not carried: a continued execution resolves its catalogue
        again, which asks the permits (``_tool_batch``)."""
        self._left_out: tuple[str, ...] = ()
        """Code and HTTP tools of the Spec the Run's catalogue left out: the tenant's permits
        refuse them (``_catalog.resolve``; the catalogue leaves a tool out for nothing else)."""
        self._features = tuple(kind(self) for kind in self.FEATURES)
        features = self._features
        self._at_boundary = overriding(features, "boundary")
        self._into_call = overriding(features, "into_call")
        self._after_call = overriding(features, "after_call")
        self._offering = overriding(features, "offered")
        self._open_items = overriding(features, "open_items")
        self._before_step = overriding(features, "before_step")
        """Per hook of the turn loop, the features that use it (``_feature.overriding``)."""
        self._builtins: dict[str, Builtin] = {
            builtin.name: builtin for feature in self._features for builtin in feature.builtins()
        }
        """Every feature's built-ins, by name, in offer order."""
        self._kind_handlers: dict[str, Handler] = {
            kind: handler
            for feature in self._features
            for kind, handler in feature.tool_kinds().items()
        }
        """Entry kinds a feature runs (its own tools), by kind."""

    def _withdrawn_tools(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self._revoked, *self._left_out]))

    def _told_unpermitted(self, name: str) -> bool:
        """Whether a call of ``name``, not offered, reads as refused by the tenant's permits
        (with their words, as a tool withdrawn mid-execution does, ``denied``) rather than
        as an unknown tool's: an agent's code or HTTP tool its catalogue left out (an
        execution continued as new after a revocation, or a Run started without the
        client's check), since patch ``psych-unpermitted-told``. A workflow's tool step of
        one still fails as naming a tool the Run does not have."""
        return self.KIND == "agent" and name in self._left_out and self._start.unpermitted_told

    def _take_spec(self, spec: AgentSpec | WorkflowSpec) -> None:
        self._spec = spec
        self._tools = {tool.name: tool for tool in spec.tools}
        self._servers = {server.name: server for server in spec.mcp_servers}
        for feature in self._features:
            feature.admit()
        bounds = self._input.bounds
        own = spec.suspension
        policy = bounds.suspension if bounds is not None and bounds.suspension else own
        # A parent imposes its expiries only: whether the model may ask questions is this
        # Version's offer (WorkflowRun shipped with this rule: no Run needs a patch for it).
        self._suspension = policy.model_copy(update={"may_ask_questions": own.may_ask_questions})

    async def _run_tool(
        self,
        turn: int,
        call: ToolCallRequest,
        offered: dict[str, CatalogEntry],
        *,
        seen: guards.Guards | None = None,
    ) -> ToolResult:
        """Run one call of a batch (``seen``: the repeat guard it reads, when not the Run's:
        a queued call's, ``_tool_batch``)."""
        withheld = self._guards.withheld
        if call.name in withheld:
            return inline(call, "refused", guards.withheld_message(call.name, self._limits))
        revoked = self._revoked.get(call.name)
        if revoked is not None:
            return inline(call, "denied", revoked, counts=False)
        entry = offered.get(call.name)
        if entry is None and self._told_unpermitted(call.name):
            tool = self._tools[call.name]
            why = unpermitted_message(tool.kind, tool.name, self._input.scope.tenant)
            return inline(call, "denied", why, counts=False)
        if entry is None:
            left_out = [*withheld, *self._revoked]
            return unknown_tool(call, offered, left_out, self.why_not_offered(call.name))
        arguments = arguments_of(call)
        if isinstance(arguments, ToolResult):
            return arguments
        repeats = self._guards if seen is None else seen
        refused = guards.repeat_refusal(repeats, call.name, call.arguments, self._limits)
        if refused is not None:
            result = inline(call, "refused", refused, counts=False)
            result.repeat_refusal = True
            return result
        refusal = await self._authorize(call, entry, arguments)
        if refusal is not None:
            return refusal
        self.check_abort()
        builtin = self._builtins.get(entry.name) if entry.kind == "builtin" else None
        if builtin is not None and not builtin.executes:
            return await builtin.handle(turn, call, arguments)
        result = await self._executing(turn, call, entry, arguments)
        while result.then is not None:  # after the call closed (an A2A peer's question)
            result = await result.then()
        if result.outcome is not None and result.outcome.status == "wait":
            return await self._external(call, result.outcome, entry.kind == "code", arguments)
        request = mcp_input.asked(result)
        if request is not None:
            return await self._answering(turn, call, entry, arguments, request)
        return result

    async def _executing(
        self,
        turn: int,
        call: ToolCallRequest,
        entry: CatalogEntry,
        arguments: dict[str, Any],
        input: McpInputAnswers | None = None,
    ) -> ToolResult:
        """Execute the call; again once a person consented, when its MCP server asked for
        consent before its tool ran (a 401: nothing was done); rejected if they refused."""
        while (result := await self._open_call(turn, call, entry, arguments, input)).consent:
            if (refused := await self.await_consent(result.consent, call.id)) is not None:
                return consent_refused(call, refused)
        return result

    async def _open_call(
        self,
        turn: int,
        call: ToolCallRequest,
        entry: CatalogEntry,
        arguments: dict[str, Any],
        input: McpInputAnswers | None,
    ) -> ToolResult:
        """Execute the call as an open (and maybe interruptible) call of the Run; while a
        local call runs, hold what follows it (``_local_hold``)."""
        self._open_calls[call.id] = (turn, call.name)
        self.report_to_parent()  # a parent's clock runs while this call does
        local = entry.kind == "code" and calls.runs_local(entry)
        order = self._local_hold.start(local)
        held: asyncio.Future[None] | None = None
        task = asyncio.create_task(self._execute(turn, call, entry, arguments, input))
        if self._interruptible_tool(call.name):
            self._interruptible[call.id] = task
        try:
            result = await task
        except asyncio.CancelledError:
            if self._abort is None or not task.cancelled():
                raise
            result = inline(call, "aborted", ABORTED_CALL, counts=False)
        finally:
            self._open_calls.pop(call.id, None)
            self._interruptible.pop(call.id, None)
            held = self._local_hold.finish(order, local)
            self.report_to_parent()
        if held is not None:
            await held
        return result

    async def _answering(
        self,
        turn: int,
        call: ToolCallRequest,
        entry: CatalogEntry,
        arguments: dict[str, Any],
        request: McpInputRequired,
    ) -> ToolResult:
        """An MCP server asks for input: questions, then the call again (``_mcp_input``)."""

        async def ask(pending: str, question: str) -> str:
            answer = await self.suspend_call(
                call,
                SuspensionReason.QUESTION,
                self._suspension.question_expires_seconds,
                id=pending,
                question=question,
            )
            return answer.answer or ""

        async def retry(answers: McpInputAnswers) -> ToolResult:
            self.check_abort()
            return await self._executing(turn, call, entry, arguments, answers)

        return await mcp_input.answer_rounds(
            call,
            request,
            may_ask=self._suspension.may_ask_questions,
            ask=ask,
            retry=retry,
        )

    def _interruptible_tool(self, name: str) -> bool:
        tool = self._tools.get(name)
        return tool.interruptible if tool is not None else True

    async def _authorize(
        self, call: ToolCallRequest, entry: CatalogEntry, arguments: dict[str, Any]
    ) -> ToolResult | None:
        """The Policy's word on this call: None to run it, else the result the model sees."""
        decision = entry.policy
        if decision is None:
            decision = await calls.decide(
                PolicyInput(
                    run_id=self._input.run_id,
                    call_id=call.id,
                    tool=entry.info,
                    arguments=arguments,
                    scope=self._input.scope,
                )
            )
        if decision.decision == "deny":
            why = f": {decision.reason}" if decision.reason else ""
            # A denial is not the tool failing.
            return inline(
                call, "denied", f"The policy does not allow this call{why}.", counts=False
            )
        if decision.decision == "allow":
            return None
        answer = await self.suspend_call(
            call, SuspensionReason.APPROVAL, self._suspension.approval_expires_seconds
        )
        if answer.approved:
            return None
        limit = self._limits.large_result_bytes
        try:
            return await rejected(call, answer.note, limit)
        except ActivityError as err:
            # The blob store down through the store's retries: a rejection is no failure
            # of the Run, the model reads it cut (since psych-rejection-unstored-read,
            # asked only then; a Run recorded before failed).
            return unstored(
                err,
                lambda: workflow.patched("psych-rejection-unstored-read"),
                call,
                "rejected",
                rejection_text(answer.note),
                limit,
                cause_text(err),
            )

    async def _external(
        self, call: ToolCallRequest, outcome: ToolOutcome, code: bool, arguments: dict[str, Any]
    ) -> ToolResult:
        token = outcome.wait_token or call.id
        if token in self._suspensions.waits:
            return inline(call, "error", f"another call already waits on token {token!r}")
        answer = await self.suspend_call(
            call,
            SuspensionReason.EXTERNAL,
            self._suspension.external_expires_seconds,
            id=token,
            question=outcome.content,
        )
        return await external_result(
            call, outcome, answer.payload, code, arguments, self._input, self._limits
        )

    async def _execute(
        self,
        turn: int,
        call: ToolCallRequest,
        entry: CatalogEntry,
        arguments: dict[str, Any],
        input: McpInputAnswers | None = None,
    ) -> ToolResult:
        large = self._limits.large_result_bytes
        summary = f"tool {call.name}, turn {turn}"
        builtin = self._builtins.get(entry.name) if entry.kind == "builtin" else None
        handler = builtin.handle if builtin is not None else self._kind_handlers.get(entry.kind)
        try:
            if handler is not None:
                # A feature's call: its activity errors are handled below like any tool's
                # (a call not safe to repeat whose worker died is UNKNOWN).
                return await handler(turn, call, arguments)
            if entry.kind == "http":
                tool = self._tools[call.name]
                assert isinstance(tool, HttpTool)
                outcome = await calls.call_tool(
                    HttpToolCall(
                        run_id=self._input.run_id,
                        call_id=call.id,
                        tool=tool,
                        arguments=arguments,
                        large_result_bytes=large,
                        scope=self._input.scope,
                    ),
                    entry,
                    summary=summary,
                )
            elif entry.kind == "mcp":
                assert entry.server is not None and entry.tool is not None
                outcome = await calls.call_tool(
                    McpToolCall(
                        run_id=self._input.run_id,
                        call_id=call.id,
                        server=self._servers[entry.server],
                        tool=entry.tool,
                        arguments=arguments,
                        large_result_bytes=large,
                        scope=self._input.scope,
                        report_through_client=not entry.safe_to_repeat,
                        name=entry.name,
                        input=input,
                    ),
                    entry,
                    summary=summary,
                )
            else:
                outcome = await calls.call_tool(
                    CodeToolCall(
                        run_id=self._input.run_id,
                        call_id=call.id,
                        tool=call.name,
                        arguments=arguments,
                        large_result_bytes=large,
                        scope=self._input.scope,
                    ),
                    entry,
                    summary=summary,
                    batch=self._batch_size(),  # the calls a local one shares its task with
                )
        except FailureError as err:
            # A local activity's failure raises ActivityError live but its bare cause (a
            # TimeoutError, say) when its marker replays: both read the same here.
            if isinstance(err, ActivityError):
                cause = err.__cause__
            elif entry.kind == "code" and calls.runs_local(entry):
                cause = err
            else:
                raise
            if isinstance(cause, CancelledError):
                if self._abort is None:
                    raise asyncio.CancelledError from err
                return inline(call, "aborted", ABORTED_CALL, counts=False)
            consent = consent_of(err) if isinstance(err, ActivityError) else None
            if consent is not None:
                result = inline(call, "error", f"the tool call needs consent: {consent.server}")
                result.consent = consent
                return result
            if not entry.safe_to_repeat and isinstance(cause, TemporalTimeoutError):
                return inline(call, "unknown", UNKNOWN_OUTCOME, counts=False)
            if isinstance(cause, ApplicationError) and cause.type == ErrorType.RESULT_NOT_KEPT:
                return inline(call, "unknown", RESULT_LOST, counts=False)
            return inline(call, "error", failure_text(entry, cause, cause_text(err)))
        return from_outcome(call, outcome)

    def _offered_builtins(self) -> tuple[ToolDefinition, ...]:
        """The built-ins this Run offers, in offer order."""
        offers = (builtin.offer() for builtin in self._builtins.values())
        return tuple(offer for offer in offers if offer is not None)
