"""The OAuth callback's part of a consent (``deliver_authorization``, ``waiting_on``) against
a real token store: the code is left for the Run that waits on the state, and never left
behind when the Run forgot its flow while the code was being written; a redirect whose
RFC 9207 ``iss`` is not the authorization server's is refused, code or refusal alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from psych_runtime.activities.mcp import WrongIssuer, deliver_authorization, waiting_on
from psych_runtime.activities.mcp._consent_callback import (
    ExpectedIss,
    Waiting,
    arrived_key,
    index_key,
)
from psych_runtime.activities.tokens import Change, LocalTokenStore, TokenKey

STATE = "state-1"
WAITING = Waiting(workflow_id="psych-acme-run1", tenant="acme", id="oauth-1")


class ForgetsWhileWriting(LocalTokenStore):
    """A store in which the Run's forgetting (its index deleted) lands just as the
    callback writes the code."""

    async def update(self, key: TokenKey, change: Change) -> None:
        await super().update(key, change)
        if key == arrived_key(WAITING.id):
            await self.delete(index_key(STATE))


async def test_the_code_is_left_for_the_waiting_run(tmp_path: Path) -> None:
    store = LocalTokenStore(tmp_path)
    await store.put(index_key(STATE), WAITING.model_dump_json().encode())
    assert await deliver_authorization(store, "code-1", STATE, None) == WAITING
    assert await store.get(arrived_key(WAITING.id)) is not None


async def test_an_unknown_state_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LookupError, match="no authorization waits on this state"):
        await deliver_authorization(LocalTokenStore(tmp_path), "code-1", STATE, None)


async def test_a_code_written_as_the_run_forgot_its_flow_is_not_left_behind(
    tmp_path: Path,
) -> None:
    store = ForgetsWhileWriting(tmp_path)
    await store.put(index_key(STATE), WAITING.model_dump_json().encode())
    with pytest.raises(LookupError, match="no authorization waits on this state"):
        await deliver_authorization(store, "code-1", STATE, None)
    assert await store.get(arrived_key(WAITING.id)) is None


async def test_a_second_code_for_the_same_state_is_refused_and_the_first_stays(
    tmp_path: Path,
) -> None:
    """A replayed redirect (its state seen, another code) before the Run exchanged the
    first: the first code stands; the same redirect again (a reloaded page) is answered as
    the first was."""
    store = LocalTokenStore(tmp_path)
    await store.put(index_key(STATE), WAITING.model_dump_json().encode())
    assert await deliver_authorization(store, "code-1", STATE, None) == WAITING
    with pytest.raises(LookupError, match="already answered"):
        await deliver_authorization(store, "code-evil", STATE, None)
    assert await deliver_authorization(store, "code-1", STATE, None) == WAITING
    left = await store.get(arrived_key(WAITING.id))
    assert left is not None and b"code-1" in left and b"code-evil" not in left


ISSUER = "https://auth.test/"


@pytest.mark.parametrize(
    ("expected", "iss", "wrong"),
    [
        (ExpectedIss(issuer=ISSUER, required=False), "https://evil.test/", "is not " + ISSUER),
        (ExpectedIss(issuer=ISSUER, required=False), "https://auth.test", "is not " + ISSUER),
        (ExpectedIss(issuer=ISSUER, required=True), None, "carries no iss"),
        (ExpectedIss(issuer=None, required=False), ISSUER, "that published no metadata"),
    ],
    ids=["another", "not-as-the-metadata-says", "missing-where-sent", "none-expected"],
)
async def test_a_redirect_of_another_issuer_is_refused_and_leaves_nothing(
    tmp_path: Path, expected: ExpectedIss, iss: str | None, wrong: str
) -> None:
    store = LocalTokenStore(tmp_path)
    waiting = WAITING.model_copy(update={"iss": expected})
    await store.put(index_key(STATE), waiting.model_dump_json().encode())
    with pytest.raises(WrongIssuer, match=wrong) as refused:
        await waiting_on(store, STATE, iss)
    assert "the Run still waits for consent" in str(refused.value)
    with pytest.raises(WrongIssuer, match=wrong):
        await deliver_authorization(store, "code-1", STATE, iss)
    assert await store.get(arrived_key(WAITING.id)) is None
    assert await store.get(index_key(STATE)) is not None


async def test_the_right_iss_and_an_entry_parked_before_the_check_are_taken(
    tmp_path: Path,
) -> None:
    store = LocalTokenStore(tmp_path)
    required = WAITING.model_copy(update={"iss": ExpectedIss(issuer=ISSUER, required=True)})
    await store.put(index_key(STATE), required.model_dump_json().encode())
    assert await deliver_authorization(store, "code-1", STATE, ISSUER) == required
    # Not sent where the server does not say it sends one; an older entry checks nothing
    # (the Run's exchange checks a code's iss).
    for expected in (ExpectedIss(issuer=ISSUER, required=False), None):
        entry = WAITING.model_copy(update={"iss": expected})
        await store.put(index_key("other"), entry.model_dump_json().encode())
        assert await waiting_on(store, "other", None) == entry
    older = WAITING.model_dump_json(exclude={"iss"}).encode()
    await store.put(index_key("older"), older)
    assert await waiting_on(store, "older", "https://evil.test/") == WAITING
