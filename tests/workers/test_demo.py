"""``examples/demo.py`` (what ``make demo`` runs) as a child process, on its own ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from .conftest import EXAMPLES, ROOT, free_port


def test_demo_runs_the_support_agent_end_to_end() -> None:
    dev_port, http_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PSYCH_"))}
    env.update(PSYCH_DEMO_PORT=str(dev_port), PSYCH_DEMO_HTTP_PORT=str(http_port))
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "demo.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert f"Temporal dev server at 127.0.0.1:{dev_port}\n" in out
    assert f"payments API at http://127.0.0.1:{http_port}\n" in out
    assert "Temporal Server:" not in out  # the server's banner stays out of the records
    lines = out.splitlines()
    assert '  tool call lookup_order({"order_id": "42"}) ...' in lines
    refund = '  tool call issue_refund -> ok: {"refunded": true, "order_id": "42"'
    assert any(line.startswith(refund) for line in lines), out
    assert "settled completed: answered" in lines
    assert "status:       completed" in lines
    assert (
        "answer:       I refunded order 42 (19.90 EUR); refund rf-42 is on its way to you." in lines
    )
    assert "tool calls:   2 (2 ok)" in lines
    assert "cost:         unknown" in lines
    # Everything it started is stopped: both ports can be bound again.
    for port in (dev_port, http_port):
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))
