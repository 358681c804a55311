"""turnlog.tools.bench: benchmarks run by ``turnlog bench NAME``."""

__all__: list[str] = []
