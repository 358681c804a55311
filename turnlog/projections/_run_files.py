"""Where a store's run files (stream_persist buffers and snapshot files) live by default."""

from __future__ import annotations

from pathlib import Path

from turnlog.eventstore import EventStore

__all__ = ["default_run_dir"]


def default_run_dir(store: EventStore) -> Path:
    """Where run files go when no ``persist_dir`` is given: a directory of this store's own.

    ``<store file>.runs`` next to a SQLite store file (``turnlog.db.runs/``), so two stores in
    one directory, or a store and its copy, never share buffers; ``./runs/<store_id>`` for
    in-memory and server stores (``./runs/store`` while the id is unknown). The rule lives
    here, below the kernel, so that ``turnlog verify`` finds the files without loading the kernel.
    """
    location = store.local_path
    if location is not None:
        return Path(str(location) + ".runs")
    return Path("runs").resolve() / (store.store_id or "store")
