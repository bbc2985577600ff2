"""The activities' OpenTelemetry spans and metrics, after the ``gen_ai`` semantic conventions.

A ``chat {model}`` span per model call (request and response model, finish reasons, input,
output and cache tokens), an ``execute_tool {tool}`` span per tool call (tool name, outcome
status), an HTTP client span under each HTTP tool's request, and the metrics
``gen_ai.client.token.usage``, ``gen_ai.client.operation.duration`` and
``psych.tool.calls``. Every span carries the Run's ``psych.*`` attributes: the run id and
tenant from the activity input, the agent, Version hash and turn from the OpenTelemetry
baggage the workflow side puts on its turn context (``workflows/_tracing.py``), which
Temporal's tracing interceptor carries to the activity in its headers. No payload field was
added for them.

Nothing is recorded until ``instrument`` is called (``psych_runtime.workers`` does it when
``OTEL_*`` configures an exporter): before that, each helper returns one shared no-op object,
so an untraced worker pays a global lookup per call. Message contents (inputs, answers, tool
arguments and results) go on spans only with ``instrument(content=True)``
(``PSYCH_OTEL_CONTENT=1``): they are the user's data, and tracing backends are often more
widely readable than the Runs themselves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Mapping
from contextvars import Token
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit

from opentelemetry import context, trace
from opentelemetry.context import Context
from opentelemetry.metrics import Counter, Histogram, MeterProvider, NoOpMeterProvider
from opentelemetry.trace import (
    NoOpTracerProvider,
    Span,
    SpanKind,
    StatusCode,
    Tracer,
    TracerProvider,
)
from opentelemetry.util.types import AttributeValue

from psych_runtime.activities.contract import (
    ChatMessage,
    ModelCallInput,
    ModelCallResult,
    ModelFailure,
    ToolOutcome,
)
from psych_runtime.activities.telemetry._labels import (
    RUN_ATTRIBUTES,
    RUN_LABELS,
    carried_labels,
    run_attributes,
)

INSTRUMENTATION_NAME = "psych_runtime"
# Bucket boundaries the gen_ai conventions recommend for these two histograms.
_TOKEN_BUCKETS = tuple(float(4**n) for n in range(14))
_DURATION_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)


@dataclass(frozen=True)
class _Instruments:
    tracer: Tracer
    token_usage: Histogram
    duration: Histogram
    tool_calls: Counter
    egress_refusals: Counter
    content: bool


_installed: _Instruments | None = None
_T = TypeVar("_T")


def instrument(
    *,
    tracer_provider: TracerProvider | None,
    meter_provider: MeterProvider | None,
    content: bool = False,
) -> None:
    """Record the activities' spans and metrics through these providers from now on.

    Args:
        tracer_provider: where spans go; ``None`` records none (their tracer is a no-op).
        meter_provider: where metrics go; ``None`` records none.
        content: put message contents, tool arguments and results on spans.
    """
    tracers = tracer_provider or NoOpTracerProvider()
    meter = (meter_provider or NoOpMeterProvider()).get_meter(INSTRUMENTATION_NAME)
    global _installed
    _installed = _Instruments(
        tracer=tracers.get_tracer(INSTRUMENTATION_NAME),
        token_usage=meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens used per model call, by gen_ai.token.type (input, output).",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        ),
        duration=meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Duration of model calls (chat) and tool calls (execute_tool).",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        ),
        tool_calls=meter.create_counter(
            "psych.tool.calls",
            unit="{call}",
            description="Tool calls by tool and outcome (psych.tool.status).",
        ),
        egress_refusals=meter.create_counter(
            "psych.egress.refused",
            unit="{connection}",
            description=(
                "Connections the egress policy refused, by psych.egress.rule and (when "
                "the request named it) psych.egress.purpose."
            ),
        ),
        content=content,
    )


def egress_refused(kind: str, purpose: str | None = None) -> None:
    """Count one connection the egress policy refused (``kind``: the rule's kind;
    ``purpose``: the kind of request it was, when its maker said, ``PurposeKind``)."""
    if _installed is not None:
        attributes = {"psych.egress.rule": kind}
        if purpose is not None:
            attributes["psych.egress.purpose"] = purpose
        _installed.egress_refusals.add(1, attributes)


def uninstrument() -> None:
    """Stop recording (what a worker is before ``instrument``)."""
    global _installed
    _installed = None


class _Call:
    """One model or tool call's span and metrics, from ``__enter__`` to ``__exit__``."""

    def __init__(self, instruments: _Instruments, metric: dict[str, AttributeValue]) -> None:
        self._instruments = instruments
        self._metric = metric
        self._started = 0.0
        self._span: Span | None = None
        self._token: Token[Context] | None = None
        self._error: str | None = None

    def _open(self, name: str, kind: SpanKind, attributes: Mapping[str, AttributeValue]) -> None:
        self._started = time.monotonic()
        self._span = self._instruments.tracer.start_span(name, kind=kind, attributes=attributes)
        # Current for the call, so spans made under it (an HTTP tool's request) nest in it
        # and carry its Run labels.
        labels = {key: attributes[key] for key in RUN_ATTRIBUTES if key in attributes}
        ctx = context.set_value(RUN_LABELS, labels, trace.set_span_in_context(self._span))
        self._token = context.attach(ctx)

    def _fail(self, error_type: str, description: str) -> None:
        self._error = error_type
        if self._span is not None:
            self._span.set_attribute("error.type", error_type)
            self._span.set_status(StatusCode.ERROR, description)

    def _close(self, exc: BaseException | None) -> None:
        if exc is not None and self._error is None:
            self._fail(type(exc).__qualname__, str(exc))
        metric = dict(self._metric)
        if self._error is not None:
            metric["error.type"] = self._error
        self._instruments.duration.record(time.monotonic() - self._started, metric)
        if self._token is not None:
            context.detach(self._token)
        if self._span is not None:
            self._span.end()


class ChatCall(_Call):
    """The ``chat`` span of one model call; enter it around the call."""

    def __init__(self, instruments: _Instruments, input: ModelCallInput) -> None:
        super().__init__(
            instruments,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": input.model,
                "psych.tenant": input.scope.tenant,
            },
        )
        self._input = input

    def __enter__(self) -> ChatCall:
        input = self._input
        attributes: dict[str, AttributeValue] = {
            **self._metric,
            **run_attributes(input.run_id, input.scope.tenant, input.turn),
            "gen_ai.conversation.id": input.run_id,
        }
        if self._instruments.content:
            attributes["gen_ai.input.messages"] = _messages(input.new_messages)
        self._open(f"chat {input.model}", SpanKind.CLIENT, attributes)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close(exc)

    def done(self, result: ModelCallResult) -> ModelCallResult:
        """Record the answer's model, finish reason and tokens; returns ``result``."""
        usage = result.usage
        reasons = (result.finish_reason,) if result.finish_reason else ()
        self._metric["gen_ai.response.model"] = result.model
        for token_type, count in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            self._instruments.token_usage.record(
                count, {**self._metric, "gen_ai.token.type": token_type}
            )
        if self._span is not None:
            self._span.set_attributes(
                {
                    "gen_ai.response.model": result.model,
                    "gen_ai.response.finish_reasons": reasons,
                    "gen_ai.usage.input_tokens": usage.input_tokens,
                    "gen_ai.usage.output_tokens": usage.output_tokens,
                    "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
                    "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
                    "gen_ai.usage.reasoning.output_tokens": usage.reasoning_tokens,
                }
            )
            if self._instruments.content:
                answer: dict[str, Any] = {"role": "assistant", "content": result.text}
                if result.tool_calls:
                    answer["tool_calls"] = [
                        call.model_dump(mode="json") for call in result.tool_calls
                    ]
                self._span.set_attribute("gen_ai.output.messages", json.dumps([answer]))
        return result

    def failed(self, failure: ModelFailure) -> None:
        """Record a classified failure: ``error.type`` is the HTTP status, or ``transient``
        / ``permanent`` when there was none."""
        kind = (
            str(failure.status)
            if failure.status
            else ("transient" if failure.transient else "permanent")
        )
        self._fail(kind, failure.message)


class ToolCall(_Call):
    """The ``execute_tool`` span of one tool call; enter it around the call."""

    def __init__(
        self,
        instruments: _Instruments,
        *,
        tool: str,
        call_id: str,
        run_id: str,
        tenant: str,
        tool_type: str,
        arguments: Mapping[str, Any],
        extra: Mapping[str, AttributeValue],
    ) -> None:
        super().__init__(
            instruments,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "psych.tenant": tenant,
            },
        )
        self._tool = tool
        self._attributes: dict[str, AttributeValue] = {
            **self._metric,
            **run_attributes(run_id, tenant),
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": tool_type,
            **extra,
        }
        if instruments.content:
            self._attributes["gen_ai.tool.call.arguments"] = json.dumps(
                dict(arguments), default=str
            )
        self._status = "cancelled"
        """Until ``done``: an exit without an outcome is a cancellation (or ``failed``)."""

    def __enter__(self) -> ToolCall:
        self._open(f"execute_tool {self._tool}", SpanKind.INTERNAL, self._attributes)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and self._status == "cancelled":
            if isinstance(exc, Exception):
                self._status = "failed"
            else:
                # asyncio.CancelledError (a BaseException): the call was cancelled, not failed.
                self._error = "cancelled"
        if self._span is not None:
            # A call ended without an outcome has its status on the span too.
            self._span.set_attribute("psych.tool.status", self._status)
        self._close(exc)
        self._instruments.tool_calls.add(1, {**self._metric, "psych.tool.status": self._status})

    def done(self, outcome: ToolOutcome) -> ToolOutcome:
        """Record the outcome's status (``ok``, ``error``, ``wait``); returns ``outcome``."""
        self._status = outcome.status
        if self._span is not None:
            self._span.set_attribute("psych.tool.status", outcome.status)
            self._span.set_attribute("psych.tool.result_bytes", outcome.size)
            if self._instruments.content:
                self._span.set_attribute("gen_ai.tool.call.result", outcome.content)
        if outcome.status == "error":
            self._fail(
                "tool_error", outcome.content[:200] if self._instruments.content else "tool error"
            )
        return outcome


class HttpCall:
    """The HTTP client span of one tool request; enter it around sending."""

    def __init__(
        self, instruments: _Instruments, method: str, url: str, server: str, template: str
    ) -> None:
        self._instruments = instruments
        self._attributes: dict[str, AttributeValue] = {
            **carried_labels(),  # the Run's labels, from the tool call's span around it
            "http.request.method": method,
            # The arguments filled into the path are the user's data, as the tool call's
            # arguments are: only with contents on; else the tool's own URL, unfilled.
            "url.full": url if instruments.content else template,
            "url.template": urlsplit(template).path,
            "server.address": server,
        }
        self._name = method
        self._span: Span | None = None

    def __enter__(self) -> HttpCall:
        self._span = self._instruments.tracer.start_span(
            self._name, kind=SpanKind.CLIENT, attributes=self._attributes
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._span is not None
        if exc is not None:
            self._span.set_attribute("error.type", type(exc).__qualname__)
            self._span.set_status(StatusCode.ERROR, str(exc))
        self._span.end()

    def status(self, code: int) -> None:
        """Record the response status (4xx and 5xx mark the span as an error)."""
        assert self._span is not None
        self._span.set_attribute("http.response.status_code", code)
        if code >= 400:
            self._span.set_attribute("error.type", str(code))
            self._span.set_status(StatusCode.ERROR)


class _NoCall:
    """What every helper returns while nothing is instrumented: one shared object."""

    def __enter__(self) -> _NoCall:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def done(self, result: _T) -> _T:
        return result

    def failed(self, failure: ModelFailure) -> None:
        return None

    def status(self, code: int) -> None:
        return None


_NO_CALL = _NoCall()


def chat_span(input: ModelCallInput) -> ChatCall | _NoCall:
    """The ``chat {model}`` span and metrics of one model call (a no-op until
    ``instrument``)."""
    if _installed is None:
        return _NO_CALL
    return ChatCall(_installed, input)


def tool_span(
    *,
    tool: str,
    call_id: str,
    run_id: str,
    tenant: str,
    arguments: Mapping[str, Any],
    tool_type: str = "function",
    extra: Mapping[str, AttributeValue] | None = None,
) -> ToolCall | _NoCall:
    """The ``execute_tool {tool}`` span and metrics of one tool call (a no-op until
    ``instrument``). The MCP activity calls it with ``tool_type="extension"`` and
    ``extra={"psych.mcp.server": name}``.

    Args:
        tool: the tool's name as the model sees it.
        call_id: the model's id of the call.
        run_id: the Run's id.
        tenant: the Run's tenant.
        arguments: the call's arguments (on the span only with content recording on).
        tool_type: ``function`` (code and HTTP tools) or ``extension`` (MCP).
        extra: more attributes for the span.
    """
    if _installed is None:
        return _NO_CALL
    return ToolCall(
        _installed,
        tool=tool,
        call_id=call_id,
        run_id=run_id,
        tenant=tenant,
        tool_type=tool_type,
        arguments=arguments,
        extra=extra or {},
    )


def http_span(method: str, url: str, server: str, *, template: str) -> HttpCall | _NoCall:
    """The HTTP client span of one request; a no-op until ``instrument``.

    ``url`` is the request's and ``template`` the tool's (its ``{argument}`` placeholders
    unfilled), both without their query (it may carry credentials, and carries arguments):
    the span's ``url.full`` is ``url`` only with contents on, else ``template``, and its
    ``url.template`` is the template's path.
    """
    if _installed is None:
        return _NO_CALL
    return HttpCall(_installed, method, url, server, template)


async def traced_tool(call: ToolCall | _NoCall, work: Awaitable[ToolOutcome]) -> ToolOutcome:
    """Await a tool call's ``work`` inside its span ``call`` (from ``tool_span``) and record
    its outcome."""
    with call:
        return call.done(await work)


def _messages(items: tuple[ChatMessage | str, ...]) -> str:
    """New messages as gen_ai JSON (stored ones are named by their blob ref)."""
    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, ChatMessage):
            out.append({"role": item.role, "content": item.content})
        else:
            out.append({"ref": item})
    return json.dumps(out)
