"""What a tenant is permitted: ``StaticPermits``, ``AllPermits`` and ``permit_problems``."""

from __future__ import annotations

import asyncio

import pytest

from psych_runtime.specs import (
    AgentBuilder,
    AllPermits,
    Permits,
    PermitSource,
    SpecError,
    StaticPermits,
    narrow,
    permit_problems,
    permitted_by,
)

MCP = "https://mcp.example.test/mcp"
PEER = "https://peer.example.test"


async def test_a_listed_tenant_gets_its_entry_another_the_default_and_none_without() -> None:
    permits = StaticPermits(
        tenants={"acme": Permits(code_tools=("lookup_*",), mcp_servers={MCP: ("get*",)})},
        default=Permits(mcp_servers={}),
    )
    assert await permits.permitted("acme", PermitSource("code")) == ("lookup_*",)
    assert await permits.permitted("acme", PermitSource("http")) is None
    assert await permits.permitted("acme", PermitSource("mcp", MCP, "any name")) == ("get*",)
    # Another spelling of the URL is another server: listed nowhere, permitted nothing.
    assert await permits.permitted("acme", PermitSource("mcp", MCP + "/")) == ()
    assert await permits.permitted("globex", PermitSource("mcp", MCP)) == ()
    assert await permits.permitted("globex", PermitSource("code")) is None
    assert await StaticPermits().permitted("acme", PermitSource("a2a", PEER)) is None


def test_a_pattern_no_name_can_match_is_refused_naming_its_field() -> None:
    with pytest.raises(SpecError) as refused:
        Permits(code_tools=("",), a2a_peers={PEER: ("a*b",)})
    message = str(refused.value)
    assert "code_tools: an empty entry grants nothing" in message
    assert f"a2a_peers[{PEER!r}]: 'a*b': '*' may only end an entry" in message


def test_one_string_where_a_list_of_patterns_is_asked_is_refused_not_taken_apart() -> None:
    # tuple("lookup*") is ('l', 'o', 'o', 'k', 'u', 'p', '*'): its '*' permitted every tool.
    with pytest.raises(SpecError) as refused:
        Permits(code_tools="lookup*", mcp_servers={MCP: "read*"})  # type: ignore[arg-type, dict-item]
    message = str(refused.value)
    assert "code_tools: a list of names and prefixes, not the string 'lookup*'" in message
    assert f"mcp_servers[{MCP!r}]: a list of names and prefixes, not the string 'read*'" in message
    # And the one narrowing function, whose Sequence[str] a type checker lets a string pass.
    with pytest.raises(TypeError, match=r"allow is a sequence of names, not the string 'get\*'"):
        narrow(["get_order", "delete_all"], allow="get*")
    with pytest.raises(TypeError, match="permitted is a sequence of names, not the string"):
        narrow(["get_order", "delete_all"], permitted="get*")


async def test_all_permits_permits_what_each_port_permits() -> None:
    first = StaticPermits({"acme": Permits(code_tools=("get_*", "send_mail", "ab*"))})
    second = StaticPermits({"acme": Permits(code_tools=("get_order*", "send_*", "x*"))})
    both = AllPermits((first, second))
    patterns = await both.permitted("acme", PermitSource("code"))
    assert patterns == ("get_order*", "send_mail")
    names = ["get_order", "get_orders", "get_user", "send_mail", "send_sms", "abc", "x"]
    assert narrow(names, permitted=patterns) == ("get_order", "get_orders", "send_mail")
    # A port with no restriction leaves the other's; none at all, no restriction.
    assert await AllPermits((first, StaticPermits())).permitted("acme", PermitSource("code")) == (
        "get_*",
        "send_mail",
        "ab*",
    )
    assert await AllPermits((StaticPermits(),)).permitted("acme", PermitSource("code")) is None


async def test_problems_name_every_unpermitted_use_at_any_depth() -> None:
    helper = (
        AgentBuilder("helper")
        .model("m")
        .http_tool("ping", description="Ping.", url="https://api.example.test/ping", method="GET")
        .a2a_peer("billing", PEER, allow=("refund",))
    )
    spec = (
        AgentBuilder("root")
        .model("m")
        .mcp_server("crm", MCP, allow=("get_user", "delete_*", "g*"))
        .subagent("helper", "Helps with pings and billing questions.", helper)
        .build()
    )
    permits = StaticPermits(
        {
            "acme": Permits(
                http_tools=(), mcp_servers={MCP: ("get_*",)}, a2a_peers={PEER: ("status",)}
            )
        }
    )
    problems = [str(problem) for problem in await permit_problems(spec, "acme", permits)]
    assert problems == [
        "mcp_servers[crm].allow: 'delete_*' grants only what tenant 'acme' is not permitted "
        "of MCP server 'crm' (permitted: get_*)",
        "subagents[helper].spec.a2a_peers[billing].allow: 'refund' grants only what tenant "
        "'acme' is not permitted of A2A peer 'billing' (permitted: status)",
        "subagents[helper].spec.tools[ping]: http tool 'ping' is not permitted to tenant 'acme'",
    ]
    assert await permit_problems(spec, "globex", permits) == []


class _Answering:
    """A port given in code answering ``answer`` for everything."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    async def permitted(self, tenant: str, source: PermitSource) -> object:
        return self.answer


@pytest.mark.parametrize("answer", ["get*", b"get*", 7, ["get*", 7]])
async def test_a_port_answering_other_than_names_is_refused_not_taken_apart(
    answer: object,
) -> None:
    # A string is a sequence of strings: taken apart, its '*' alone would permit all.
    both = AllPermits((StaticPermits(), _Answering(answer)))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"_Answering\.permitted answered .* for tenant 'acme'"):
        await both.permitted("acme", PermitSource("mcp", MCP))
    assert await permitted_by(_Answering({"get*"}), "acme", PermitSource("code")) == ("get*",)  # type: ignore[arg-type]


class _Silent:
    """A port that never answers (its tenant service hangs)."""

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        await asyncio.Event().wait()
        return None


class _TimingOut:
    """A port whose own call times out: its TimeoutError is its own, raised as it is."""

    async def permitted(self, tenant: str, source: PermitSource) -> tuple[str, ...] | None:
        raise TimeoutError("tenant service timed out")


async def test_a_port_that_does_not_answer_fails_within_the_bound_naming_it() -> None:
    with pytest.raises(TimeoutError) as caught:
        await permitted_by(_Silent(), "acme", PermitSource("mcp", MCP), within=0.01)
    assert str(caught.value) == (
        f"_Silent.permitted gave no answer within 0.01 s for tenant 'acme' (mcp {MCP})"
    )
    with pytest.raises(TimeoutError, match=r"^tenant service timed out$"):
        await permitted_by(_TimingOut(), "acme", PermitSource("code"))


async def test_a_silent_port_among_a_workers_two_is_the_one_named() -> None:
    # A worker given a port in code and a settings file's section asks both (AllPermits):
    # the one that does not answer is named, not the pair, so the operator knows which.
    both = AllPermits((StaticPermits(), _Silent()))
    with pytest.raises(TimeoutError) as caught:
        await permitted_by(both, "acme", PermitSource("mcp", MCP), within=0.01)
    assert str(caught.value) == (
        f"_Silent.permitted gave no answer within 0.01 s for tenant 'acme' (mcp {MCP})"
    )
    # A port's own error is raised as it is through the pair too.
    with pytest.raises(TimeoutError, match=r"^tenant service timed out$"):
        await permitted_by(AllPermits((_TimingOut(), _Silent())), "acme", PermitSource("code"))
    table = StaticPermits(tenants={"acme": Permits(code_tools=("get*", "put"))})
    narrower = StaticPermits(tenants={"acme": Permits(code_tools=("get_order",))})
    assert await permitted_by(
        AllPermits((table, narrower)), "acme", PermitSource("code"), within=1
    ) == ("get_order",)
