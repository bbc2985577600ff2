"""Model-facing MCP tool names and narrowing by ``allow``: pure functions."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from psych_runtime.activities.mcp._names import (
    MAX_TOOL_NAME,
    allowed_tools,
    name_tools,
    plain_name,
    sanitise,
)

PROVIDER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_a_plain_name_is_server_and_tool_joined() -> None:
    naming = name_tools([("crm", "find_customer")])
    assert naming.names == {("crm", "find_customer"): "crm__find_customer"}
    assert naming.renamed == ()


def test_characters_providers_refuse_are_replaced_and_recorded() -> None:
    naming = name_tools([("crm.eu", "orders/list"), ("crm.eu", "get-order")])
    assert naming.names[("crm.eu", "orders/list")] == "crm_eu__orders_list"
    assert naming.names[("crm.eu", "get-order")] == "crm_eu__get-order"
    assert naming.renamed == (
        ("crm_eu__get-order", "crm.eu", "get-order"),
        ("crm_eu__orders_list", "crm.eu", "orders/list"),
    )


def test_a_long_name_is_cut_to_64_with_a_stable_suffix() -> None:
    tool = "a_very_long_tool_name_" * 5
    name = plain_name("server", tool)
    assert len(name) == MAX_TOOL_NAME
    assert name.startswith("server__a_very_long_tool_name_")
    assert re.search(r"-[0-9a-f]{8}$", name)
    # Stable: the same pair names alike every time, anywhere.
    assert name_tools([("server", tool)]).names[("server", tool)] == name
    # Another long tool sharing the first 55 characters still gets its own name.
    other = tool + "x"
    assert plain_name("server", other) != name
    assert plain_name("server", other)[:55] == name[:55]


def test_a_name_needing_no_change_is_kept_and_other_collisions_go_by_original_name() -> None:
    pairs = [("s", "get_order"), ("s", "get.order"), ("s", "get/order")]
    naming = name_tools(pairs)
    # "get_order" needs no change and keeps it; the two sanitised into it get suffixes.
    assert naming.names[("s", "get_order")] == "s__get_order"
    assert naming.names[("s", "get.order")].startswith("s__get_order-")
    assert naming.names[("s", "get/order")].startswith("s__get_order-")
    assert len(set(naming.names.values())) == 3
    # Whatever order the tools arrive in, and whether or not the others are listed.
    assert name_tools(reversed(pairs)).names == naming.names
    assert name_tools([("s", "get_order")]).names == {("s", "get_order"): "s__get_order"}
    assert {(server, tool) for _, server, tool in naming.renamed} == {
        ("s", "get.order"),
        ("s", "get/order"),
    }
    # Between sanitised names alone, the first by original name keeps it.
    sanitised = name_tools(pairs[1:])
    # "get.order" < "get/order"
    assert sanitised.names[("s", "get.order")] == "s__get_order"
    assert sanitised.names[("s", "get/order")].startswith("s__get_order-")


def test_servers_whose_names_sanitise_alike_do_not_collide() -> None:
    naming = name_tools([("a.b", "x"), ("a_b", "x")])
    # a_b's tool needs no change, so it keeps a_b__x; a.b's, sanitised into it, does not.
    assert naming.names[("a_b", "x")] == "a_b__x"
    assert naming.names[("a.b", "x")].startswith("a_b__x-")


def test_a_reserved_name_is_never_given_to_an_mcp_tool() -> None:
    naming = name_tools([("crm", "lookup")], reserved=["crm__lookup"])
    assert naming.names[("crm", "lookup")] != "crm__lookup"
    assert naming.names[("crm", "lookup")].startswith("crm__lookup-")


def test_allow_narrows_by_the_servers_own_names() -> None:
    offered = ["get.order", "get_customer", "delete_order", "ping"]
    assert allowed_tools(offered, ()) == tuple(sorted(offered))
    assert allowed_tools(offered, ("get*",)) == ("get.order", "get_customer")
    assert allowed_tools(offered, ("ping", "delete_order")) == ("delete_order", "ping")
    # The model-facing form is not what allow names.
    assert allowed_tools(offered, ("get_order",)) == ()


def test_sanitise_keeps_only_provider_characters() -> None:
    assert sanitise("a.b/c d:é-_9") == "a_b_c_d__-_9"


@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_.-]{0,40}", fullmatch=True),
            st.text(min_size=0, max_size=80),
        ),
        max_size=30,
    )
)
def test_names_are_always_valid_unique_and_order_free(pairs: list[tuple[str, str]]) -> None:
    naming = name_tools(pairs)
    names = list(naming.names.values())
    assert all(PROVIDER_NAME.match(name) for name in names)
    assert len(set(names)) == len(names)
    assert name_tools(list(reversed(pairs))).names == naming.names
