"""``psych validate|publish --check-connections`` against real MCP servers on loopback: one
up, one stopped, one behind a bearer; the problem names the server's path.

Every line ``psych`` prints about the file is compared, the closing count included: a Spec
refused for any other reason, a wrong message or a missing problem fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from psych_runtime.workers.cli import main
from tests.forking import client as forking
from tests.mcp.fixture import McpTestServer, start_mcp_server

SECRET = "bearer-value-for-the-check"
DOWN = "server did not answer at publish and is not optional"
REFUSED = "ConnectError: All connection attempts failed"
"""What the check reads from a loopback port nothing listens on."""


def spec_file(tmp_path: Path, servers: list[dict[str, Any]], **extra: Any) -> Path:
    """An agent Spec naming ``servers``, as a JSON file."""
    spec = {"kind": "agent", "name": "checked", "model": {"model": "m"}, "mcp_servers": servers}
    path = tmp_path / "checked.json"
    path.write_text(json.dumps({**spec, **extra}))
    return path


def server_entry(name: str, server: McpTestServer, **fields: Any) -> dict[str, Any]:
    transport = "sse" if server.transport == "sse" else "http"
    return {"name": name, "url": server.url, "transport": transport, **fields}


def problems(file: Path, err: str) -> list[str]:
    """Every line ``psych`` printed about ``file``, its prefix taken off."""
    prefix = f"{file}: "
    return [line.removeprefix(prefix) for line in err.splitlines() if line.startswith(prefix)]


@pytest.fixture(scope="module")
def stopped_server() -> McpTestServer:
    """A server started then stopped: its URL is real, and nothing answers there now."""
    server = start_mcp_server("streamable-http")
    server.stop()
    return server


@pytest.fixture
def bearer_server() -> Iterator[McpTestServer]:
    server = start_mcp_server("streamable-http", require_bearer=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("command", ["validate", "publish"])
def test_an_unreachable_server_is_a_problem_with_its_path(
    command: str,
    tmp_path: Path,
    stopped_server: McpTestServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Its only server is down: the old check (an empty set of reachable servers meant
    # "don't check") passed this Spec.
    file = spec_file(tmp_path, [server_entry("crm", stopped_server)])
    store = tmp_path / "store"
    argv = [command, str(file), "--check-connections"]
    if command == "publish":
        argv += ["--store", str(store)]
    assert main(argv) == 1
    assert problems(file, capsys.readouterr().err) == [
        f"mcp_servers[crm]: {DOWN}: {REFUSED}",
        "1 problem(s); not valid",
    ]
    assert not store.exists() or not any(store.rglob("*.json"))


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
def test_a_reachable_server_is_no_problem(
    transport: str,
    tmp_path: Path,
    mcp_http_server: McpTestServer,
    mcp_sse_server: McpTestServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = mcp_sse_server if transport == "sse" else mcp_http_server
    file = spec_file(tmp_path, [server_entry("crm", server)])
    assert main(["validate", str(file), "--check-connections"]) == 0
    assert problems(file, capsys.readouterr().err) == []


def test_only_the_down_servers_that_are_not_optional_are_reported(
    tmp_path: Path,
    mcp_http_server: McpTestServer,
    stopped_server: McpTestServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    servers = [
        server_entry("up", mcp_http_server),
        server_entry("down", stopped_server),
        server_entry("spare", stopped_server, credential="other", optional=True),
    ]
    file = spec_file(tmp_path, servers)
    assert main(["validate", str(file), "--check-connections"]) == 1
    assert problems(file, capsys.readouterr().err) == [
        f"mcp_servers[down]: {DOWN}: {REFUSED}",
        "1 problem(s); not valid",
    ]


def test_without_the_flag_nothing_is_connected_to(
    tmp_path: Path, stopped_server: McpTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    file = spec_file(tmp_path, [server_entry("crm", stopped_server)])
    assert main(["validate", str(file)]) == 0
    assert problems(file, capsys.readouterr().err) == []


def test_servers_of_subagents_and_workflow_steps_are_checked(
    tmp_path: Path,
    mcp_http_server: McpTestServer,
    stopped_server: McpTestServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    helper = {
        "kind": "agent",
        "name": "helper",
        "model": {"model": "m"},
        "mcp_servers": [server_entry("docs", stopped_server)],
    }
    agent = {
        "kind": "agent",
        "name": "lead",
        "model": {"model": "m"},
        "mcp_servers": [server_entry("docs", mcp_http_server)],
        "subagents": [{"name": "helper", "description": "looks things up, " * 2, "spec": helper}],
    }
    workflow = {
        "kind": "workflow",
        "name": "flow",
        "steps": [{"kind": "agent", "name": "first", "spec": agent}],
    }
    file = tmp_path / "flow.json"
    file.write_text(json.dumps(workflow))
    assert main(["validate", str(file), "--check-connections"]) == 1
    helper_docs = "steps[first].spec.subagents[helper].spec.mcp_servers[docs]"
    # The lead's "docs" answered; the helper's, at another address, did not (and, being
    # another definition under the lead's name, the helper may not use it either).
    assert problems(file, capsys.readouterr().err) == [
        f"{helper_docs}: MCP server 'docs' is not the same definition as the parent's MCP "
        "server of that name, so the subagent may not use it",
        f"{helper_docs}: {DOWN}: {REFUSED}",
        "2 problem(s); not valid",
    ]


def test_the_credential_is_sent_as_a_bearer_and_never_printed(
    tmp_path: Path,
    bearer_server: McpTestServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    file = spec_file(tmp_path, [server_entry("crm", bearer_server, credential="crm-token")])
    monkeypatch.setenv("PSYCH_SECRET_CRM_TOKEN", SECRET)
    assert main(["validate", str(file), "--check-connections", "--tenant", "acme"]) == 0
    captured = capsys.readouterr()
    assert problems(file, captured.err) == []
    assert list(bearer_server.bearers().values()) == [[SECRET]]
    assert SECRET not in captured.out + captured.err


def test_a_missing_credential_is_a_problem_naming_it(
    tmp_path: Path,
    bearer_server: McpTestServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("PSYCH_SECRET_CRM_TOKEN", raising=False)
    file = spec_file(tmp_path, [server_entry("crm", bearer_server, credential="crm-token")])
    assert main(["validate", str(file), "--check-connections"]) == 1
    assert problems(file, capsys.readouterr().err) == [
        f"mcp_servers[crm]: {DOWN}: credential 'crm-token' is not available",
        "1 problem(s); not valid",
    ]
    assert bearer_server.bearers() == {}


def test_an_invalid_tenant_is_one_line(
    tmp_path: Path, mcp_http_server: McpTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    file = spec_file(tmp_path, [server_entry("crm", mcp_http_server)])
    assert main(["validate", str(file), "--check-connections", "--tenant", "no spaces"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("psych: invalid tenant 'no spaces'")
    assert err.count("\n") == 1


def test_the_cli_does_not_import_the_mcp_sdk_until_a_check_runs(tmp_path: Path) -> None:
    # Importing the SDK takes seconds on a busy machine; every psych command pays for what
    # the CLI imports, and only --check-connections (or a worker) needs it.
    probe = (
        "import sys\n"
        "from psych_runtime.workers.cli import main\n"
        "import psych_runtime.workers\n"
        "before = 'mcp' in sys.modules\n"
        f"main(['validate', {str(tmp_path / 'missing.json')!r}])\n"
        "print(before, 'mcp' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["False", "False"]


def test_validate_warns_of_every_spec_url_the_egress_policy_refuses_and_a_check_fails_on_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PSYCH_EGRESS_ALLOW", "")  # the default policy, not the suite's
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # no global settings file
    file = tmp_path / "agent.yaml"
    file.write_text(
        json.dumps(
            {
                "kind": "agent",
                "name": "egress",
                "model": {"model": "m"},
                "tools": [
                    {
                        "kind": "http",
                        "name": "refund",
                        "description": "Refund.",
                        "url": "http://127.0.0.1:9/orders/{id}",
                        "input_schema": {
                            "type": "object",
                            "properties": {"id": {"type": "string"}},
                        },
                    },
                    {
                        "kind": "http",
                        "name": "meta",
                        "description": "Metadata.",
                        "url": "http://169.254.169.254/latest/meta-data",
                    },
                ],
                "mcp_servers": [{"name": "docs", "url": "http://localhost:9/mcp"}],
            }
        )
    )
    rule = (
        "addresses are refused for URLs from a Spec unless the operator allows them (egress "
        "allow list: PSYCH_EGRESS_ALLOW or the settings file)"
    )
    tools = [
        "tools[meta].url: this environment's egress refused: "
        f"http://169.254.169.254/latest/meta-data: link-local (cloud metadata among them) {rule}",
        f"tools[refund].url: this environment's egress refused: http://127.0.0.1:9/orders/{{id}}: "
        f"loopback {rule}",
    ]
    # Warnings: the worker that runs it may allow what this shell does not.
    assert main(["validate", str(file)]) == 0
    assert problems(file, capsys.readouterr().err) == [
        *(f"warning: {line}" for line in tools),
        "warning: mcp_servers[docs].url: this environment's egress refused: "
        f"http://localhost:9/mcp (localhost -> 127.0.0.1): loopback {rule}",
    ]
    # Checking connections, the refusals are problems, each once: the MCP server's is
    # why its check failed. Every line is about the file (the egress port's log line was
    # printed bare).
    assert main(["validate", str(file), "--check-connections"]) == 1
    err = capsys.readouterr().err
    assert problems(file, err) == [
        f"mcp_servers[docs]: {DOWN}: EgressDenied: egress refused: localhost "
        f"(localhost -> 127.0.0.1): loopback {rule}",
        *tools,
        "3 problem(s); not valid",
    ]
    assert len(problems(file, err)) == len(err.splitlines())
    # An optional server is no problem when down, but one the policy refuses is.
    spec = json.loads(file.read_text())
    spec["mcp_servers"][0]["optional"] = True
    file.write_text(json.dumps(spec))
    assert main(["validate", str(file), "--check-connections"]) == 1
    assert problems(file, capsys.readouterr().err) == [
        *tools,
        "mcp_servers[docs].url: this environment's egress refused: http://localhost:9/mcp "
        f"(localhost -> 127.0.0.1): loopback {rule}",
        "3 problem(s); not valid",
    ]
    monkeypatch.setenv("PSYCH_EGRESS_ALLOW", "127.0.0.0/8,169.254.169.254/32")
    assert main(["validate", str(file)]) == 0
    assert problems(file, capsys.readouterr().err) == []


def test_a_check_prints_each_refusal_once_and_every_line_about_the_file(
    tmp_path: Path,
) -> None:
    # In its own process: the line was the egress port's log record, which Python prints
    # bare when nothing set logging up (pytest's own handler would have caught it here).
    file = spec_file(
        tmp_path,
        [{"name": "docs", "url": "http://localhost:9/mcp"}],
        a2a_peers=[{"name": "peer", "url": "http://localhost:9/a2a"}],
    )
    env = {**os.environ, "PSYCH_EGRESS_ALLOW": "", "XDG_CONFIG_HOME": str(tmp_path)}
    argv = ["validate", str(file), "--check-connections"]
    done = forking.run(  # forked (tests.forking)
        [sys.executable, "-m", "psych_runtime.workers.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert [line.startswith(f"{file}: ") for line in lines] == [True] * len(lines)
    assert [problem.split(": ")[0] for problem in problems(file, done.stderr)] == [
        "mcp_servers[docs]",
        "a2a_peers[peer]",
        "2 problem(s); not valid",
    ]


def test_allow_entries_naming_no_tool_the_server_lists_are_problems(
    tmp_path: Path, mcp_http_server: McpTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # An entry naming no tool granted nothing, silently: the check connected, listed the
    # tools and passed the Spec, and its Runs offered none of what the author meant.
    allow = ["echo", "look*", "crm__charge", "nope*"]
    file = spec_file(tmp_path, [server_entry("crm", mcp_http_server, allow=allow)])
    assert main(["validate", str(file), "--check-connections"]) == 1
    offers = "big, charge, echo, fail, image, lookup, progress, resource, slow, tally, wipe"
    assert problems(file, capsys.readouterr().err) == [
        f"mcp_servers[crm].allow: 'crm__charge' names no tool the server offers (it offers: "
        f"{offers}); allow names the server's own tool names, not the 'crm__<tool>' names "
        "the model sees",
        f"mcp_servers[crm].allow: 'nope*' names no tool the server offers (it offers: {offers})",
        "2 problem(s); not valid",
    ]
    # Every entry naming a tool: no problem.
    file = spec_file(tmp_path, [server_entry("crm", mcp_http_server, allow=["echo", "t*"])])
    assert main(["validate", str(file), "--check-connections"]) == 0
    assert problems(file, capsys.readouterr().err) == []


def test_validate_warns_of_an_a2a_peer_url_the_egress_policy_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Peers are reached through the same egress policy, but validate judged only HTTP
    # tools' and MCP servers' URLs: a peer on a private address passed without a word.
    monkeypatch.setenv("PSYCH_EGRESS_ALLOW", "")  # the default policy, not the suite's
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # no global settings file
    helper = {
        "kind": "agent",
        "name": "helper",
        "model": {"model": "m"},
        "a2a_peers": [{"name": "meta", "url": "http://169.254.169.254/"}],
    }
    spec = {
        "kind": "agent",
        "name": "lead",
        "model": {"model": "m"},
        "a2a_peers": [{"name": "billing", "url": "http://10.0.0.5/"}],
        "subagents": [{"name": "helper", "description": "looks things up, " * 2, "spec": helper}],
    }
    file = tmp_path / "agent.json"
    file.write_text(json.dumps(spec))
    rule = (
        "addresses are refused for URLs from a Spec unless the operator allows them (egress "
        "allow list: PSYCH_EGRESS_ALLOW or the settings file)"
    )
    assert main(["validate", str(file)]) == 0
    assert problems(file, capsys.readouterr().err) == [
        "warning: a2a_peers[billing].url: this environment's egress refused: "
        f"http://10.0.0.5/: private {rule}",
        "warning: subagents[helper].spec.a2a_peers[meta].url: this environment's egress "
        f"refused: http://169.254.169.254/: link-local (cloud metadata among them) {rule}",
    ]
    # Checking connections (nothing is sent: both are address literals the policy refuses),
    # each refusal is a problem once: the peer check's, as why the peer did not answer.
    assert main(["validate", str(file), "--check-connections"]) == 1
    said = problems(file, capsys.readouterr().err)
    assert said[-1] == "2 problem(s); not valid"
    assert [line.split(":")[0] for line in said if "egress refused" in line] == [
        "a2a_peers[billing]",
        "subagents[helper].spec.a2a_peers[meta]",
    ]
