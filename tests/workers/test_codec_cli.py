"""Encryption configured by the environment: ``psych dev`` and ``psych run`` with
``PSYCH_CODEC_KEYS`` as real processes; the Run completes and its history, read with the
plain ``temporal`` CLI, holds none of its text."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sys

import pytest

from psych_runtime.testing import Reply, ToolCall
from psych_runtime.workers import temporal_binary
from tests._ports import free_port

from .conftest import TOOLS_REF, Cli, psych, read_until, spawn

PSYCH = (sys.executable, "-m", "psych_runtime.workers.cli")
ANSWER = "Order 7 reached Mrs Higgins at 27A Wimpole Street."
KEYS = json.dumps(
    {
        "current": {"acme": "acme-1"},
        "keys": [
            {"id": "acme-1", "tenant": "acme", "secret": base64.b64encode(os.urandom(32)).decode()}
        ],
    }
)


async def test_psych_dev_and_psych_run_encrypt_with_the_keys_of_the_environment(
    cli: Cli, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cli.fake.enqueue(
        Reply.tool_calls(ToolCall("lookup_order", {"order_id": "7"})), Reply.text(ANSWER)
    )
    port = free_port()
    child = await spawn(
        [*PSYCH, "dev", "--port", str(port)],
        cli.child_env(PSYCH_TOOLS=TOOLS_REF, PSYCH_CODEC_KEYS=KEYS),
        cli.home,
    )
    assert child.stdout is not None
    try:
        await read_until(child.stdout, "Ctrl-C to stop")
        monkeypatch.setenv("PSYCH_CODEC_KEYS", KEYS)  # what `psych run` in this shell reads
        argv = [
            "run",
            str(cli.spec_file),
            "--input",
            "Where is order 7, sent to Wimpole Street?",
            "--address",
            f"127.0.0.1:{port}",
            "--tenant",
            "acme",
            "--tools",
            TOOLS_REF,
            "--store",
            str(cli.home / "versions"),
            "--json",
        ]
        async with asyncio.timeout(60):
            status, out, err = await psych(capsys, *argv)
        assert status == 0, out + err
        report = json.loads(out)
        assert report["answer"] == ANSWER
        shown = await asyncio.create_subprocess_exec(
            temporal_binary(),
            "workflow",
            "show",
            "--workflow-id",
            report["workflow_id"],
            "--address",
            f"127.0.0.1:{port}",
            "--output",
            "json",
            stdout=asyncio.subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")},
        )
        history, _ = await shown.communicate()
    finally:
        child.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            _, errors = await child.communicate()
    assert child.returncode == 0, errors.decode()
    assert shown.returncode == 0
    text = history.decode()
    bodies = "\n".join(
        base64.b64decode(found).decode(errors="replace") for found in _datas(json.loads(text))
    )
    for marker in ("Wimpole", "Higgins"):
        assert marker not in text + bodies
    assert "YmluYXJ5L2VuY3J5cHRlZA==" in text  # base64 of binary/encrypted


def _datas(value: object) -> list[str]:
    if isinstance(value, dict):
        found = [value["data"]] if isinstance(value.get("data"), str) else []
        return found + [d for item in value.values() for d in _datas(item)]
    if isinstance(value, list):
        return [d for item in value for d in _datas(item)]
    return []
