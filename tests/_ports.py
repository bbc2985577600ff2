"""A free loopback port for a server a test starts (at the time of asking).

It is the product's own pick (outside the kernel's ephemeral range), so no port-0 bind in
the meantime (a dev server's internal services, a client's outgoing connection) takes it.
"""

from __future__ import annotations

from psych_runtime.workers import free_port

__all__ = ["free_port"]
