"""``psych validate|publish --check-connections`` for A2A peers: every peer of a Spec, at
any depth (subagents' embedded Specs, workflow steps), has its Agent Card fetched through
the egress port for the check's Scope (``check_peers``), and each is reported: reachable
with the skills a Run would offer after ``allow``, or why not.

Judged like MCP servers: a required peer that does not answer is a problem, an optional
one a warning (a Run leaves it out and tells its model); an ``allow`` entry naming no skill
of the card is a problem (it grants nothing, so it is most likely a typo or a skill the
peer dropped).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from psych_runtime.activities.secrets import SecretResolver
from psych_runtime.specs import A2APeer, AgentSpec, Scope, WorkflowSpec, nested_specs

if TYPE_CHECKING:
    # Only for the types: the HTTP clients load when a check runs, not for plain validate.
    from psych_runtime.activities.a2a import A2aSettings
    from psych_runtime.activities.egress import Egress


def peers_of(spec: AgentSpec | WorkflowSpec) -> list[tuple[str, A2APeer]]:
    """Every A2A peer of ``spec`` at any depth, with its path (``a2a_peers[x]``,
    ``subagents[s].spec.a2a_peers[x]``, ``steps[t].spec.a2a_peers[x]``), in order found."""
    return [
        (f"{prefix}a2a_peers[{peer.name}]", peer)
        for prefix, node in nested_specs(spec)
        if isinstance(node, AgentSpec)
        for peer in node.a2a_peers
    ]


@dataclass
class PeerReport:
    """What a check of a Spec's peers found: one line per peer, problems and warnings."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


async def check_spec_peers(
    spec: AgentSpec | WorkflowSpec,
    *,
    scope: Scope,
    secrets: SecretResolver | None,
    egress: Egress,
    settings: A2aSettings | None = None,
) -> PeerReport:
    """Fetch the card of every peer of ``spec`` and judge each (see the module docstring);
    ``settings`` bound each fetch (``card_timeout_seconds``) as for a worker."""
    report = PeerReport()
    found = peers_of(spec)
    if not found:
        return report
    # Imported here: the a2a SDK (protobuf types) costs import time plain validate skips.
    from psych_runtime.activities.a2a import check_peers

    checks = await check_peers(
        [peer for _, peer in found], scope=scope, secrets=secrets, egress=egress, settings=settings
    )
    for (path, peer), check in zip(found, checks, strict=True):
        if check.error is not None:
            report.lines.append(f"{path}: unreachable: {check.error}")
            if peer.optional:
                report.warnings.append(
                    f"{path}: optional peer did not answer (a Run leaves it out): {check.error}"
                )
            else:
                report.problems.append(
                    f"{path}: peer did not answer and is not optional: {check.error}"
                )
            continue
        skills = ", ".join(check.granted) or "none"
        report.lines.append(f"{path}: reachable; skills offered: {skills}")
        offers = ", ".join(check.offered) or "no skills"
        report.problems.extend(
            f"{path}.allow: {entry!r} names no skill of the peer's card (it offers: {offers})"
            for entry in check.unmatched
        )
    return report
