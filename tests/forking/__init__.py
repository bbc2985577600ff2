"""Start the suite's ``psych`` and MCP test server processes cheaply: forked from a host
that imported them once (``tests.forking._host``), not fresh interpreters that import the
worker stack again (1.5-2.3 s of CPU each)."""
