"""turnlog.projections: the conversation domain, the event catalogue and pure folds."""

__all__: list[str] = []
