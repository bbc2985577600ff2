"""The one redaction function every activity passes upstream-derived text through."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from typing import Any, NamedTuple
from urllib.parse import quote

import pytest
from pydantic import BaseModel, ValidationError
from temporalio.api.failure.v1 import Failure
from temporalio.converter import DataConverter, DefaultFailureConverter
from temporalio.exceptions import (
    ApplicationError,
    ApplicationErrorCategory,
    CancelledError,
    TimeoutError,
    TimeoutType,
)

from psych_runtime.activities.blobs import LocalStoreFailed
from psych_runtime.activities.contract import ErrorType
from psych_runtime.activities.secrets import Redactor
from psych_runtime.activities.secrets._redact import RedactedError
from psych_runtime.specs import StoreUnavailable

SECRET = 'tok/en+"with"<odd>&chars='


@pytest.mark.parametrize(
    "form",
    [
        SECRET,
        f"Bearer {SECRET}",
        quote(SECRET, safe=""),
        json.dumps(SECRET)[1:-1],
        json.dumps(SECRET)[1:-1].replace("/", "\\/"),  # PHP's json_encode
        'tok/en+\\"with\\"\\u003codd\\u003e\\u0026chars=',  # Go's encoding/json
        "tok/en+&quot;with&quot;&lt;odd&gt;&amp;chars=",
        base64.b64encode(SECRET.encode()).decode(),
        base64.urlsafe_b64encode(SECRET.encode()).decode().rstrip("="),
    ],
)
def test_each_echoed_form_is_replaced_by_the_name(form: str) -> None:
    redact = Redactor({"api": SECRET})
    assert redact(f"you sent <{form}>") == (
        f"you sent <{'Bearer ' if form.startswith('Bearer') else ''}[REDACTED:api]>"
    )


def test_several_secrets_and_no_secret() -> None:
    redact = Redactor({"a": "alpha-1", "b": "beta-2", "empty": ""})
    assert redact("alpha-1 beta-2 gamma") == "[REDACTED:a] [REDACTED:b] gamma"
    assert Redactor()("alpha-1") == "alpha-1"
    assert "alpha" not in repr(redact) and "'a'" in repr(redact)


def test_scrub_rewrites_the_cause_chain_and_replaces_what_cannot_be_rewritten() -> None:
    class Body(BaseModel):
        n: int

    try:
        Body.model_validate_json('{"n": "alpha-1"}')
    except ValidationError as err:
        validation = err
    try:
        raise ValueError("parse failed near alpha-1") from validation
    except ValueError as err:
        outer = err

    clean = Redactor({"a": "alpha-1"}).scrub(outer)

    assert clean is outer and str(outer) == "parse failed near [REDACTED:a]"
    assert isinstance(outer.__cause__, RedactedError)  # ValidationError computes its text
    assert "alpha-1" not in str(outer.__cause__)
    assert "[REDACTED:a]" in str(outer.__cause__)


def test_scrub_redacts_an_application_errors_message_and_keeps_its_fields() -> None:
    try:
        raise ValueError("read alpha-1") from None
    except ValueError as raised:
        cause = raised
    structured = {"n": "alpha-1"}
    err = ApplicationError(
        "upstream said alpha-1",
        "ref alpha-1",
        structured,
        type="Boom",
        non_retryable=True,
        next_retry_delay=timedelta(seconds=3),
        category=ApplicationErrorCategory.BENIGN,
    )
    err.__cause__ = cause

    clean = Redactor({"a": "alpha-1"}).scrub(err)

    assert clean is err and err.__cause__ is cause
    assert err.message == "upstream said [REDACTED:a]"
    assert str(err) == "Boom: upstream said [REDACTED:a]"
    assert str(cause) == "read [REDACTED:a]"
    # String details are redacted, and the strings inside structured ones (a copy).
    assert tuple(err.details) == ("ref [REDACTED:a]", {"n": "[REDACTED:a]"})
    assert structured == {"n": "alpha-1"}  # the activity's own value is not rewritten
    assert (err.type, err.non_retryable) == ("Boom", True)
    assert err.next_retry_delay == timedelta(seconds=3)
    assert err.category is ApplicationErrorCategory.BENIGN


def test_scrub_keeps_a_local_store_failed_a_store_unavailable() -> None:
    err = LocalStoreFailed(
        "blob alpha-1: the local blob store failed (EIO: I/O error)",
        ref="alpha-1",
        errno_name="EIO",
        lasting=False,
        detail="under /srv: [Errno 5]",
    )

    clean = Redactor({"a": "alpha-1"}).scrub(err)

    assert clean is err and isinstance(err, StoreUnavailable)
    text = "blob [REDACTED:a]: the local blob store failed (EIO: I/O error)"
    assert err.message == text and str(err) == text
    assert (err.type, err.non_retryable) == (ErrorType.LOCAL_STORE_FAILED, False)
    assert (err.errno_name, err.lasting, err.detail) == ("EIO", False, "under /srv: [Errno 5]")


def test_what_temporal_records_of_a_scrubbed_failure_holds_no_secret() -> None:
    converter = DefaultFailureConverter()
    payloads = DataConverter.default.payload_converter
    raised = Failure(message="upstream said alpha-1", stack_trace="at alpha-1")
    raised.application_failure_info.type = "Upstream"
    decoded = converter.from_failure(raised, payloads)  # keeps the proto, sent as it is
    err = ApplicationError("call failed: alpha-1", "alpha-1", type="Boom")
    err.__cause__ = decoded

    Redactor({"a": "alpha-1"}).scrub(err)

    sent = Failure()
    converter.to_failure(err, payloads, sent)
    assert b"alpha-1" not in sent.SerializeToString()
    assert sent.message == "call failed: [REDACTED:a]"
    assert sent.cause.message == "upstream said [REDACTED:a]"
    assert sent.cause.application_failure_info.type == "Upstream"


class Pair(NamedTuple):
    name: str
    times: int


def test_scrub_walks_structured_details_nested() -> None:
    # Until 12-07 only string details were redacted: a dict or list detail carrying a
    # secret (a response quoted into a structured failure) went to history as it was.
    kept = {"fine": [1, 2.5, None, True]}
    blob = b"alpha-1"
    err = ApplicationError(
        "failed",
        {"body": {"lines": ["ok", ("said alpha-1", 3)]}, "alpha-1": "as a key"},
        [Pair("alpha-1", 2), blob],
        kept,
        type="Boom",
    )
    clean = Redactor({"a": "alpha-1"}).scrub(err)
    assert clean is err and err.message == "failed"
    first, second, third = err.details
    assert first == {
        "body": {"lines": ["ok", ("said [REDACTED:a]", 3)]},
        "[REDACTED:a]": "as a key",
    }
    assert second == [Pair("[REDACTED:a]", 2), blob]
    assert isinstance(second[0], Pair)  # a named tuple stays one
    assert second[1] is blob  # not a string: left as it is
    assert third is kept  # nothing to redact: the very object


def test_scrub_leaves_a_cyclic_detail_to_end() -> None:
    looped: list[Any] = ["alpha-1"]
    looped.append(looped)
    err = ApplicationError("failed", looped)
    Redactor({"a": "alpha-1"}).scrub(err)
    walked = err.details[0]
    assert walked[0] == "[REDACTED:a]" and walked[1] is looped


def test_scrub_walks_cancelled_and_timeout_details() -> None:
    cancelled = CancelledError("stopped", {"why": "alpha-1"})
    timed_out = TimeoutError(
        "timed out", type=TimeoutType.HEARTBEAT, last_heartbeat_details=[["at alpha-1"]]
    )
    redact = Redactor({"a": "alpha-1"})
    redact.scrub(cancelled)
    redact.scrub(timed_out)
    assert tuple(cancelled.details) == ({"why": "[REDACTED:a]"},)
    assert tuple(timed_out.last_heartbeat_details) == (["at [REDACTED:a]"],)


def test_a_decoded_failures_structured_details_are_not_sent_as_decoded() -> None:
    # A failure decoded from Temporal whose only secret is inside a dict detail: its proto
    # (which the converter would send as it is) is dropped, and what is sent is redacted.
    converter = DefaultFailureConverter()
    payloads = DataConverter.default.payload_converter
    raised = Failure(message="upstream failed", stack_trace="remote frame")
    raised.application_failure_info.type = "Upstream"
    raised.application_failure_info.details.payloads.extend(
        payloads.to_payloads([{"quoted": ["alpha-1"]}])
    )
    decoded = converter.from_failure(raised, payloads)
    assert isinstance(decoded, ApplicationError) and decoded.failure is not None

    Redactor({"a": "alpha-1"}).scrub(decoded)

    sent = Failure()
    converter.to_failure(decoded, payloads, sent)
    assert b"alpha-1" not in sent.SerializeToString()
    details = payloads.from_payloads(sent.application_failure_info.details.payloads)
    assert details == [{"quoted": ["[REDACTED:a]"]}]
    # The remote stack trace goes with the proto (Redactor.scrub says why).
    assert "remote frame" not in sent.stack_trace
