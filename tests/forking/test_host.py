"""The fork host (``tests.forking``) as the fixtures rely on it: a server's status is its
own process's, however the kernel hands out pids; a host killed takes its children."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.forking.client import REPO

# Run in a PID namespace of its own, where this script's processes are the only ones and
# ``ns_last_pid`` says which pid the next fork takes: a server gets the pid of one killed
# before, as it does on a busy machine once the pid counter wraps (pid_max, 32768 here).
_REUSED = """
import os, signal, tempfile
from tests.forking.client import spawn, stop_host

log = tempfile.NamedTemporaryFile(prefix="mcp-forked-", suffix=".log")
first = spawn("tests.mcp.server", ["--transport", "sse"], stderr=log)
os.kill(first.pid, signal.SIGKILL)
assert first.wait(30) == -signal.SIGKILL
with open("/proc/sys/kernel/ns_last_pid", "w") as last:
    last.write(str(first.pid - 1))
second = spawn("tests.mcp.server", ["--transport", "sse"], stderr=log)
assert second.pid == first.pid, (first.pid, second.pid)
try:
    print("running" if second.poll() is None else f"ended {second.returncode}")
    os.kill(second.pid, signal.SIGTERM)
    print(f"then {second.wait(30)}")
finally:
    stop_host()
"""


def test_a_server_under_an_earlier_servers_pid_is_running_not_ended() -> None:
    # The host took a pid it had reaped before for that child's: a server just started
    # under it polled as ended (the earlier one's -9), so its fixture gave up on it.
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare(1) to make a PID namespace")
    namespace = [unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    done = subprocess.run(
        [*namespace, sys.executable, "-c", _REUSED],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"no PID namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["running", "then -15"], done.stderr


# In a process of its own, with its own host (killing this process's would kill the
# servers its other tests use).
_HOST_KILLED = """
import os, signal, time
import tests.forking.client as forked
from tests.mcp.fixture import start_mcp_server

def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True

server = start_mcp_server("sse")
assert forked._host is not None
host = forked._host.process
os.kill(host.pid, signal.SIGKILL)
host.wait()
for _ in range(600):  # it goes at once; a loaded machine may take its time
    if gone(server.pid):
        break
    time.sleep(0.05)
else:
    os.kill(server.pid, signal.SIGKILL)
print("gone" if gone(server.pid) else "left running")
try:
    server.stop()
except RuntimeError as err:
    print(str(err).split(" (")[0])
again = start_mcp_server("sse")  # a host started anew
again.stop()
print(f"again {again.process.returncode}")
forked.stop_host()
"""


def test_a_killed_host_takes_its_servers_with_it_and_says_so() -> None:
    # The host killed (SIGKILL, the OOM killer), its servers were left listening after
    # the session, and stopping one raised BrokenPipeError without stopping it.
    done = subprocess.run(
        [sys.executable, "-c", _HOST_KILLED],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "gone",
        "the fork host exited",
        "again -15",
    ], done.stderr


# In a process of its own, whose host is started while a variable is patched.
_PATCHED = """
import json, os, sys
import tests.forking.client as forking

unpatched = dict(os.environ)
os.environ["PYTHONPATH"] = "/patched-by-a-test"
done = forking.run(
    [sys.executable, "-m", "tests.forking.probe", "info"],
    env=unpatched,
    capture_output=True,
    cwd=forking.REPO,
)
forking.stop_host()
print(json.loads(done.stdout)["forked"])
"""


def test_a_host_started_while_a_test_patched_the_environment_still_forks() -> None:
    # The host took the environment of the moment: a PYTHONPATH a test had set then
    # made every later child, without it, be executed instead of forked.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", _PATCHED],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True"], done.stderr
