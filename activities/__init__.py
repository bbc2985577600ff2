"""psych_runtime.activities."""

__all__: list[str] = []
