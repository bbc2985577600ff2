"""What a Run's history carries of its input and its tool catalogue: the fields at their
defaults left out, read back the same; inputs written in full (every history before)
still read."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model
from pydantic_core import to_json

from psych_runtime.activities.contract import (
    CatalogEntry,
    Latency,
    PolicyDecision,
    ThreadRef,
    ToolCatalog,
    ToolInfo,
    Usage,
)
from psych_runtime.specs import (
    AgentBuilder,
    Scope,
    Version,
    spec_to_data,
    spec_wire_data,
)
from psych_runtime.specs import _wire as wire
from psych_runtime.workflows import (
    AgentRunInput,
    ModelCallFinished,
    Record,
    RunAdmitted,
    RunSettled,
    RunState,
    RunStatus,
    Totals,
    Undelivered,
)

WHEN = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def version() -> Version:
    spec = (
        AgentBuilder("support")
        .instructions("Help.")
        .model("gpt-4o", temperature=0.2)
        .limits(max_turns=4)
        .build()
    )
    return Version.of(spec, WHEN)


def run_input() -> AgentRunInput:
    return AgentRunInput(
        run_id="r1", version=version(), scope=Scope(tenant="acme"), messages=("hi",)
    )


def test_a_run_input_travels_without_its_defaults_and_reads_back_the_same() -> None:
    start = run_input()
    data: dict[str, Any] = json.loads(to_json(start))  # as the data converter writes it
    assert set(data) == {"run_id", "version", "scope", "messages"}
    spec = data["version"]["spec"]
    assert spec["kind"] == "agent"
    assert spec["limits"] == {"max_turns": 4}
    assert spec["model"] == {"model": "gpt-4o", "temperature": 0.2}
    assert "suspension" not in spec
    assert AgentRunInput.model_validate_json(to_json(start)) == start
    # The Python form keeps every field (only the JSON is the wire).
    assert start.model_dump()["depth"] == 0


def test_a_run_input_written_in_full_still_reads() -> None:
    start = run_input()
    full = {
        **start.model_dump(mode="json", exclude={"version"}),
        "depth": 0,
        "carry": None,
        "version": {
            "hash": start.version.hash,
            "spec": spec_to_data(start.version.spec),
            "published_at": "2026-12-05T09:00:00Z",
        },
    }
    assert AgentRunInput.model_validate_json(json.dumps(full)) == start


def test_a_spec_whose_short_form_reads_otherwise_travels_in_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = version().spec
    # A reader that would not get the Spec back from the short form: the full dump is sent.
    monkeypatch.setattr(wire, "_SPEC", TypeAdapter(dict))
    assert spec_wire_data(spec) == spec_to_data(spec)


def test_a_catalogue_travels_without_its_entries_defaults() -> None:
    entry = CatalogEntry(
        name="lookup",
        kind="code",
        safe_to_repeat=True,
        info=ToolInfo(name="lookup", kind="code", read_only=True),
        policy=PolicyDecision(decision="allow"),
    )
    catalog = ToolCatalog(tools_ref=None, entries=(entry,))
    data = json.loads(to_json(catalog))
    assert data["entries"] == [
        {
            "name": "lookup",
            "kind": "code",
            "safe_to_repeat": True,
            "info": {"name": "lookup", "kind": "code", "read_only": True},
            "policy": {"decision": "allow"},
        }
    ]
    assert ToolCatalog.model_validate_json(to_json(catalog)) == catalog
    # An entry on its own dumps whole: the MCP and A2A catalogue hashes are over it, and a
    # Policy is handed its ToolInfo.
    assert entry.model_dump(mode="json")["local_seconds"] is None
    assert entry.info.model_dump()["destructive"] is None


def test_run_settled_leaves_out_undelivered_when_empty() -> None:
    # A client of a build before the field refuses fields it does not know: it still reads
    # the run_settled of every Run that delivered all it took.
    settled = RunSettled(
        seq=4,
        at=WHEN,
        scope=Scope(tenant="acme"),
        status=RunStatus.COMPLETED,
        reason="answered",
        totals=Totals(),
    )
    assert "undelivered" not in json.loads(to_json(settled))
    assert RunSettled.model_validate_json(to_json(settled)) == settled
    listed = settled.model_copy(
        update={"undelivered": (Undelivered(mode="follow_up", message="and shipping?"),)}
    )
    data = json.loads(to_json(listed))
    assert data["undelivered"] == [{"mode": "follow_up", "message": "and shipping?"}]
    assert TypeAdapter(Record).validate_json(to_json(listed)) == listed


def test_run_admitted_leaves_out_thread_bound_without_a_thread() -> None:
    # A client of a build before the field (7e8d4e5) refuses fields it does not know: it
    # still reads the run_admitted of every Run that continues no thread.
    admitted = RunAdmitted(
        seq=1,
        at=WHEN,
        scope=Scope(tenant="acme"),
        version_hash="sha256:" + "0" * 64,
        agent="support",
        messages=("hi",),
        system_prompt="Help.",
    )
    assert "thread_bound" not in json.loads(to_json(admitted))
    assert RunAdmitted.model_validate_json(to_json(admitted)) == admitted
    thread = ThreadRef(run="psych-acme-earlier", head="sha256:" + "1" * 64)
    bounded = admitted.model_copy(update={"thread": thread, "thread_bound": 0})
    assert json.loads(to_json(bounded))["thread_bound"] == 0
    assert TypeAdapter(Record).validate_json(to_json(bounded)) == bounded


def test_model_call_finished_leaves_out_refs_it_does_not_have() -> None:
    # The refs of what a call was sent are new (12-06): a model_call_finished without them
    # (recorded by a worker of an earlier build) is written as before, so a client of that
    # build still reads it; with them, they are written and read back.
    finished = ModelCallFinished(
        seq=3,
        at=WHEN,
        scope=Scope(tenant="acme"),
        turn=1,
        model="fake-model",
        text="hi",
        usage=Usage(input_tokens=3, output_tokens=1),
        latency=Latency(queue_wait_ms=1.0, duration_ms=2.0),
    )
    data = json.loads(to_json(finished))
    assert "context_ref" not in data and "system_ref" not in data
    assert TypeAdapter(Record).validate_json(to_json(finished)) == finished
    head, system = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    with_refs = finished.model_copy(update={"context_ref": head, "system_ref": system})
    data = json.loads(to_json(with_refs))
    assert (data["context_ref"], data["system_ref"]) == (head, system)
    assert TypeAdapter(Record).validate_json(to_json(with_refs)) == with_refs


def test_run_state_leaves_out_withdrawn_tools_when_none_are() -> None:
    # A client of a build before the field refuses fields it does not know (the state's
    # fields of that build, ``extra="forbid"``): it still reads the state of every Run whose
    # tenant's permits refuse none of its tools. A client of this build reads a state
    # written before the field (no key) as withdrawing none.
    before = {name: (field.annotation, field) for name, field in RunState.model_fields.items()}
    del before["withdrawn_tools"]
    old_client: type[BaseModel] = create_model(  # type: ignore[call-overload]  # fields at run time
        "RunStateBefore", __config__=ConfigDict(frozen=True, extra="forbid"), **before
    )
    state = RunState(
        run_id="r1",
        tenant="acme",
        agent="support",
        version_hash="sha256:" + "0" * 64,
        status=RunStatus.RUNNING,
        turn=2,
        last_seq=7,
        totals=Totals(),
    )
    assert "withdrawn_tools" not in json.loads(to_json(state))
    assert old_client.model_validate_json(to_json(state)).model_dump()["turn"] == 2
    assert RunState.model_validate_json(to_json(state)) == state
    withdrawn = state.model_copy(update={"withdrawn_tools": ("send_mail",)})
    assert json.loads(to_json(withdrawn))["withdrawn_tools"] == ["send_mail"]
    assert RunState.model_validate_json(to_json(withdrawn)) == withdrawn
    with pytest.raises(ValidationError, match="withdrawn_tools"):  # the documented cost
        old_client.model_validate_json(to_json(withdrawn))
