"""Values a command cannot honour are refused by the command that reads them, naming them:
never a traceback of every command, never a silent default (from an audit of the CLI)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import re
import socket
from pathlib import Path

import pytest

from psych_runtime.activities.tools import RulePolicy
from psych_runtime.specs import PsychError
from psych_runtime.workers import start_dev_server
from psych_runtime.workers.cli import main
from psych_runtime.workers.cli._parser import build_parser
from tests._ports import free_port

from .conftest import SUPPORT_SPEC, TOOLS_REF


def test_a_bad_serve_body_bound_in_the_environment_is_serves_error_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PSYCH_SERVE_MAX_BODY_BYTES", "4MB")
    # Every other command reads nothing of it (it broke them all, --help included).
    with pytest.raises(SystemExit) as helped:
        main(["--help"])
    assert helped.value.code == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        main(["serve"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "--max-body-bytes: '4MB' is not a byte count" in err
    assert "PSYCH_SERVE_MAX_BODY_BYTES" in err


@pytest.mark.parametrize("value", ["0", "-5"])
def test_serve_refuses_a_body_bound_below_one_before_it_listens(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # -5 started the server, which then answered every request 500; 0 meant the default.
    with pytest.raises(SystemExit) as refused:
        main(["serve", "--max-body-bytes", value])
    assert refused.value.code == 2
    assert f"'{value}' is not a byte count" in capsys.readouterr().err


def test_a_worker_flag_of_zero_is_refused_not_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `--max-model-calls 0` ran with 100 (the flag was dropped as falsy).
    status = main(["worker", "--max-model-calls", "0", "--address", "127.0.0.1:9"])
    assert status != 0
    assert capsys.readouterr().err == "psych: --max-model-calls '0' must be at least 1\n"


@pytest.mark.parametrize("address", ["bogus address", "127.0.0.1:99999"])
def test_an_address_temporal_cannot_read_is_one_line_naming_it(
    address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["status", "psych-acme-r1", "--tenant", "acme", "--address", address])
    err = capsys.readouterr().err
    assert status != 0
    assert "Traceback" not in err
    assert f"cannot connect to Temporal at {address!r}" in err


def test_ask_destructive_y_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    # `Y` was read as off: destructive tools ran without anyone approving them.
    from psych_runtime.workers._worker import WorkerSettings

    for yes in ("Y", "y", "Yes", " on "):
        policy = WorkerSettings.from_env({"PSYCH_ASK_DESTRUCTIVE": yes}).policy
        assert isinstance(policy, RulePolicy)
        assert policy.by_effect["destructive"] == "ask", yes
    assert WorkerSettings.from_env({"PSYCH_WORKFLOW_SANDBOX": "Y"}).workflow_sandbox is True


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "missing.yaml", "--input", "hi", "--address", "127.0.0.1:9"],
        ["serve", "--address", "127.0.0.1:9"],
        ["worker", "--address", "127.0.0.1:9"],
    ],
    ids=["run", "serve", "worker"],
)
def test_roles_apart_maybe_is_refused_by_every_command_that_reads_it(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # run and serve read it as no, worker refused it: one fleet, two readings.
    monkeypatch.setenv("PSYCH_ROLES_APART", "maybe")
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 1
    assert err.startswith(
        "psych: environment variable PSYCH_ROLES_APART='maybe' is neither yes nor no"
    ), err
    assert len(err.splitlines()) == 1


def test_roles_apart_is_read_by_no_other_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PSYCH_ROLES_APART", "maybe")
    assert main(["schema"]) == 0
    assert "PSYCH_ROLES_APART" not in capsys.readouterr().err


def test_a_store_that_is_a_file_is_one_line_naming_where_it_was_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "agent.yaml"
    spec.write_text("kind: agent\nname: notes\ninstructions: Take notes.\nmodel: {model: m}\n")
    a_file = tmp_path / "versions"
    a_file.write_text("not a directory")
    # It was a FileExistsError traceback from mkdir.
    assert main(["publish", str(spec), "--store", str(a_file)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"psych: --store {str(a_file)!r} is a file, not a directory: name a directory (made "
        "when first published to) or an s3://BUCKET/PREFIX URL\n"
    )
    monkeypatch.setenv("PSYCH_STORE", str(a_file))
    assert main(["publish", str(spec)]) == 1
    assert capsys.readouterr().err.startswith(f"psych: PSYCH_STORE {str(a_file)!r} is a file")
    # A file on the way to it: mkdir's NotADirectoryError was a traceback too.
    assert main(["publish", str(spec), "--store", str(a_file / "inner")]) == 1
    err = capsys.readouterr().err
    said = "the local version store failed (ENOTDIR: Not a directory)"
    assert said in err and f"; under {a_file / 'inner'}: " in err, err
    assert err.count("\n") == 1, err


def test_schema_into_a_missing_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "missing" / "psych.schema.json"
    assert main(["schema", "-o", str(target)]) == 1
    assert capsys.readouterr().err == (f"psych: cannot write {target}: No such file or directory\n")


@pytest.mark.parametrize(
    "argv",
    [
        ["dev", "--port", "99999"],
        ["dev", "--ui-port", "70000", "--port", "99999"],
        ["worker", "--health-port", "65536"],
        ["codec-server", "--port", "-1"],
    ],
)
def test_a_port_out_of_range_is_a_usage_error_naming_the_flag(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # `psych dev --port 99999` was an OverflowError traceback from bind().
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {argv[1]}: '{argv[2]}' is not a port number" in err
    assert "Traceback" not in err


def test_the_dev_server_refuses_a_port_out_of_range() -> None:
    # The library's own check, for programs that call it without the CLI's parser.
    with pytest.raises(PsychError, match="port 99999 is not a port number"):
        asyncio.run(start_dev_server(port=99999))


def test_codec_server_on_a_port_in_use_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = {
        "current": {"acme": "acme-1"},
        "keys": [
            {"id": "acme-1", "tenant": "acme", "secret": base64.b64encode(bytes(32)).decode()}
        ],
    }
    monkeypatch.setenv("PSYCH_CODEC_KEYS", json.dumps(keys))
    monkeypatch.setenv("PSYCH_CODEC_TOKEN", "t")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        status = main(["codec-server", "--port", str(port)])
    assert status == 1
    err = capsys.readouterr().err
    assert err.startswith(f"psych: cannot listen on 127.0.0.1:{port}: "), err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("flag", "variable"), [("--health-port", "PSYCH_HEALTH_PORT"), ("--metrics-port", None)]
)
def test_a_worker_probe_port_in_use_is_one_line_before_connecting(
    flag: str,
    variable: str | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The health server failed with a traceback once the workers were polling, the
    # metrics one with the SDK's ValueError. Port 9 (discard) has no Temporal server.
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        if variable is not None:
            monkeypatch.setenv(variable, str(port))
            argv = ["worker", "--address", "127.0.0.1:9"]
        else:
            argv = ["worker", "--address", "127.0.0.1:9", flag, str(port)]
        status = main(argv)
    assert status == 1
    err = capsys.readouterr().err
    assert err.startswith(f"psych: {variable or flag} {port}: cannot listen on 0.0.0.0:{port}: ")
    assert len(err.splitlines()) == 1
    free = str(free_port())
    status = main(
        ["worker", "--address", "127.0.0.1:9", "--health-port", free, "--metrics-port", free]
    )
    assert status == 1
    assert capsys.readouterr().err == (
        f"psych: --health-port and --metrics-port are both port {free}: give two ports\n"
    )


@pytest.mark.parametrize("command", ["validate", "publish"])
def test_validate_and_publish_load_psych_tools_as_the_worker_does(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # They ignored PSYCH_TOOLS: a Spec the worker runs was "invalid" for its code tools.
    monkeypatch.setenv("PSYCH_TOOLS", TOOLS_REF)
    monkeypatch.setenv("PSYCH_STORE", str(tmp_path / "versions"))
    status = main([command, str(SUPPORT_SPEC)])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert "lookup_order" not in out + err


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_tools_reference_that_does_not_load_names_where_it_was_given(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, str(SUPPORT_SPEC), *(["--input", "hi"] if command == "run" else [])]
    monkeypatch.setenv("PSYCH_TOOLS", "no_such_module:registry")
    assert main(argv) == 1
    assert capsys.readouterr().err.startswith(
        "psych: PSYCH_TOOLS: 'no_such_module:registry': cannot import 'no_such_module'"
    )
    assert main([*argv, "--tools", "json:dumps"]) == 1
    assert capsys.readouterr().err == (
        "psych: --tools 'json:dumps' is a function, not a ToolRegistry\n"
    )


@pytest.mark.parametrize(
    ("argv", "environ", "said"),
    [
        # Named PSYCH_MAX_MODEL_CALLS, PSYCH_TOOLS, nothing or --listen: none of them set.
        (["worker", "--max-model-calls", "0"], {}, "--max-model-calls '0' must be"),
        ([], {"PSYCH_MAX_MODEL_CALLS": "0"}, "PSYCH_MAX_MODEL_CALLS='0' must be"),
        (["worker", "--tools", "json:dumps"], {}, "--tools 'json:dumps' is not a ToolRegistry"),
        (["worker", "--tools", "no_such_module:x"], {}, "--tools: 'no_such_module:x': cannot"),
        ([], {"PSYCH_TOOLS": "no_such_module:x"}, "PSYCH_TOOLS: 'no_such_module:x': cannot"),
        (["worker", "--live-listen", "nonsense"], {}, "--live-listen: a live relay address"),
        ([], {"PSYCH_LIVE_LISTEN": "nonsense"}, "PSYCH_LIVE_LISTEN: a live relay address"),
        # A traceback from worker (and dev, publish --check-connections), naming neither.
        ([], {"PSYCH_EGRESS_ALLOW": "10.0.0.0/33"}, "PSYCH_EGRESS_ALLOW: '10.0.0.0/33' is not"),
        ([], {"PSYCH_EGRESS_DENY": "10.0.0.1/8,/x"}, "PSYCH_EGRESS_DENY: '/x' is not"),
        (
            [],
            {"PSYCH_EGRESS_DENY": "evil.example:443"},
            "PSYCH_EGRESS_DENY: 'evil.example:443' is not a host pattern",
        ),
        # A worker that said it polled and was ready, and that the server never served.
        (
            ["worker", "--deployment", "fleet", "--build-id", "b" * 256],
            {},
            "--build-id: a build id of 256 bytes; Temporal takes at most 255",
        ),
        (
            [],
            {"PSYCH_DEPLOYMENT": "fleet", "PSYCH_BUILD_ID": "é" * 128},
            "--build-id/PSYCH_BUILD_ID: a build id of 256 bytes",
        ),
        (["serve", "--listen", "bad"], {}, "--listen 'bad': give host:port"),
        (["serve"], {"PSYCH_SERVE_LISTEN": "bad"}, "PSYCH_SERVE_LISTEN 'bad': give host:port"),
        (
            ["oauth-callback"],
            {"PSYCH_OAUTH_CALLBACK_LISTEN": "zz"},
            "PSYCH_OAUTH_CALLBACK_LISTEN 'zz'",
        ),
    ],
)
def test_a_refused_value_is_named_where_it_was_given(
    argv: list[str],
    environ: dict[str, str],
    said: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main([*(argv or ["worker"]), "--address", "127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"psych: {said}"), err
    assert len(err.splitlines()) == 1


def test_serve_names_the_settings_file_psych_settings_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # It named the default file (~/.config/psych/settings.yaml), which it had not read.
    settings = tmp_path / "settings.yaml"
    settings.write_text("serve: {}\n")
    monkeypatch.setenv("PSYCH_SETTINGS", str(settings))
    assert main(["serve", "--address", "127.0.0.1:9"]) == 1
    assert f"of the settings file ({settings}, from PSYCH_SETTINGS)" in capsys.readouterr().err


_FLAGS_OF = {
    "worker": ["--task-queue", "--ask", "--tools", "--live-listen", "--live-url", "--deployment"],
    "dev": ["--task-queue", "--ask", "--tools", "--live-listen", "--live-url"],
}


@pytest.mark.parametrize(
    ("command", "flag"), [(command, flag) for command, flags in _FLAGS_OF.items() for flag in flags]
)
def test_a_worker_flag_given_empty_is_refused_naming_it(
    command: str, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--task-queue "$QUEUE"` with QUEUE unset joined the default queue 'psych', and
    # `--ask "$TOOL"` started a worker that asked for nothing: the empty value was dropped.
    where = ["--address", "127.0.0.1:9"] if command == "worker" else ["--port", "9"]
    status = main([command, flag, "", *where])
    assert status == 1
    assert capsys.readouterr().err == (
        f"psych: {flag}: an empty value (give one, or leave {flag} out)\n"
    )


def _env_read() -> list[str]:
    """The variables the parser modules read (``os.environ.get("X"``, ``env("X"``)."""
    cli = Path(build_parser.__code__.co_filename).parent
    sources = "".join(p.read_text() for p in sorted(cli.glob("_parser*.py")))
    return sorted(set(re.findall(r'(?:environ\.get|env)\("(PSYCH_[A-Z_]+)"', sources)))


ENV_READ = _env_read()


def test_every_option_an_environment_variable_sets_names_it_in_its_help(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Until 12-07 `psych serve --help` named none of the six PSYCH_SERVE_JWT*/JWKS
    # variables its JWT options read; the other options each name theirs.
    for name in ENV_READ:
        monkeypatch.setenv(name, f"from-{name}")
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    unnamed = []
    for command, sub in commands.items():
        for action in sub._actions:
            for name in ENV_READ:
                if action.default == f"from-{name}" and name not in (action.help or ""):
                    unnamed.append(f"psych {command} {action.option_strings[0]}: {name}")
    assert unnamed == [], unnamed
