"""The scripting the loopback fake servers share: script files, entries used up in order.

A script is a list of entries (pydantic models, one class per fake) read from JSON (a list, or
``{"responses": [...]}``) or JSONL. Each entry answers ``times`` requests (None: any number);
entries with a ``match`` are tried first, then the first unused entry without one.
``ScriptSlots`` keeps that bookkeeping behind a lock, so a server on its own thread and the test
that reads ``unused()`` agree.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

# The fakes' one error class; it is defined with the OpenAI script, whose public name it is.
from ._errors import ScriptError

__all__ = ["ScriptSlots", "coerce_entries", "load_entries"]


class _Entry(Protocol):
    @property
    def times(self) -> int | None: ...

    @property
    def match(self) -> object | None: ...


EntryT = TypeVar("EntryT", bound=_Entry)
ModelT = TypeVar("ModelT", bound=BaseModel)


class _Slot(Generic[EntryT]):
    """A script entry and how many more requests it may answer."""

    def __init__(self, index: int, entry: EntryT) -> None:
        self.index = index
        self.entry = entry
        self.left = entry.times

    def usable(self) -> bool:
        return self.left is None or self.left > 0


class ScriptSlots(Generic[EntryT]):
    """The entries of a script and how many requests each may still answer."""

    def __init__(self, entries: Sequence[EntryT]) -> None:
        self._lock = threading.Lock()
        self._slots = [_Slot(i, e) for i, e in enumerate(entries)]

    def __len__(self) -> int:
        return len(self._slots)

    def claim(self, fits: Callable[[EntryT], bool], *, fallback: bool = True) -> tuple[int, EntryT] | None:
        """Use up one answer of the entry for a request: (index, entry), or None when none is left.

        Args:
            fits: Whether an entry's ``match`` fits the request (only asked of entries with one).
            fallback: Whether an unused entry without ``match`` may answer when no match fits.
        """
        with self._lock:
            slot = self._find(fits, fallback)
            if slot is None:
                return None
            if slot.left is not None:
                slot.left -= 1
            return slot.index, slot.entry

    def _find(self, fits: Callable[[EntryT], bool], fallback: bool) -> _Slot[EntryT] | None:
        for slot in self._slots:
            if slot.usable() and slot.entry.match is not None and fits(slot.entry):
                return slot
        if fallback:
            for slot in self._slots:
                if slot.usable() and slot.entry.match is None:
                    return slot
        return None

    def unused(self) -> list[EntryT]:
        """Entries with a finite ``times`` that were not used up."""
        with self._lock:
            return [slot.entry for slot in self._slots if slot.left]

    def unused_indexes(self) -> list[int]:
        """The positions of those entries in the script."""
        with self._lock:
            return [slot.index for slot in self._slots if slot.left]


def _entries_from(value: Any, source: str, model: type[ModelT]) -> list[ModelT]:
    if isinstance(value, Mapping) and "responses" in value:
        value = value["responses"]
    if not isinstance(value, list):
        raise ScriptError(f"{source}: a script is a list of entries or {{'responses': [...]}}")
    return [_entry(item, f"{source}: entry {index}", model) for index, item in enumerate(value)]


def _entry(item: Any, where: str, model: type[ModelT]) -> ModelT:
    if isinstance(item, model):
        return item
    try:
        return model.model_validate(item)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'entry'}: {error['msg']}"
            for error in exc.errors()
        )
        raise ScriptError(f"{where}: {problems}") from exc


def load_entries(path: str | Path, model: type[ModelT]) -> list[ModelT]:
    """Read a script file: JSON (a list, or ``{"responses": [...]}``) or JSONL (one entry a line).

    Raises:
        ScriptError: The file is missing, not JSON, or an entry is invalid (names file and entry).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"{path}: cannot read the script: {exc.strerror}") from exc
    if path.suffix != ".jsonl":
        try:
            return _entries_from(json.loads(text), str(path), model)
        except json.JSONDecodeError as exc:
            if path.suffix == ".json":
                raise ScriptError(f"{path}: not JSON: {exc}") from exc
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ScriptError(f"{path}:{number}: not JSON: {exc}") from exc
        entries.append(_entry(item, f"{path}:{number}", model))
    return entries


def coerce_entries(
    script: str | Path | Sequence[Mapping[str, Any] | ModelT], model: type[ModelT]
) -> list[ModelT]:
    """Entries from a script file path, or from a sequence of dicts and entries."""
    if isinstance(script, str | Path):
        return load_entries(script, model)
    return _entries_from(list(script), "script", model)
