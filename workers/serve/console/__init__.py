"""psych_runtime.workers.serve.console: the web console of ``psych serve``.

Static HTML, ES modules and CSS shipped as package data (no build step, nothing fetched
from elsewhere), served by ``console_routes()`` on the same app as the HTTP API it calls.
"""

from psych_runtime.workers.serve.console._routes import CONSOLE_CSP, console_routes

__all__ = ["CONSOLE_CSP", "console_routes"]
