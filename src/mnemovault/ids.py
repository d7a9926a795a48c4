"""Identifiers: UUID version 7 (RFC 9562 section 5.7), time-ordered, so keyset pagination by
id returns oldest first."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_state = [0, 0]  # last milliseconds, last 74-bit counter


def uuid7() -> uuid.UUID:
    """A new UUIDv7: 48-bit Unix time in milliseconds, then 74 bits that start random each
    millisecond and count up within it (RFC 9562 section 6.2, method 2), so ids made by one
    process are strictly increasing."""
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _state[0]:
            counter = int.from_bytes(os.urandom(10), "big") >> 7  # 73 bits: room to count
        else:
            ms = _state[0]
            counter = _state[1] + 1
        _state[0], _state[1] = ms, counter
    value = (
        (ms & 0xFFFF_FFFF_FFFF) << 80
        | 0x7 << 76
        | ((counter >> 62) & 0xFFF) << 64
        | 0x2 << 62
        | (counter & ((1 << 62) - 1))
    )
    return uuid.UUID(int=value)
