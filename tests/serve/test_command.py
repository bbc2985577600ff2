"""``psych serve``'s settings: where it listens and whom it accepts, refused before it
connects to anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from psych_runtime.activities.egress import EgressPolicy
from psych_runtime.specs import PermitSource, PsychError, SpecError
from psych_runtime.workers._settings import parse_settings
from psych_runtime.workers.cli._main import main
from psych_runtime.workers.cli._parser import build_parser
from psych_runtime.workers.cli._serve_command import (
    _section,
    auth_from,
    egress_from,
    parse_listen,
    permits_from,
)
from psych_runtime.workers.serve import ApiKey


def test_listen_takes_host_and_port() -> None:
    assert parse_listen("127.0.0.1:8000") == ("127.0.0.1", 8000)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad in ("8000", "localhost", ":80", "h:99999", "h:x"):
        with pytest.raises(PsychError, match="host:port"):
            parse_listen(bad)


def test_serve_refuses_to_start_accepting_nobody(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PSYCH_SERVE_API_KEYS", raising=False)
    monkeypatch.delenv("PSYCH_SETTINGS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # no global settings file there
    assert main(["serve", "--address", "127.0.0.1:9"]) == 1
    assert "accepts nobody yet" in capsys.readouterr().err


def test_keys_come_from_the_settings_file_and_the_environment_and_jwt_from_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_key = ApiKey.of("from-file", "acme", "ops")
    env_key = ApiKey.of("from-env", "globex")
    settings = tmp_path / "settings.yaml"
    settings.write_text(
        "serve:\n"
        f"  api_keys: [{{sha256: {file_key.sha256}, tenant: acme, principal: ops}}]\n"
        "  jwt: {jwks_url: 'http://127.0.0.1:1/jwks', issuer: idp, audience: psych,\n"
        "        leeway_seconds: 5}\n"
    )
    monkeypatch.setenv(
        "PSYCH_SERVE_API_KEYS", json.dumps([{"sha256": env_key.sha256, "tenant": "globex"}])
    )
    args = build_parser().parse_args(
        [
            "serve",
            "--settings",
            str(settings),
            "--jwt-audience",
            "api",
            "--jwt-tenant-claim",
            "org",
            "--jwt-publisher-claim",
            "psych_publisher",
        ]
    )
    auth = auth_from(args, _section(args))
    assert auth.api_keys == (file_key, env_key)
    assert auth.jwt is not None
    assert (auth.jwt.issuer, auth.jwt.audience, auth.jwt.tenant_claim) == ("idp", "api", "org")
    # Each flag replaces its own setting only: the file's leeway stays.
    assert (auth.jwt.publisher_claim, auth.jwt.leeway_seconds) == ("psych_publisher", 5)
    monkeypatch.setenv("PSYCH_SERVE_API_KEYS", '[{"tenant": "globex"}]')
    with pytest.raises(PsychError, match=r"PSYCH_SERVE_API_KEYS\[0\]: sha256 is required"):
        auth_from(args, _section(args))


def test_only_the_global_settings_file_may_configure_serve() -> None:
    assert parse_settings({"serve": {}}, source="global.yaml", scope="global").hooks == ()
    with pytest.raises(SpecError, match="only the global settings file may configure serve"):
        parse_settings({"serve": {}}, source=".psych/settings.yaml", scope="project")


def test_push_notifications_are_judged_by_the_egress_section_of_the_settings_file_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``psych serve --settings FILE`` judges webhook URLs by FILE's ``egress:`` section
    (and ``PSYCH_EGRESS_*``), as it takes its keys from FILE; before, the webhooks were
    judged by the default global file's, whatever ``--settings`` named."""
    monkeypatch.delenv("PSYCH_SETTINGS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))  # no default file
    settings = tmp_path / "settings.yaml"
    settings.write_text("egress:\n  deny: ['*.internal.example', '10.9.0.0/16']\n")
    args = build_parser().parse_args(["serve", "--settings", str(settings)])
    policy = EgressPolicy(egress_from(args))
    refusal = policy.judge("https://hooks.internal.example/a2a", "acme")
    assert refusal is not None
    assert refusal.message() == (
        "egress refused: hooks.internal.example: denied by the fleet's rule host *.internal.example"
    )
    # The environment's rules still hold (the suite allows loopback there).
    assert policy.judge("http://127.0.0.1:8080/hook", "acme") is None
    settings.write_text("egress:\n  deny: ['10.0.0.0/33']\n")
    with pytest.raises(PsychError, match=r"10\.0\.0\.0/33.* is not a CIDR"):
        egress_from(args)


async def test_serve_dispatches_within_the_permits_section_of_its_settings_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PSYCH_SETTINGS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))  # no default file
    settings = tmp_path / "settings.yaml"
    settings.write_text("permits:\n  tenants:\n    acme: {code_tools: ['lookup_*']}\n")
    args = build_parser().parse_args(["serve", "--settings", str(settings)])
    permits = permits_from(args)
    assert permits is not None
    assert await permits.permitted("acme", PermitSource("code")) == ("lookup_*",)
    assert await permits.permitted("globex", PermitSource("code")) is None
    assert permits_from(build_parser().parse_args(["serve"])) is None
    settings.write_text("permits:\n  tenants:\n    acme: {code_tools: lookup_*}\n")
    with pytest.raises(PsychError) as refused:
        permits_from(args)
    assert str(refused.value) == (
        f"{settings}: permits.tenants.acme.code_tools: a list of names and prefixes ending "
        "in '*', not 'lookup_*'"
    )
    # A tenant no Scope can carry (a quoted key ending in a newline) would permit nobody.
    settings.write_text('permits:\n  tenants:\n    "acme\\n": {code_tools: [lookup_x]}\n')
    with pytest.raises(PsychError, match=r"permits\.tenants\.acme\n: not a tenant"):
        permits_from(args)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"PSYCH_BLOB_URL": "s3://bucket/blobs", "PSYCH_BLOB_DIR": "blobs"}, "PSYCH_BLOB_DIR"),
        ({"PSYCH_BLOB_URL": "s3:///blobs"}, "PSYCH_BLOB_URL"),
        ({"PSYCH_BLOB_DIR": "a-file"}, "is a file, not a directory"),
        ({"PSYCH_BLOB_URL": "s3://bucket/blobs", "PSYCH_TOKEN_DIR": "tokens"}, "PSYCH_TOKEN_DIR"),
    ],
)
def test_serve_refuses_its_stores_settings_before_it_connects(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    named: str,
) -> None:
    # From a review: the blob and token stores were built after the Temporal client was
    # connected, so a store setting that is wrong was told only once a server answered
    # (none running: "cannot connect to Temporal"), though serve_settings says nothing is
    # connected to for settings that are refused.
    monkeypatch.delenv("PSYCH_SETTINGS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # no global settings file there
    monkeypatch.setenv(
        "PSYCH_SERVE_API_KEYS",
        json.dumps([{"sha256": ApiKey.of("k", "acme").sha256, "tenant": "acme"}]),
    )
    for name in ("PSYCH_BLOB_URL", "PSYCH_BLOB_DIR", "PSYCH_TOKEN_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, str(tmp_path / value) if name.endswith("_DIR") else value)
    (tmp_path / "a-file").write_text("not a directory")
    store = str(tmp_path / "versions")
    assert main(["serve", "--address", "127.0.0.1:9", "--store", store]) == 1
    err = capsys.readouterr().err
    assert named in err, err
    assert "cannot connect to Temporal" not in err, err
