"""An A2A skill outside the peer's ``allow`` is refused before any hook runs."""

from __future__ import annotations

from pathlib import Path

from temporalio.testing import ActivityEnvironment

from psych_runtime.activities.a2a import A2aActivities
from psych_runtime.activities.blobs import LocalBlobStore
from psych_runtime.activities.contract import A2aToolCall, ToolOutcome
from psych_runtime.activities.egress import Egress, EgressSettings
from psych_runtime.specs import A2APeer, Scope

from ._hooks import noting_hooks


async def test_a_skill_outside_allow_is_refused_before_any_hook(tmp_path: Path) -> None:
    # Checked after the pre hooks, the refusal was an error an on_error hook could replace
    # by a result: the security check comes first, and a denial runs no hook. Nothing is
    # sent (the peer's address is never dialled).
    seen: list[str] = []
    hooks = noting_hooks(seen)
    a2a = A2aActivities(
        blobs=LocalBlobStore(tmp_path), egress=Egress(EgressSettings()), hooks=hooks
    )
    call = A2aToolCall(
        run_id="r1",
        call_id="c1",
        peer=A2APeer(name="desk", url="http://127.0.0.1:9/", allow=("ask",)),
        skill="wipe",
        name="desk__wipe",
        arguments={"message": "wipe everything"},
        large_result_bytes=100_000,
        scope=Scope(tenant="acme"),
    )
    outcome: ToolOutcome = await ActivityEnvironment().run(a2a.call, call)
    assert (outcome.status, seen) == ("denied", [])
    assert outcome.content == "skill 'wipe' of peer 'desk' is not granted"
