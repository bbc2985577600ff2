"""psych_runtime.workers."""

__all__: list[str] = []
