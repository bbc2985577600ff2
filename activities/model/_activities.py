"""Model calls: the ``psych.model.call`` activity over OpenAI chat completions.

The workflow sends a model id and the conversation by reference (DESIGN.md §4); this
activity resolves the references in the BlobStore, calls the endpoint the worker configured
for that model id, stores the assistant message and returns the new conversation head.

Retrying is not done here. The HTTP client runs with its own retries off (httpx never
retries), every failure leaves as a non-retryable ``ModelCallFailed`` ApplicationError whose
details are a ``ModelFailure``, and the workflow decides from ``ModelFailure.transient``
whether to spend its per-Run transient budget or walk ``ModelRef.fallbacks``. ``classify``
is the one place that decides what is transient.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Self

import httpx
from pydantic import TypeAdapter
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from psych_runtime.activities._activity_class import ActivityClass
from psych_runtime.activities.blobs import BlobStore, Conversations, RecentByRef, blob_words
from psych_runtime.activities.contract import (
    MODEL_CALL,
    ChatMessage,
    ErrorType,
    Latency,
    ModelCallInput,
    ModelCallResult,
    ModelFailure,
    SlimModelCallInput,
    SlimModelCallResult,
    ToolDefinition,
    UnusedSummary,
    Usage,
    full_model_input,
    slim_model_result,
)
from psych_runtime.activities.egress import Egress
from psych_runtime.activities.live import AttemptDeltas, DeltaHub
from psych_runtime.activities.mcp import (
    McpConsentRequired,
    McpResolver,
    McpUnreachable,
    Resolved,
    consent_error,
    resolve_turn,
    turn_result,
)
from psych_runtime.activities.model._context import ContextProviders, ContextRequest
from psych_runtime.activities.model._endpoints import ModelEndpoints, Pricing, call_cost
from psych_runtime.activities.model._failures import (
    MAX_RESULT_BYTES,
    ResponseTooLarge,
    StreamIdle,
    classify,
    surely_fits,
)
from psych_runtime.activities.model._request import Request, RequestBodies, encode_tools
from psych_runtime.activities.model._stream import _parse_body, _sse_lines, _Stream
from psych_runtime.activities.model._threads import thread_head
from psych_runtime.activities.model._wire import (
    _Answer,
    _heartbeating,
    _media_type,
    _read_capped,
    _timeout,
    _too_large,
    _unreported,
)
from psych_runtime.activities.secrets import Redactor
from psych_runtime.activities.telemetry import chat_span
from psych_runtime.activities.tools import complete_through_client
from psych_runtime.specs import with_context

API_KEY_NAME = "model-api-key"
"""The name an endpoint's API key is redacted as: ``[REDACTED:model-api-key]``."""
_DRAIN_SECONDS = 1.0


_TOOL_LIST = TypeAdapter(list[ToolDefinition])


# --- the activity -------------------------------------------------------------------------


class ModelActivities(ActivityClass):
    """The model-call activity and its collaborators.

    Register ``activities()`` (``call``) on a worker. The instance keeps one
    ``Conversations`` so that a Run's next call resolves its conversation head from cache
    (O(1) per call).
    """

    def __init__(
        self,
        *,
        endpoints: ModelEndpoints,
        blobs: BlobStore,
        pricing: Pricing | None = None,
        http: httpx.AsyncClient | None = None,
        mcp: McpResolver | None = None,
        context: ContextProviders | None = None,
        live: DeltaHub | None = None,
        outage_seconds: float = 0.0,
    ) -> None:
        """Bind the activity to its collaborators.

        Args:
            endpoints: which endpoint serves which model id.
            blobs: where conversations, system prompts and tool lists are stored.
            pricing: prices calls; ``None`` leaves every cost unknown.
            http: the client for provider requests, from the worker's egress port
                (``Egress.http(None, "operator")``); ``None`` makes a port of its own
                from the environment, with the endpoints' hosts as the operator's, which
                ``aclose`` closes. Either way its timeouts are set per request and
                nothing retries.
            mcp: resolves an agent turn's MCP servers before its call (``McpActivities``);
                ``None``: a call naming MCP servers fails, naming what is missing.
            context: the worker's pre-turn context providers (``activities._context``),
                asked before every call; ``None``: no per-turn context.
            live: the worker's delta hub: each ``call`` attempt publishes its pieces there
                and heartbeats their address from its first beat (``LiveAttempt``);
                ``None``, or a hub no relay serves: nothing is offered to followers.
            outage_seconds: how long the Temporal server may be away without an answer
                that arrived meanwhile being lost (and the call made again, paid twice):
                above 0, ``call`` reports its answer through the worker's client, whose
                retries must last that long (``outage_retry``), instead of the SDK's own
                completion, which gives up after about 10 s. The workflow gives a model
                call a heartbeat timeout that outlasts the outage its workflows worker
                tolerates (that worker's ``outage_seconds`` plus the margin,
                ``workflows/kernel/_model_lost.py``). 0: no such care.
        """
        self.endpoints = endpoints
        self.blobs = blobs
        self.pricing = pricing
        self.conversations = Conversations(blobs)
        self._systems: RecentByRef[str] = RecentByRef()
        """System prompts by ref: read once per worker, not once per call (each of these
        three keeps 16 MiB, counted as the blobs the values came from)."""
        self._tool_lists: RecentByRef[tuple[ToolDefinition, ...]] = RecentByRef()
        """Tool lists by ref, parsed."""
        self._tools_json: RecentByRef[bytes] = RecentByRef()
        """The same with the tools a call leaves out, as a request's ``tools``."""
        self.requests = RequestBodies()
        """Each conversation's messages as a request holds them, by head ref."""
        self.mcp = mcp
        self.context = context
        self.live = live
        self.outage_seconds = outage_seconds
        self._egress: Egress | None = None
        if http is None:
            self._egress = Egress(operator_hosts=endpoints.hosts())
            http = self._egress.http(None, "operator")
        self.http = http

    async def aclose(self) -> None:
        """Close the HTTP client if this instance created it."""
        if self._egress is not None:
            await self._egress.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @activity.defn(name=MODEL_CALL)
    async def call(self, input: SlimModelCallInput) -> SlimModelCallResult:
        """``complete`` on the wire's slim payloads (``activities/contract/_slim.py``): the
        run id read off the workflow id unless sent, the result without what the workflow
        knows.

        Raises:
            ApplicationError: as ``complete``.
        """
        info = activity.info()
        call = full_model_input(input, info.workflow_id)
        if self.live is None or not self.live.serving:
            return self._deliver(slim_model_result(await self.complete(call), call))
        # The turn first: each execution of a continued Run numbers its activities anew.
        deltas = self.live.open(f"{call.turn}.{info.activity_id}#{info.attempt}", call.turn)
        try:
            result = await self.complete(call, deltas=deltas)
        except BaseException as err:
            # Before the failure reaches the workflow: a follower drops the partial text
            # before it reads ModelCallFailed (or sees the next attempt).
            deltas.end("failed", str(err) or type(err).__name__)
            raise
        # Before the result is returned, so the relay holds every piece by the time the
        # Run records ModelCallFinished.
        deltas.end("completed")
        return self._deliver(slim_model_result(result, call))

    def _deliver(self, result: SlimModelCallResult) -> SlimModelCallResult:
        """``result``, or, with ``outage_seconds``, the same handed to the worker's client.

        The answer is paid for: if the SDK's completion gave up during a server outage,
        the workflow would see the call time out and make it again.

        Raises:
            CompleteAsyncError: the answer is on its way through the client.
        """
        if self.outage_seconds <= 0:
            return result
        complete_through_client(result, activity.info().activity_id, what="model call")

    async def complete(
        self,
        input: ModelCallInput,
        *,
        deltas: AttemptDeltas | None = None,
        remember: bool = True,
        context: bool = True,
    ) -> ModelCallResult:
        """Call the model on the stored conversation plus what is new; store its answer.

        The call in its full form, inside an activity (``call``, and compaction's
        summariser): not an activity of its own. ``deltas``: where the answer's pieces are
        published as they arrive; its address goes out with every heartbeat. ``remember``:
        cache the new head's messages for the next call (not the summariser's: no next).
        ``context``: ask the worker's context providers (a turn's call; not the
        summariser's, which has its own system prompt and is no turn of the Run).

        The endpoint's API key is redacted (``[REDACTED:model-api-key]``) from everything
        taken from the response: the answer, failure messages, their causes and the log.

        Raises:
            ApplicationError: type ``ModelCallFailed``, non-retryable, category BENIGN,
                details a ``ModelFailure`` saying whether the failure is transient, then,
                when the model answered before it, an ``UnusedSummary`` (what it billed).
        """
        started, redact = time.monotonic(), Redactor()
        paid: list[UnusedSummary] = []  # what the answer cost, once one came (``_complete``)
        with chat_span(input) as span:
            try:
                # Beats from the start: rebuilding a long conversation from a slow BlobStore
                # happens before the request and must not look like a lost worker.
                async with _heartbeating(None if deltas is None else deltas.details):
                    answer = await self._complete(
                        input, started, redact, deltas, remember, context, paid
                    )
                    return span.done(answer)
            except McpConsentRequired as err:
                # Not the model's failure either: the Run suspends until a person consents.
                span.failed(ModelFailure(transient=False, message=str(err)))
                raise consent_error(err) from None
            except McpUnreachable as err:
                # Not the model's failure: no call was made, and retrying cannot help.
                activity.logger.warning("model call not made: %s", err)
                span.failed(ModelFailure(transient=False, message=str(err)))
                raise ApplicationError(
                    str(err),
                    type=ErrorType.MCP_UNREACHABLE,
                    non_retryable=True,
                    category=ApplicationErrorCategory.BENIGN,
                ) from None
            except Exception as err:
                # The one place foreign exceptions are mapped. Non-retryable: the workflow
                # retries transient failures against its per-Run budget and fallbacks.
                failure = classify(err, model=input.model)
                failure = failure.model_copy(update={"message": redact(failure.message)})
                # The workflow handles every model failure, so it is an expected outcome:
                # one line here, and BENIGN makes the SDK log its traceback at DEBUG instead
                # of WARNING.
                activity.logger.warning(
                    "model call failed (%s): %s%s",
                    "transient" if failure.transient else "not transient",
                    failure.message,
                    redact(blob_words(err)),
                )
                span.failed(failure)
                raise ApplicationError(
                    failure.message,
                    failure.model_dump(mode="json"),
                    # An answer came before the failure (storing it, say): it was billed.
                    *(answer.model_dump(mode="json") for answer in paid),
                    type=ErrorType.MODEL_CALL_FAILED,
                    non_retryable=True,
                    category=ApplicationErrorCategory.BENIGN,
                ) from redact.scrub(err)

    async def _complete(
        self,
        input: ModelCallInput,
        started: float,
        redact: Redactor,
        deltas: AttemptDeltas | None,
        remember: bool,
        context: bool,
        paid: list[UnusedSummary],
    ) -> ModelCallResult:
        endpoint = self.endpoints.for_model(input.model)
        if endpoint.api_key:
            redact.add(API_KEY_NAME, endpoint.api_key)
        stream = input.stream and endpoint.stream
        system_ref, system = await self._system(input)
        context_ref = input.context_ref
        if input.thread is not None and context_ref is None:
            # A continuing Run's first call: the earlier conversation, bounded, by reference.
            context_ref = await thread_head(self.conversations, input.thread)
        history = await self.conversations.messages(context_ref)
        new_refs: list[str] = []
        new_messages: list[ChatMessage] = []
        for item in input.new_messages:
            if isinstance(item, ChatMessage):
                new_refs.append(await self.conversations.put_message(item))
                new_messages.append(item)
            else:
                new_refs.append(item)
                new_messages.append(await self.conversations.get_message(item))
        tools_ref = input.tools_ref
        resolved: Resolved | None = None
        if input.mcp is not None:
            resolved = await resolve_turn(self.mcp, input)
            tools_ref = resolved.catalog.tools_ref
            for note in resolved.notes:
                new_refs.append(await self.conversations.put_message(note))
                new_messages.append(note)
        tools = await self._tools(tools_ref, input.exclude_tools)
        turn_context = None
        if context and self.context is not None and self.context.settings.sources:
            # This call's system text only: system_ref (what the next call loads) stays the
            # Run's own prompt, and nothing here enters the conversation chain.
            blocks, turn_context = await self.context.gather(
                ContextRequest(input.scope, input.run_id, input.turn, tuple(new_messages))
            )
            system = with_context(system or "", blocks) or None
        request = self.requests.write(
            input, system, context_ref, history, new_messages, tools, stream=stream
        )
        url = endpoint.base_url.rstrip("/") + "/chat/completions"
        headers = {"Content-Type": "application/json"}
        if endpoint.api_key:
            headers["Authorization"] = f"Bearer {endpoint.api_key}"

        reader = _Stream(started=started, deltas=deltas, redact=redact) if stream else None
        answer = await self._send(url, request, headers, input, started, reader)
        usage, cost = answer.usage or Usage(), call_cost(self.pricing, input.model, answer.usage)
        paid.append(UnusedSummary(usage=usage, cost=cost))  # billed, whatever follows
        answer = dataclasses.replace(
            answer,
            text=redact(answer.text),
            tool_calls=tuple(
                call.model_copy(update={"arguments": redact(call.arguments)})
                for call in answer.tool_calls
            ),
        )
        if deltas is not None and deltas.pieces == 0:
            # A whole answer (not streamed, or a gateway that ignored `stream`): one piece.
            deltas.text(answer.text)
            for index, tool_call in enumerate(answer.tool_calls):
                deltas.tool_call(index, tool_call.id, tool_call.name, tool_call.arguments)

        assistant = ChatMessage(
            role="assistant",
            content=answer.text,
            tool_calls=answer.tool_calls,
            provider_fields=answer.provider_fields,
        )
        assistant_ref = await self.conversations.put_message(assistant)
        stored = [*new_messages, assistant] if remember else None
        head = await self.conversations.append(context_ref, [*new_refs, assistant_ref], stored)
        assert head is not None  # the node holds at least the assistant message
        if remember:
            kept = self.conversations.cached(head)
            tail = None if kept is None else kept[-len(new_messages) - 1 :]
            self.requests.remember(context_ref, head, request, new_messages, tail)
        info = activity.info()
        queue_wait = (info.started_time - info.current_attempt_scheduled_time).total_seconds()
        result = ModelCallResult(
            model=input.model,
            system_ref=system_ref,
            context_ref=head,
            text=answer.text,
            # What the provider needs echoed stays in the stored message (it can be
            # kilobytes per call): the workflow's history never carries it.
            tool_calls=tuple(
                call.model_copy(update={"provider_fields": None}) if call.provider_fields else call
                for call in answer.tool_calls
            ),
            finish_reason=answer.finish_reason,
            usage=usage,
            cost=cost,
            latency=Latency(
                queue_wait_ms=max(0.0, queue_wait * 1000),
                duration_ms=(time.monotonic() - started) * 1000,
                first_token_ms=answer.first_token_ms,
            ),
            mcp=None
            if resolved is None or input.mcp is None
            else turn_result(resolved, input.mcp, (call.name for call in answer.tool_calls)),
            context=turn_context,
            # No prompt tokens reported (no usage, or a usage saying zero, which no request
            # is): compaction's trigger needs a prompt size all the same.
            estimated_prompt_tokens=len(request.body) // 4 if _unreported(answer.usage) else None,
        )
        if not surely_fits(result):
            size = len(result.model_dump_json())
            if size > MAX_RESULT_BYTES:
                raise ResponseTooLarge(_too_large(size, "result"))
        return result

    async def _system(self, input: ModelCallInput) -> tuple[str | None, str | None]:
        """The system prompt's ref and text: stored now if inline, else read (``_systems``)."""
        if input.system_prompt is not None:
            data = input.system_prompt.encode()
            ref = await self.blobs.put(data)
            self._systems.keep_sized(ref, input.system_prompt, len(data))
            return ref, input.system_prompt
        if input.system_ref is not None:
            text = self._systems.get(input.system_ref)
            if text is None:
                data = await self.blobs.get(input.system_ref)
                text = data.decode()
                self._systems.keep_sized(input.system_ref, text, len(data))
            return input.system_ref, text
        return None, None

    async def _tools(self, ref: str | None, exclude: Sequence[str]) -> bytes:
        """The ``tools`` of a request (``encode_tools``) from the list stored at ``ref``."""
        if ref is None:
            return b""
        key = ref + json.dumps(sorted(exclude)) if exclude else ref
        encoded = self._tools_json.get(key)
        if encoded is None:
            tools = self._tool_lists.get(ref)
            if tools is None:
                data = await self.blobs.get(ref)
                tools = tuple(_TOOL_LIST.validate_json(data))
                self._tool_lists.keep_sized(ref, tools, len(data))
            excluded = set(exclude)
            encoded = encode_tools([t for t in tools if t.name not in excluded])
            self._tools_json.keep_sized(key, encoded, len(encoded))
        return encoded

    async def _send(
        self,
        url: str,
        request: Request,
        headers: dict[str, str],
        input: ModelCallInput,
        started: float,
        stream: _Stream | None,
    ) -> _Answer:
        """POST ``request`` and read the answer: as a stream into ``stream``, or whole (None).

        The read timeout is the idle limit either way: a gap between received bytes, which
        for a whole answer is mostly the wait for it (until 12-05 only the activity's 10
        minutes bounded an endpoint that does not stream, an audit found).
        """
        idle = input.stream_idle_seconds
        try:
            async with self.http.stream(
                "POST", url, content=request.body, headers=headers, timeout=_timeout(idle or None)
            ) as response:
                if not response.is_success:
                    await response.aread()
                    response.raise_for_status()
                media_type = _media_type(response)
                if stream is None or media_type != "text/event-stream":
                    # Not streamed; or a gateway that ignores `stream: true` (a whole JSON
                    # completion), or something else entirely (an HTML page): judged whole,
                    # by content.
                    data = await _read_capped(response)
                    return _parse_body(data, media_type, input.turn, started)
                lines = _sse_lines(response.aiter_bytes())
                async for line in lines:
                    stream.feed(line)
                    if stream.done:
                        break
                stream.close()
                # Drain what follows [DONE] (normally nothing): a response left unread
                # closes its connection, and the next call would pay a new TCP (and TLS)
                # handshake. Bounded, so a server holding the stream open after [DONE]
                # cannot turn a complete answer into an idle failure.
                if stream.done:
                    with contextlib.suppress(TimeoutError, httpx.HTTPError):
                        async with asyncio.timeout(_DRAIN_SECONDS):
                            async for _ in lines:
                                pass
        except httpx.ReadTimeout as err:
            raise StreamIdle(idle, streamed=stream is not None) from err
        return stream.answer(input.turn)
