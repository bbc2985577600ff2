"""The one redaction function every activity passes upstream-derived text through."""

from __future__ import annotations

import base64
import json
import sys
from collections import OrderedDict, defaultdict
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
from psych_runtime.activities.secrets._details import _TOO_DEEP, MAX_DETAIL_DEPTH
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
    blob = b"alpha"
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
    assert second[1] is blob  # no secret in it: the very object
    assert third is kept  # nothing to redact: the very object


def test_scrub_ends_on_a_cyclic_detail_and_rebuilds_the_cycle() -> None:
    # Until 12-07 the copy referred back to the original, secret and all.
    looped: list[Any] = ["alpha-1"]
    looped.append(looped)
    looped_tuple: list[Any] = []
    looped_tuple.append(("alpha-1", looped_tuple))
    err = ApplicationError("failed", looped, looped_tuple)
    Redactor({"a": "alpha-1"}).scrub(err)
    walked, walked_tuple = err.details
    assert walked[0] == "[REDACTED:a]" and walked[1] is walked
    assert walked_tuple[0][0] == "[REDACTED:a]" and walked_tuple[0][1] is walked_tuple
    # A tuple referred back to from inside itself cannot be: marked instead.
    inner: list[Any] = ["alpha-1"]
    cyclic_tuple = (inner,)
    inner.append(cyclic_tuple)
    err = ApplicationError("failed", cyclic_tuple)
    Redactor({"a": "alpha-1"}).scrub(err)
    assert err.details[0] == (["[REDACTED:a]", "[TRUNCATED:cycle]"],)
    assert looped[0] == inner[0] == "alpha-1"  # the activity's own values are not rewritten


def test_scrub_truncates_details_nested_too_deep_without_recursing() -> None:
    # Until 12-07 the walk recursed: details nested ~1,000 deep raised RecursionError out
    # of scrub (a model call's failure then went out retryable, not MODEL_CALL_FAILED), and
    # nested half as deep the failure converter could not encode them either.
    def nested(levels: int, bottom: str) -> Any:
        value: Any = [bottom]
        for _ in range(levels):
            value = {"down": [value]}
        return value

    def bottom(value: Any) -> Any:
        levels = 1
        while isinstance(value, dict):
            value, levels = value["down"][0], levels + 2
        return value, levels

    deep = nested(5 * sys.getrecursionlimit(), "at the bottom alpha-1")
    clean = nested(300, "nothing here")
    shallow = nested(MAX_DETAIL_DEPTH // 2 - 1, "at the bottom alpha-1")
    err = ApplicationError("failed", deep, clean, shallow)

    Redactor({"a": "alpha-1"}).scrub(err)

    walked, kept, walked_shallow = err.details
    assert bottom(walked) == bottom(kept) == (_TOO_DEEP, MAX_DETAIL_DEPTH + 1)
    assert bottom(walked_shallow) == (["at the bottom [REDACTED:a]"], MAX_DETAIL_DEPTH - 1)
    sent = Failure()
    DefaultFailureConverter().to_failure(err, DataConverter.default.payload_converter, sent)
    assert b"alpha-1" not in sent.SerializeToString()


class _Counting(Redactor):
    def __init__(self, secrets: dict[str, str]) -> None:
        super().__init__(secrets)
        self.scanned: list[str] = []

    def __call__(self, text: str) -> str:
        self.scanned.append(text)
        return super().__call__(text)


def test_scrub_scans_each_distinct_text_once() -> None:
    # Until 12-07 every key of every dict was scanned again, every container walked
    # through a call per item: 100k dicts took over a second on the event loop.
    rows = [{"kind": "row", "status": "ok", "n": n} for n in range(1000)]
    quoted = {"kind": "row", "status": "alpha-1", "n": 1000}
    redact = _Counting({"a": "alpha-1"})
    redact.scrub(ApplicationError("failed", [*rows, quoted], rows, type="Boom"))
    # The message (str(err) and .message) and each distinct text in the details, once.
    texts = ["Boom: failed", "alpha-1", "failed", "kind", "n", "ok", "row", "status"]
    assert sorted(redact.scanned) == texts


class _Headers(dict[str, Any]):
    source = "upstream"


class _Lines(list[Any]):
    pass


class _Uncopyable(dict[str, Any]):
    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("not copied")


def test_scrub_keeps_dict_and_list_subclasses() -> None:
    # Until 12-07 a dict or list subclass that held a secret came back a plain dict, list.
    headers = _Headers({"auth": "Bearer alpha-1", "n": 1})
    headers.source = "echo"
    counts: defaultdict[str, list[str]] = defaultdict(list, {"seen": ["alpha-1"]})
    ordered = OrderedDict([("z", "alpha-1"), ("a", "fine")])
    err = ApplicationError("failed", headers, counts, ordered, _Lines(["alpha-1"]))
    Redactor({"a": "alpha-1"}).scrub(err)
    walked, walked_counts, walked_ordered, lines = err.details
    assert type(walked) is _Headers and walked == {"auth": "Bearer [REDACTED:a]", "n": 1}
    assert walked.source == "echo" and walked is not headers
    assert type(walked_counts) is defaultdict and walked_counts.default_factory is list
    assert walked_counts == {"seen": ["[REDACTED:a]"]}
    assert type(walked_ordered) is OrderedDict
    assert list(walked_ordered.items()) == [("z", "[REDACTED:a]"), ("a", "fine")]
    assert type(lines) is _Lines and lines == ["[REDACTED:a]"]
    assert headers["auth"] == "Bearer alpha-1"  # the activity's own value is not rewritten
    # One copy.copy fails for comes back a plain dict (the docstring says so).
    err = ApplicationError("failed", _Uncopyable(auth="alpha-1"))
    Redactor({"a": "alpha-1"}).scrub(err)
    assert type(err.details[0]) is dict and err.details[0] == {"auth": "[REDACTED:a]"}


def test_scrub_redacts_bytes_details() -> None:
    # Until 12-07 bytes were left as they were, a secret in a body quoted as bytes too.
    body = b"\xff\xfe said alpha-1 \x80"  # not UTF-8: the rest comes back byte for byte
    fine = b"fine"
    err = ApplicationError("failed", b"key alpha-1", {"body": body}, [fine])
    Redactor({"a": "alpha-1"}).scrub(err)
    assert tuple(err.details) == (
        b"key [REDACTED:a]",
        {"body": b"\xff\xfe said [REDACTED:a] \x80"},
        [fine],
    )
    assert err.details[2][0] is fine


class _Word(str):
    """A str subclass defining ``__eq__`` (so unhashable) whose own methods lie."""

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        return True

    def __contains__(self, part: object) -> bool:
        return False

    def __str__(self) -> str:
        return "nothing here"


class _Blob(bytes):
    """A bytes subclass defining ``__eq__`` (so unhashable) whose own decode lies."""

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        return True

    def decode(self, *args: Any, **kwargs: Any) -> str:
        return "nothing here"


def test_scrub_redacts_unhashable_str_and_bytes_subclasses_by_their_contents() -> None:
    # Until 12-07 (the walk's cache of texts) such a detail raised TypeError ("unhashable
    # type") out of scrub; a subclass's own __eq__/__contains__/decode must not hide one.
    fine = _Word("fine")
    err = ApplicationError("failed", _Word("key alpha-1"), [_Blob(b"key alpha-1")], {"a": fine})
    Redactor({"a": "alpha-1"}).scrub(err)
    word, (blob,), kept = err.details
    assert type(word) is str and word == "key [REDACTED:a]"
    assert type(blob) is bytes and blob == b"key [REDACTED:a]"
    assert kept["a"] is fine  # no secret: the very object


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
