"""Memory the server freed, given back to the system.

glibc's allocator keeps what the process frees — in each handler thread's arena, and in the
middle of the heap — for the next allocation, and gives it back to the system only from the top
of the heap. After large temporary arrays (a 2048-px drawing laid out, an upload decoded, the
test set scored at start-up) the process's RSS stayed at its peak although nothing held the
memory any more: 40 hostile sessions left it at ~2.1 GB, unchanged after 90 s idle.
`malloc_trim(0)` walks every arena and returns their free pages; `keep_trimming` calls it in a
background thread every `every` seconds (a few milliseconds each time) and once after start-up's
work. Elsewhere than glibc it does nothing. Figures: docs/hosting.md ("Grow memory").
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading

_libc = None


def trim() -> bool:
    """Give the allocator's free pages back to the system now: whether it could (glibc only)."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if not _libc:
        return False
    _libc.malloc_trim(0)
    return True


def keep_trimming(every: float = 30.0) -> threading.Thread | None:
    """`trim` now and every `every` seconds, in a daemon thread (None where there is no glibc)."""
    if not trim():
        return None

    def loop():
        while not stop.wait(every):
            trim()
    stop = threading.Event()
    thread = threading.Thread(target=loop, name="vit-trim", daemon=True)
    thread.start()
    return thread
