"""psych_runtime.workflows.runs (see workflows/README.md)."""
