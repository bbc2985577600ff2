"""``psych run --thread``: a Run continuing an earlier Run's conversation."""

from __future__ import annotations

import json

import pytest

from psych_runtime.testing import Reply

from .conftest import Cli, psych


async def test_run_with_thread_continues_the_earlier_conversation(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.fake.enqueue(Reply.text("Order 42 was delivered."), Reply.text("Yes, order 42."))
    async with cli.worker():
        status, out, err = await psych(capsys, *cli.run_args("--input", "Order 42?", "--json"))
        assert status == 0, err
        first = json.loads(out)["workflow_id"]
        status, out, err = await psych(
            capsys,
            *cli.run_args("--input", "Which order was that?", "--thread", first, "--json"),
        )
        assert status == 0, err
        assert f"continuing {first}" in err
        assert json.loads(out)["thread"]["run"] == first
        # Another tenant may not continue it.
        status, out, err = await psych(
            capsys,
            *cli.run_args("--input", "What did acme say?", "--thread", first, tenant="other"),
        )
    assert status == 1
    assert f"psych: Run {first} does not belong to tenant 'other'" in err
    seen = [m.get("content") for m in cli.fake.requests[1]["messages"] if m["role"] != "system"]
    assert seen == ["Order 42?", "Order 42 was delivered.", "Which order was that?"]
    assert len(cli.fake.requests) == 2
