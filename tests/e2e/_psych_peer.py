"""Two psych sides on loopback for the psych-to-psych A2A tests.

The PEER side: the harness's worker (in this process, on the harness's task queue) runs
the Runs that ``psych serve``'s app (under uvicorn on 127.0.0.1) dispatches for A2A
messages, in the tenant of each message's API key. Every POST the app receives is
recorded (``SeenRequests``) so a test can count the messages a peer was sent.

The CALLER side: ``psych worker`` in its own process (``_role_proc.spawn_role``) on a task
queue of its own, with the serve API keys as ``PSYCH_SECRET_<NAME>`` credentials, so a
test can SIGKILL it and start another; ``PsychClient`` of that queue dispatches and reads
the caller's Runs.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from psych_runtime.activities.versions import FileVersionStore
from psych_runtime.specs import ToolRegistry
from psych_runtime.workers.serve import ApiKey, AuthSettings, ServeSettings, create_app
from psych_runtime.workflows import PsychClient
from tests.forking import aio

from ._role_proc import spawn_role, stop
from ._waiting import eventually
from .conftest import Harness

SEND_METHODS = frozenset({"SendMessage", "SendStreamingMessage"})
"""The JSON-RPC methods (and HTTP+JSON paths' last part) that send a message."""


@dataclass(frozen=True)
class Seen:
    """One POST the served app received."""

    path: str
    method: str
    """The JSON-RPC method, or for the HTTP+JSON binding the path's last part."""
    authorization: str


@dataclass
class SeenRequests:
    """An ASGI wrapper around the served app that records every POST it receives."""

    app: ASGIApp
    seen: list[Seen] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        read: list[Message] = []
        body = b""
        while not read or read[-1].get("more_body", False):
            read.append(await receive())
            body += read[-1].get("body", b"")
        path: str = scope["path"]
        method = path.rsplit("/", 1)[-1].split(":")[-1]
        if path.endswith("/"):
            try:
                method = str(json.loads(body).get("method", ""))
            except ValueError:
                method = ""
        headers = dict(scope["headers"])
        self.seen.append(Seen(path, method, headers.get(b"authorization", b"").decode()))

        async def replay() -> Message:
            return read.pop(0) if read else await receive()

        await self.app(scope, replay, send)

    def sends(self, agent: str) -> list[Seen]:
        """The messages sent to ``agent`` (``send``/``message:send`` or ``stream``)."""
        prefix = f"/a2a/{agent}/"
        return [
            s
            for s in self.seen
            if (s.path + "/").startswith(prefix)
            and (s.method in SEND_METHODS or s.method in {"send", "stream"})
        ]


@dataclass
class Sides:
    """The peer's serve URL and requests, and the caller's worker process and client."""

    base: str
    seen: SeenRequests
    caller: PsychClient
    proc: aio.Process
    caller_start: tuple[str, str, Path, str]
    """(target, task queue, blob directory, model URL) the caller's workers start with."""
    env: Mapping[str, str]
    """The caller workers' credentials."""

    def url(self, agent: str) -> str:
        """The served agent's A2A URL (its card is under it)."""
        return f"{self.base}/a2a/{agent}"

    async def kill_caller(self) -> None:
        """SIGKILL the caller's worker process."""
        await stop(self.proc, signal.SIGKILL)

    async def restart_caller(self) -> None:
        """Start another caller worker on the same queue, blobs and model."""
        target, task_queue, blobs, model_url = self.caller_start
        self.proc = await spawn_role(
            target, task_queue, ("all",), blobs, model_url, extra_env=self.env
        )


@asynccontextmanager
async def psych_sides(
    harness: Harness, keys: Mapping[str, tuple[str, str]]
) -> AsyncIterator[Sides]:
    """Both sides running while the block runs.

    Args:
        harness: its worker runs the peer's Runs; its client is the served app's.
        keys: credential name -> (API key, tenant): the serve app takes each key for its
            tenant, and the caller's worker resolves the credential name to the key.
    """
    api_keys = tuple(ApiKey.of(key, tenant, "caller") for key, tenant in keys.values())
    seen = SeenRequests(create_app(ServeSettings(harness.client, AuthSettings(api_keys))))
    server = uvicorn.Server(uvicorn.Config(seen, host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())

    async def started() -> bool:
        return server.started

    caller_queue = f"p2p-caller-{uuid.uuid4().hex[:12]}"
    target = harness.env.client.service_client.config.target_host
    env = {f"PSYCH_SECRET_{name.upper().replace('-', '_')}": key for name, (key, _) in keys.items()}
    blobs = harness.home / "caller" / "blobs"
    caller = PsychClient(
        harness.env.client,
        store=FileVersionStore(harness.home / "caller" / "versions"),
        task_queue=caller_queue,
        registry=ToolRegistry(),
    )
    proc: aio.Process | None = None
    sides: Sides | None = None
    try:
        async with harness.worker():
            await eventually(started, what="uvicorn to listen")
            port = server.servers[0].sockets[0].getsockname()[1]
            proc = await spawn_role(
                target, caller_queue, ("all",), blobs, harness.fake.base_url, extra_env=env
            )
            sides = Sides(
                base=f"http://127.0.0.1:{port}",
                seen=seen,
                caller=caller,
                proc=proc,
                caller_start=(target, caller_queue, blobs, harness.fake.base_url),
                env=env,
            )
            yield sides
    finally:
        if sides is not None:
            await stop(sides.proc, signal.SIGKILL)
        elif proc is not None:
            await stop(proc, signal.SIGKILL)
        server.should_exit = True
        await serving
