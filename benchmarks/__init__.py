"""The benchmarks ``turnlog bench NAME`` runs from a source checkout (not shipped in the wheel).

Each module exposes ``add_arguments(parser)`` and ``run(args) -> int``; ``docs/performance.md``
gives today's figures and the commands. They measure internals on purpose (private store
writers, the chunk log), so they live outside the package whose layers they cut across.
"""

__all__: list[str] = []
