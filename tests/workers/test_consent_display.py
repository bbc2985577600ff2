"""What ``psych status``, ``psych run``, ``psych report`` and ``psych list --suspended``
show of a Run suspended for authorization (a person's consent to an MCP server's OAuth):
the whole URL to open, and that psych's OAuth callback completes it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from psych_runtime.specs import Scope
from psych_runtime.workers.cli._runs import _pending_lines
from psych_runtime.workers.console import describe_pending, format_record, resume_command
from psych_runtime.workflows import Pending, RunSummary, Suspended, SuspensionReason

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
URL = (
    "https://auth.example.com/authorize?response_type=code&client_id=psych-crm"
    "&state=abc&code_challenge=xyz&code_challenge_method=S256"
)
ITEM = Pending(
    reason=SuspensionReason.AUTHORIZATION,
    id="oauth-0123456789abcdef",
    call_id="turn-1",
    tool="crm",
    question=URL,
    expires_at=NOW + timedelta(days=1),
)


def test_the_item_names_the_server_and_the_whole_url() -> None:
    assert describe_pending(ITEM) == f"a person's consent for MCP server crm: open {URL}"
    command = resume_command("psych-acme-r1", ITEM, "acme")
    assert command is not None
    assert command.startswith(f"open {URL} in a browser and consent")
    assert "psych oauth-callback" in command and "/oauth/callback" in command


def test_the_record_and_the_suspended_listing_show_it() -> None:
    record = Suspended(seq=3, at=NOW, scope=Scope(tenant="acme"), pending=ITEM)
    assert f"open {URL}" in format_record(record)
    run = RunSummary(
        workflow_id="psych-acme-r1",
        run_id="r1",
        agent="crm-agent",
        version_hash="sha256:0",
        status="suspended",
        started_at=NOW,
        closed_at=None,
        suspension="authorization",
        pending=(ITEM,),
    )
    waits, until = _pending_lines(run, "acme", NOW)
    assert waits == f"  authorization {ITEM.id}: waiting for {describe_pending(ITEM)}"
    assert f"open {URL} in a browser" in until
