"""UUIDv7 event ids, made by the writer (RFC 9562 §5.7), and the check of ids given by a caller."""

from __future__ import annotations

import os
import re
import threading
import time
from uuid import UUID, SafeUUID

from ._errors import InvalidEventError

__all__ = ["CANONICAL_ID", "check_event_id", "uuid7"]

CANONICAL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
"""The one spelling of an event id every backend stores: ``str(uuid)``."""


def check_event_id(value: object, stream: str | None = None, index: int | None = None) -> str:
    """The canonical text of an event id: ``str(uuid)`` for a ``UUID``, or a str already in that form.

    Every backend stores ids in that one spelling, so one UUID is one idempotency key. A
    string that is not a UUID, or spells one differently (upper case, braces, no dashes,
    ``urn:uuid:``), is refused rather than repaired: a caller comparing its own spelling
    with the stored one would not find it.

    Raises:
        InvalidEventError: ``value`` is neither a ``UUID`` nor a canonical UUID string.
    """
    if isinstance(value, UUID):
        return str(value)
    if type(value) is str and CANONICAL_ID.match(value):
        return value
    if isinstance(value, str):
        try:
            canonical = str(UUID(value))
        except ValueError:
            hint = "pass a uuid.UUID, or str() of one"
        else:
            hint = f"write it as {canonical!r} or pass a uuid.UUID"
        raise InvalidEventError(
            f"event id {value!r} is not a UUID in canonical form (lower-case 8-4-4-4-12 hex digits): {hint}",
            stream=stream,
            index=index,
        )
    raise InvalidEventError(
        f"event id must be a uuid.UUID, not {type(value).__name__} {value!r}", stream=stream, index=index
    )


_lock = threading.Lock()
_last_ms = 0
_counter = 0

_VERSION_AND_VARIANT = (0x7 << 76) | (0b10 << 62)
"""The fixed bits of a UUIDv7: version 7, variant ``10``."""
_urandom, _from_bytes, _time_ns = os.urandom, int.from_bytes, time.time_ns
_set = object.__setattr__
_UNKNOWN = SafeUUID.unknown

_POOL_IDS = 256
"""Ids' worth of randomness read from the OS at once (10 bytes each)."""
_pool = b""
_taken = 0


def _forget_pool() -> None:
    # A child process must never reuse randomness its parent also uses: the ids would collide.
    global _pool, _taken
    _pool, _taken = b"", 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def uuid7() -> UUID:
    """Return a new UUIDv7: 48-bit Unix milliseconds, then a 12-bit counter and random bits.

    Ids made by one process are strictly increasing, also within one millisecond, so they
    sort in creation order.
    """
    global _last_ms, _counter, _pool, _taken
    with _lock:
        # 80 random bits per id from the OS: 62 for the id's tail, the top 10 seed the counter
        # when a new millisecond starts. Read for 256 ids at once: one ``getrandom`` per id was
        # most of an id's cost (and a kernel turn makes about nine ids). Taken under the lock,
        # so no two threads get the same bytes; a forked child starts with an empty pool.
        if _taken >= len(_pool):
            _pool, _taken = _urandom(10 * _POOL_IDS), 0
        bits = _from_bytes(_pool[_taken : _taken + 10], "big")
        _taken += 10
        ms = _time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms = ms
            _counter = bits >> 70  # below 0x400: leaves room to count up
        else:
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        counter = _counter
    tail = bits & 0x3FFF_FFFF_FFFF_FFFF
    # UUID(int=...) checks its keyword arguments and range on every call (about 2 µs, as much
    # as the rest of this function); the value is a valid 128-bit UUID by construction, so
    # the instance is filled as UUID.__init__ would fill it.
    uuid = object.__new__(UUID)
    _set(uuid, "int", ((ms & 0xFFFF_FFFF_FFFF) << 80) | _VERSION_AND_VARIANT | (counter << 64) | tail)
    _set(uuid, "is_safe", _UNKNOWN)
    return uuid
