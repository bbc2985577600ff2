"""An idempotency key names one dispatch: the same key with the same input reaches the same
Run, with other input it is refused (it used to answer silently with the old Run, dropping
the new input). Through PsychClient and ``psych run``, against the session dev server.
"""

from __future__ import annotations

import uuid

import pytest

from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import AgentBuilder, PsychError, Scope
from psych_runtime.testing import Reply
from psych_runtime.workflows import PsychClient

from .conftest import Cli, psych

SCOPE = Scope(tenant="acme")


def client_of(cli: Cli, task_queue: str) -> PsychClient:
    return PsychClient(
        cli.env.client, store=FileVersionStore(cli.home / "versions"), task_queue=task_queue
    )


async def test_a_used_key_with_other_messages_or_version_is_refused_even_with_no_worker(
    cli: Cli,
) -> None:
    # No worker polls this queue: the check reads the Run's history, which the server has.
    client = client_of(cli, f"nobody-{uuid.uuid4().hex[:12]}")
    spec = AgentBuilder("support").instructions("Help.").model("gpt-4o-mini").build()
    key = f"key-{uuid.uuid4().hex}"
    first = await client.dispatch(spec, "Refund order 42", scope=SCOPE, idempotency_key=key)
    again = await client.dispatch(spec, "Refund order 42", scope=SCOPE, idempotency_key=key)
    assert again.workflow_id == first.workflow_id

    with pytest.raises(PsychError) as other_messages:
        await client.dispatch(spec, "Refund order 43", scope=SCOPE, idempotency_key=key)
    assert str(other_messages.value) == (
        f"idempotency key {key!r} already started Run {first.workflow_id} with another input "
        "(other messages); a key names one dispatch, so new input needs a new key"
    )

    changed = AgentBuilder("support").instructions("Help kindly.").model("gpt-4o-mini").build()
    with pytest.raises(PsychError) as other_version:
        await client.dispatch(changed, "Refund order 42", scope=SCOPE, idempotency_key=key)
    newer = client.publish(changed).hash
    assert f"(Version {first.version_hash}, this dispatch {newer})" in str(other_version.value)

    # Another tenant's same key is another Run altogether.
    elsewhere = await client.dispatch(
        spec, "Refund order 43", scope=Scope(tenant="globex"), idempotency_key=key
    )
    assert elsewhere.workflow_id != first.workflow_id


async def test_a_settled_runs_key_is_refused_for_other_input_through_psych_run(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.fake.enqueue(Reply.text("Hello!"))
    key = f"key-{uuid.uuid4().hex}"
    async with cli.worker():
        status, out, err = await psych(
            capsys, *cli.run_args("--input", "Hi", "--idempotency-key", key)
        )
        assert status == 0, out + err
        # The same input again: the same settled Run, no model call.
        status, again, _ = await psych(
            capsys, *cli.run_args("--input", "Hi", "--idempotency-key", key)
        )
        assert status == 0
        status, refused_out, refused = await psych(
            capsys, *cli.run_args("--input", "Bye", "--idempotency-key", key)
        )
    assert len(cli.fake.requests) == 1
    run_id = next(word for word in out.split() if word.startswith("psych-acme-"))
    assert run_id in again
    assert status == 1
    assert refused_out == ""
    assert refused == (
        f"psych: idempotency key {key!r} already started Run {run_id} with another input "
        "(other messages); a key names one dispatch, so new input needs a new key\n"
    )
