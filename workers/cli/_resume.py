"""``psych approve``, ``deny``, ``answer``, ``complete``, ``abort`` and ``steer``.

Each is one update of the Run's workflow (``psych.resume``, ``psych.abort``,
``psych.steer``), sent through ``PsychClient`` as the caller's Scope: ``--tenant`` must own
the Run and ``--principal`` is recorded as who acted. A refusal (nothing pending with that
id, expired, already answered, settled) is a ``Refused`` error: one line, exit 1.
``--idempotency-key`` names the request: run again with the same key, it is applied at most
once (``PsychClient``'s ``idempotency_key``). ``--update-timeout`` bounds the wait for the
Run's worker (``PsychClient``'s ``update_timeout``; default ``UPDATE_TIMEOUT``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import PsychError
from psych_runtime.workers.cli._parser import DEFAULT_STORE
from psych_runtime.workers.cli._run_facts import has_worker
from psych_runtime.workers.cli._runs import (
    scope_of,
    temporal_client,
)
from psych_runtime.workflows import (
    TEMPORAL_READ_TIMEOUT,
    PsychClient,
    ResumeResult,
    describe_within,
)


async def _client(args: argparse.Namespace) -> tuple[PsychClient, Client]:
    temporal = await temporal_client(args)
    # Resuming never touches the version store; the default one is never written.
    return PsychClient(temporal, store=FileVersionStore(DEFAULT_STORE)), temporal


async def _warn_without_worker(temporal: Client, workflow_id: str) -> None:
    """Say so when no worker polls the Run's task queue: an update waits for one. The
    describe waits ``TEMPORAL_READ_TIMEOUT`` at most (past it, nothing is said)."""
    handle = temporal.get_workflow_handle(workflow_id)
    try:
        description = await describe_within(handle, workflow_id, TEMPORAL_READ_TIMEOUT)
        if description.close_time is not None:
            return  # settled: the client refuses at once
        if not await has_worker(temporal, description.task_queue):
            print(
                f"psych: no worker polls task queue {description.task_queue!r}; "
                f"{workflow_id} takes the request when one does (`psych worker`)",
                file=sys.stderr,
                flush=True,
            )
    except RPCError:
        return  # not found, or not ours to describe: the update itself says what is wrong


def _update_timeout(args: argparse.Namespace) -> timedelta | None:
    """``--update-timeout`` as the client takes it (None: its default)."""
    seconds: float | None = args.update_timeout
    return None if seconds is None else timedelta(seconds=seconds)


def _print_result(workflow_id: str, result: ResumeResult, principal: str | None) -> None:
    by = f" by {principal}" if principal else ""
    print(f"{workflow_id}: {result.reason} {result.id} {result.outcome}{by}")


async def _resume(args: argparse.Namespace) -> int:
    scope = scope_of(args)
    client, temporal = await _client(args)
    await _warn_without_worker(temporal, args.run_id)
    key = args.idempotency_key
    bound = _update_timeout(args)
    result: ResumeResult
    if args.command == "approve":
        result = await client.approve(
            args.run_id,
            args.call_id,
            scope=scope,
            note=args.note,
            idempotency_key=key,
            held_by=args.held_by,
            update_timeout=bound,
        )
    elif args.command == "deny":
        result = await client.deny(
            args.run_id,
            args.call_id,
            scope=scope,
            note=args.note,
            idempotency_key=key,
            held_by=args.held_by,
            update_timeout=bound,
        )
    elif args.command == "answer":
        result = await client.answer(
            args.run_id,
            args.call_id,
            args.text,
            scope=scope,
            idempotency_key=key,
            held_by=args.held_by,
            update_timeout=bound,
        )
    else:
        payload = parse_payload(args.payload)
        result = await client.complete(
            args.run_id,
            args.token,
            payload,
            scope=scope,
            idempotency_key=key,
            held_by=args.held_by,
            update_timeout=bound,
        )
    _print_result(args.run_id, result, scope.principal)
    return 0


def parse_payload(text: str | None) -> Any:
    """``--payload`` as JSON (absent: ``null``).

    Raises:
        PsychError: it is not valid JSON (naming the option and where it broke).
    """
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as err:
        raise PsychError(f"--payload is not valid JSON: {err} (in {text[:60]!r})") from err


def cmd_resume(args: argparse.Namespace) -> int:
    """Approve, deny, answer or complete what a suspended Run waits for."""
    if args.command == "complete":
        parse_payload(args.payload)  # refuse bad JSON before connecting anywhere
    return asyncio.run(_resume(args))


async def _abort(args: argparse.Namespace) -> int:
    scope = scope_of(args)
    client, temporal = await _client(args)
    await _warn_without_worker(temporal, args.run_id)
    key = args.idempotency_key
    await client.abort(
        args.run_id,
        scope=scope,
        reason=args.reason,
        idempotency_key=key,
        update_timeout=_update_timeout(args),
    )
    print(
        f"{args.run_id}: abort requested; it settles aborted once its calls that cannot be "
        "interrupted finish"
    )
    return 0


def cmd_abort(args: argparse.Namespace) -> int:
    """Abort a Run."""
    return asyncio.run(_abort(args))


_WHEN = {
    "steer": "before its next model call of this turn",
    "follow_up": "when the model would otherwise end on an answer, as a new turn",
    "next_run": "in a new Run once this one settles",
}


async def _steer(args: argparse.Namespace) -> int:
    scope = scope_of(args)
    client, temporal = await _client(args)
    await _warn_without_worker(temporal, args.run_id)
    key = args.idempotency_key
    await client.steer(
        args.run_id,
        args.message,
        scope=scope,
        mode=args.mode,
        idempotency_key=key,
        update_timeout=_update_timeout(args),
    )
    print(f"{args.run_id}: {args.mode} message taken; the model sees it {_WHEN[args.mode]}")
    return 0


def cmd_steer(args: argparse.Namespace) -> int:
    """Give a Run a message (steer, follow_up or next_run)."""
    if not args.message.strip():
        raise PsychError("the message is empty")
    return asyncio.run(_steer(args))
