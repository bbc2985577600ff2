"""Permits for the e2e tests: a client of the harness's store, task queue and registry that
checks a permits port before each dispatch (``PsychClient(permits=...)``), as ``psych
serve``'s does, and a port whose operator revokes permits while a Run works."""

from __future__ import annotations

from collections.abc import Callable

from psych_runtime.specs import AgentBuilder, AgentSpec, PermitSource, TenantPermits
from psych_runtime.workflows import PsychClient

from .conftest import Harness


def checking_client(harness: Harness, permits: TenantPermits | None) -> PsychClient:
    """The harness's client, but dispatching through ``permits``."""
    return PsychClient(
        harness.env.client,
        store=harness.client.store,
        task_queue=harness.settings.task_queue,
        registry=harness.registry,
        permits=permits,
    )


class Revoking:
    """A ``TenantPermits`` (given in code, ``WorkerSettings.permits``) that permits
    everything until it has answered ``until`` times, then only ``lookup*`` and ``echo``:
    an operator revoking a permit between the turn's offer and the call."""

    def __init__(self, until: int) -> None:
        self.until = until
        self.asked: list[tuple[str, str]] = []

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        self.asked.append((tenant, source.kind))
        return None if len(self.asked) <= self.until else ("echo", "lookup*")


def mail_sender(sent: list[str]) -> Callable[[str], str]:
    """A ``send_mail`` code tool that appends each address it mails to ``sent``."""

    def send_mail(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return "sent"

    return send_mail


def mailer(harness: Harness, sent: list[str], *tools: Callable[..., str]) -> AgentSpec:
    """An agent with ``tools``, ``send_mail`` (``mail_sender``) and the HTTP tool ``ping``
    on port 9 (discard) on loopback: refused before a request is made, so none is."""
    builder = AgentBuilder("mailer", registry=harness.registry).model("fake-model")
    for tool in (*tools, mail_sender(sent)):
        builder = builder.tool(tool)
    ping = "http://127.0.0.1:9/ping"
    return builder.http_tool("ping", description="Ping.", url=ping, method="GET").build()
