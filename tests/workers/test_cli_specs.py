"""``psych validate`` and ``psych publish``: exit codes, every problem, no tracebacks."""

from __future__ import annotations

import asyncio
import errno
import re
import sys
import tempfile
import time
from pathlib import Path

import pytest

import psych_runtime.workers as workers
from psych_runtime.workers.cli import main
from tests._ports import free_port
from tests._s3_server import S3_ENV, s3_server
from tests.forking import client as forking

from .conftest import EXAMPLES, SUPPORT_SPEC, TOOLS_REF


def test_public_names_are_sorted_and_exist() -> None:
    assert workers.__all__ == sorted(workers.__all__)
    assert {"follow_run", "format_record", "format_report"} <= set(workers.__all__)
    assert all(hasattr(workers, name) for name in workers.__all__)


def test_validate_a_valid_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(SUPPORT_SPEC), "--registry", TOOLS_REF]) == 0
    assert capsys.readouterr().out.strip() == f"{SUPPORT_SPEC}: valid"


def test_validate_prints_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "two.yaml"
    spec.write_text(
        "kind: agent\nname: two\nmodel: {model: m}\n"
        "tools:\n  - {kind: code, name: alpha}\n  - {kind: code, name: beta}\n"
    )
    assert main(["validate", str(spec), "--known-model", "other"]) == 1
    err = capsys.readouterr().err
    assert f"{spec}: tools[alpha]: code tool 'alpha' is not registered" in err
    assert f"{spec}: tools[beta]: code tool 'beta' is not registered" in err
    assert f"{spec}: model.model: unknown model 'm'" in err
    assert f"{spec}: 3 problem(s); not valid" in err


def test_malformed_yaml_names_line_and_column_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("kind: agent\nname: [oops\nmodel: {model: m}\n")
    assert main(["validate", str(spec)]) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1
    assert "line 3, column 6" in captured.err
    assert "Traceback" not in captured.err + captured.out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["validate", "no/such/spec.yaml"], "cannot read"),
        (["validate", str(SUPPORT_SPEC), "--registry", "no_such_module:registry"], "cannot import"),
        (["validate", str(SUPPORT_SPEC), "--registry", "no_colon"], "module:attribute"),
    ],
)
def test_errors_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("psych: ") and err.count("\n") == 1
    assert message in err


def test_publish_twice_prints_the_same_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "versions"
    argv = ["publish", str(SUPPORT_SPEC), "--registry", TOOLS_REF, "--store", str(store)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    second = capsys.readouterr().out
    assert first == second
    assert first.startswith("sha256:") and " agent support " in first
    digest = first.split()[0].removeprefix("sha256:")
    assert [p.name for p in store.iterdir()] == [f"{digest}.json"]


def test_a_version_store_it_cannot_write_to_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A directory another user owns, or a read-only mount: the Version's file cannot be
    # created in it (the error is made here, as root may create files in any directory).
    store = tmp_path / "versions"
    store.mkdir()

    def refused(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(errno.EACCES, "Permission denied", str(store / ".publish-x"))

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    argv = ["publish", str(SUPPORT_SPEC), "--registry", TOOLS_REF, "--store", str(store)]
    assert main(argv) == 1
    # The Version by hash and the errno, as a Run that publishes a child's Spec is told;
    # where the store is, after the ";", for the operator only (the error's detail).
    err = capsys.readouterr().err
    assert re.fullmatch(
        r"psych: Version sha256:[0-9a-f]{64} cannot be published: the local version store "
        rf"failed \(EACCES: Permission denied\); under {re.escape(str(store))}: "
        r"\[Errno 13\] Permission denied: .*\n",
        err,
    ), err


async def test_an_s3_store_that_refuses_or_cannot_be_reached_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bucket name mistyped, or an endpoint nothing listens on: what S3 (or botocore)
    # said, on one line, not botocore's traceback; an endpoint that did not answer is
    # StoreUnavailable, which the command's line gives with where the store is.
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    argv = ["publish", str(SUPPORT_SPEC), "--registry", TOOLS_REF, "--store"]
    async with s3_server() as server:
        status = await asyncio.to_thread(main, [*argv, server.url("no-such-bucket")])
    assert status == 1
    assert capsys.readouterr().err == (
        "psych: S3 refused: An error occurred (NoSuchBucket) when calling the PutObject "
        "operation: The specified bucket does not exist\n"
    )
    nobody = f"http://127.0.0.1:{free_port()}"
    status = await asyncio.to_thread(main, [*argv, f"s3://b?endpoint={nobody}&region=us-east-1"])
    assert status == 1
    err = capsys.readouterr().err
    assert re.fullmatch(
        r"psych: Version sha256:[0-9a-f]{64} cannot be published: the S3 version store did "
        r"not answer \(connection failed: EndpointConnectionError\); at "
        + re.escape(nobody)
        + r" \(s3://b/versions/[0-9a-f]{64}\.json\): Could not connect to the endpoint URL: "
        + re.escape(f'"{nobody}/')
        + r'b/versions/[0-9a-f]{64}\.json"\n',
        err,
    ), err


def test_publish_refuses_an_invalid_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "versions"
    assert main(["publish", str(SUPPORT_SPEC), "--store", str(store)]) == 1
    assert "code tool 'lookup_order' is not registered" in capsys.readouterr().err
    assert not store.exists()


def test_publish_refuses_an_oauth_server_it_cannot_use_at_every_depth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The authorization_code grant with neither a client nor dynamic registration allowed,
    # and no redirect URI: refused in the agent and in its subagent, nothing stored.
    spec = tmp_path / "consenting.yaml"
    oauth = "{grant: authorization_code, allow_dynamic_registration: false}"
    spec.write_text(
        "kind: agent\nname: a\nmodel: {model: m}\n"
        f"mcp_servers: [{{name: crm, url: 'https://crm.test', oauth: {oauth}}}]\n"
        "subagents:\n  - name: helper\n    description: Summarises long threads for me.\n"
        "    spec: {kind: agent, name: h, model: {model: m},\n"
        "           mcp_servers: [{name: crm, url: 'https://crm.test',\n"
        f"                          oauth: {oauth}}}]}}\n"
    )
    store = tmp_path / "versions"
    assert main(["publish", str(spec), "--store", str(store)]) == 1
    err = capsys.readouterr().err
    client = (
        "the authorization_code grant needs a client: preregistered_client_id, or cimd_url "
        "(a client-id metadata document), or allow_dynamic_registration: true (a client "
        "registered with the authorization server at run time); allow_dynamic_registration "
        "is false"
    )
    redirect = (
        "the authorization_code grant needs a redirect URI: where the operator's OAuth "
        "callback listens (psych oauth-callback, psych serve /oauth/callback)"
    )
    assert err.splitlines() == [
        f"{spec}: mcp_servers[crm].oauth.preregistered_client_id: {client}",
        f"{spec}: mcp_servers[crm].oauth.redirect_uris: {redirect}",
        f"{spec}: subagents[helper].spec.mcp_servers[crm].oauth.preregistered_client_id: {client}",
        f"{spec}: subagents[helper].spec.mcp_servers[crm].oauth.redirect_uris: {redirect}",
        f"{spec}: 4 problem(s); not valid",
    ]
    assert not store.exists()


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_spec_validates(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(example), "--registry", TOOLS_REF]) == 0, capsys.readouterr().err


BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)
HOSTILE_FILES: dict[str, tuple[bytes, str]] = {
    "latin1.yaml": (b"kind: agent\nname: caf\xe9\n", "not UTF-8 at line 2, column 10"),
    "deep.json": (b"[" * 100_000, "line 1, column 129: nested deeper than 128 levels"),
    "deep.yaml": (b"[" * 100_000, "line 1, column 129: nested deeper than 128 levels"),
    "recursive.yaml": (b"&a [*a]", "[0]: contains itself"),
    "bomb.yaml": (
        ("kind: agent\nname: b\nmodel: {model: m}\na: &a [lol, lol, lol, lol, lol, lol, lol,"
         " lol, lol]\n" + BOMB).encode(),
        "expands to more than",
    ),
    "bigint.json": (
        b'{"kind": "agent", "name": "a", "model": {"model": "m", "max_output_tokens": '
        + b"9" * 5000 + b"}}",
        "line 1, column 77: a number of 5000 digits",
    ),
    "surrogate.json": (
        b'{"kind": "agent", "name": "a", "model": {"model": "m"}, "instructions": "\\ud800"}',
        "instructions: contains a lone surrogate U+D800",
    ),
    "duplicate.yaml": (
        b"kind: agent\nname: a\nmodel: {model: m}\nname: b\n",
        "line 4, column 1: duplicate key 'name' (first at line 2)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
def test_hostile_spec_file_is_one_line_naming_file_and_place(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    content, place = HOSTILE_FILES[name]
    spec = tmp_path / name
    spec.write_bytes(content)
    assert main(["validate", str(spec)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"psych: {spec}") and captured.err.count("\n") == 1
    assert place in captured.err


def test_psych_validate_refuses_an_alias_bomb_within_seconds(tmp_path: Path) -> None:
    content, place = HOSTILE_FILES["bomb.yaml"]
    spec = tmp_path / "bomb.yaml"
    spec.write_bytes(content)
    started = time.monotonic()
    done = forking.run(  # forked (tests.forking): its imports done, as in a warm process
        [sys.executable, "-m", "psych_runtime.workers.cli", "validate", str(spec)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Forked, its imports are done: the refusal itself takes < 1 s of this.
    assert time.monotonic() - started < 15
    assert done.returncode == 1
    assert place in done.stderr and "Traceback" not in done.stderr
