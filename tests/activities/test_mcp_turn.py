"""The agent turn's MCP discovery as the model call reports it (pure parts)."""

from __future__ import annotations

from psych_runtime.activities.contract import (
    CatalogEntry,
    McpCatalog,
    McpServerStatus,
    McpTurn,
    ToolInfo,
)
from psych_runtime.activities.mcp import Resolved, turn_result
from psych_runtime.specs import McpServer

SERVER = McpServer(name="crm", url="http://127.0.0.1:9/mcp")


def entry(name: str) -> CatalogEntry:
    return CatalogEntry(
        name=name,
        kind="mcp",
        safe_to_repeat=True,
        info=ToolInfo(name=name, kind="mcp", read_only=True),
        server="crm",
        tool=name.removeprefix("crm__"),
    )


def resolved(hash: str, *, cached: bool) -> Resolved:
    catalog = McpCatalog(
        catalog_hash=hash,
        tools_ref=None,
        entries=(entry("crm__get"), entry("crm__list")),
        servers=(McpServerStatus(server="crm", status="ok", tools=2, cached=cached),),
        renamed=(("crm__get", "crm", "get"),),
    )
    return Resolved(catalog, ())


def test_an_unchanged_catalogue_sends_the_hash_and_only_entries_the_workflow_lacks() -> None:
    turn = McpTurn(servers=(SERVER,), known_hash="abc", have=("crm__get",))
    result = turn_result(resolved("abc", cached=True), turn, ["crm__get", "crm__list", "x"])
    assert result.catalog_hash == "abc"
    assert result.servers == () and result.renamed == () and result.fresh == ()
    assert [e.name for e in result.entries] == ["crm__list"]
    # On the wire: the hash and the missing entry; nothing that holds its default.
    assert set(result.model_dump(mode="json")) == {"catalog_hash", "entries"}


def test_a_fresh_answer_of_an_unchanged_catalogue_names_the_server() -> None:
    turn = McpTurn(servers=(SERVER,), known_hash="abc")
    result = turn_result(resolved("abc", cached=False), turn, [])
    assert result.fresh == ("crm",) and result.entries == ()


def test_a_changed_catalogue_sends_statuses_renames_and_every_called_entry() -> None:
    turn = McpTurn(servers=(SERVER,), known_hash="old", have=("crm__get",))
    result = turn_result(resolved("new", cached=False), turn, ["crm__get"])
    assert [s.server for s in result.servers] == ["crm"]
    assert result.renamed == (("crm__get", "crm", "get"),)
    # What the workflow held belonged to the old catalogue: sent again.
    assert [e.name for e in result.entries] == ["crm__get"]


def test_the_turn_input_leaves_defaults_out_and_reads_back_whole() -> None:
    turn = McpTurn(servers=(SERVER,), known_hash="abc")
    wire = turn.model_dump_json()
    assert wire == '{"servers":[{"name":"crm","url":"http://127.0.0.1:9/mcp"}],"known_hash":"abc"}'
    assert McpTurn.model_validate_json(wire) == turn
