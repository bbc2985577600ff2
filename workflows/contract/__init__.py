"""psych_runtime.workflows.contract (see workflows/README.md)."""
