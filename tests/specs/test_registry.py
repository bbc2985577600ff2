"""The ToolRegistry: schemas from type hints and docstrings, argument validation, refusals."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from psych_runtime.specs import BUILTIN_TOOL_NAMES, RegistryError, ToolDef, ToolRegistry


def lookup_order(order_id: str, include_items: bool = False, limit: int = 10) -> dict[str, Any]:
    """Look up an order by its id,
    including its status.

    A longer explanation that is not part of the summary.

    Args:
        order_id: The id printed on the receipt,
            for example ``A-1``.
        include_items (bool): Whether to list the line items.
        limit: Most items to list.

    Returns:
        The order.
    """
    return {"order_id": order_id, "include_items": include_items, "limit": limit}


async def refund(order_id: str, amount: float, reason: Literal["damaged", "late"]) -> str:
    """Refund part of an order.

    Args:
        order_id: Which order.
        amount: How much, in the order's currency.
        reason: Why.
    """
    await asyncio.sleep(0)
    return f"{order_id}:{amount}:{reason}"


def undocumented(x: int) -> int:
    return x


class Query(BaseModel):
    """Search the knowledge base.

    More detail here.
    """

    model_config = ConfigDict(extra="forbid")

    text: str
    top_k: int = 5


class LooseQuery(BaseModel):
    """A model that silently drops unknown fields."""

    text: str


@pytest.fixture
def registry() -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(lookup_order)
    reg.register(refund)
    return reg


def test_schema_from_type_hints(registry: ToolRegistry) -> None:
    schema = registry.get("lookup_order").parameters_schema
    assert schema["type"] == "object"
    assert schema["required"] == ["order_id"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["order_id"]["type"] == "string"
    assert props["include_items"]["type"] == "boolean"
    assert props["include_items"]["default"] is False
    assert props["limit"]["type"] == "integer"
    assert props["limit"]["default"] == 10
    assert "title" not in schema


def test_async_schema_types(registry: ToolRegistry) -> None:
    schema = registry.get("refund").parameters_schema
    assert sorted(schema["required"]) == ["amount", "order_id", "reason"]
    assert schema["properties"]["amount"]["type"] == "number"
    assert schema["properties"]["reason"]["enum"] == ["damaged", "late"]


def test_descriptions_from_google_docstring(registry: ToolRegistry) -> None:
    tool = registry.get("lookup_order")
    assert tool.description == "Look up an order by its id, including its status."
    props = tool.parameters_schema["properties"]
    assert props["order_id"]["description"] == "The id printed on the receipt, for example ``A-1``."
    assert props["include_items"]["description"] == "Whether to list the line items."
    assert props["limit"]["description"] == "Most items to list."
    assert registry.get("refund").description == "Refund part of an order."


def test_sync_and_async_registered(registry: ToolRegistry) -> None:
    assert registry.get("lookup_order").is_async is False
    assert registry.get("refund").is_async is True
    assert registry.get("lookup_order").fn is lookup_order
    assert registry.get("lookup_order").idempotent is False


async def test_invoke_sync_applies_defaults(registry: ToolRegistry) -> None:
    result = await registry.get("lookup_order").invoke({"order_id": "A-1"})
    assert result == {"order_id": "A-1", "include_items": False, "limit": 10}
    result = await registry.get("lookup_order").invoke({"order_id": "A-1", "limit": 3})
    assert result["limit"] == 3


async def test_invoke_awaits_async(registry: ToolRegistry) -> None:
    result = await registry.get("refund").invoke(
        {"order_id": "A-1", "amount": 2.5, "reason": "late"}
    )
    assert result == "A-1:2.5:late"


@pytest.mark.parametrize(
    "arguments",
    [
        {"order_id": "A-1", "surprise": True},
        {"order_id": ["A-1"]},
        {"order_id": "A-1", "limit": "ten"},
        {"order_id": "A-1", "include_items": "perhaps"},
        {"limit": 3},
    ],
    ids=["extra", "list_for_str", "str_for_int", "str_for_bool", "missing"],
)
async def test_invoke_validates_arguments(
    registry: ToolRegistry, arguments: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        await registry.get("lookup_order").invoke(arguments)
    with pytest.raises(ValidationError):
        registry.get("lookup_order").parse_arguments(arguments)


async def test_invalid_arguments_never_reach_the_function() -> None:
    calls: list[int] = []
    reg = ToolRegistry()

    def count(n: int) -> int:
        """Count."""
        calls.append(n)
        return n

    reg.register(count)
    with pytest.raises(ValidationError):
        await reg.get("count").invoke({"n": 1, "extra": 2})
    with pytest.raises(ValidationError):
        await reg.get("count").invoke({"n": "one"})
    assert calls == []
    assert await reg.get("count").invoke({"n": 4}) == 4
    assert calls == [4]


async def test_async_invalid_arguments_refused(registry: ToolRegistry) -> None:
    with pytest.raises(ValidationError):
        await registry.get("refund").invoke({"order_id": "A", "amount": 1, "reason": "bored"})


async def test_decorator_form() -> None:
    reg = ToolRegistry()

    @reg.register(idempotent=True)
    async def ping(host: str) -> str:
        """Ping a host."""
        return f"pong {host}"

    @reg.register
    def echo(text: str) -> str:
        """Echo the text."""
        return text

    assert await ping("a") == "pong a"  # the decorator returns the function itself
    tool = reg.get("ping")
    assert tool.idempotent is True
    assert tool.is_async is True
    assert await tool.invoke({"host": "h"}) == "pong h"
    assert reg.get("echo").idempotent is False
    assert await reg.get("echo").invoke({"text": "t"}) == "t"


def test_name_and_description_override() -> None:
    reg = ToolRegistry()
    reg.register(undocumented, name="identity", description="Return x.")
    tool = reg.get("identity")
    assert tool.description == "Return x."
    assert "undocumented" not in reg
    reg.register(lookup_order, name="orders", description="Custom.")
    assert reg.get("orders").description == "Custom."


async def test_register_dynamic() -> None:
    reg = ToolRegistry()
    seen: list[Query] = []

    def search(query: Query) -> list[str]:
        seen.append(query)
        return [query.text] * query.top_k

    reg.register_dynamic("search", Query, search, idempotent=True)
    tool = reg.get("search")
    assert tool.description == "Search the knowledge base."
    assert tool.idempotent is True
    assert tool.parameters_schema["additionalProperties"] is False
    assert await tool.invoke({"text": "t", "top_k": 2}) == ["t", "t"]
    assert seen == [Query(text="t", top_k=2)]
    with pytest.raises(ValidationError):
        await tool.invoke({"text": "t", "unexpected": 1})
    reg.register_dynamic("search2", Query, search, description="Explicit.")
    assert reg.get("search2").description == "Explicit."


async def test_register_dynamic_async() -> None:
    reg = ToolRegistry()

    async def search(query: Query) -> str:
        return query.text.upper()

    reg.register_dynamic("search", Query, search)
    assert reg.get("search").is_async
    assert await reg.get("search").invoke({"text": "x"}) == "X"


def test_register_dynamic_refuses_a_model_allowing_extras() -> None:
    reg = ToolRegistry()
    with pytest.raises(RegistryError, match="extra='forbid'"):
        reg.register_dynamic("loose", LooseQuery, lambda q: q)
    assert "loose" not in reg
    with pytest.raises(RegistryError, match="BaseModel"):
        reg.register_dynamic("not_model", dict, lambda q: q)  # type: ignore[arg-type]


def test_register_dynamic_needs_a_description() -> None:
    """A model without a docstring has no description of its own.

    ``inspect.getdoc`` falls back to the nearest base class docstring, which here is
    pydantic's ``BaseModel`` documentation; that must not become what the model is told.
    """

    class Bare(BaseModel):
        model_config = ConfigDict(extra="forbid")
        x: int

    reg = ToolRegistry()
    with pytest.raises(RegistryError, match="description"):
        reg.register_dynamic("bare", Bare, lambda q: q)
    assert "bare" not in reg


def test_duplicate_names_refused(registry: ToolRegistry) -> None:
    with pytest.raises(RegistryError, match="already registered"):
        registry.register(lookup_order)
    with pytest.raises(RegistryError, match="already registered"):
        registry.register(undocumented, name="refund", description="Other.")
    with pytest.raises(RegistryError, match="already registered"):
        registry.register_dynamic("lookup_order", Query, lambda q: q)
    assert registry.get("lookup_order").fn is lookup_order


@pytest.mark.parametrize("name", sorted(BUILTIN_TOOL_NAMES | {"send_message"}))
def test_builtin_names_refused(name: str) -> None:
    reg = ToolRegistry()
    with pytest.raises(RegistryError, match="built-in"):
        reg.register(lookup_order, name=name)
    with pytest.raises(RegistryError, match="built-in"):
        reg.register_dynamic(name, Query, lambda q: q)
    assert len(reg) == 0


@pytest.mark.parametrize(
    "name",
    # "lookup\n": a Python "$" matches before a final newline; the Spec's name rule does not.
    ["has space", "9starts_with_digit", "x" * 129, "a/b", "-dash", "lookup\n", "x" * 128 + "\n"],
)
def test_invalid_names_refused(name: str) -> None:
    with pytest.raises(RegistryError, match="does not match"):
        ToolRegistry().register(lookup_order, name=name)


def test_missing_type_hint_refused() -> None:
    def partly(a: int, b) -> int:  # type: ignore[no-untyped-def]
        """Partly typed."""
        return a

    with pytest.raises(RegistryError, match="'b' has no type hint"):
        ToolRegistry().register(partly)


def test_var_args_refused() -> None:
    def star(*items: str) -> None:
        """Star."""

    def star_star(**options: str) -> None:
        """Star star."""

    for fn in (star, star_star):
        reg = ToolRegistry()
        with pytest.raises(RegistryError, match=r"\*"):
            reg.register(fn)
        assert len(reg) == 0


def test_positional_only_refused() -> None:
    def pos(a: int, /) -> int:
        """Positional."""
        return a

    with pytest.raises(RegistryError, match="positional-only"):
        ToolRegistry().register(pos)


def test_no_docstring_and_no_description_refused() -> None:
    reg = ToolRegistry()
    with pytest.raises(RegistryError, match="docstring or a description"):
        reg.register(undocumented)
    with pytest.raises(RegistryError, match="docstring or a description"):
        reg.register(undocumented, description="")
    assert "undocumented" not in reg
    reg.register(undocumented, description="Return x.")
    assert "undocumented" in reg


def test_unresolvable_hint_refused() -> None:
    def broken(x: NoSuchType) -> None:  # type: ignore[name-defined]  # noqa: F821
        """Broken."""

    with pytest.raises(RegistryError, match="type hints"):
        ToolRegistry().register(broken)


@pytest.mark.parametrize("argument", ["_private", "model_dump", "model_config", "json"])
async def test_argument_names_register_cleanly_or_are_refused(argument: str) -> None:
    """An argument name is the model's API; pydantic internals must not leak through.

    Either the registry refuses the name with a RegistryError, or it registers without a
    warning and the value reaches the function.
    """
    namespace: dict[str, Any] = {}
    exec(
        f"def tool({argument}: int) -> int:\n    'Return the argument.'\n    return {argument}\n",
        namespace,
    )
    reg = ToolRegistry()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            reg.register(namespace["tool"])
        except RegistryError:
            return
    assert await reg.get("tool").invoke({argument: 7}) == 7


def test_lookup_helpers(registry: ToolRegistry) -> None:
    assert registry.names() == frozenset({"lookup_order", "refund"})
    assert "refund" in registry
    assert "nope" not in registry
    assert len(registry) == 2
    assert [t.name for t in registry] == ["lookup_order", "refund"]
    assert all(isinstance(t, ToolDef) for t in registry)
    assert registry.find(refund) is registry.get("refund")
    assert registry.find(undocumented) is None
    with pytest.raises(RegistryError, match="'nope'"):
        registry.get("nope")


# --- local_seconds: quick tools safe to repeat run as local activities --------------------


def test_local_seconds_is_kept_for_an_idempotent_tool() -> None:
    reg = ToolRegistry()
    reg.register(lookup_order, idempotent=True, read_only=True, local_seconds=2)
    tool = reg.get("lookup_order")
    assert tool.local_seconds == 2.0
    assert isinstance(tool.local_seconds, float)
    reg.register(refund, idempotent=True)
    assert reg.get("refund").local_seconds is None


def test_local_seconds_of_a_dynamic_tool() -> None:
    class Query(BaseModel):
        """Search the catalogue."""

        model_config = ConfigDict(extra="forbid")
        text: str

    reg = ToolRegistry()
    reg.register_dynamic("query", Query, lambda q: q.text, idempotent=True, local_seconds=0.5)
    assert reg.get("query").local_seconds == 0.5
    with pytest.raises(RegistryError, match=r"'other'.*needs idempotent=True"):
        reg.register_dynamic("other", Query, lambda q: q.text, local_seconds=0.5)


def test_local_seconds_needs_a_tool_safe_to_repeat() -> None:
    reg = ToolRegistry()
    # read_only is a policy's annotation, not a promise that a second run is harmless.
    with pytest.raises(RegistryError, match="'refund': local_seconds needs idempotent=True"):
        reg.register(refund, read_only=True, local_seconds=1.0)
    assert "refund" not in reg


# 1e-7 s is no bound at all: a timedelta of it is 0, which the workflow would read as
# "unset" and give the call a normal tool's 10 minutes.
@pytest.mark.parametrize(
    "seconds", [0, 1e-7, 0.0009, -1.0, 10.5, float("nan"), float("inf"), True, "2"]
)
def test_local_seconds_out_of_range_or_not_a_number_is_refused(seconds: Any) -> None:
    reg = ToolRegistry()
    with pytest.raises(RegistryError, match="'lookup_order': local_seconds must be"):
        reg.register(lookup_order, idempotent=True, local_seconds=seconds)
    assert "lookup_order" not in reg
