"""A gRPC relay on 127.0.0.1 in front of a real Temporal server, for the tests that must
count what a client asked and how each ask was answered, or make the server look in
trouble for a few asks: every unary call is passed on as bytes (its metadata too), and
its answer (or status) passed back and recorded; ``fail_next`` answers the next calls of
one method with a status of the test's instead, without asking the server; ``hang`` holds
every call of one method unanswered (a server that accepts the call and never answers),
until the caller gives up or the relay stops; ``withhold`` passes every call of one method
on and holds its answer (the server did it, the caller never hears); ``before_next`` does
something of the test's (closes a Run) before the next call of one method is passed on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio


@dataclass
class Relay:
    """A relay's target (``host:port``) and what it saw."""

    target: str
    answered: list[tuple[str, grpc.StatusCode]] = field(default_factory=list)
    """Each call's method (its last part: ``ListWorkflowExecutions``) and its status, in
    the order they were answered."""
    _failures: dict[str, list[tuple[grpc.StatusCode, bytes, str]]] = field(default_factory=dict)
    hung: dict[str, int] = field(default_factory=dict)
    """The methods whose calls are held unanswered (``hang``), each with how many of its
    calls are still passed on first."""
    held: list[str] = field(default_factory=list)
    """Each call held unanswered, by method, in the order they came."""
    _before: dict[str, Callable[[], Awaitable[None]]] = field(default_factory=dict)
    withheld: set[str] = field(default_factory=set)
    """The methods whose calls are passed on and their answers held (``withhold``)."""
    deadlines: list[tuple[str, float | None]] = field(default_factory=list)
    """Each call's method and the seconds its caller's deadline left it as the relay took
    it, in the order they came."""

    def before_next(self, method: str, action: Callable[[], Awaitable[None]]) -> None:
        """Await ``action()`` before the next call of ``method`` is passed on (once)."""
        self._before[method] = action

    def fail_next(
        self,
        method: str,
        status: grpc.StatusCode,
        times: int = 1,
        details: bytes = b"",
        message: str | None = None,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` with ``status`` (not asked of the
        server), and ``details`` (a ``google.rpc.Status``'s bytes) when given, its message
        ``message`` (else one naming the relay)."""
        said = message or f"the relay answers {status.name} (scripted)"
        self._failures.setdefault(method, []).extend([(status, details, said)] * times)

    def hang(self, method: str, after: int = 0) -> None:
        """Hold every call of ``method`` from now on (past its next ``after``), unanswered
        and not asked of the server."""
        self.hung[method] = after

    def withhold(self, method: str) -> None:
        """Pass every call of ``method`` from now on to the server, and hold its answer
        (recorded in ``held`` once the server gave it)."""
        self.withheld.add(method)

    def of(self, method: str) -> list[grpc.StatusCode]:
        """The statuses of ``method``'s calls so far, in order."""
        return [status for name, status in self.answered if name == method]

    def failure_for(self, method: str) -> tuple[grpc.StatusCode, bytes, str] | None:
        queued = self._failures.get(method)
        return queued.pop(0) if queued else None


class _Forward(grpc.GenericRpcHandler):
    def __init__(self, relay: Relay, upstream: grpc.aio.Channel) -> None:
        self.relay = relay
        self.upstream = upstream

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[bytes, bytes]:
        path = handler_call_details.method

        async def forward(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
            name = path.rpartition("/")[2]
            self.relay.deadlines.append((name, context.time_remaining()))
            if self.relay.hung.get(name, 0) > 0:
                self.relay.hung[name] -= 1
            elif name in self.relay.hung:
                self.relay.held.append(name)
                await asyncio.Event().wait()  # never set: the caller's deadline ends it
            action = self.relay._before.pop(name, None)
            if action is not None:
                await action()
            failure = self.relay.failure_for(name)
            if failure is not None:
                status, details, said = failure
                self.relay.answered.append((name, status))
                trailing = (("grpc-status-details-bin", details),) if details else ()
                await context.abort(status, said, trailing)
            metadata = [
                (key, value)
                for key, value in context.invocation_metadata() or ()
                if not key.startswith(":") and key not in ("user-agent", "te", "content-type")
            ]
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self.upstream.unary_unary(path)
            try:
                answer: bytes = await call(request, metadata=metadata)
            except grpc.aio.AioRpcError as err:
                self.relay.answered.append((name, err.code()))
                await context.abort(err.code(), err.details() or "")
            if name in self.relay.withheld:
                self.relay.held.append(name)
                await asyncio.Event().wait()  # never set: the caller's deadline ends it
            self.relay.answered.append((name, grpc.StatusCode.OK))
            return answer

        return grpc.unary_unary_rpc_method_handler(forward)


@asynccontextmanager
async def relayed(upstream_target: str) -> AsyncIterator[Relay]:
    """A relay to ``upstream_target`` (``host:port``) on a free loopback port."""
    async with grpc.aio.insecure_channel(upstream_target) as upstream:
        server = grpc.aio.server()
        port = server.add_insecure_port("127.0.0.1:0")
        relay = Relay(f"127.0.0.1:{port}")
        server.add_generic_rpc_handlers((_Forward(relay, upstream),))
        await server.start()
        try:
            yield relay
        finally:
            await server.stop(grace=None)
