"""``psych run``, ``follow``, ``status``, ``report`` and ``list``: driving Runs through a
Temporal server."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.envconfig import ClientConfig
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities.blobs import blob_store_from_env
from psych_runtime.activities.versions import FileVersionStore, version_store_at
from psych_runtime.specs import PsychError, Scope, SpecError, VersionStore, env_flag
from psych_runtime.workers._client import connect
from psych_runtime.workers._worker import DEFAULT_HOME
from psych_runtime.workers._worker_checks import tenant_sealed_blobs
from psych_runtime.workers._worker_settings import permits_with_file
from psych_runtime.workers.cli._parser import DEFAULT_STORE, store_location
from psych_runtime.workers.cli._run_facts import (
    QUERY_TIMEOUT,
    RunFacts,
    has_worker,
    print_fallback,
    run_facts,
    unanswered,
)
from psych_runtime.workers.cli._specs import checked_spec, load_registry
from psych_runtime.workers.cli._stores import closing_stores
from psych_runtime.workers.console import (
    describe_pending,
    follow_run,
    format_state,
    format_time,
    format_until,
    output_for,
    print_inputs,
    print_report,
    print_transcript,
    printable,
    read_transcript,
    resume_command,
    runs_table,
    turns_without_calls,
)
from psych_runtime.workers.fleet import unpolled_queues
from psych_runtime.workflows import (
    TEMPORAL_READ_TIMEOUT,
    PsychClient,
    RunStatus,
    RunSummary,
    TenantBlobs,
    parse_workflow_id,
    read_mapped,
)

_OS_MESSAGE = re.compile(r'(?:message|error): "([^"]+)"')
_SYSTEM_INFO = "`get_system_info` call error after connection"
"""How the SDK's bridge says the connect's first call (GetSystemInfo) failed."""
_UNANSWERED_CONNECT = ('message: "Timeout expired"', "code: DeadlineExceeded")
"""How that failure reads when its timeout ran out: the client transport's (measured: a
held GetSystemInfo, ``code: Cancelled, message: "Timeout expired"`` after 30 s), or a
deadline status."""


def temporal_target(args: argparse.Namespace) -> str:
    """The server address a command connects to: ``--address``, else Temporal's env config."""
    if args.address:
        return str(args.address)
    config = ClientConfig.load_client_connect_config()
    return str(config.get("target_host") or "localhost:7233")


async def temporal_client(args: argparse.Namespace, **connect_options: Any) -> Client:
    """Connect per ``--address``/``--namespace`` and Temporal's environment configuration
    (``connect_options`` go to ``connect``).

    Raises:
        PsychError: the server cannot be reached (one line, no traceback).
    """
    try:
        client = await connect(args.address, namespace=args.namespace, **connect_options)
    except ValueError as err:
        # An address the SDK cannot read ('', 'bogus address', a port past 65535).
        raise PsychError(
            f"cannot connect to Temporal at {temporal_target(args)!r}: {err} (give "
            "host:port, by --address or TEMPORAL_ADDRESS)"
        ) from err
    except RuntimeError as err:
        # The SDK's bridge reports connection failures as a RuntimeError carrying a long
        # transport-level chain; its OS message ("Connection refused") says it best.
        text = str(err)
        found = _OS_MESSAGE.search(text)
        reason = found.group(1) if found else text.removeprefix("Failed client connect: ")
        if _SYSTEM_INFO in text and any(said in text for said in _UNANSWERED_CONNECT):
            # Something accepted the connection and never answered the SDK's first call:
            # the SDK waits a bound of its own (30 s measured, temporalio 1.35), then this.
            raise PsychError(
                f"cannot connect to Temporal at {temporal_target(args)}: Temporal did not "
                f"answer its first call (GetSystemInfo) in time ({reason}); the connection "
                "was accepted, so a server or a proxy listens there but does not answer"
            ) from err
        raise PsychError(
            f"cannot connect to Temporal at {temporal_target(args)}: {reason} "
            "(is a server running? `psych dev` starts one)"
        ) from err
    await _check_namespace(client, args)
    return client


async def _check_namespace(client: Client, args: argparse.Namespace) -> None:
    """Refuse a namespace the server does not have.

    Every later call would fail NOT_FOUND, which the commands read as "no such Run" (a
    wrong --namespace said the Run was missing) and a worker as nothing to poll.

    Asked with ``TEMPORAL_READ_TIMEOUT``: a server that accepts the call and never answers
    it hung every command here.

    Raises:
        PsychError: the namespace does not exist (naming where it was given).
        TemporalUnanswered: Temporal did not answer within ``TEMPORAL_READ_TIMEOUT`` (its
            ``why`` names the namespace; the command prints it as one line).
        TemporalCancelled: it answered a timeout's status at once (a CANCELLED under
            load): it gave the describe up, which is not its silence.
        RPCError: any other failure.
    """
    request = DescribeNamespaceRequest(namespace=client.namespace)
    asked_at = time.monotonic()
    try:
        await client.workflow_service.describe_namespace(request, timeout=TEMPORAL_READ_TIMEOUT)
    except RPCError as err:
        subject = f"namespace {client.namespace!r}"
        said = read_mapped(
            err, None, "a describe", TEMPORAL_READ_TIMEOUT, asked_at=asked_at, subject=subject
        )
        if said is not err:  # Temporal's silence, or a timeout's status it answered at once
            raise said from err
        if err.status == RPCStatusCode.PERMISSION_DENIED:
            return  # a key may be allowed its namespace's workflows and not this: it exists
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        given = "--namespace" if args.namespace else "Temporal's environment configuration"
        raise PsychError(
            f"namespace {client.namespace!r} ({given}) does not exist on the Temporal server "
            f"at {temporal_target(args)} (`temporal operator namespace list` lists them)"
        ) from err


def scope_of(args: argparse.Namespace) -> Scope:
    """The caller's Scope from ``--tenant`` (and ``--principal`` and ``--label`` where a
    command has them; a label given twice is refused)."""
    try:
        tenant = Scope(tenant=args.tenant).tenant
    except ValidationError as err:
        raise PsychError(
            f"invalid tenant {args.tenant!r}: use letters, digits, '_' and '.' only"
        ) from err
    principal = getattr(args, "principal", None) or None
    labels: dict[str, str] = {}
    for key, value in getattr(args, "label", None) or ():
        if key in labels:
            raise PsychError(f"label {key!r} is given twice (--label {key}=...)")
        labels[key] = value
    try:
        scope = Scope(tenant=tenant, principal=principal, labels=labels)
    except ValidationError as err:
        raise PsychError(f"invalid principal {principal!r}: at most 256 characters") from err
    try:
        return scope.check_labels()
    except SpecError as err:
        raise PsychError(f"invalid --label: {err}") from err


def roles_apart_of(args: argparse.Namespace) -> bool:
    """``--roles-apart``, else ``PSYCH_ROLES_APART`` (read as every yes/no variable is).

    Raises:
        SpecError: the variable is neither yes nor no.
    """
    return bool(args.roles_apart) or env_flag(os.environ, "PSYCH_ROLES_APART")


async def _run(args: argparse.Namespace) -> int:
    where, source = store_location(args)
    store = version_store_at(where, source=source)
    async with closing_stores(store):  # an S3 version store's client
        return await _run_on(args, store)


async def _run_on(args: argparse.Namespace, store: VersionStore) -> int:
    roles_apart = roles_apart_of(args)
    registry = load_registry(args)
    spec = checked_spec(args.file, registry)
    if spec is None:
        return 1
    scope = scope_of(args)
    # The global settings file a worker started without --settings reads (PSYCH_SETTINGS,
    # else the default one): a Run its permits: section refuses is refused here, named.
    permits = permits_with_file(None)
    temporal = await temporal_client(args)
    client = PsychClient(
        temporal,
        store=store,
        task_queue=args.task_queue,
        registry=registry,
        roles_apart=roles_apart,
        permits=permits,
    )
    version = client.publish(spec)
    if not await has_worker(temporal, args.task_queue):
        print(
            f"psych: no worker polls task queue {args.task_queue!r} yet; the Run waits for one "
            "(start one with `psych worker` or `psych dev`)",
            file=sys.stderr,
            flush=True,
        )
    run = await client.dispatch(
        version,
        args.input,
        scope=scope,
        idempotency_key=args.idempotency_key,
        thread=args.thread,
    )
    try:
        report = await follow_run(client, run, scope=scope, json_report=args.json, full=args.full)
    except asyncio.CancelledError:
        print(
            f"psych: stopped following {run.workflow_id}; the Run goes on "
            f"(`psych status {run.workflow_id} --tenant {scope.tenant}`)",
            file=sys.stderr,
        )
        raise
    return 0 if report.status is RunStatus.COMPLETED else 1


def cmd_run(args: argparse.Namespace) -> int:
    """Publish a Spec, dispatch a Run, print its records live and then its report.

    Exits 0 when the Run completed, 1 otherwise.
    """
    return asyncio.run(_run(args))


async def _follow(args: argparse.Namespace) -> int:
    scope = scope_of(args)
    temporal = await temporal_client(args)
    facts = await run_facts(temporal, args.run_id, scope=scope)
    if not facts.worker_polling:
        # Its records are queries: with no worker to answer them, following would wait.
        print_fallback(facts, json_output=args.json)
        return 1
    # The Run's own task queue, for the header (following only reads).
    client = PsychClient(
        temporal, store=FileVersionStore(DEFAULT_STORE), task_queue=facts.task_queue
    )
    try:
        report = await follow_run(
            client, args.run_id, scope=scope, json_report=args.json, full=args.full
        )
    except asyncio.CancelledError:
        print(f"psych: stopped following {args.run_id}; the Run goes on", file=sys.stderr)
        raise
    return 0 if report.status is RunStatus.COMPLETED else 1


def cmd_follow(args: argparse.Namespace) -> int:
    """Follow an existing Run: its records so far and as they come, then its report.

    Exits as ``psych run`` does: 0 when the Run completed, 1 otherwise.
    """
    return asyncio.run(_follow(args))


def _reader(temporal: Client, blobs: TenantBlobs | None = None) -> PsychClient:
    # Reading Runs never touches the version store; the default one is never written.
    return PsychClient(temporal, store=FileVersionStore(DEFAULT_STORE), blobs=blobs)


async def _status(args: argparse.Namespace) -> int:
    scope = scope_of(args)
    temporal = await temporal_client(args)
    # Before the query, which no workflows-role worker would answer; another tenant's Run
    # is refused by the query itself, so its queues are not described to this caller.
    if parse_workflow_id(args.run_id)[0] == scope.tenant:
        for queue in await unpolled_queues(temporal, args.run_id):
            print(f"psych: {queue.message()}", file=sys.stderr, flush=True)
    # Never stuck: with no worker polling, the query would wait for one until its deadline.
    facts = await run_facts(temporal, args.run_id, scope=scope)
    if facts.worker_polling:
        try:
            state = await _reader(temporal).status(
                args.run_id, scope=scope, query_timeout=QUERY_TIMEOUT
            )
        except RPCError as err:
            if not unanswered(err):
                raise
        else:
            print(
                state.model_dump_json(indent=2) if args.json else format_state(args.run_id, state)
            )
            return 0
    print_fallback(facts, json_output=args.json)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Print a Run's current state (the ``psych.state`` query); with no worker to answer
    it, what Temporal itself knows (``run_facts``), within seconds."""
    return asyncio.run(_status(args))


async def _report(args: argparse.Namespace) -> int:
    scope = scope_of(args)
    if args.format != "text" and not args.transcript:
        raise PsychError(f"--format {args.format} is for --transcript")
    if args.inputs and args.transcript:
        raise PsychError("--inputs is for the report, not --transcript")
    if args.turn and not args.inputs:
        raise PsychError("--turn is for --inputs")
    inputs: bool | set[int] = set(args.turn) if args.turn else bool(args.inputs)
    temporal = await temporal_client(args)
    facts = await run_facts(temporal, args.run_id, scope=scope)
    if not facts.worker_polling:
        print_fallback(facts, json_output=args.json)
        return 1
    # The workers' store, as they configure it (opened for the tenant when sealed), closed
    # once the report is printed or refused.
    stored = (
        blob_store_from_env(os.environ, Path(DEFAULT_HOME) / "blobs", writes=False)
        if inputs
        else None
    )
    async with closing_stores(stored):
        blobs = None if stored is None else tenant_sealed_blobs(temporal, stored)
        return await _print_report(args, facts, _reader(temporal, blobs), inputs)


async def _print_report(
    args: argparse.Namespace, facts: RunFacts, client: PsychClient, inputs: bool | set[int]
) -> int:
    """``psych report``'s output (the report, its inputs, or the transcript) read through
    ``client``; 1 when no worker answers."""
    scope = scope_of(args)
    # Both bounded by QUERY_TIMEOUT: the server lists a stopped worker's poller for a while,
    # and the client's default deadline made --transcript wait ~30 s before it failed.
    try:
        if args.transcript:
            transcript = await read_transcript(
                client, args.run_id, scope=scope, query_timeout=QUERY_TIMEOUT
            )
        else:
            report = await client.report(
                args.run_id, scope=scope, query_timeout=QUERY_TIMEOUT, inputs=inputs
            )
    except RPCError as err:
        if not unanswered(err):
            raise
        print_fallback(facts, json_output=args.json)
        return 1
    if args.transcript:
        print_transcript(transcript, sys.stdout, markdown=args.format == "md")
        return 0
    missing = None if isinstance(inputs, bool) else turns_without_calls(report, inputs)
    if missing is not None:
        raise PsychError(f"--turn {missing}")
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print_report(report, sys.stdout)
        if inputs:
            print(file=sys.stdout)
            print_inputs(report, sys.stdout, None if inputs is True else inputs)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Print a Run's report (summary, JSON with ``--json``; ``--inputs``: with what each
    model call was sent, read from the blob store), or with ``--transcript`` the
    conversation as its model saw it (``--format md``: as Markdown)."""
    return asyncio.run(_report(args))


def _pending_lines(run: RunSummary, tenant: str, now: datetime) -> list[str]:
    """What a suspended Run waits on, until when, and the command that resumes it
    (``printable``: a question is the model's text)."""
    return [printable(line) for line in _waits(run, tenant, now)]


def _waits(run: RunSummary, tenant: str, now: datetime) -> list[str]:
    if run.unreadable is not None:
        return [f"  what it waits for cannot be read now: {run.unreadable}"]
    if not run.pending:
        return ["  waiting for nothing any more (answered since it was listed)"]
    lines: list[str] = []
    for item in run.pending:
        lines.append(f"  {item.reason} {item.id}: waiting for {describe_pending(item)}")
        until = f"until {format_time(item.expires_at)} ({format_until(item.expires_at, now)})"
        command = resume_command(run.workflow_id, item, tenant)
        lines.append(f"    {until}" + (f"; {command}" if command else ""))
    return lines


async def _list(args: argparse.Namespace) -> int:
    scope = scope_of(args)
    if args.limit < 0:
        raise PsychError(f"--limit {args.limit}: a number of Runs, or 0 for all of them")
    client = _reader(await temporal_client(args))
    # 0 = all: the client pages through every match (sys.maxsize never binds).
    page = await client.list_page(
        scope=scope,
        agent=args.agent,
        status=args.status,
        suspended=args.suspended,
        limit=args.limit or sys.maxsize,
        cursor=args.cursor,
    )
    runs = list(page.runs)
    while not args.limit and page.next_cursor is not None:
        # All of them: a page ends short past the rows it reads past (``FOREIGN_MAX``),
        # which is no end of the listing; its cursor reads on.
        page = await client.list_page(
            scope=scope,
            agent=args.agent,
            status=args.status,
            suspended=args.suspended,
            limit=sys.maxsize,
            cursor=page.next_cursor,
        )
        runs += page.runs
    if not runs and page.next_cursor is None:
        which = "suspended Runs" if args.suspended else "Runs"
        more = " more" if args.cursor else ""
        print(f"no{more} {which} for tenant {scope.tenant!r}", file=sys.stderr)
        return 0
    if not runs:
        # A page of rows the listing reads past and does not show (its warning says
        # which), ended short of any Run: the listing goes on past them.
        print(
            "psych: no matching Runs in this page (it ended short, reading past what it "
            f"does not show); there may be more (--cursor {page.next_cursor} with the same "
            "filters reads on)",
            file=sys.stderr,
        )
        return 0
    listed = [
        (
            run.workflow_id,
            run.agent or "-",
            f"{run.status} ({run.closed_as})" if run.closed_as else run.status or "-",
            run.started_at.isoformat(timespec="seconds") if run.started_at else "-",
        )
        for run in runs
    ]
    now = datetime.now(UTC)
    waits = [_pending_lines(run, scope.tenant, now) for run in runs] if args.suspended else None
    console = output_for(sys.stdout).console
    if console is not None:
        console.print(runs_table(listed, waits))
    else:
        rows = [("RUN ID", "AGENT", "STATUS", "STARTED"), *listed]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        for index, row in enumerate(rows):
            padded = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            print("  ".join([*padded, row[-1]]))
            if waits is not None and index > 0:
                print("\n".join(waits[index - 1]))
    if page.next_cursor is not None:
        which = "next" if args.cursor else "newest"
        print(
            f"psych: showing the {which} {len(runs)} matching Runs; there are more "
            f"(--cursor {page.next_cursor} with the same filters shows the next ones, "
            f"--limit 0 shows all)",
            file=sys.stderr,
        )
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """List the tenant's Runs, newest first; with ``--suspended``, what each waits on."""
    return asyncio.run(_list(args))
