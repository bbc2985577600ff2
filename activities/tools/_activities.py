"""Tool activities: resolve a Run's tool catalog, run code tools, send HTTP tool requests,
read back stored results (the built-in ``read_tool_output``) and store a child Run's
answer (``_store_result``).

Errors the model should read come back as data, ``ToolOutcome(status="error")``: invalid
arguments, an exception raised by a tool, an HTTP error status, a timeout, a refused
connection, a missing credential, and an exception nothing expected (a SecretResolver's
own failure, a bug: logged with its traceback, ``unexpected``). The activity itself fails
only for what the model cannot fix (a code tool this worker does not have) and on
cancellation.

Every outcome's tool message (what the model is shown) is stored in the BlobStore
(``message_ref``). A result larger than ``large_result_bytes`` is stored whole
(``result_ref``) and shown as a handle plus a preview, so it enters workflow history only
as that preview; the model reads the rest in slices with ``read_tool_output``.

While a tool runs the activity heartbeats, so a crashed worker is noticed by the heartbeat
timeout and a cancellation (an abort) reaches the activity.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

import httpx
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from psych_runtime.activities._beat import heartbeating
from psych_runtime.activities.blobs import BlobStore, canonical_json
from psych_runtime.activities.contract import (
    POLICY_DECIDE,
    TOOL_CATALOG,
    TOOL_READ_OUTPUT,
    TOOL_RUN_CODE,
    TOOL_SEND_HTTP,
    CatalogEntry,
    CatalogInput,
    CodeToolCall,
    ErrorType,
    HttpToolCall,
    PolicyDecision,
    PolicyInput,
    ReadOutputInput,
    SlimCodeToolCall,
    SlimHttpToolCall,
    SlimToolOutcome,
    ToolCatalog,
    ToolDefinition,
    ToolInfo,
    ToolOutcome,
    full_code_call,
    full_http_call,
    slim_outcome,
)
from psych_runtime.activities.egress import Egress, EgressDenied, never_sent
from psych_runtime.activities.hooks import HookCall, Hooks, Interception
from psych_runtime.activities.secrets import Redactor, SecretResolver
from psych_runtime.activities.telemetry import tool_span, traced_tool
from psych_runtime.activities.tools._catalog import (
    builtin_entry,
    catalogue_permits,
    http_definition,
    http_info,
    http_safe_to_repeat,
    registered_code_tool,
    unpermitted,
)
from psych_runtime.activities.tools._code import call_code, describe_invalid, render_result
from psych_runtime.activities.tools._http import (
    NOT_SAFE_TO_REPEAT,
    ToolError,
    build_request,
    send_request,
)
from psych_runtime.activities.tools._local_calls import (
    check_local_bytes,
    hooked_local_call,
    local_timed_out,
)
from psych_runtime.activities.tools._outcomes import fixed_decision, unexpected
from psych_runtime.activities.tools._policy import Policy, RulePolicy, ask_policy
from psych_runtime.activities.tools._read_output import read_slice
from psych_runtime.activities.tools._reporting import OUTAGE_MARGIN, complete_through_client
from psych_runtime.activities.tools._store_result import StoredResults
from psych_runtime.specs import (
    ExternalWait,
    TenantPermits,
    ToolDef,
    ToolRegistry,
    matches,
    tool_call_scope,
)

_log = logging.getLogger(__name__)


class ToolActivities(StoredResults):
    """The tool activities, sharing one BlobStore, SecretResolver and HTTP client.

    Register them with a worker::

        tools = ToolActivities(registry=registry, blobs=LocalBlobStore(path))
        Worker(..., activities=tools.activities())

    and ``await tools.aclose()`` when the worker stops.
    """

    def __init__(
        self,
        *,
        registry: ToolRegistry,
        blobs: BlobStore,
        secrets: SecretResolver | None = None,
        egress: Egress | None = None,
        policy: Policy | None = None,
        heartbeat_seconds: float = 1.0,
        outage_seconds: float = 0.0,
        hooks: Hooks | None = None,
        permits: TenantPermits | None = None,
    ) -> None:
        """Create the activities.

        Args:
            registry: the code tools this worker can run.
            blobs: where results and tool messages are stored.
            secrets: resolves HTTP tool credentials; without one, a tool that names a
                credential gets an error outcome.
            egress: the worker's egress port: HTTP tools are sent with its client for the
                call's tenant, which refuses what the egress policy refuses (the call's
                outcome is then ``denied``, naming the rule; a redirect refused after the
                request was sent, an ``error`` of a call that ran) and never retries (a POST is
                not safe to repeat, and repeating is the workflow's decision). Without
                one, one is made from the environment (``EgressSettings.from_env``) and
                closed by ``aclose``.
            policy: decides allow/deny/ask per tool or per call (default ``RulePolicy()``,
                which allows everything). An exception inside it counts as deny.
            heartbeat_seconds: how often a running tool call heartbeats.
            outage_seconds: how long the Temporal server may be away without losing the
                result of a call not safe to repeat that finished meanwhile (0: no such
                care). Such calls then get a heartbeat timeout of ``outage_seconds +
                OUTAGE_MARGIN`` and report their result through the worker's client
                (asynchronous completion), whose retries must last as long: connect it
                with ``outage_retry(outage_seconds)`` (psych's ``connect`` does).
            hooks: the pre, post and on_error hooks every call of these activities runs
                through (``activities/hooks/_hooks.py``; default none).
            permits: what each tenant may use (``TenantPermits``): a code or HTTP tool call
                outside it is refused before any hook (default none: no restriction).
        """
        self.registry = registry
        self.hooks = hooks if hooks is not None else Hooks()
        self.blobs = blobs
        self.secrets = secrets
        self._egress = egress
        self._owned_egress: Egress | None = None
        self._heartbeat_seconds = heartbeat_seconds
        self._outage_seconds = outage_seconds
        self.policy: Policy = policy if policy is not None else RulePolicy()
        self.permits = permits

    async def aclose(self) -> None:
        """Close the egress port's clients if these activities made it."""
        if self._owned_egress is not None:
            await self._owned_egress.aclose()
            self._owned_egress = None

    def _client(self, tenant: str) -> httpx.AsyncClient:
        # Made on first use, so a worker whose Runs never call an HTTP tool holds none.
        egress = self._egress
        if egress is None:
            if self._owned_egress is None:
                self._owned_egress = Egress()
            egress = self._owned_egress
        return egress.http(tenant)

    # --- activities ------------------------------------------------------------------------

    @activity.defn(name=TOOL_CATALOG)
    async def catalog(self, input: CatalogInput) -> ToolCatalog:
        """Resolve the tools a Run offers into stored definitions and execution facts.

        The definitions (sorted by name) are stored as one blob, ``tools_ref``, which
        model calls refer to instead of carrying the list. A code or HTTP tool the Run's
        tenant is not permitted (``permits``) is left out: the model is never offered it,
        and the Run denies a call of it with the permits' words (an agent's, since patch
        ``psych-unpermitted-told``; before, and a workflow's tool step, an unknown tool's).

        Raises:
            ApplicationError: ``ToolNotRegistered`` when a code tool is not in this
                worker's registry; ``DuplicateToolName`` when two tools share a name;
                ``BadInput`` when the permits cannot be asked (``catalogue_permits``).
                All are non-retryable.
        """
        definitions: list[ToolDefinition] = []
        entries: list[CatalogEntry] = []
        code_permitted, http_permitted = await catalogue_permits(self.permits, input)
        for name in input.code_tools:
            if code_permitted is not None and not matches(name, code_permitted):
                continue
            tool = self._code_tool(name)
            definitions.append(
                ToolDefinition(
                    name=tool.name, description=tool.description, parameters=tool.parameters_schema
                )
            )
            info = ToolInfo(
                name=tool.name,
                kind="code",
                read_only=tool.read_only,
                destructive=tool.destructive,
            )
            entries.append(
                CatalogEntry(
                    name=tool.name,
                    kind="code",
                    safe_to_repeat=tool.idempotent,
                    info=info,
                    policy=self._fixed(info),
                    heartbeat_timeout_seconds=self._lost_after(tool.idempotent),
                    local_seconds=None if self._hooked(tool.name) else tool.local_seconds,
                )
            )
        for http_tool in input.http_tools:
            if http_permitted is not None and not matches(http_tool.name, http_permitted):
                continue
            definitions.append(http_definition(http_tool))
            info = http_info(http_tool)
            safe = http_safe_to_repeat(http_tool)
            entries.append(
                CatalogEntry(
                    name=http_tool.name,
                    kind="http",
                    safe_to_repeat=safe,
                    info=info,
                    policy=self._fixed(info),
                    heartbeat_timeout_seconds=self._lost_after(safe),
                )
            )
        for builtin in input.builtins:
            definitions.append(builtin)
            entries.append(builtin_entry(builtin))
        counts = Counter(definition.name for definition in definitions)
        duplicates = sorted(name for name, count in counts.items() if count > 1)
        if duplicates:
            raise ApplicationError(
                f"tool names offered more than once: {', '.join(duplicates)}",
                type=ErrorType.DUPLICATE_TOOL_NAME,
                non_retryable=True,
            )
        definitions.sort(key=lambda definition: definition.name)
        entries.sort(key=lambda entry: entry.name)
        tools_ref = None
        if definitions:
            tools_ref = await self.blobs.put(
                canonical_json([definition.model_dump(mode="json") for definition in definitions])
            )
        return ToolCatalog(tools_ref=tools_ref, entries=tuple(entries))

    def _hooked(self, tool: str) -> bool:
        """Whether a hook covers ``tool``: its calls then run as normal activities, since a
        local call's bound is the tool's ``local_seconds`` plus room for the permits check
        only (a command hook may take 10 s, a tool 0.5 s), and its hooks would run again."""
        return any(self.hooks.for_tool(stage, tool) for stage in ("pre", "post", "on_error"))

    def _fixed(self, info: ToolInfo) -> PolicyDecision | None:
        return fixed_decision(self.policy, info)

    @activity.defn(name=POLICY_DECIDE)
    async def decide(self, input: PolicyInput) -> PolicyDecision:
        """Ask the Policy about one call (``ask_policy``: an exception inside it, or no
        answer within ``POLICY_ANSWER_SECONDS``, counts as deny)."""
        return await ask_policy(self.policy, input)

    @activity.defn(name=TOOL_RUN_CODE)
    async def run_code(self, input: SlimCodeToolCall) -> SlimToolOutcome:
        """``code`` on the wire's slim payloads (``activities/contract/_slim.py``): the run
        id read off the workflow id unless sent, the outcome without what the workflow
        derives. A call not safe to repeat may report through the client (``_deliver``).

        Raises:
            ApplicationError: as ``code``; ``LocalResultTooLarge`` (non-retryable) for a
                local call whose outcome is over its ``local_bytes``, ``LocalCallHooked``
                (non-retryable, before anything runs) for one a hook of this worker covers.
            asyncio.CancelledError: as ``code``.
        """
        call = full_code_call(input, activity.info().workflow_id)
        if activity.info().is_local and self._hooked(call.tool):
            raise hooked_local_call(call.tool)
        safe = self._code_tool(call.tool).idempotent
        wire = self._deliver(await self.code(call), safe)
        check_local_bytes(wire, input.local_bytes, call.tool)
        return wire

    async def code(self, input: CodeToolCall) -> ToolOutcome:
        """Run one registered code tool; invalid arguments and its exceptions are data.

        The call in its full form, inside the activity (``run_code``). Sync functions run
        in a worker thread so the event loop keeps heartbeating. On cancellation an async
        tool is cancelled; a sync tool's thread cannot be stopped and runs to its end, its
        result discarded.

        Raises:
            ApplicationError: ``ToolNotRegistered`` (non-retryable).
            asyncio.CancelledError: the activity was cancelled.
        """
        started = time.monotonic()
        tool = self._code_tool(input.tool)
        span = tool_span(
            tool=input.tool,
            call_id=input.call_id,
            run_id=input.run_id,
            tenant=input.scope.tenant,
            arguments=input.arguments,
        )
        plan = self.hooks.plan(
            HookCall.of(
                input.tool, "code", input.arguments, input.call_id, input.run_id, input.scope
            )
        )
        # Heartbeating from the first check to the stored outcome: a permits port (or, for
        # HTTP, a SecretResolver) slower than the heartbeat timeout would otherwise fail
        # the call as lost before it started. (Hooks beat on their own.)
        work = heartbeating(self._run_code(input, tool, started, plan), self._heartbeat_seconds)
        return await traced_tool(span, work)

    async def _run_code(
        self, input: CodeToolCall, tool: ToolDef, started: float, plan: Interception
    ) -> ToolOutcome:
        refused = await unpermitted(self.permits, "code", tool.name, input.scope)
        if refused is not None:
            return await self._refused(input, refused, started, plan)
        denied = await plan.before()
        if denied is not None:
            return await self._outcome(input, "denied", denied, started, plan)
        if plan.rewritten:
            input = input.model_copy(update={"arguments": plan.arguments})
        try:
            parsed = tool.parse_arguments(input.arguments)
        except ValidationError as err:
            text = f"invalid arguments for {tool.name}: {describe_invalid(err)}"
            return await self._outcome(input, "error", text, started, plan)
        # A local call's tool gets its local_seconds from here: the permits check before is
        # bounded on its own (``permitted_by``), and the local activity leaves room for both.
        seconds = input.local_seconds
        bound = asyncio.timeout(seconds)  # None: no bound of its own
        once = not tool.idempotent  # from here on, the tool has run
        try:
            async with bound:
                with tool_call_scope(input.scope):  # tool_scope() inside the tool (its thread)
                    value = await call_code(tool, parsed)
        except Exception as err:
            if seconds is not None and bound.expired():
                raise local_timed_out(tool.name, seconds) from err
            activity.logger.warning("code tool %s raised", tool.name, exc_info=True)
            text = f"{type(err).__name__}: {err}"
            return await self._outcome(input, "error", text, started, plan, once=once)
        if isinstance(value, ExternalWait):
            waiting = value.message or f"waiting for {value.token}"
            outcome = await self._outcome(input, "wait", waiting, started, plan, once=once)
            return outcome.model_copy(update={"wait_token": value.token})
        return await self._outcome(input, "ok", render_result(value), started, plan, once=once)

    @activity.defn(name=TOOL_SEND_HTTP)
    async def send_http(self, input: SlimHttpToolCall) -> SlimToolOutcome:
        """``http`` on the wire's slim payloads (``activities/contract/_slim.py``), as
        ``run_code``.

        Raises:
            asyncio.CancelledError: the activity was cancelled.
        """
        call = full_http_call(input, activity.info().workflow_id)
        safe = call.tool.method not in NOT_SAFE_TO_REPEAT
        return self._deliver(await self.http(call), safe)

    async def http(self, input: HttpToolCall) -> ToolOutcome:
        """Send one HTTP tool request; error statuses, timeouts and refusals are data.

        The call in its full form, inside the activity (``send_http``).

        Raises:
            asyncio.CancelledError: the activity was cancelled.
        """
        started = time.monotonic()
        # Everything below the request comes from the server, which may echo the credential.
        redact = Redactor()
        span = tool_span(
            tool=input.tool.name,
            call_id=input.call_id,
            run_id=input.run_id,
            tenant=input.scope.tenant,
            arguments=input.arguments,
        )
        plan = self.hooks.plan(
            HookCall.of(
                input.tool.name, "http", input.arguments, input.call_id, input.run_id, input.scope
            )
        )
        work = self._send_http(input, redact, started, plan)
        return await traced_tool(span, heartbeating(work, self._heartbeat_seconds))

    async def _send_http(
        self, input: HttpToolCall, redact: Redactor, started: float, plan: Interception
    ) -> ToolOutcome:
        refused = await unpermitted(self.permits, "http", input.tool.name, input.scope)
        if refused is not None:
            return await self._refused(input, refused, started, plan)
        denied = await plan.before()
        if denied is not None:
            return await self._outcome(input, "denied", denied, started, plan)
        if plan.rewritten:
            input = input.model_copy(update={"arguments": plan.arguments})
        client = self._client(input.scope.tenant)
        unsafe, built = not http_safe_to_repeat(input.tool), False
        try:
            request = await build_request(client, self.secrets, input, redact)
            built = True  # it may be sent and take effect, unless it provably never left
            text = await send_request(client, input.tool, request)
        except EgressDenied as err:  # its connection refused: never sent
            text = redact(f"{input.tool.name}: {err}")
            return await self._outcome(input, "denied", text, started, plan, unsent=True)
        except Exception as err:
            unsent = not built or never_sent(err)
            if isinstance(err, ToolError):
                text = redact(str(err))
            else:
                text = unexpected(input.tool.name, err, redact)
            once = unsafe and not unsent
            return await self._outcome(
                input, "error", text, started, plan, once=once, unsent=unsent
            )
        return await self._outcome(input, "ok", redact(text), started, plan, once=unsafe)

    @activity.defn(name=TOOL_READ_OUTPUT)
    async def read_output(self, input: ReadOutputInput) -> ToolOutcome:
        """The built-in ``read_tool_output``: a slice of a stored result.

        ``offset`` and ``length`` count characters (of the UTF-8 decoded result), matching
        the character offsets the truncation message gives. The slice is preceded by a
        header line with the total size and the next offset. A slice is never truncated
        again: the model chose its length.
        """
        started = time.monotonic()
        arguments = {"handle": input.handle, "offset": input.offset, "length": input.length}
        plan = self.hooks.plan(HookCall("read_tool_output", "builtin", arguments, input.call_id))
        denied = await plan.before()
        if denied is not None:
            return await self._outcome(input, "denied", denied, started, plan)
        try:
            if plan.rewritten:
                input = ReadOutputInput.model_validate({**plan.arguments, "call_id": input.call_id})
            text = await read_slice(self.blobs, input)
        except ValidationError as err:
            text = f"invalid arguments for read_tool_output: {describe_invalid(err)}"
            return await self._outcome(input, "error", text, started, plan)
        except ToolError as err:
            return await self._outcome(input, "error", str(err), started, plan)
        return await self._outcome(input, "ok", text, started, plan)

    # --- helpers ---------------------------------------------------------------------------

    async def _refused(
        self, input: CodeToolCall | HttpToolCall, why: str, started: float, plan: Interception
    ) -> ToolOutcome:
        """The outcome of a call the tenant's permits refuse (``unpermitted``): denied, and
        marked so, which the Run reads as the permit revoked (it offers the tool no more)."""
        outcome = await self._outcome(input, "denied", why, started, plan)
        return outcome.model_copy(update={"unpermitted": True})

    def _code_tool(self, name: str) -> ToolDef:
        return registered_code_tool(self.registry, name)

    def _lost_after(self, safe_to_repeat: bool) -> float | None:
        """The heartbeat timeout a tool's calls get (None: the workflow's default)."""
        if safe_to_repeat or self._outage_seconds <= 0:
            return None
        return self._outage_seconds + OUTAGE_MARGIN

    def _deliver(self, outcome: ToolOutcome, safe_to_repeat: bool) -> SlimToolOutcome:
        """The slim form of ``outcome``; a call not safe to repeat reports it itself.

        The worker's own completion of an activity gives up after about 10 s of retries,
        so a call that finished while the server was away would be lost, and recorded
        UNKNOWN. Such a call completes asynchronously instead, through the worker's client,
        whose retries last the outage (the heartbeat timeout, set in the catalogue, lasts
        as long). A call safe to repeat is simply run again if its result is lost.

        Raises:
            CompleteAsyncError: the outcome is on its way through the client.
        """
        wire = slim_outcome(outcome)
        if safe_to_repeat or self._outage_seconds <= 0:
            return wire
        # Reported in the form the activity returns: the workflow decodes it as that type.
        complete_through_client(wire, outcome.call_id)
