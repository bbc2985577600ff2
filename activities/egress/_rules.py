"""Where a worker may connect: the rules, and the decision on one host and address.

Two origins of a URL. The operator's own configuration (model endpoints) is trusted: its
hosts are allowed by name. Everything a Spec names (HTTP tools, MCP servers, A2A peers,
OAuth endpoints found through them), including a Spec a model composed with ``spawn``, may
not reach an address the worker's network trusts: loopback, private, link-local (cloud
metadata at 169.254.169.254 among them), shared (carrier-grade NAT, 100.64.0.0/10, where
another cloud keeps its metadata), multicast, reserved or unspecified addresses, unless an
allow rule names them. Deny rules win over allow rules; a tenant's rules come before the
fleet's.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from psych_runtime.specs import SpecError

Origin = Literal["operator", "spec"]
"""Who chose the URL: the worker's operator, or a Spec (and so perhaps a model)."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

LOOPBACK = ("127.0.0.0/8", "::1/128", "localhost")
"""What ``psych dev`` and the demo allow: their own tool and MCP servers on loopback."""

DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""The largest response body a Spec-named URL may send (a tool result is bounded far lower
later; this stops a server streaming without end into the worker's memory)."""

_SHARED = ipaddress.ip_network("100.64.0.0/10")


class EgressRules(BaseModel):
    """Allow and deny lists: host patterns (``api.example.com``, ``*.corp.example``,
    ``localhost``; case-insensitive, ``*`` and ``?`` wildcards) and CIDRs (``10.0.0.0/8``,
    ``127.0.0.1/32``, ``fd00::/8``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow_hosts: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    allow_cidrs: tuple[str, ...] = ()
    deny_hosts: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    deny_cidrs: tuple[str, ...] = ()

    @field_validator("allow_hosts", "deny_hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            _check_host_pattern(pattern)
        return value

    @field_validator("allow_cidrs", "deny_cidrs")
    @classmethod
    def _cidrs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for cidr in value:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as err:
                raise ValueError(f"{cidr!r} is not a CIDR (like 10.0.0.0/8): {err}") from None
        return value

    @classmethod
    def parse(cls, allow: str = "", deny: str = "") -> EgressRules:
        """Rules from comma-separated lists where each entry is a CIDR or a host pattern.

        Raises:
            ValueError: an entry with a ``/`` that is not a CIDR.
        """
        allow_hosts, allow_cidrs = _split(allow)
        deny_hosts, deny_cidrs = _split(deny)
        return cls(
            allow_hosts=allow_hosts,
            allow_cidrs=allow_cidrs,
            deny_hosts=deny_hosts,
            deny_cidrs=deny_cidrs,
        )

    def allows(self, host: str, address: IPAddress | None) -> str | None:
        """The allow rule matching ``host`` (or ``address``), if any."""
        return _match(self.allow_hosts, self.allow_cidrs, host, address, deny=False)

    def denies(self, host: str, address: IPAddress | None) -> str | None:
        """The deny rule matching ``host`` (or ``address``), if any."""
        return _match(self.deny_hosts, self.deny_cidrs, host, address, deny=True)

    @property
    def empty(self) -> bool:
        return not (self.allow_hosts or self.allow_cidrs or self.deny_hosts or self.deny_cidrs)


class EgressSettings(BaseModel):
    """The worker's egress policy: the fleet's rules, each tenant's, and the body bound.

    From the environment (``from_env``): ``PSYCH_EGRESS_ALLOW`` and ``PSYCH_EGRESS_DENY``,
    comma-separated CIDRs and host patterns; or the settings file's ``egress`` section
    (``rules``, ``tenants``, ``max_response_bytes``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rules: EgressRules = EgressRules()
    tenants: dict[str, EgressRules] = Field(default_factory=dict)
    max_response_bytes: Annotated[int, Field(gt=0)] = DEFAULT_MAX_RESPONSE_BYTES

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EgressSettings:
        """The fleet's rules from ``PSYCH_EGRESS_ALLOW`` and ``PSYCH_EGRESS_DENY``.

        Raises:
            SpecError: an entry of one of them is not a CIDR or host pattern (the variable
                and the entry named).
        """
        env = os.environ if environ is None else environ
        allow, deny = env.get("PSYCH_EGRESS_ALLOW", ""), env.get("PSYCH_EGRESS_DENY", "")
        for name, entries in (("PSYCH_EGRESS_ALLOW", allow), ("PSYCH_EGRESS_DENY", deny)):
            try:
                _split(entries)
            except ValueError as err:
                # A SpecError (a PsychError): every command prints it as one line.
                raise SpecError(f"{name}: {err}") from None
        return cls(rules=EgressRules.parse(allow, deny))

    def allowing(self, *entries: str) -> EgressSettings:
        """These settings with ``entries`` (CIDRs or host patterns) added to the fleet's
        allow list: what ``psych dev`` and the demo do for their loopback servers."""
        hosts, cidrs = _split(",".join(entries))
        rules = self.rules.model_copy(
            update={
                "allow_hosts": (*self.rules.allow_hosts, *hosts),
                "allow_cidrs": (*self.rules.allow_cidrs, *cidrs),
            }
        )
        return self.model_copy(update={"rules": rules})


@dataclass(frozen=True)
class Refusal:
    """Why a connection is refused: ``rule`` names the rule, for the model and the log."""

    host: str
    address: str | None
    rule: str
    kind: str = "denied"
    """A short name of the rule's kind, for metrics: ``denied`` (a deny rule), or the kind
    of address refused by default (``loopback``, ``private``, ``link-local``, ...)."""

    def message(self, url: str | None = None) -> str:
        target = url or self.host
        if self.address is None or self.address == self.host:
            return f"egress refused: {target}: {self.rule}"
        return f"egress refused: {target} ({self.host} -> {self.address}): {self.rule}"


class EgressPolicy:
    """Decides one connection: by host name first, then by each address it resolves to."""

    def __init__(self, settings: EgressSettings, operator_hosts: frozenset[str] = frozenset()):
        self.settings = settings
        self.operator_hosts = frozenset(h.lower() for h in operator_hosts)

    def rules_for(self, tenant: str | None) -> tuple[EgressRules, ...]:
        """The rules that apply to ``tenant``: its own first, then the fleet's."""
        own = self.settings.tenants.get(tenant) if tenant is not None else None
        return (self.settings.rules,) if own is None else (own, self.settings.rules)

    def judge(self, url: str, tenant: str | None) -> Refusal | None:
        """Would a Spec's ``url`` be refused for ``tenant``, judging only what needs no
        lookup: deny and allow patterns, address literals, and ``localhost`` (loopback by
        definition, RFC 6761). Sends nothing, and needs no HTTP client (``psych validate``
        judges with the policy alone)."""
        host = urlsplit(url).hostname
        if not host:
            return None
        host = host.lower().rstrip(".")  # "localhost." is the same name, fully qualified
        if not host:
            return None
        refusal = self.decide(host, None, tenant=tenant, origin="spec")
        if refusal is not None:
            return refusal
        literal = "127.0.0.1" if host == "localhost" or host.endswith(".localhost") else None
        try:
            address = ipaddress.ip_address(host.strip("[]") if literal is None else literal)
        except ValueError:
            return None  # a name: the worker's own lookup decides
        return self.decide(host, address, tenant=tenant, origin="spec")

    def decide(
        self, host: str, address: IPAddress | None, *, tenant: str | None, origin: Origin
    ) -> Refusal | None:
        """``None`` when ``host`` (at ``address``, once resolved) may be reached.

        With ``address`` None only the name is judged (deny and allow patterns); the
        caller judges each resolved address again.
        """
        host = host.lower().rstrip(".")
        literal = _literal(host)
        address = address if address is not None else literal
        shown = None if address is None else str(address)
        for rules in self.rules_for(tenant):
            rule = rules.denies(host, address)
            if rule is not None:
                return Refusal(host, shown, f"denied by {_who(rules, self, tenant)} rule {rule}")
        for rules in self.rules_for(tenant):
            if rules.allows(host, address) is not None:
                return None
        if origin == "operator" and host in self.operator_hosts:
            return None
        if address is None:
            return None  # judged once resolved
        kind = blocked_kind(address)
        if kind is None:
            return None
        return Refusal(
            host,
            shown,
            kind=kind.split(" ")[0],
            rule=f"{kind} addresses are refused for URLs from a Spec unless the operator allows "
            "them (egress allow list: PSYCH_EGRESS_ALLOW or the settings file)",
        )


def blocked_kind(address: IPAddress) -> str | None:
    """What kind of address a Spec's URL may not reach by default (``None``: public)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return blocked_kind(address.ipv4_mapped)
    if address.is_loopback:
        return "loopback"
    if isinstance(address, ipaddress.IPv4Address) and address in _SHARED:
        return "shared (carrier-grade NAT) and cloud metadata"
    if address.is_link_local:
        return "link-local (cloud metadata among them)"
    if address.is_multicast:
        return "multicast"
    if address.is_unspecified:
        return "unspecified"
    if address.is_private:
        return "private"
    if address.is_reserved:
        return "reserved"
    return None


def _who(rules: EgressRules, policy: EgressPolicy, tenant: str | None) -> str:
    return "the fleet's" if rules is policy.settings.rules else f"tenant {tenant!r}'s"


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _match(
    hosts: tuple[str, ...],
    cidrs: tuple[str, ...],
    host: str,
    address: IPAddress | None,
    *,
    deny: bool,
) -> str | None:
    for pattern in hosts:
        if fnmatch.fnmatchcase(host, pattern.lower()):
            return f"host {pattern}"
    if address is None:
        return None
    # ::ffff:a.b.c.d reaches a.b.c.d (Linux connects it as IPv4), so it is judged as the
    # IPv4 address, and a rule written in the mapped form (inside ::ffff:0:0/96) as the
    # IPv4 network it stands for. A deny rule also holds for the address as written (a
    # deny of ::/0 still refuses ::ffff:a.b.c.d); an allow rule does not (an allow of
    # ::/0 must not open every IPv4 address by its mapped spelling).
    unmapped = _unmapped(address)
    for cidr in cidrs:
        network: IPNetwork = ipaddress.ip_network(cidr, strict=False)
        if _within(unmapped, _unmapped_network(network)) or (deny and _within(address, network)):
            return f"cidr {cidr}"
    return None


_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


def _unmapped(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _unmapped_network(network: IPNetwork) -> IPNetwork:
    if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(_MAPPED):
        first = network.network_address.ipv4_mapped
        assert first is not None
        return ipaddress.IPv4Network((first, network.prefixlen - 96))
    return network


def _within(address: IPAddress, network: IPNetwork) -> bool:
    return address.version == network.version and address in network


_HOST_PATTERN = re.compile(r"[a-z0-9._*?-]+")
"""What a host pattern may hold: a host name's characters and the ``*``/``?`` wildcards."""


def _check_host_pattern(pattern: str) -> None:
    # A port, a path, a scheme or userinfo makes a pattern no host name matches: a deny
    # rule written so would deny nothing, and say nothing.
    if not _HOST_PATTERN.fullmatch(pattern.lower()):
        raise ValueError(
            f"{pattern!r} is not a host pattern (a host name, * and ? as wildcards, like "
            "*.corp.example; no scheme, port or path) nor a CIDR"
        )


def _split(entries: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    hosts: list[str] = []
    cidrs: list[str] = []
    for raw in entries.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError as err:
            if "/" in entry:  # meant as a CIDR: never read as a host pattern instead
                raise ValueError(f"{entry!r} is not a CIDR (like 10.0.0.0/8): {err}") from None
            _check_host_pattern(entry)
            hosts.append(entry.lower())
        else:
            cidrs.append(entry)
    return tuple(hosts), tuple(cidrs)
