"""``psych hooks check`` and the settings flags of ``psych worker`` / ``psych dev``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from psych_runtime.activities import HookEffect
from psych_runtime.specs import Scope
from psych_runtime.workers import format_record
from psych_runtime.workers._settings import PROJECT_SETTINGS
from psych_runtime.workers.cli import main
from psych_runtime.workers.cli._parser import build_parser
from psych_runtime.workers.cli._processes import settings_from
from psych_runtime.workflows import ToolCallFinished


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def no_user_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No settings of the user running the tests: an empty config home, no PSYCH_SETTINGS,
    a working directory of the test's own."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("PSYCH_SETTINGS", raising=False)
    monkeypatch.chdir(tmp_path)


def test_check_prints_the_chain_per_stage_and_per_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = write(
        tmp_path / "g.yaml",
        "trusted_modules: [tests.workers]\n"
        "hooks:\n"
        "  pre:\n"
        "    'send_*': tests.workers._hook_module:deny_everything\n"
        "    '*': {command: [/usr/bin/audit, '{to}'], timeout_seconds: 2}\n"
        "  post: {send_email: [tests.workers._hook_module:shout]}\n",
    )
    status = main(
        ["hooks", "check", "--settings", str(file), "--tool", "send_email", "--tool", "x"]
    )
    out = capsys.readouterr().out
    assert status == 0
    assert f"global settings: {file}" in out
    assert "project settings: none" in out and "trusted modules: tests.workers" in out
    assert "  send_*: python tests.workers._hook_module:deny_everything" in out
    assert '  *: command:["/usr/bin/audit", "{to}"] (timeout 2 s)' in out
    assert "on_error: none" in out
    assert (
        "tool send_email:\n"
        '  pre: tests.workers._hook_module:deny_everything -> command:["/usr/bin/audit", "{to}"]\n'
        "  post: tests.workers._hook_module:shout\n"
        "  on_error: none\n"
        "tool x:\n"
        '  pre: command:["/usr/bin/audit", "{to}"]\n'
        "  post: none"
    ) in out


def test_check_prints_every_problem_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = write(
        tmp_path / "g.yaml",
        "hooks: {pre: {a: {command: 'echo hi | sh'}, 'b*c': m:f}, post: {x: 7}}\n",
    )
    assert main(["hooks", "check", "--settings", str(file)]) == 1
    err = capsys.readouterr().err
    assert "hooks.pre['a'].command: a shell string is refused" in err
    assert "hooks.pre['b*c']: invalid tool pattern" in err
    assert "hooks.post['x']: a hook is" in err


def test_check_names_a_command_whose_program_is_a_placeholder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A placeholder in the program (the model's arguments would choose what runs) is a
    problem named with its file and path, reported with the file's other problems; it was
    a ValueError traceback out of ``psych hooks check`` and out of a worker's start."""
    file = write(
        tmp_path / "g.yaml",
        "hooks: {pre: {'*': [{command: ['{program}', x]}]}, post: {x: 7}}\n",
    )
    assert main(["hooks", "check", "--settings", str(file)]) == 1
    err = capsys.readouterr().err
    assert (
        f"{file}: hooks.pre['*'][0].command: a command hook's program cannot hold a "
        "placeholder: '{program}'"
    ) in err
    assert "hooks.post['x']: a hook is" in err
    assert "Traceback" not in err


def test_check_refuses_an_untrusted_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = write(tmp_path / "g.yaml", "hooks: {pre: {'*': subprocess:run}}\n")
    assert main(["hooks", "check", "--settings", str(file)]) == 1
    err = capsys.readouterr().err
    assert "module 'subprocess' is not trusted" in err


def test_check_says_an_untrusted_project_file_was_not_loaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / PROJECT_SETTINGS, "hooks: {pre: {'*': {command: [/bin/false]}}}\n")
    assert main(["hooks", "check"]) == 0
    out = capsys.readouterr().out
    assert "NOT LOADED (not trusted" in out and "pre: none" in out
    assert main(["hooks", "check", "--trust-project-settings"]) == 0
    out = capsys.readouterr().out
    assert "(trusted)" in out and '  *: command:["/bin/false"]' in out


def test_worker_and_dev_take_the_settings_flags(tmp_path: Path) -> None:
    file = write(tmp_path / "g.yaml", "hooks: {post: {'*': {command: [/bin/cat]}}}\n")
    for command in ("worker", "dev"):
        args = build_parser().parse_args(
            [command, "--settings", str(file), "--trust-project-settings"]
        )
        settings = settings_from(args)
        assert settings.settings_file == file and settings.trust_project_settings
    plain = settings_from(build_parser().parse_args(["worker"]))
    assert plain.settings_file is None and not plain.trust_project_settings


def test_worker_with_an_untrusted_module_stops_before_connecting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = write(tmp_path / "g.yaml", "hooks: {pre: {'*': os:system}}\n")
    # Port 9 (discard) has no Temporal server: reaching it would be a different error.
    status = main(["worker", "--address", "127.0.0.1:9", "--settings", str(file)])
    assert status == 1
    assert "module 'os' is not trusted" in capsys.readouterr().err


def test_a_hooked_call_prints_each_hook_and_the_arguments_that_ran() -> None:
    finished = ToolCallFinished(
        seq=4,
        at=datetime(2026, 12, 1, tzinfo=UTC),
        scope=Scope(tenant="acme"),
        turn=1,
        call_id="c1",
        tool="lookup",
        status="ok",
        content="record 42",
        ran_arguments={"id": "42"},
        hooks=(
            HookEffect(stage="pre", hook="acme:fix_id", effect="rewrote_arguments"),
            HookEffect(stage="post", hook="acme:redact", effect="rewrote_result"),
        ),
    )
    assert format_record(finished) == (
        "  tool call lookup -> ok: record 42 (hooks: pre acme:fix_id rewrote_arguments; "
        'post acme:redact rewrote_result; ran with {"id": "42"})'
    )
    plain = finished.model_copy(update={"hooks": (), "ran_arguments": None})
    assert format_record(plain) == "  tool call lookup -> ok: record 42"


def test_a_bad_serve_section_stops_the_worker_and_hooks_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One file is the fleet's: a worker given it must not start as if it were sound, then
    # `psych serve` refuse it.
    file = write(tmp_path / "g.yaml", "serve: {api_keys: nope}\n")
    assert main(["hooks", "check", "--settings", str(file)]) == 1
    assert f"{file}: serve.api_keys: a list of" in capsys.readouterr().err
    file = write(tmp_path / "g.yaml", "serve: {max_body_bytes: 0}\n")
    # Port 9 (discard) has no Temporal server: reaching it would be a different error.
    assert main(["worker", "--address", "127.0.0.1:9", "--settings", str(file)]) == 1
    assert f"{file}: serve.max_body_bytes: a positive number" in capsys.readouterr().err
