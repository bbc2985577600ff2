"""The reads psych times, each attempt timed: the SDK's own retries, made one attempt at
a time.

A read that needs no worker (a describe, a page of a history or of a Run listing, a
count, a task queue's pollers) tells Temporal's silence from a timeout's status it
answered at once by how long the request waited (``waited_out``). The SDK sends these
reads with ``retry=True``: its core sends each again on UNAVAILABLE, UNKNOWN and the
other transient statuses, with backoff, out of sight, so the time the call took is of
every attempt and the pauses between: six UNAVAILABLEs and then a CANCELLED answered at
once took 3.3 s, past a 2 s bound, and were read as Temporal's silence.

``AttemptTimed``, the service client ``PsychPlugin`` connects (``connect_service_client``),
sends those reads (``TIMED_READS``) with the core's retries off and retries them here on
the client's own ``RetryConfig`` and the core's rules (temporalio 1.35's sdk-core
``client/src/retry.rs``: its retryable statuses, at most ``max_retries`` attempts, an
exponential backoff with jitter ending once ``max_elapsed_time_millis`` has passed, a
RESOURCE_EXHAUSTED waiting at least its throttle schedule, a message too large not
retried). The last attempt's failure is raised as ``AttemptFailed``, carrying when that
attempt was sent, which ``waited_out`` times. Every other call, and a read asked without
retries, goes to the connected client as it is. The client's interceptors see each call
as before: they sit above the service client.

The core also sends a request again once when its connection closed under it (a GOAWAY
the transport did not handle), which it tells by the transport's error. Here that error
shows only in the status it came as: a CANCELLED whose message is the HTTP client's own
for a request its connection dropped (``operation was canceled``, hyper's; a server that
gave a request up says otherwise, "context canceled"). Such an answer is sent again once,
as the core does: a whole-suite run (12-07 18:53) read one as ``TemporalCancelled`` in a
``result()``'s long poll, which the core had retried unseen before these reads were made
here.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import google.protobuf.message
from temporalio.service import (
    RetryConfig,
    RPCError,
    RPCStatusCode,
    ServiceClient,
    ServiceResponse,
)

TIMED_READS = frozenset(
    {
        "describe_workflow_execution",
        "get_workflow_execution_history",
        "list_workflow_executions",
        "count_workflow_executions",
        "describe_task_queue",
    }
)
"""The workflow service's reads whose failures psych tells apart by the time an attempt
waited (``read_mapped``, the fleet policy check): their attempts are made here."""

_RETRYABLE = frozenset(
    {
        RPCStatusCode.DATA_LOSS,
        RPCStatusCode.INTERNAL,
        RPCStatusCode.UNKNOWN,
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.ABORTED,
        RPCStatusCode.OUT_OF_RANGE,
        RPCStatusCode.UNAVAILABLE,
    }
)
"""The statuses the SDK's core sends a request again on (its ``RETRYABLE_ERROR_CODES``)."""

_TOO_LARGE = (
    "grpc: received message larger than max",
    "grpc: message after decompression larger than max",
    "grpc: received message after decompression larger than max",
)
"""How a RESOURCE_EXHAUSTED the core does not retry starts: a message too large."""

_CORE_DEFAULT = RetryConfig(
    initial_interval_millis=100,
    randomization_factor=0.2,
    multiplier=1.7,
    max_interval_millis=5000,
    max_elapsed_time_millis=10_000,
    max_retries=10,
)
"""The retries the SDK's core makes for a client connected with no ``retry_config`` (its
``RetryOptions::default``): pauses growing 1.7 times, not the 1.5 of the SDK's own
``RetryConfig()``, which the core never sees then."""

_LONG_POLL_TIMEOUT = timedelta(seconds=70)
"""The deadline the SDK's core gives each attempt of a history long poll
(``wait_new_event``) asked with no timeout (its ``LONG_POLL_TIMEOUT``), only on its retrying
path: sent with its retries off, such a call had its 30 s default for other calls."""

_DROPPED = "operation was canceled"
"""The message of a CANCELLED the SDK's HTTP client (hyper, through tonic) makes of a request
its connection dropped, the case the core sends again once."""

_THROTTLE = RetryConfig(
    initial_interval_millis=1000,
    randomization_factor=0.2,
    multiplier=2.0,
    max_interval_millis=10_000,
    max_elapsed_time_millis=None,
    max_retries=0,
)
"""The core's throttle schedule, the least a RESOURCE_EXHAUSTED waits before the next
attempt (its ``throttle_retry_policy``)."""


class AttemptFailed(RPCError):
    """The failure of the last attempt of a read ``AttemptTimed`` retried: an
    ``RPCError`` of that attempt's status, message and details (callers handle it as
    before), and when that attempt was sent. Pickles and copies whole."""

    def __init__(self, err: RPCError, asked_at: float, attempts: int) -> None:
        super().__init__(err.message, err.status, err.raw_grpc_status)
        self.asked_at = asked_at
        """When the last attempt was sent (``time.monotonic()``): the time it waited is
        the time since, not the time since the read was asked."""
        self.attempts = attempts
        """How many attempts were sent, this one the last."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), self.args, self.__dict__))


def _rebuilt(cls: type[RPCError], args: tuple[Any, ...], state: dict[str, Any]) -> RPCError:
    """An error of ``cls`` with ``args`` and ``state``, its ``__init__`` not run (the
    default rebuild calls ``cls(*args)``, which takes an ``RPCError`` here)."""
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


class _Backoff:
    """One exponential schedule of a ``RetryConfig``, as the core's backoff runs it: each
    pause drawn within ``randomization_factor`` of the current interval, which then grows
    by ``multiplier`` up to ``max_interval_millis``; none once ``max_elapsed_time_millis``
    has passed since the first attempt, or would pass in the pause."""

    def __init__(self, config: RetryConfig, started: float) -> None:
        self._config = config
        self._interval = config.initial_interval_millis / 1000
        self._started = started

    def next(self) -> float | None:
        config = self._config
        elapsed = time.monotonic() - self._started
        limit = None
        if config.max_elapsed_time_millis is not None:
            limit = config.max_elapsed_time_millis / 1000
        if limit is not None and elapsed > limit:
            return None
        spread = config.randomization_factor * self._interval
        pause = self._interval - spread + random.random() * 2 * spread
        self._interval = min(self._interval * config.multiplier, config.max_interval_millis / 1000)
        if limit is not None and elapsed + pause > limit:
            return None
        return pause


class AttemptTimed(ServiceClient):
    """A connected service client whose ``TIMED_READS`` asked with retries are sent one
    attempt at a time, retried here as the SDK's core would, the last failure raised as
    ``AttemptFailed``; every other call goes to ``connected`` as it is."""

    def __init__(self, connected: ServiceClient) -> None:
        super().__init__(connected.config)
        self._connected = connected

    @property
    def worker_service_client(self) -> Any:
        """The connected client's (workers call the core directly)."""
        return self._connected.worker_service_client

    def update_rpc_metadata(self, metadata: Mapping[str, str | bytes]) -> None:
        """The connected client's metadata, updated."""
        self._connected.update_rpc_metadata(metadata)

    def update_api_key(self, api_key: str | None) -> None:
        """The connected client's API key, updated."""
        self._connected.update_api_key(api_key)

    async def _rpc_call(
        self,
        rpc: str,
        req: google.protobuf.message.Message,
        resp_type: type[ServiceResponse],
        *,
        service: str,
        retry: bool,
        metadata: Mapping[str, str | bytes],
        timeout: timedelta | None,  # noqa: ASYNC109  # the SDK's signature, overridden
    ) -> ServiceResponse:
        if not retry or service != "workflow" or rpc not in TIMED_READS:
            return await self._connected._rpc_call(
                rpc,
                req,
                resp_type,
                service=service,
                retry=retry,
                metadata=metadata,
                timeout=timeout,
            )
        config = self.config.retry_config or _CORE_DEFAULT
        if timeout is None and getattr(req, "wait_new_event", False):
            timeout = _LONG_POLL_TIMEOUT  # the core's, given with its retries only
        started = time.monotonic()
        backoff = _Backoff(config, started)
        throttle = _Backoff(_THROTTLE, started)
        attempts = 0
        while True:
            attempts += 1
            asked_at = time.monotonic()
            try:
                return await self._connected._rpc_call(
                    rpc,
                    req,
                    resp_type,
                    service=service,
                    retry=False,
                    metadata=metadata,
                    timeout=timeout,
                )
            except RPCError as err:
                pause = _pause(err, attempts, config, backoff, throttle)
                if pause is None:
                    raise AttemptFailed(err, asked_at, attempts) from err
            await asyncio.sleep(pause)


def _pause(
    err: RPCError, attempts: int, config: RetryConfig, backoff: _Backoff, throttle: _Backoff
) -> float | None:
    """How long to wait before sending again a request whose attempt ``attempts`` failed
    with ``err``; None: not again, ``err`` is the answer."""
    if config.max_retries > 0 and attempts >= config.max_retries:
        return None
    if err.status == RPCStatusCode.CANCELLED and err.message == _DROPPED:
        return 0.0 if attempts == 1 else None  # once (the core's rule), with no pause
    if err.status not in _RETRYABLE:
        return None
    if err.status == RPCStatusCode.RESOURCE_EXHAUSTED and err.message.startswith(_TOO_LARGE):
        return None
    pause = backoff.next()
    if pause is None:
        return None
    if err.status == RPCStatusCode.RESOURCE_EXHAUSTED:
        return max(pause, throttle.next() or 0.0)
    return pause
