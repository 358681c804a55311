"""turnlog.kernel.operations: one module per verb; Branch methods import them lazily."""

__all__: list[str] = []
