"""What each model call of a report was sent, read from the blob store on request.

A report holds each answered call's refs (``ModelCallReport.context_ref``, ``system_ref``,
``context_blocks``), which its records carry; the messages and prompt behind them are read
only when asked (``PsychClient.report(..., inputs=...)``): a long Run's report would
otherwise read every turn's conversation. One ``Conversations`` reads them all, so the
calls of one Run, read oldest first, each read only the node their turn appended.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from psych_runtime.activities.blobs import (
    BlobNotFound,
    BlobStore,
    Conversations,
    LocalStoreFailed,
)
from psych_runtime.specs import (
    AccessDenied,
    BlobsUnavailable,
    BlobUnreadable,
    NotFound,
    Refused,
    with_context,
)
from psych_runtime.workflows.client._report_types import ModelCallReport, RunReport
from psych_runtime.workflows.contract._contract import RefusalKind

TenantBlobs = BlobStore | Callable[[str], BlobStore]
"""A client's blob store: one store, or the store to read for a tenant (a deployment that
seals blobs per tenant, ``EncryptedBlobStore``, opens them for the Run's tenant only)."""

Inputs = bool | Collection[int]
"""Which model calls' inputs a report reads: all (True), none (False), or those of the
given turns."""


def no_blob_store(what: str) -> BlobsUnavailable:
    """The error of a client given no blob store when ``what`` needs one."""
    return BlobsUnavailable(
        f"{what} needs the blob store the workers write, and this client has none: "
        "construct PsychClient with blobs=<that BlobStore> (psych: PSYCH_BLOB_DIR or "
        "PSYCH_BLOB_URL, as the workers have them)"
    )


async def with_inputs(
    report: RunReport,
    blobs: TenantBlobs | None,
    inputs: Inputs,
    tenant: str,
    max_calls: int | None = None,
) -> RunReport:
    """``report`` with the system prompt and input messages of each model call ``inputs``
    selects filled in (its steps' child Runs' reports too, of the same turns).

    A call that recorded no refs (a failed or open attempt, or one a worker of an earlier
    build recorded) keeps None: what it was sent is not known.

    Raises:
        BlobsUnavailable: ``blobs`` is None, or does not hold a blob a call names.
        BlobUnreadable: a blob a call names is there but does not open (damaged, or
            sealed under other keys than ``blobs`` opens with).
        Refused: ``TooLarge``, ``inputs`` selects more than ``max_calls`` calls (each
            call's messages repeat the conversation before it), before any is read.
    """
    if not inputs:
        return report
    turns = None if inputs is True else frozenset(inputs)
    if max_calls is not None and (asked := _selected(report, turns)) > max_calls:
        raise Refused(
            RefusalKind.TOO_LARGE,
            f"inputs of {asked} model calls asked: at most {max_calls} a request (each "
            "repeats the conversation before it); select turns with turn=N (repeatable)",
        )
    if blobs is None:
        raise no_blob_store("a report with the model calls' inputs")
    store = blobs if isinstance(blobs, BlobStore) else blobs(tenant)
    return await _filled(report, _Reader(store), turns)


def _selected(report: RunReport, turns: frozenset[int] | None) -> int:
    """How many model calls of ``report`` (its steps' child Runs' included) ``turns``
    selects (None: every one)."""
    own = sum(turns is None or call.turn in turns for call in report.model_calls)
    return own + sum(_selected(s.child, turns) for s in report.steps if s.child is not None)


async def _filled(report: RunReport, reader: _Reader, turns: frozenset[int] | None) -> RunReport:
    calls = [
        await reader.call(call) if turns is None or call.turn in turns else call
        for call in report.model_calls
    ]
    steps = [
        step
        if step.child is None
        else step.model_copy(update={"child": await _filled(step.child, reader, turns)})
        for step in report.steps
    ]
    return report.model_copy(update={"model_calls": tuple(calls), "steps": tuple(steps)})


class _Reader:
    """Reads calls' inputs from one store, keeping conversations read (``Conversations``)."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self.conversations = Conversations(blobs)

    async def call(self, call: ModelCallReport) -> ModelCallReport:
        if call.context_ref is None:
            return call
        where = f"turn {call.turn}'s"
        try:
            # The stored conversation ends with the call's answer: the rest is its input.
            messages = (await self.conversations.messages(call.context_ref))[:-1]
            system = "" if call.system_ref is None else await self._text(call.system_ref)
            blocks = [await self._text(ref) for ref in call.context_blocks]
        except AccessDenied as err:
            # The cipher's words name key ids and which tenants the keys are for: the
            # operator's, not a caller's to read.
            raise BlobUnreadable(
                f"{where} model call input is in the blob store but its seal does not open "
                "with this client's keys: the blob was altered, sealed under keys this "
                "client does not hold (its codec keys are not the workers'), or stored "
                "unsealed before encryption was turned on"
            ) from err
        except NotFound as err:
            if isinstance(err, BlobNotFound) and err.damaged:
                raise BlobUnreadable(
                    f"{where} model call input is in the blob store but damaged: its bytes "
                    "no longer match their ref (cut short by a crash, or altered)"
                ) from err
            # Not the store's own words: they hold its path, the server's, not a caller's.
            raise BlobsUnavailable(
                f"{where} model call input is not in this client's blob store: the client "
                "reads another store than the workers wrote (PSYCH_BLOB_DIR, "
                "PSYCH_BLOB_URL), or the blob was removed since"
            ) from err
        except LocalStoreFailed as err:  # e.g. files of another user, written 0600
            # Its words name the blob and the errno, never the path.
            raise BlobsUnavailable(
                f"{where} model call input could not be read: {err} (the client must be "
                "able to read the workers' blob store)"
            ) from err
        except OSError as err:  # another store's disk error, raised as it is
            raise BlobsUnavailable(
                f"{where} model call input could not be read: {type(err).__name__}: "
                f"{err.strerror or 'an I/O error'} (the client must be able to read the "
                "workers' blob store)"
            ) from err
        except ValueError as err:  # not UTF-8, not a stored node or message: sealed bytes
            raise BlobsUnavailable(
                f"{where} model call input is stored sealed, and this client reads it as it "
                "is: give it the store opened for the Run's tenant with the workers' keys "
                "(psych_runtime.workers.tenant_sealed_blobs)"
            ) from err
        return call.model_copy(
            update={"system_prompt": with_context(system, blocks), "messages": messages}
        )

    async def _text(self, ref: str) -> str:
        return (await self.blobs.get(ref)).decode()
