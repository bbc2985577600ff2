"""Every ``PsychError`` pickles and unpickles (and copies) to an equal exception: class,
``args``, message and attributes. By default an exception is rebuilt by calling its class
with its ``args``, which those whose constructor builds the message from its arguments do
not accept (``Refused``, ``NotPermitted``, ``UnknownPosition``: a TypeError) or turn into
another message (``ValidationFailed``). Each class in ``specs/_errors.py`` has a case here,
and so do the ones elsewhere with a constructor of their own (the blob stores', through
the same ``__reduce__``: ``tests/activities/test_blob_errors_pickle.py``). A PermissionError
one built as an ``OSError`` (an errno, its text, a file name) keeps those fields, which
are not in its ``__dict__``, and so its message.
"""

from __future__ import annotations

import copy
import errno
import functools
import pickle
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from psych_runtime.activities.secrets import SecretNotFound
from psych_runtime.specs import (
    AccessDenied,
    BadCursor,
    BlobsUnavailable,
    BlobUnreadable,
    NotFound,
    NotPermitted,
    PermitsUnavailable,
    Problem,
    PsychError,
    Refused,
    RegistryError,
    RunFailed,
    SpecError,
    StoreUnavailable,
    ValidationFailed,
    VersionMismatch,
)
from psych_runtime.specs import _errors as specs_errors
from psych_runtime.specs._errors import StoreDamaged
from psych_runtime.workers.serve._auth import IssuerUnavailable
from psych_runtime.workers.serve._expiry import CredentialExpired
from psych_runtime.workflows import ClosedStateUnanswered, HistoryNotRead, TemporalUnanswered
from psych_runtime.workflows.client._follow_hub import UnknownPosition

HASH = "sha256:" + "ab" * 32
PROBLEMS = (
    Problem("limits.max_turns", "must be at least 1, not 0"),
    Problem("tools[issue_refund].url", "'ftp://pay.example.test' is not an http(s) URL"),
)
NOT_PERMITTED = (
    Problem("tools[shell]", "the code tool 'shell' is not permitted"),
    Problem("mcp[https://mcp.example.test/mcp]", "the MCP server is not permitted"),
)


def case(cls: type[PsychError], *args: Any, **kwargs: Any) -> Any:
    """A parameter making a new ``cls(*args, **kwargs)`` for each test (a note is added);
    one built as an ``OSError`` (an errno first) is named so."""
    name = f"{cls.__name__}-errno" if args and isinstance(args[0], int) else cls.__name__
    return pytest.param(functools.partial(cls, *args, **kwargs), id=name)


ERRORS = (
    case(PsychError, "something went wrong on purpose"),
    case(SpecError, "limits.max_turns: Input should be greater than or equal to 1"),
    case(VersionMismatch, f"the document states {HASH}, its content hashes to another"),
    case(StoreDamaged, f"the stored Version {HASH} no longer reads back as written"),
    case(ValidationFailed, PROBLEMS),
    case(RegistryError, "no tool registered as 'issue_refund'"),
    case(NotFound, "no Run psych-acme-4f2a in tenant 'acme'"),
    case(AccessDenied, "the Run psych-globex-1 is not tenant 'acme''s"),
    case(AccessDenied, errno.EACCES, "Permission denied", "/srv/psych/blobs/ab/abab"),
    case(NotPermitted, "acme", NOT_PERMITTED),
    case(PermitsUnavailable, "the permits of tenant 'acme' could not be asked: TimeoutError()"),
    case(Refused, "NotSuspended", "psych-acme-4f2a: the Run is not suspended"),
    case(RunFailed, "max_turns (3) reached"),
    case(BlobsUnavailable, f"no blob store to read {HASH} from"),
    case(BadCursor, "the cursor was made for another tenant's listing"),
    case(BlobUnreadable, f"the blob {HASH} no longer hashes to its ref"),
    case(
        StoreUnavailable,
        f"the blob store did not answer (reading {HASH})",
        detail="ConnectTimeout: http://127.0.0.1:9000/blobs/ab/abab",
    ),
    case(SecretNotFound, "no secret 'crm_token' for tenant 'acme'"),
    case(CredentialExpired, expires_at=1_796_000_000.0),
    case(IssuerUnavailable, "the issuer's keys could not be read", retry_after=30.0),
    case(UnknownPosition, "psych-acme-4f2a", after=12, last_seq=9),
)

WAYS: dict[str, Callable[[PsychError], PsychError]] = {
    "pickle": lambda err: pickle.loads(pickle.dumps(err)),
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
}


def test_every_error_class_of_specs_has_a_case() -> None:
    classes = {
        value
        for value in vars(specs_errors).values()
        if isinstance(value, type) and issubclass(value, PsychError)
    }
    assert classes <= {param.values[0].func for param in ERRORS}


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("make", ERRORS)
def test_an_error_pickles_and_copies_to_an_equal_one(
    make: Callable[[], PsychError], way: str
) -> None:
    err = make()
    err.add_note("a note added where it was caught")
    back = WAYS[way](err)
    assert type(back) is type(err) and back is not err
    assert back.args == err.args
    assert str(back) == str(err)
    assert vars(back) == vars(err) and back.__notes__ == ["a note added where it was caught"]
    if isinstance(err, OSError):  # AccessDenied, NotPermitted: a PermissionError
        assert isinstance(back, OSError)
        fields = ("errno", "strerror", "filename", "filename2")
        assert [getattr(back, f) for f in fields] == [getattr(err, f) for f in fields]


def _timeout() -> RPCError:
    return RPCError("Timeout expired", RPCStatusCode.CANCELLED, b"\x08\x01\x12\x0fTimeout expired")


RPC_ERRORS = (
    pytest.param(
        lambda: ClosedStateUnanswered("psych-acme-4f2a", "canceled", _timeout()), id="closed"
    ),
    pytest.param(
        lambda: ClosedStateUnanswered("psych-acme-4f2a", "terminated", _timeout(), unsettled=True),
        id="closed-unsettled",
    ),
    pytest.param(
        lambda: HistoryNotRead("psych-acme-4f2a", 1000, timedelta(seconds=4), _timeout()),
        id="history",
    ),
    pytest.param(
        lambda: TemporalUnanswered(
            "psych-acme-4f2a", "a describe", timedelta(seconds=10), _timeout()
        ),
        id="describe",
    ),
    pytest.param(
        lambda: TemporalUnanswered(
            None,
            "a page",
            timedelta(seconds=10),
            _timeout(),
            subject="tenant 'acme''s Run listing",
        ),
        id="listing",
    ),
)


def test_a_temporal_unanswered_names_a_run_or_a_subject_not_both_nor_neither() -> None:
    for run, subject in ((None, None), ("psych-acme-4f2a", "task queue 'orders'")):
        with pytest.raises(ValueError, match="give a Run's workflow id or a subject"):
            TemporalUnanswered(run, "a describe", None, _timeout(), subject=subject)


RPC_WAYS: dict[str, Callable[[RPCError], RPCError]] = {
    "pickle": lambda err: pickle.loads(pickle.dumps(err)),
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
}


@pytest.mark.parametrize("way", RPC_WAYS)
@pytest.mark.parametrize("make", RPC_ERRORS)
def test_a_closed_runs_rpc_error_pickles_and_copies_to_an_equal_one(
    make: Callable[[], RPCError], way: str
) -> None:
    # RPCErrors, not PsychErrors (a caller handles them as the query's or the read's
    # timeout), built from a Run, a timeout and a cause: rebuilt by ``args`` they failed.
    err = make()
    err.add_note("a note added where it was caught")
    back = RPC_WAYS[way](err)
    assert type(back) is type(err) and back is not err
    assert (back.args, str(back), vars(back)) == (err.args, str(err), vars(err))
    assert (back.message, back.status, back.raw_grpc_status) == (
        err.message,
        err.status,
        err.raw_grpc_status,
    )
    assert back.grpc_status == err.grpc_status
    assert back.__notes__ == ["a note added where it was caught"]
