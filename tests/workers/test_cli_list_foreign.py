"""``psych list`` when the visibility store answers other tenants' Runs to a tenant's
listing (a store that matches ``PsychTenant`` loosely): the listing reads past them and
warns, and the person listing sees that warning on stderr once, ``--verbose`` or not,
apart from the table on stdout. Run as the executable is (a subprocess), against the
session dev server."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.testing import WorkflowEnvironment

from psych_runtime.workflows.contract._contract import SA_TENANT

# The real executable's entry, with the bound of other tenants' Runs a listing reads past
# lowered from 1000 to 2: three of them pass it, but a listing that read to its end did
# not end short (it said it did, of a tenant whose one Run it showed).
ENTRY = (
    "import psych_runtime.workflows.client._listing as listing; listing.FOREIGN_MAX = 2; "
    "from psych_runtime.workers.cli._main import entry; entry()"
)
WARNING = (
    "the visibility store answered 3 Run(s) of other tenants to a listing of tenant {tenant!r} "
    "(it matches PsychTenant loosely: a case-insensitive collation?)"
)


async def _start(client: Client, workflow_id: str, tenant: str) -> None:
    """A Run no worker takes (its task queue has none), whose tenant attribute is
    ``tenant`` whatever its id says: what a loosely matching store answers."""
    await client.start_workflow(
        "AgentRun",
        id=workflow_id,
        task_queue=f"nobody-{uuid.uuid4().hex[:8]}",
        search_attributes=TypedSearchAttributes(
            [SearchAttributePair(SearchAttributeKey.for_keyword(SA_TENANT), tenant)]
        ),
    )


@pytest.fixture
async def listed(dev_env: WorkflowEnvironment) -> AsyncIterator[tuple[str, str]]:
    """A tenant with one Run of its own, and three of another tenant that the store
    answers to its listing (started after, so newest first); (tenant, its Run's id)."""
    client = dev_env.client
    tenant = f"t{uuid.uuid4().hex[:10]}"
    own = f"psych-{tenant}-{uuid.uuid4().hex}"
    ids = [own, *(f"psych-x{tenant}-{uuid.uuid4().hex}" for _ in range(3))]
    for workflow_id in ids:
        await _start(client, workflow_id, tenant)
    query = f"{SA_TENANT} = '{tenant}'"
    for _ in range(80):  # the visibility store catches up shortly after
        if (await client.count_workflows(query)).count == len(ids):
            break
        await asyncio.sleep(0.25)
    try:
        yield tenant, own
    finally:
        for workflow_id in ids:
            await client.get_workflow_handle(workflow_id).terminate()


@pytest.mark.parametrize("verbose", [False, True])
async def test_a_listing_that_read_past_other_tenants_runs_says_so_once_on_stderr(
    dev_env: WorkflowEnvironment, listed: tuple[str, str], verbose: bool
) -> None:
    tenant, own = listed
    address = dev_env.client.service_client.config.target_host
    argv = ["list", "--address", address, "--tenant", tenant, *(["--verbose"] * verbose)]
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", ENTRY, *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["RUN", "ID", "AGENT", "STATUS", "STARTED"]
    assert [row.split()[0] for row in rows] == [own]  # the table alone, no warning in it
    warned = [line for line in done.stderr.splitlines() if "visibility store" in line]
    assert len(warned) == 1, done.stderr
    expected = re.escape(WARNING.format(tenant=tenant))
    form = r"\d\d:\d\d:\d\d warning: " if verbose else r"psych: warning: "
    assert re.fullmatch(form + expected, warned[0]), warned[0]


@pytest.fixture
async def strays(dev_env: WorkflowEnvironment) -> AsyncIterator[tuple[str, str, list[str]]]:
    """A tenant with one Run of its own, and three workflows after it that carry its tenant
    attribute but are not psych Runs (ids not ``psych-<tenant>-<run id>``: started by
    hand); (tenant, its Run's id, their ids)."""
    client = dev_env.client
    tenant = f"t{uuid.uuid4().hex[:10]}"
    own = f"psych-{tenant}-{uuid.uuid4().hex}"
    hand = [f"by-hand-{tenant}-{index}" for index in range(3)]
    for workflow_id in (own, *hand):
        await _start(client, workflow_id, tenant)
    query = f"{SA_TENANT} = '{tenant}'"
    for _ in range(80):  # the visibility store catches up shortly after
        if (await client.count_workflows(query)).count == 1 + len(hand):
            break
        await asyncio.sleep(0.25)
    try:
        yield tenant, own, hand
    finally:
        for workflow_id in (own, *hand):
            await client.get_workflow_handle(workflow_id).terminate()


async def _psych_list(dev_env: WorkflowEnvironment, *argv: str) -> subprocess.CompletedProcess[str]:
    address = dev_env.client.service_client.config.target_host
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", ENTRY, "list", "--address", address, *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_page_of_workflows_that_are_no_runs_says_so_and_goes_on(
    dev_env: WorkflowEnvironment, strays: tuple[str, str, list[str]]
) -> None:
    tenant, own, hand = strays
    # Read past: the Run alone is shown, and the warning names the workflows.
    done = await _psych_list(dev_env, "--tenant", tenant)
    assert done.returncode == 0, done.stderr
    assert [row.split()[0] for row in done.stdout.splitlines()[1:]] == [own]
    named = ", ".join(repr(workflow_id) for workflow_id in hand[::-1])
    warned = [line for line in done.stderr.splitlines() if "are not psych Runs" in line]
    assert len(warned) == 1, done.stderr
    assert warned[0].startswith(
        f"psych: warning: 3 workflow(s) carry tenant {tenant!r}'s PsychTenant but are not "
        f"psych Runs (their ids are not psych-<tenant>-<run id>: started by hand, or by "
        f"another system?): {named}; left out of its listing"
    )
    # One a page, past two (FOREIGN_MAX) of them: the page ends short, holding no Run; the
    # listing is not over, and its cursor reads on to the Run.
    first = await _psych_list(dev_env, "--tenant", tenant, "--limit", "1")
    assert first.returncode == 0, first.stderr
    assert first.stdout == ""
    assert "ended short at 0 of up to 1" in first.stderr
    found = re.search(r"--cursor (\S+) with the same filters reads on", first.stderr)
    assert found is not None, first.stderr
    rest = await _psych_list(dev_env, "--tenant", tenant, "--limit", "1", "--cursor", found[1])
    assert rest.returncode == 0, rest.stderr
    assert [row.split()[0] for row in rest.stdout.splitlines()[1:]] == [own]


async def test_limit_0_lists_all_past_pages_that_ended_short(
    dev_env: WorkflowEnvironment, strays: tuple[str, str, list[str]]
) -> None:
    # --limit 0 is "all of them", but a page that ended short past FOREIGN_MAX rows it
    # reads past (here its first, of the three workflows) is no end: psych list printed
    # that page alone (no Run, a cursor) and stopped. Visibility asked a row at a time
    # (PAGE_MAX 1), so the page ends short before the Run.
    tenant, own, _ = strays
    address = dev_env.client.service_client.config.target_host
    entry = f"import psych_runtime.workflows.client._listing as paged; paged.PAGE_MAX = 1; {ENTRY}"
    argv = ["list", "--address", address, "--tenant", tenant, "--limit", "0"]
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", entry, *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert [row.split()[0] for row in done.stdout.splitlines()[1:]] == [own], done.stderr
    assert "--cursor" not in done.stderr, done.stderr
