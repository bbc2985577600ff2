"""The slim hot-path payloads (``psych.model.call``, ``psych.tool.run_code``): their
wire forms and the conversions to and from the full payloads, each exact."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from psych_runtime.activities import EncryptedBlobStore, LocalBlobStore
from psych_runtime.activities.blobs import BlobStore, Conversations
from psych_runtime.activities.contract import (
    ChatMessage,
    CodeToolCall,
    HttpToolCall,
    Latency,
    ModelCallInput,
    ModelCallResult,
    SlimCodeToolCall,
    SlimHttpToolCall,
    SlimModelCallInput,
    SlimModelCallResult,
    SlimToolOutcome,
    ToolCallRequest,
    ToolOutcome,
    Usage,
    _slim,
    _slim_payloads,
    blob_ref,
    expected_refs,
    from_wire,
    full_code_call,
    full_http_call,
    full_model_input,
    full_model_result,
    full_outcome,
    ids_from,
    slim_code_call,
    slim_http_call,
    slim_model_input,
    slim_model_result,
    slim_outcome,
    to_wire,
)
from psych_runtime.activities.tools import store_outcome
from psych_runtime.specs import HttpTool, ModelRef, Scope
from psych_runtime.workers import Key, Keyring, PsychCodec
from psych_runtime.workflows import workflow_id_for

SCOPE = Scope(tenant="acme", principal="ops")
RUN_ID = "0123456789abcdef0123456789abcdef"
WORKFLOW_ID = workflow_id_for("acme", RUN_ID)


def in_run() -> ActivityEnvironment:
    """An activity context of the Run (a sealing store seals for its tenant)."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=WORKFLOW_ID)
    return env


def sealed_store(root: Path) -> BlobStore:
    """A store whose refs are of sealed bytes (the worker's with a codec)."""
    codec = PsychCodec(Keyring([Key("acme-1", "acme", os.urandom(32))], {"acme": "acme-1"}))
    return EncryptedBlobStore(LocalBlobStore(root), codec.blob_cipher())


def ref(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def wire(payload: Any) -> dict[str, Any]:
    """The payload as the pydantic data converter writes it."""
    decoded: dict[str, Any] = json.loads(payload.model_dump_json())
    return decoded


# --- model call input ---------------------------------------------------------------------


def model_call(**changes: Any) -> ModelCallInput:
    fields: dict[str, Any] = {
        "run_id": RUN_ID,
        "turn": 2,
        "model": "gpt",
        "params": ModelRef(model="gpt"),
        "system_ref": ref("system"),
        "context_ref": ref("head"),
        "new_messages": (ref("tool message"), ChatMessage(role="user", content="more")),
        "tools_ref": ref("tools"),
        "scope": SCOPE,
    }
    return ModelCallInput(**fields | changes)


def test_the_model_input_leaves_out_what_the_activity_derives() -> None:
    call = model_call()
    slim = slim_model_input(call, WORKFLOW_ID)
    sent = wire(slim)
    assert sent == {
        "turn": 2,
        "model": "gpt",
        "system_ref": to_wire(ref("system")),
        "context_ref": to_wire(ref("head")),
        "new_messages": [
            to_wire(ref("tool message")),
            {"role": "user", "content": "more", "tool_calls": [], "tool_call_id": None},
        ],
        "tools_ref": to_wire(ref("tools")),
        "scope": {"principal": "ops"},
    }
    decoded = SlimModelCallInput.model_validate_json(slim.model_dump_json())
    assert decoded == slim
    assert full_model_input(decoded, WORKFLOW_ID) == call
    # 71-character refs and the run id no longer travel: well under the full form.
    assert len(slim.model_dump_json()) < len(call.model_dump_json()) - 150


def test_the_model_input_sends_what_the_workflow_id_does_not_name() -> None:
    call = model_call(params=ModelRef(model="gpt", temperature=0.2))
    slim = slim_model_input(call, "someone-elses-id")
    sent = wire(slim)
    assert sent["run_id"] == RUN_ID and sent["scope"] == {"tenant": "acme", "principal": "ops"}
    assert sent["params"] == {"model": "gpt", "temperature": 0.2}
    assert full_model_input(slim, "someone-elses-id") == call
    # A fallback attempt: params name the primary, so they travel.
    fallback = model_call(model="fallback")
    assert wire(slim_model_input(fallback, WORKFLOW_ID))["params"] == {"model": "gpt"}


def test_a_slim_call_without_run_id_outside_a_run_is_refused_clearly() -> None:
    slim = slim_model_input(model_call(), WORKFLOW_ID)
    with pytest.raises(ValueError, match="the workflow must send them"):
        full_model_input(slim, None)


def test_the_tenant_and_run_id_read_back_off_the_workflow_id() -> None:
    assert ids_from(workflow_id_for("acme", RUN_ID)) == ("acme", RUN_ID)
    assert ids_from(workflow_id_for("acme", "run-with-dashes")) == ("acme", "run-with-dashes")
    assert ids_from("psych-acme") is None
    assert ids_from("other-acme-1") is None


# --- model call result --------------------------------------------------------------------


async def stored_result(
    blobs: BlobStore, call: ModelCallInput, text: str, calls: tuple[ToolCallRequest, ...]
) -> ModelCallResult:
    """A result whose refs are what the model activity stores (``Conversations``)."""
    conversations = Conversations(blobs)
    refs = []
    for item in call.new_messages:
        refs.append(item if isinstance(item, str) else await conversations.put_message(item))
    assistant = ChatMessage(role="assistant", content=text, tool_calls=calls)
    refs.append(await conversations.put_message(assistant))
    head = await conversations.append(call.context_ref, refs)
    assert head is not None
    system_ref = call.system_ref
    if call.system_prompt is not None:
        system_ref = await blobs.put(call.system_prompt.encode())
    return ModelCallResult(
        model=call.model,
        system_ref=system_ref,
        context_ref=head,
        text=text,
        tool_calls=calls,
        finish_reason="tool_calls" if calls else "stop",
        usage=Usage(input_tokens=1041, output_tokens=5),
        latency=Latency(queue_wait_ms=0.0371, duration_ms=5.8912, first_token_ms=4.14),
    )


CALLS = (ToolCallRequest(id="call_2", name="lookup", arguments='{"turn": 2}'),)


@pytest.mark.parametrize("inline_prompt", [False, True])
async def test_the_model_result_leaves_out_the_refs_the_workflow_derives(
    tmp_path: Path, inline_prompt: bool
) -> None:
    changes = {"system_prompt": "Be brief.", "system_ref": None} if inline_prompt else {}
    call = model_call(**changes)
    result = await in_run().run(stored_result, LocalBlobStore(tmp_path), call, "", CALLS)
    assert expected_refs(call, "", CALLS) == (result.context_ref, result.system_ref)
    slim = slim_model_result(result, call)
    assert wire(slim) == {
        "tool_calls": [["call_2", "lookup", '{"turn": 2}']],
        "usage": [1041, 5],
        "latency": [0, 5.9, 4.1],
    }
    back = full_model_result(SlimModelCallResult.model_validate_json(slim.model_dump_json()), call)
    rounded = Latency(queue_wait_ms=0.0, duration_ms=5.9, first_token_ms=4.1)
    assert back == result.model_copy(update={"latency": rounded})


async def test_refs_a_sealed_store_made_travel_whole(tmp_path: Path) -> None:
    # Sealed blobs are keyed by their ciphertext: nothing the workflow could derive.
    call = model_call(system_prompt="Be brief.", system_ref=None)
    result = await in_run().run(stored_result, sealed_store(tmp_path), call, "Hello.", ())
    slim = slim_model_result(result, call)
    sent = wire(slim)
    assert from_wire(sent["context_ref"]) == result.context_ref
    assert from_wire(sent["system_ref"]) == result.system_ref
    assert full_model_result(slim, call).context_ref == result.context_ref


def test_unusual_finish_reasons_and_older_object_forms_still_travel() -> None:
    latency = Latency(queue_wait_ms=1, duration_ms=2)
    for reason in ("length", None):
        slim = SlimModelCallResult(finish_reason=reason, latency=latency, text="cut")
        assert wire(slim)["finish_reason"] == reason
        assert SlimModelCallResult.model_validate_json(slim.model_dump_json()) == slim
    assert "finish_reason" not in wire(SlimModelCallResult(finish_reason="stop", latency=latency))
    objects = SlimModelCallResult.model_validate(
        {
            "context_ref": ref("head"),
            "tool_calls": [{"id": "c", "name": "n", "arguments": "{}"}],
            "usage": {"input_tokens": 3},
            "latency": {"queue_wait_ms": 1, "duration_ms": 2},
        }
    )
    assert objects.finish_reason == "tool_calls" and objects.usage.input_tokens == 3
    assert objects.tool_calls[0].id == "c" and objects.latency == latency


# --- code tool call -----------------------------------------------------------------------


def test_the_code_tool_call_round_trips_without_run_id_and_tenant() -> None:
    call = CodeToolCall(
        run_id=RUN_ID,
        call_id="call_1",
        tool="lookup",
        arguments={"turn": 1},
        large_result_bytes=32768,
        scope=SCOPE,
    )
    slim = slim_code_call(call, WORKFLOW_ID)
    assert wire(slim) == {
        "call_id": "call_1",
        "tool": "lookup",
        "arguments": {"turn": 1},
        "scope": {"principal": "ops"},
    }
    decoded = SlimCodeToolCall.model_validate_json(slim.model_dump_json())
    assert full_code_call(decoded, WORKFLOW_ID) == call
    elsewhere = slim_code_call(call, "psych-other-tenant")
    assert wire(elsewhere)["run_id"] == RUN_ID
    assert full_code_call(elsewhere, "psych-other-tenant") == call


def test_the_http_tool_call_round_trips_with_its_tool_at_its_set_fields() -> None:
    tool = HttpTool(name="refund", description="Refund.", url="http://x/{id}", method="POST")
    call = HttpToolCall(
        run_id=RUN_ID,
        call_id="call_1",
        tool=tool,
        arguments={"id": "42"},
        large_result_bytes=8192,
        scope=SCOPE,
    )
    slim = slim_http_call(call, WORKFLOW_ID)
    assert wire(slim) == {
        "call_id": "call_1",
        "tool": {"name": "refund", "description": "Refund.", "url": "http://x/{id}"},
        "arguments": {"id": "42"},
        "large_result_bytes": 8192,
        "scope": {"principal": "ops"},
    }
    decoded = SlimHttpToolCall.model_validate_json(slim.model_dump_json())
    assert full_http_call(decoded, WORKFLOW_ID) == call


async def outcome_of(blobs: BlobStore, text: str, limit: int) -> ToolOutcome:
    """What a tool activity stores and returns for ``text`` (inside an activity)."""
    return await in_run().run(
        store_outcome, blobs, "call_7", "ok", text, started=time.monotonic(), limit=limit
    )


async def test_a_result_shown_whole_travels_as_its_content_and_latency(tmp_path: Path) -> None:
    outcome = await outcome_of(LocalBlobStore(tmp_path), "x" * 4096, 8192)
    slim = slim_outcome(outcome)
    sent = wire(slim)
    assert set(sent) == {"content", "latency"}
    back = full_outcome(SlimToolOutcome.model_validate_json(slim.model_dump_json()), "call_7")
    assert back == outcome.model_copy(update={"latency": back.latency})
    assert back.latency.duration_ms == round(outcome.latency.duration_ms, 1)


@pytest.mark.parametrize("sealed", [False, True])
async def test_a_truncated_or_sealed_result_sends_its_size_and_refs(
    tmp_path: Path, sealed: bool
) -> None:
    blobs = sealed_store(tmp_path) if sealed else LocalBlobStore(tmp_path)
    outcome = await outcome_of(blobs, "é" * 3000, 100 if not sealed else 8192)
    sent = wire(slim_outcome(outcome))
    assert {"result_ref", "message_ref"} <= set(sent)
    if not sealed:
        assert sent["truncated"] is True and sent["size"] == 6000
    assert full_outcome(slim_outcome(outcome), "call_7") == outcome


def files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


@pytest.mark.parametrize("sealed", [False, True])
async def test_a_result_shown_whole_has_the_ref_storing_it_would_give_without_a_file(
    tmp_path: Path, sealed: bool
) -> None:
    # Only the tool message is written; the result's ref (what the repeat guard compares)
    # is still the one put gives, sealed or not.
    blobs = sealed_store(tmp_path) if sealed else LocalBlobStore(tmp_path)
    outcome = await outcome_of(blobs, "delivered on Tuesday", 8192)
    assert len(files(tmp_path)) == 1
    put = await in_run().run(blobs.put, b"delivered on Tuesday")
    assert outcome.result_ref == put


async def test_the_frozen_derivation_is_what_the_stores_write_today(tmp_path: Path) -> None:
    # The workflow re-derives refs on every replay with _slim's frozen encoding; it must
    # equal what Conversations stores, or every call sends its refs again. A field added
    # to ChatMessage or ToolCallRequest fails here: keep the frozen functions as they are
    # (replayed Runs derived their heads with them) and accept that new calls send refs,
    # or give the new encoding a new payload name. ``provider_fields`` is left out of the
    # stored form when absent, so a message without it derives as before; one with it (a
    # Gemini answer) stores something else and its call sends the head.
    assert set(ChatMessage.model_fields) == {
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "provider_fields",
    }
    assert set(ToolCallRequest.model_fields) == {"id", "name", "arguments", "provider_fields"}
    conversations = Conversations(LocalBlobStore(tmp_path))
    calls = (ToolCallRequest(id="c1", name="lookup", arguments='{"id": "ä"}'),)
    for message in (
        ChatMessage(role="user", content="Où est ma commande ?"),
        ChatMessage(role="assistant", content="", tool_calls=calls),
        ChatMessage(role="tool", content="delivered", tool_call_id="c1"),
    ):
        stored = await conversations.put_message(message)
        assert _slim._inline_ref(message) == stored
    echoed = ChatMessage(
        role="assistant",
        tool_calls=(calls[0].model_copy(update={"provider_fields": {"extra_content": {}}}),),
    )
    assert _slim._inline_ref(echoed) != await conversations.put_message(echoed)
    parent, messages = "sha256:" + "0" * 64, ["sha256:" + "1" * 64]
    head = await conversations.append(parent, messages)
    assert blob_ref(_slim._frozen_dumps({"parent": parent, "messages": messages})) == head


@pytest.mark.parametrize(
    ("full", "slim", "derived"),
    [
        (ModelCallInput, SlimModelCallInput, set()),
        (CodeToolCall, SlimCodeToolCall, set()),
        (HttpToolCall, SlimHttpToolCall, set()),
        (ModelCallResult, SlimModelCallResult, {"model"}),  # the workflow knows what it called
        # The workflow knows which call it made; only an MCP call (whose wire form is the
        # full ToolOutcome) ends ``input_required``, and only an A2A call (full too) stores
        # blobs beside its result (``handles``), never a code or HTTP tool's slim one.
        (ToolOutcome, SlimToolOutcome, {"call_id", "input_required", "handles"}),
    ],
)
def test_every_field_has_a_wire_field_or_is_derived(
    full: type[Any], slim: type[Any], derived: set[str]
) -> None:
    # The conversions carry the fields a pair shares by name (``_slim._carried``): one added
    # to a full payload without its wire field would arrive as its default on the other side.
    assert set(full.model_fields) - set(slim.model_fields) == derived
    assert set(slim.model_fields) <= set(full.model_fields)


def test_the_usage_and_latency_wire_lists_name_every_field_in_order() -> None:
    # Usage and Latency travel as lists by position in the slim results: a field added to
    # either class must be appended to its wire tuple (and sent), or it would arrive as 0.
    assert tuple(Usage.model_fields) == _slim_payloads._USAGE_FIELDS
    assert tuple(Latency.model_fields) == _slim_payloads._LATENCY_FIELDS


def test_a_sealed_result_that_sends_its_head_is_not_hashed_by_the_workflow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A sealed store sends the head; the workflow derives only the system ref it knows.
    call = model_call()
    head = "sha256:" + "5" * 64
    slim = SlimModelCallResult(
        context_ref=head, latency=Latency(queue_wait_ms=0, duration_ms=1), finish_reason="stop"
    )

    def no_hashing(*args: object) -> str:
        raise AssertionError("the head was derived though the activity sent it")

    monkeypatch.setattr(_slim, "_expected_head", no_hashing)
    back = full_model_result(slim, call)
    assert (back.context_ref, back.system_ref) == (head, call.system_ref)
