"""Files a command writes: never the store, never over a file unasked, never half-written.

``written_file`` writes to a private temporary file (0600, created with ``O_EXCL``) in the
destination's directory and moves it into place only when everything was written, so a
failure leaves nothing behind and an earlier file untouched. The destination is refused
when it is the store (its database file, ``-wal``, ``-shm`` or ``-journal``, also through
symbolic links), when it is a symbolic link (never followed), and when it exists and
``force`` is not given.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from ._command import UserError, sqlite_file

__all__ = ["check_destination", "store_files", "written_directory_files", "written_file"]

_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def store_files(url: str) -> list[Path]:
    """The files a SQLite store at ``url`` lives in (none for other stores)."""
    path = sqlite_file(url)
    if path is None:
        return []
    return [Path(f"{path}{suffix}") for suffix in _SIDE_FILES]


def _same(a: Path, b: Path) -> bool:
    """True when ``a`` and ``b`` name one file (existing), or resolve to one path (not yet)."""
    with contextlib.suppress(OSError):
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def check_destination(path: Path, *, force: bool, protected: Iterable[Path] = ()) -> None:
    """Refuse a destination that is a protected file, a symbolic link, a directory or (unforced) a file.

    Raises:
        UserError: naming the destination and why it is refused.
    """
    for kept in protected:
        if _same(path, kept):
            raise UserError(f"{path} is the store itself ({kept}); choose another output file")
    if path.is_symlink():
        raise UserError(f"{path} is a symbolic link; give the file it points to, or another name")
    if path.is_dir():
        raise UserError(f"{path} is a directory; give a file name")
    if path.exists() and not force:
        raise UserError(f"{path} exists; give --force to replace it")
    parent = path.parent
    if not parent.is_dir():
        raise UserError(f"the directory {parent} does not exist")


def _move_into_place(temporary: Path, path: Path, *, force: bool) -> None:
    os.chmod(temporary, 0o600)  # conversation logs are private
    if force:
        os.replace(temporary, path)  # replaces the directory entry; a link there is not followed
        return
    try:
        os.link(temporary, path)  # atomic and never over an existing file
    except FileExistsError as exc:
        raise UserError(f"{path} exists; give --force to replace it") from exc
    except OSError:
        # a file system without hard links: the check made before writing has to do
        if path.exists() or path.is_symlink():
            raise UserError(f"{path} exists; give --force to replace it") from None
        os.replace(temporary, path)
        return
    os.unlink(temporary)


@contextlib.contextmanager
def written_file(path: Path, *, force: bool, protected: Iterable[Path] = ()) -> Iterator[IO[bytes]]:
    """A binary file to write ``path`` through: in place only when the block ends without error.

    Args:
        path: The destination.
        force: Replace an existing file.
        protected: Files that must never be written (the store's).

    Raises:
        UserError: the destination is refused (see ``check_destination``).
    """
    protected = list(protected)
    check_destination(path, force=force, protected=protected)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    temporary = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        check_destination(path, force=force, protected=protected)
        _move_into_place(temporary, path, force=force)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


@contextlib.contextmanager
def written_directory_files(
    directory: Path, names: Iterable[str], *, force: bool, protected: Iterable[Path] = ()
) -> Iterator[Path]:
    """A private scratch directory whose files named ``names`` move into ``directory`` at the end.

    ``directory`` is created (0700) when missing. Each file is refused like ``written_file``
    refuses it; nothing is moved unless the block ends without error, and the scratch
    directory is removed either way.
    """
    protected, names = list(protected), list(names)
    if directory.is_symlink():
        raise UserError(f"{directory} is a symbolic link; give the directory it points to")
    if directory.exists() and not directory.is_dir():
        raise UserError(f"{directory} is not a directory")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name in names:
        check_destination(directory / name, force=force, protected=protected)
    scratch = Path(tempfile.mkdtemp(prefix=".turnlog-export-", dir=directory))
    try:
        yield scratch
        for name in names:
            check_destination(directory / name, force=force, protected=protected)
        for name in names:
            if (scratch / name).exists():
                _move_into_place(scratch / name, directory / name, force=force)
    finally:
        for leftover in scratch.iterdir():
            leftover.unlink()
        scratch.rmdir()
