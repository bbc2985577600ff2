"""Reading a peer task the Run waits on (``psych.a2a.poll``): a peer that answers it has
no such task ends the wait with that answer (through the call's on_error hooks, as any
failure the model reads); one that cannot be reached is read again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from a2a.client.errors import A2AClientError
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities import HookCall, Hooks
from psych_runtime.activities.a2a import A2aActivities
from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import A2aPollInput, ToolOutcome
from psych_runtime.activities.egress import Egress, EgressRules, EgressSettings
from psych_runtime.specs import A2APeer, Scope
from tests.a2a.peer import serve_peer


def _poll(url: str, task_id: str) -> A2aPollInput:
    return A2aPollInput(
        run_id="r1",
        call_id="c1",
        peer=A2APeer(name="travel", url=url),
        skill="book",
        name="travel__book",
        task_id=task_id,
        arguments={"message": "book it"},
        large_result_bytes=100_000,
        scope=Scope(tenant="acme"),
    )


@asynccontextmanager
async def _activities(tmp_path: Path, hooks: Hooks | None = None) -> AsyncIterator[A2aActivities]:
    egress = Egress(EgressSettings(rules=EgressRules(allow_cidrs=("127.0.0.0/8",))))
    try:
        yield A2aActivities(blobs=LocalBlobStore(tmp_path), egress=egress, hooks=hooks)
    finally:
        await egress.aclose()


async def test_a_task_the_peer_does_not_have_ends_the_wait_naming_it(tmp_path: Path) -> None:
    async with serve_peer(("book",)) as peer, _activities(tmp_path) as a2a:
        outcome: ToolOutcome = await ActivityEnvironment().run(
            a2a.poll, _poll(peer.url, "task-404")
        )
    assert outcome.status == "error"
    assert outcome.content.startswith("A2A peer 'travel' could not give task task-404: ")
    assert "TaskNotFoundError" in outcome.content


async def test_a_task_the_peer_does_not_have_goes_through_the_on_error_hooks(
    tmp_path: Path,
) -> None:
    """The failure the model reads is an on_error hook's to replace, as a failed task's is;
    before, this one was stored as it was and no on_error hook ran."""
    seen: list[str] = []

    def from_cache(call: HookCall, error: str) -> str:
        seen.append(error)
        return "booked (from the cache)"

    hooks = Hooks().on_error("travel__book", from_cache)
    async with serve_peer(("book",)) as peer, _activities(tmp_path, hooks) as a2a:
        outcome: ToolOutcome = await ActivityEnvironment().run(
            a2a.poll, _poll(peer.url, "task-404")
        )
    assert len(seen) == 1 and seen[0].startswith("A2A peer 'travel' could not give task ")
    assert outcome.status == "ok" and outcome.content == "booked (from the cache)"
    assert [(e.stage, e.effect) for e in outcome.hooks] == [("on_error", "replaced_error")]


async def test_a_peer_that_does_not_answer_is_read_again(tmp_path: Path) -> None:
    async with serve_peer(("book",)) as peer, _activities(tmp_path) as a2a:
        # Its card is read (and kept) while it is up; then it answers 503 to the read.
        await ActivityEnvironment().run(a2a.poll, _poll(peer.url, "task-404"))
        peer.down = True
        with pytest.raises(A2AClientError, match="HTTP Error 503"):
            await ActivityEnvironment().run(a2a.poll, _poll(peer.url, "task-1"))
    assert peer.refused == 1
