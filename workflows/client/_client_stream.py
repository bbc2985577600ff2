"""PsychClient's ``stream``: a Run's records as they are written, and with ``deltas`` the
pieces of its model call in flight (``FollowHub``, ``LiveCall``)."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from typing import Any, Literal, overload

from temporalio.client import WorkflowHandle

from psych_runtime.specs import Scope, SpecError
from psych_runtime.workflows.client._follow_hub import FollowHub
from psych_runtime.workflows.contract._contract import RunHandle
from psych_runtime.workflows.contract._deltas import Delta
from psych_runtime.workflows.contract._records import Record


class RunStreaming(abc.ABC):
    """Following a Run (PsychClient has it)."""

    follows: FollowHub

    @abc.abstractmethod
    def _handle(self, run: RunHandle | str, scope: Scope) -> tuple[str, WorkflowHandle[Any, Any]]:
        """The Run's workflow id and handle, after checking the caller's tenant owns it."""

    @overload
    def stream(
        self,
        run: RunHandle | str,
        *,
        scope: Scope,
        after: int = 0,
        deltas: Literal[False] = False,
        after_delta: None = None,
    ) -> AsyncIterator[Record]: ...

    @overload
    def stream(
        self,
        run: RunHandle | str,
        *,
        scope: Scope,
        after: int = 0,
        deltas: Literal[True],
        after_delta: tuple[str, int] | None = None,
    ) -> AsyncIterator[Record | Delta]: ...

    @overload
    def stream(
        self,
        run: RunHandle | str,
        *,
        scope: Scope,
        after: int = 0,
        deltas: bool,
        after_delta: tuple[str, int] | None = None,
    ) -> AsyncIterator[Record | Delta]: ...

    async def stream(
        self,
        run: RunHandle | str,
        *,
        scope: Scope,
        after: int = 0,
        deltas: bool = False,
        after_delta: tuple[str, int] | None = None,
    ) -> AsyncIterator[Record | Delta]:
        """Yield records with ``seq > after`` as the Run writes them, until it settles.

        Pushed, not polled on a timer: the server's history long-poll says when a workflow
        task completed, and only then is the records query read (``RecordFollower``), so
        a follower grows no history and costs an idle Run's worker nothing. Goes on across
        worker restarts and continue-as-new; also ends when the workflow closed without
        settling its record (terminated by an operator, or by a parent's close policy).
        Streams of one Run through this client share one follower (``FollowHub``).

        With ``deltas``, also the text and tool-call pieces of the model call in flight
        (``TokenDelta``), read from the relay of the worker running it, between the
        records: every piece of an attempt before that call's record, and
        ``DeltasDropped`` for an attempt that failed or whose relay was lost (drop its
        pieces). ``after_delta=(call, n)`` resumes attempt ``call`` after its piece ``n``,
        with its ``DeltasDropped`` if it ended without an answer meanwhile (first, or
        before the record of its end; a reconnect: pass the last record's seq as ``after``
        too). Deltas are not
        durable: a worker without a relay offers none, and only the call in flight when
        the stream starts is offered, not earlier ones.

        Raises:
            SpecError: ``after`` below 0, or ``after_delta`` without ``deltas``.
            UnknownPosition: ``after`` is past the Run's last record (a seq another Run
                sent, or made up): raised once a records query made after the stream
                started says so, not waited on.
        """
        workflow_id, _ = self._handle(run, scope)
        if after < 0:
            # Streams of a Run share one follower, which counts from its first stream's
            # ``after``: one from -1 made every later stream skip a record.
            raise SpecError(f"after is the last seq the caller has, 0 or more, not {after}")
        if after_delta is not None and not deltas:
            raise SpecError("after_delta is for a stream with deltas=True")
        async for item in self.follows.stream(
            workflow_id, after, deltas=deltas, after_delta=after_delta
        ):
            yield item
