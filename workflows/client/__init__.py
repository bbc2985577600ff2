"""psych_runtime.workflows.client (see workflows/README.md)."""
