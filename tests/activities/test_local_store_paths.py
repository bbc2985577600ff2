"""The local token and version stores' disk errors name what was asked, never where the
store is: ``LocalStoreFailed``, as a ``LocalBlobStore``'s (``test_local_store_failures``).

A Run reaches both: a spawned child's Spec is published through the worker's version
store (``psych.version.publish``, whose failure the model reads as "not started: ..."),
and an MCP server's OAuth token is kept in the worker's token store. Before, the first
said "cannot write to the version store directory /var/lib/psych/versions: ..." and the
second let the ``OSError`` through, its words naming the record's file.

The disk refuses for real: a file stands where the store's directory (or a shard of it)
goes; the tests run as root, so a permission bit would refuse nothing.
"""

from __future__ import annotations

import errno
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

from psych_runtime.activities import (
    FileVersionStore,
    LocalTokenStore,
    McpSettings,
    StaticSecretResolver,
    TokenKey,
)
from psych_runtime.activities.blobs import LocalBlobStore, LocalStoreFailed
from psych_runtime.activities.contract import VERSION_PUBLISH, VersionPublishInput
from psych_runtime.activities.mcp import McpActivities
from psych_runtime.activities.versions import VersionActivities
from psych_runtime.specs import AgentBuilder, AgentSpec, McpOAuth, McpServer, Version
from psych_runtime.workers import PsychPlugin
from tests.activities.test_mcp import call
from tests.activities.test_mcp_oauth import oauth_server  # noqa: F401 (a fixture)
from tests.mcp.oauth_fixture import OAuthMcpServer

KEY = TokenKey("acme", None, "https://issuer.test", "psych-worker", "https://crm.test/mcp")


def child_spec() -> AgentSpec:
    return AgentBuilder("child").instructions("Help.").model("gpt-4o").build()


def says_nothing_of(err: BaseException | None, root: Path) -> None:
    """No message along ``err``'s chain names ``root`` (what an activity's failure carries
    into the Run's history)."""
    while err is not None:
        assert str(root) not in str(err), err
        err = err.__cause__ or (None if err.__suppress_context__ else err.__context__)


async def test_a_child_spec_not_published_names_the_version_never_the_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: SpecError "cannot make the version store directory <root>: Not a directory".
    (tmp_path / "file").write_bytes(b"not a directory")
    root = tmp_path / "file" / "versions"
    spec = child_spec()
    hashed = Version.of(spec).hash
    publish = VersionActivities(FileVersionStore(root)).publish
    with caplog.at_level(logging.WARNING), pytest.raises(LocalStoreFailed) as caught:
        await ActivityEnvironment().run(publish, VersionPublishInput(run_id="r1", spec=spec))
    err = caught.value
    assert str(err) == (
        f"Version {hashed} cannot be published: the local version store failed "
        "(ENOTDIR: Not a directory)"
    )
    assert (err.ref, err.errno_name, err.lasting) == (hashed, "ENOTDIR", True)
    says_nothing_of(err, tmp_path)
    assert str(root) in err.detail  # the operator's: psych publish prints it
    logged = [r.getMessage() for r in caplog.records if "version store failed" in r.getMessage()]
    assert len(logged) == 1 and str(root) in logged[0], logged


def test_a_version_that_cannot_be_read_names_it_never_the_directory(tmp_path: Path) -> None:
    store = FileVersionStore(tmp_path / "versions")
    hashed = store.publish(child_spec()).hash
    document = tmp_path / "versions" / f"{hashed.removeprefix('sha256:')}.json"
    document.unlink()
    document.mkdir()  # a directory where its document goes
    with pytest.raises(LocalStoreFailed) as caught:
        store.get(hashed)
    assert str(caught.value) == (
        f"Version {hashed} cannot be read: the local version store failed (EISDIR: Is a directory)"
    )
    says_nothing_of(caught.value, tmp_path)


async def test_a_token_store_refusing_names_the_record_never_the_path(tmp_path: Path) -> None:
    # Before: NotADirectoryError / FileExistsError, "[Errno 20] Not a directory: '<root>/..'".
    (tmp_path / "tokens").write_bytes(b"not a directory")
    store = LocalTokenStore(tmp_path / "tokens")
    steps: tuple[tuple[str, Callable[[], Awaitable[object]]], ...] = (
        ("read", lambda: store.get(KEY)),
        ("stored", lambda: store.put(KEY, b"record")),
        ("updated", lambda: store.update(KEY, lambda old: b"record")),
    )
    for done, step in steps:
        with pytest.raises(LocalStoreFailed) as caught:
            await step()
        said = f"the token record {KEY!r} cannot be {done}: the local token store failed ("
        assert str(caught.value).startswith(said), caught.value
        assert caught.value.ref == repr(KEY)
        says_nothing_of(caught.value, tmp_path)


async def test_what_an_update_raises_is_its_own_never_the_stores(tmp_path: Path) -> None:
    store = LocalTokenStore(tmp_path / "tokens")

    def change(old: bytes | None) -> bytes | None:
        raise FileNotFoundError("the change's own error")

    with pytest.raises(FileNotFoundError, match="the change's own error"):
        await store.update(KEY, change)


async def test_an_mcp_call_whose_token_store_refuses_fails_naming_the_record(
    oauth_server: OAuthMcpServer,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    # Before: the token store's NotADirectoryError, its path in the words the model read.
    (tmp_path / "tokens").write_bytes(b"not a directory")
    oauth = McpOAuth(preregistered_client_id="psych-worker", client_secret_credential="crm_secret")
    secret = "cc-secret-0123456789"
    mcp = McpActivities(
        blobs=LocalBlobStore(tmp_path / "blobs"),
        secrets=StaticSecretResolver({"crm_secret": secret}),
        settings=McpSettings(oauth_issuers={"crm_secret": oauth_server.issuer}),
        tokens=LocalTokenStore(tmp_path / "tokens"),
    )
    try:
        with pytest.raises(LocalStoreFailed) as caught:
            await call(mcp, McpServer(name="crm", url=oauth_server.url, oauth=oauth), "whoami", {})
    finally:
        await mcp.aclose()
    assert "the local token store failed (" in str(caught.value), caught.value
    says_nothing_of(caught.value, tmp_path)


@workflow.defn(name="PublishOnce", sandboxed=False)
class _PublishOnce:
    """``psych.version.publish`` under the retry policy the Runs give it (three attempts)."""

    @workflow.run
    async def run(self, spec: AgentSpec) -> str:
        try:
            await workflow.execute_activity(
                VERSION_PUBLISH,
                VersionPublishInput(run_id="r1", spec=spec),
                result_type=Version,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(
                    maximum_attempts=3,
                    initial_interval=timedelta(milliseconds=50),
                    backoff_coefficient=1.0,
                ),
            )
        except ActivityError as err:
            cause = err.cause
            state = err.retry_state.name if err.retry_state is not None else None
            if not isinstance(cause, ApplicationError):
                return f"not an ApplicationError: {cause!r}"
            return f"{cause.type} {cause.non_retryable} {state}: {cause.message}"
        return "published"


class _Counted(FileVersionStore):
    """A version store whose disk fails every write with ``code``, counting the attempts."""

    def __init__(self, root: Path, code: int) -> None:
        super().__init__(root)
        self.code = code
        self.attempts = 0

    def _write(self, version: Version, path: Path, *, replace: bool) -> bool:
        self.attempts += 1
        raise OSError(self.code, os.strerror(self.code), str(path))


@pytest.mark.parametrize(
    ("code", "attempts", "ends"),
    [
        (errno.EROFS, 1, "LocalStoreFailed True NON_RETRYABLE_FAILURE"),
        (errno.ENOSPC, 3, "LocalStoreFailed False MAXIMUM_ATTEMPTS_REACHED"),
    ],
    ids=["EROFS", "ENOSPC"],
)
async def test_an_activity_whose_disk_refuses_for_good_is_not_retried(
    dev_env: WorkflowEnvironment, tmp_path: Path, code: int, attempts: int, ends: str
) -> None:
    # Until 12-06 LocalStoreFailed left its activity as a plain exception, retryable: a
    # read-only directory was written again as often as the policy allowed (a tool's
    # catalogue: five times), though a model call failing on it already failed not
    # transient (``classify``). A full disk may be freed meanwhile: retried as before.
    client = await Client.connect(
        dev_env.client.service_client.config.target_host,
        namespace=dev_env.client.namespace,
        plugins=[PsychPlugin()],
    )
    store = _Counted(tmp_path / "versions", code)
    spec = child_spec()
    queue = f"publish-{code}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[_PublishOnce],
        activities=VersionActivities(store).activities(),
    ):
        said = await client.execute_workflow(
            _PublishOnce.run, spec, id=f"publish-once-{code}-{uuid.uuid4()}", task_queue=queue
        )
    assert said.startswith(f"{ends}: Version {Version.of(spec).hash} cannot be published")
    assert store.attempts == attempts
    assert str(tmp_path) not in said
