"""``psych validate|publish --check-connections`` with A2A peers: each peer's Agent Card
fetched from a real ``a2a-sdk`` server on loopback (``tests.a2a.peer``) through the egress
port, reported per peer (reachable with the skills ``allow`` leaves, or why not); an
``allow`` entry the card lacks and an unreachable required peer are problems, an
unreachable optional one a warning."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from psych_runtime.workers.cli import main
from tests._ports import free_port
from tests.a2a.peer import serve_peer


def spec_file(tmp_path: Path, peers: list[dict[str, Any]], **extra: Any) -> Path:
    spec = {"kind": "agent", "name": "checked", "model": {"model": "m"}, "a2a_peers": peers}
    path = tmp_path / "checked.json"
    path.write_text(json.dumps({**spec, **extra}))
    return path


def lines(file: Path, text: str) -> list[str]:
    return [line[len(f"{file}: ") :] for line in text.splitlines() if line.startswith(f"{file}: ")]


@pytest.mark.parametrize("command", ["validate", "publish"])
async def test_each_peer_is_reported_and_allow_naming_a_missing_skill_is_a_problem(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with serve_peer(("book_flight", "book_hotel", "quote", "wipe")) as peer:
        file = spec_file(
            tmp_path,
            [
                {"name": "travel", "url": peer.url, "allow": ["book_*", "quote", "refund"]},
                {"name": "spare", "url": dead, "optional": True},
            ],
        )
        argv = [command, str(file), "--check-connections"]
        if command == "publish":
            argv += ["--store", str(tmp_path / "store")]
        # main runs its own event loop; the peer answers from this one.
        status = await asyncio.to_thread(main, argv)
    captured = capsys.readouterr()
    assert status == 1
    out = lines(file, captured.out)
    assert "a2a_peers[travel]: reachable; skills offered: book_flight, book_hotel, quote" in out
    [spare] = [line for line in out if line.startswith("a2a_peers[spare]: ")]
    assert spare.startswith("a2a_peers[spare]: unreachable: ")
    err = lines(file, captured.err)
    assert (
        "a2a_peers[travel].allow: 'refund' names no skill of the peer's card (it offers: "
        "book_flight, book_hotel, quote, wipe)"
    ) in err
    # The optional peer that did not answer is a warning, not a problem.
    assert any(
        line.startswith("warning: a2a_peers[spare]: optional peer did not answer") for line in err
    )
    assert "1 problem(s); not valid" in err
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.json"))


async def test_a_required_peer_that_does_not_answer_is_a_problem_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    file = spec_file(tmp_path, [{"name": "gone", "url": dead}])
    status = await asyncio.to_thread(main, ["validate", str(file), "--check-connections"])
    err = lines(file, capsys.readouterr().err)
    assert status == 1
    assert any(
        line.startswith("a2a_peers[gone]: peer did not answer and is not optional: ")
        for line in err
    ), err


async def test_a_peer_in_a_subagent_with_its_credential_and_a_valid_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PSYCH_SECRET_DESK_KEY", "desk-secret")
    async with serve_peer(("echo",)) as peer:
        helper = {
            "kind": "agent",
            "name": "helper",
            "model": {"model": "m"},
            "a2a_peers": [{"name": "desk", "url": peer.url, "credential": "desk-key"}],
        }
        file = spec_file(
            tmp_path,
            [],
            subagents=[
                {
                    "name": "helper",
                    "description": "Answers questions for the agent.",
                    "spec": helper,
                }
            ],
        )
        status = await asyncio.to_thread(main, ["validate", str(file), "--check-connections"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert lines(file, captured.out)[0] == (
        "subagents[helper].spec.a2a_peers[desk]: reachable; skills offered: echo"
    )
    # The card was fetched with the credential the environment resolves for the peer.
    assert captured.out.endswith(f"{file}: valid\n")
    assert "desk-secret" not in captured.out + captured.err
