"""`make demo`: the support agent end to end, in one process, on a real Temporal dev server.

It starts, and stops again on the way out:

- the embedded Temporal dev server (port 7233, or ``PSYCH_DEMO_PORT``, or any free port
  when 7233 is taken);
- a loopback HTTP server playing the payments API the ``issue_refund`` tool calls (port
  8765, or ``PSYCH_DEMO_HTTP_PORT``, or any free port; the tool's URL follows it). It
  checks the bearer token against ``PSYCH_SECRET_PAYMENTS_API_KEY``, which is set to a
  demo value when unset, and the worker resolves the ``payments-api-key`` credential
  from that same variable;
- the scriptable fake model, scripted by ``scripted_support_model`` (what ``psych dev
  --fake-model`` serves) to behave like a small model: unless ``OPENAI_BASE_URL`` is
  set, in which case that endpoint (with ``OPENAI_API_KEY``) serves ``PSYCH_DEMO_MODEL``
  (default: the Spec's model);
- a psych worker with the tools of ``examples/tools.py`` whose Policy asks a person to
  approve every ``issue_refund`` call (``RulePolicy(tools={"issue_refund": "ask"})``, what
  ``psych worker --ask issue_refund`` builds).

Then it publishes ``support-agent.yaml``, dispatches one Run and prints its records live
and its report, exactly as ``psych run`` does. When the Run suspends on the refund's
approval, the demo prints the command an operator would run (``psych approve <run> <call
id>``) and approves the call itself, as operator ``ops``, through ``PsychClient.approve``;
the refund then runs. Then it runs the workflow ``onboarding-workflow.yaml`` the same way: a
tool step (``create_account``) and an agent step (a greeter, a child AgentRun, followed in
place). It exits 0 when both Runs completed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from psych_runtime.activities import (
    Endpoint,
    EnvSecretResolver,
    FileVersionStore,
    LocalBlobStore,
    ModelEndpoints,
    RulePolicy,
)
from psych_runtime.activities.egress import LOOPBACK, EgressSettings
from psych_runtime.specs import (
    AgentSpec,
    Scope,
    ToolRegistry,
    WorkflowSpec,
    parse_spec,
    spec_to_data,
)
from psych_runtime.testing import FakeModel
from psych_runtime.workers import (
    WorkerSettings,
    exit_process,
    follow_run,
    run_worker,
    start_dev_server,
)
from psych_runtime.workers._loading import load_object, load_spec_file
from psych_runtime.workers.cli._scripted_model import scripted_support_model
from psych_runtime.workflows import PsychClient, RunHandle, RunStatus, Suspended

HERE = Path(__file__).resolve().parent
SPEC_FILE = HERE / "support-agent.yaml"
WORKFLOW_FILE = HERE / "onboarding-workflow.yaml"
WORKFLOW_MESSAGE = "Onboard Ada Lovelace, who signed up for the starter plan."
TOOLS = f"{HERE / 'tools.py'}:registry"
MESSAGE = "Please refund order 42, it arrived broken."
TASK_QUEUE = "psych-demo"
TENANT = "demo"
OPERATOR = "ops"
ASK_BEFORE = "issue_refund"
SECRET_VARIABLE = "PSYCH_SECRET_PAYMENTS_API_KEY"
SPEC_HTTP_PORT = 8765


# --- the payments API ---------------------------------------------------------------------


def _json(text: str) -> dict[str, Any]:
    """A request body's JSON object ({} when it is not one)."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@contextmanager
def payments_api(port: int) -> Iterator[str]:
    """Serve ``POST /orders/{id}/refund`` on loopback; yield the base URL."""
    refund_path = re.compile(r"^/orders/([^/]+)/refund$")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = _json(self.rfile.read(length).decode() if length else "")
            expected = f"Bearer {os.environ.get(SECRET_VARIABLE, '')}"
            matched = refund_path.match(self.path)
            if self.headers.get("authorization") != expected:
                self._answer(401, {"error": "invalid or missing bearer token"})
            elif matched is None:
                self._answer(404, {"error": f"no route for POST {self.path}"})
            else:
                order_id = matched.group(1)
                self._answer(
                    200,
                    {
                        "refunded": True,
                        "order_id": order_id,
                        "refund_id": f"rf-{order_id}",
                        "reason": body.get("reason"),
                    },
                )

        def _answer(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the Run's records already show every call

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="payments-api", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# --- wiring -------------------------------------------------------------------------------


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        # As the servers do, so a port left in TIME_WAIT by a previous demo counts as free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class DemoSetupError(Exception):
    """A ``PSYCH_DEMO_*`` variable names no port, or a port that is taken."""


def _port(variable: str, preferred: int) -> int:
    """``$variable`` (0: any free port), else ``preferred`` when free, else 0 (the OS picks
    one). A value that is no port, or a port in use, is refused naming the variable, before
    anything starts."""
    value = os.environ.get(variable)
    if not value:
        return preferred if _is_free(preferred) else 0
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise DemoSetupError(f"{variable}={value!r} is not a port number (0 to 65535)")
    if port and not _is_free(port):
        raise DemoSetupError(
            f"{variable}={port}: port {port} on 127.0.0.1 is in use; name a free one, or "
            f"unset {variable} to use {preferred} when free and any free port otherwise"
        )
    return port


def _example_spec() -> AgentSpec:
    spec = load_spec_file(SPEC_FILE)
    assert isinstance(spec, AgentSpec)
    return spec


@contextmanager
def _stdout_to_devnull() -> Iterator[None]:
    """Point file descriptor 1 at /dev/null while a child process is started.

    The dev server prints a banner on the standard output it inherits, late enough to land
    in the middle of the Run's records; nothing else writes while it starts.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _approver(client: PsychClient, run: RunHandle) -> Callable[[Any], Awaitable[None]]:
    """What ``follow_run`` calls with each record: approve the refund once it waits."""
    operator = Scope(tenant=TENANT, principal=OPERATOR)

    async def on_record(record: Any) -> None:
        if not isinstance(record, Suspended) or record.pending.reason != "approval":
            return
        call_id = record.pending.id
        print(
            f"    (the demo approves {call_id} itself, as operator {OPERATOR!r}, "
            "through PsychClient.approve)",
            flush=True,
        )
        await client.approve(run, call_id, scope=operator, note="order checked, refund it")

    return on_record


def _demo_workflow(model: str) -> WorkflowSpec:
    """The example workflow with its agent steps' model set."""
    data = spec_to_data(load_spec_file(WORKFLOW_FILE))
    for step in data["steps"]:
        if step["kind"] == "agent":
            step["spec"]["model"]["model"] = model
    spec = parse_spec(data, source=str(WORKFLOW_FILE))
    assert isinstance(spec, WorkflowSpec)
    return spec


def _demo_spec(example: AgentSpec, payments_url: str, model: str) -> AgentSpec:
    """The example Spec, its HTTP tool pointed at ``payments_url`` and its model set."""
    data = spec_to_data(example)
    for tool in data["tools"]:
        if tool["kind"] == "http":
            tool["url"] = tool["url"].replace(f"http://127.0.0.1:{SPEC_HTTP_PORT}", payments_url)
    data["model"]["model"] = model
    spec = parse_spec(data, source=str(SPEC_FILE))
    assert isinstance(spec, AgentSpec)
    return spec


async def main(dev_port: int, http_port: int) -> int:
    """Run the demo on these ports (0: any free one); the exit status is 0 when both Runs
    completed."""
    os.environ.setdefault(SECRET_VARIABLE, "demo-payments-key")
    registry = load_object(TOOLS)
    assert isinstance(registry, ToolRegistry)
    real_model = bool(os.environ.get("OPENAI_BASE_URL"))
    with _stdout_to_devnull():
        env = await start_dev_server(port=dev_port or None)
    try:
        async with AsyncExitStack() as stack:
            payments_url = stack.enter_context(payments_api(http_port))
            example = _example_spec()
            model = example.model.model
            if real_model:
                model = os.environ.get("PSYCH_DEMO_MODEL") or model
                endpoints = ModelEndpoints.from_env()
                serving = f"{model} at {os.environ['OPENAI_BASE_URL']}"
            else:
                fake = await stack.enter_async_context(FakeModel(models=(model,)))
                fake.responder = scripted_support_model
                endpoints = ModelEndpoints(default=Endpoint(fake.base_url, "demo-model-key"))
                serving = f"the scripted fake model as {model} (set OPENAI_BASE_URL for a real one)"
            spec = _demo_spec(example, payments_url, model)
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="psych-demo-")))
            settings = WorkerSettings(
                task_queue=TASK_QUEUE,
                registry=registry,
                blobs=LocalBlobStore(home / "blobs"),
                endpoints=endpoints,
                secrets=EnvSecretResolver(),
                policy=RulePolicy(tools={ASK_BEFORE: "ask"}),
                # The demo's own servers are on loopback, which a Spec may reach only when
                # the operator allows it.
                egress=EgressSettings().allowing(*LOOPBACK),
            )
            await stack.enter_async_context(run_worker(env.client, settings))
            print(f"Temporal dev server at {env.client.service_client.config.target_host}")
            print(f"payments API at {payments_url}")
            print(f"model: {serving}")
            print(f"approval needed for: {ASK_BEFORE}")
            client = PsychClient(
                env.client,
                store=FileVersionStore(home / "versions"),
                task_queue=TASK_QUEUE,
                registry=registry,
            )
            version = client.publish(spec)
            print(f"published {spec.name} {version.hash}")
            print(f"input: {MESSAGE}\n", flush=True)
            scope = Scope(tenant=TENANT)
            run = await client.dispatch(version, MESSAGE, scope=scope)
            report = await follow_run(client, run, scope=scope, on_record=_approver(client, run))
            workflow = client.publish(_demo_workflow(model))
            print(f"\npublished workflow {workflow.spec.name} {workflow.hash}")
            print(f"input: {WORKFLOW_MESSAGE}\n", flush=True)
            onboarding = await client.dispatch(workflow, WORKFLOW_MESSAGE, scope=scope)
            steps = await follow_run(client, onboarding, scope=scope)
    finally:
        await env.shutdown()
    completed = (report.status, steps.status) == (RunStatus.COMPLETED, RunStatus.COMPLETED)
    return 0 if completed else 1


if __name__ == "__main__":
    try:
        ports = _port("PSYCH_DEMO_PORT", 7233), _port("PSYCH_DEMO_HTTP_PORT", SPEC_HTTP_PORT)
    except DemoSetupError as error:
        print(f"demo: {error}", file=sys.stderr)
        sys.exit(2)
    try:
        exit_process(asyncio.run(main(*ports)))
    except KeyboardInterrupt:
        exit_process(130)
