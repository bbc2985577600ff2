"""psych_runtime.workflows."""

__all__: list[str] = []
