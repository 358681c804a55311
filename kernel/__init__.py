"""turnlog.kernel: the command side (Kernel, Branch, Session, verbs, providers)."""

__all__: list[str] = []
