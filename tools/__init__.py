"""turnlog.tools: the turnlog command, loopback fake providers, demo and benchmarks."""

__all__: list[str] = []
