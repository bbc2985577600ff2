"""Imported by a fork host in ``tests/forking/test_host.py``: starts a thread, as a library
that started one at import (or a Temporal runtime) would, which makes forking unsound."""

from __future__ import annotations

import threading

threading.Thread(target=threading.Event().wait, daemon=True).start()
