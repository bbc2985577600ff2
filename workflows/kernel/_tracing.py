"""The workflow side of a Run's trace: the Run span, its turn and step spans, and baggage.

The tree mirrors the records: ``invoke_agent {agent}`` (or ``invoke_workflow {workflow}``)
for the Run, ``turn {n}`` (or ``step {name}``) under it, and under each turn the activities'
``chat`` and ``execute_tool`` spans and any child Run, because Temporal's tracing
interceptor carries the current context (this turn's) into every activity and child
workflow it starts. The Run's agent, Version hash and turn travel as OpenTelemetry baggage,
so the activities label their spans with them without a payload field.

Spans are recorded only on a worker that psych's telemetry plugin marks as traced (the
``TRACING_EXTERN`` extern function; ``psych_runtime.workers.telemetry_plugins``), so a
worker built without telemetry records none whatever the process's tracer provider is.
Replay safety is Temporal's: a span is only recorded when the worker's global tracer
provider is a ``ReplaySafeTracerProvider`` (what ``psych_runtime.workers`` installs; see
``temporalio.contrib.opentelemetry.create_tracer_provider``). It gives workflow spans
deterministic ids (from the workflow's seeded random), so a span started again on replay
(a cache eviction, another worker after a restart) is the same span, and it drops every
``end`` made while history is replayed, so each span is exported once, by the worker that
ends it live. With any other provider (none, or one of the application's own that is not
replay-safe) nothing here records anything: a plain provider would export every span again
on each replay. Spans add no workflow command and read no clock or random the workflow
itself uses, so tracing on or off replays the same history.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import Token

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from opentelemetry import baggage, context, trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, StatusCode
    from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider

    from psych_runtime.workflows.contract._records import RunStatus
    from psych_runtime.workflows.kernel._outcome import Outcome, Stop

INSTRUMENTATION_NAME = "psych_runtime.workflows"
TRACING_EXTERN = "psych_runtime.tracing"
"""The extern function a worker traced by psych registers (``workers/_telemetry.py``): its
presence says the worker's Runs record spans, its answer whether contents go on them
(``PSYCH_OTEL_CONTENT``: a failed Run's reason, which may quote a tool's or a provider's
error text)."""


class RunTrace:
    """The spans of one Run: enter ``run`` around its body, call ``turn``/``step`` at
    each boundary. Everything is a no-op unless the worker is marked traced
    (``TRACING_EXTERN``) and the tracer provider is replay-safe."""

    def __init__(self) -> None:
        self._span: Span | None = None
        self._content = False
        self._labels: dict[str, str] = {}
        self._inner: tuple[Span, Token[Context]] | None = None

    @contextmanager
    def run(
        self, *, kind: str, name: str, run_id: str, tenant: str, version: str
    ) -> Iterator[None]:
        """The Run's span (current for the block), with the Run's baggage.

        Args:
            kind: ``agent`` or ``workflow``.
            name: the agent's or workflow's name.
            run_id: the Run's id.
            tenant: the Run's tenant.
            version: the Version hash.
        """
        provider = trace.get_tracer_provider()
        traced = workflow.extern_functions().get(TRACING_EXTERN)
        if traced is None or not isinstance(provider, ReplaySafeTracerProvider):
            yield
            return
        self._content = bool(traced())
        ctx = context.get_current()
        for key, value in (
            ("psych.run_id", run_id),
            ("psych.tenant", tenant),
            ("psych.agent", name),
            ("psych.version", version),
        ):
            ctx = baggage.set_baggage(key, value, ctx)
        operation = "invoke_agent" if kind == "agent" else "invoke_workflow"
        span = provider.get_tracer(INSTRUMENTATION_NAME).start_span(
            f"{operation} {name}",
            ctx,
            attributes={
                "gen_ai.operation.name": operation,
                "gen_ai.agent.name" if kind == "agent" else "gen_ai.workflow.name": name,
                "gen_ai.agent.version" if kind == "agent" else "psych.version": version,
                "gen_ai.conversation.id": run_id,
                "psych.run_id": run_id,
                "psych.tenant": tenant,
                "psych.agent": name,
                "psych.version": version,
                "psych.kind": kind,
                "psych.workflow_id": workflow.info().workflow_id,
            },
        )
        self._span = span
        self._labels = {
            "psych.run_id": run_id,
            "psych.tenant": tenant,
            "psych.agent": name,
            "psych.version": version,
        }
        token = context.attach(trace.set_span_in_context(span, ctx))
        try:
            yield
        except Stop as stop:
            self.settled(stop.outcome)
            raise
        except Exception as err:
            span.set_status(StatusCode.ERROR, f"{type(err).__name__}: {err}")
            raise
        except workflow.ContinueAsNewError:
            # The Run goes on in a new execution, whose Run span nests under this one's
            # current turn: this span ends here, unsettled, and says why.
            span.set_attribute("psych.continued_as_new", True)
            raise
        finally:
            self._close_inner()
            _detach(token)
            self._span = None
            span.end()

    def settled(self, outcome: Outcome) -> Outcome:
        """Put the body's outcome on the Run span (a failed Run's is an error); returns
        ``outcome``."""
        if self._span is not None:
            self._span.set_attribute("psych.status", outcome.status.value)
            if outcome.status is RunStatus.FAILED:
                # The reason quotes what failed (a tool's error text, a provider's answer):
                # contents, as a tool call's result is.
                reason = outcome.reason if self._content else "the Run failed"
                self._span.set_status(StatusCode.ERROR, reason)
        return outcome

    def turn(self, turn: int) -> None:
        """End the previous turn's span and start turn ``turn``'s, current until the next."""
        self._next(f"turn {turn}", {"psych.turn": turn}, str(turn))

    def step(self, index: int, name: str) -> None:
        """End the previous step's span and start step ``name``'s (``index`` from 1, sent
        as ``psych.turn``: a WorkflowRun's steps are its turns)."""
        self._next(f"step {name}", {"psych.step": name, "psych.turn": index}, str(index))

    def _next(self, name: str, attributes: dict[str, str | int], turn: str) -> None:
        if self._span is None:
            return
        self._close_inner()
        ctx = baggage.set_baggage("psych.turn", turn, context.get_current())
        tracer = trace.get_tracer_provider().get_tracer(INSTRUMENTATION_NAME)
        span = tracer.start_span(name, ctx, attributes={**self._labels, **attributes})
        self._inner = span, context.attach(trace.set_span_in_context(span, ctx))

    def _close_inner(self) -> None:
        if self._inner is None:
            return
        span, token = self._inner
        self._inner = None
        _detach(token)
        span.end()


def _detach(token: Token[Context]) -> None:
    """Undo an attach, if this is still the context it was made in.

    A workflow evicted from the cache ends with its coroutines closed wherever garbage
    collection runs them, where the token is not valid; there is nothing to undo there,
    and OpenTelemetry's own ``detach`` would log an error for it."""
    try:
        token.var.reset(token)
    except (ValueError, RuntimeError):
        # ValueError: made in another context; RuntimeError: already undone.
        return
