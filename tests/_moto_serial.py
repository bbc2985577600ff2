"""moto's S3 server, handling one request at a time: ``python _moto_serial.py HOST PORT``.

S3 makes a conditional write (``If-None-Match: *``) atomic. moto's threaded server checks
the condition and then stores, so two concurrent puts of one key can both pass the check
and leave two versions. Tests that race writers against each other need S3's atomicity,
so this server keeps moto's application and its threaded connections but lets only one
request at a time into the backend. Run as a script by ``tests/_s3_server.py``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple


def main(host: str, port: int) -> None:
    os.environ.setdefault("MOTO_PORT", str(port))
    app = DomainDispatcherApplication(create_backend_app)
    one_at_a_time = threading.Lock()

    def serial(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        with one_at_a_time:
            # The body is read out inside the lock: a lazy response would run the
            # backend after the lock is released.
            return list(app(environ, start_response))

    run_simple(host, port, serial, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
