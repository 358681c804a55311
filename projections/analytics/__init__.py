"""turnlog.projections.analytics: usage, cost, latency, errors and tools from the log."""

__all__: list[str] = []
