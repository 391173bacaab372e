"""glibc malloc settings for a server that reads untrusted bodies of up to megabytes.

glibc serves a large allocation (a 4 MB review body, its decoded strings) with mmap and returns it on
free, but after such a free it raises its mmap threshold to that size (up to 32 MiB), so every later one
comes from the heap, where the freed space stays mapped between live objects: a worker grew by 125 MiB
over 3,000 large reviews while Python held 35 MiB (bench/webhook_adversarial.py). A fixed threshold keeps
large blocks mmapped (returned at once), and two arenas keep 16 threads from each holding their own
heap. No effect outside glibc (musl, macOS): the call is skipped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters (malloc.h)
M_ARENA_MAX = -8
MMAP_THRESHOLD = 128 << 10  # glibc's default starting value, now fixed
ARENAS = 2


def bound_malloc() -> bool:
    """Apply the settings to this process; True when glibc took them."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_ARENA_MAX, ARENAS))
    if not ok:
        log.info("malloc settings not applied (not glibc?)")
    return ok
