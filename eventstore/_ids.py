"""UUIDv7 event ids, made by the writer (RFC 9562 §5.7)."""

from __future__ import annotations

import os
import threading
import time
from uuid import UUID

__all__ = ["uuid7"]

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def uuid7() -> UUID:
    """Return a new UUIDv7: 48-bit Unix milliseconds, then a 12-bit counter and random bits.

    Ids made by one process are strictly increasing, also within one millisecond, so they
    sort in creation order.
    """
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms = ms
            _counter = int.from_bytes(os.urandom(2), "big") & 0x3FF  # leave room to count up
        else:
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        counter = _counter
    rand = int.from_bytes(os.urandom(8), "big") & 0x3FFF_FFFF_FFFF_FFFF
    value = (ms & 0xFFFF_FFFF_FFFF) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= rand
    return UUID(int=value)
