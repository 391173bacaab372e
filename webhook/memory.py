"""glibc malloc settings for a server that reads untrusted bodies of up to megabytes.

glibc serves a large allocation (a 4 MB review body, its decoded strings) with mmap and returns it on
free, but after such a free it raises its mmap threshold to that size (up to 32 MiB), so every later one
comes from the heap, where the freed space stays mapped between live objects: a worker grew by 125 MiB
over 3,000 large reviews while Python held 35 MiB (bench/webhook_adversarial.py). A fixed threshold keeps
large blocks mmapped (returned at once), and two arenas keep 16 threads from each holding their own
heap. No effect outside glibc (musl, macOS): the call is skipped. And `retained`: what a cache entry
really holds, the measure of the webhook's memos.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import sys
import types

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


# What `retained` does not count: objects every cached value shares and that live as long as the
# process anyway (classes, modules, functions, the catalogue's GPU models and profiles).
# (and frames, tracebacks and code: what an exception reaches, the interpreter's, not the value's)
_SHARED_TYPES: tuple[type, ...] = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
    types.FrameType,
    types.TracebackType,
)


_MANAGED_DICT = 1 << 4  # Py_TPFLAGS_MANAGED_DICT


def retained(*objs: object, shared: tuple[type, ...] = (), limit: int | None = None) -> int:
    """The bytes `objs` hold: sys.getsizeof of everything reachable from them (gc.get_referents:
    containers, dataclass fields, __dict__ and __slots__), each object once, leaving out classes,
    modules, functions, the singletons and instances of `shared` (with what they reach).

    The MIG memos (webhook/checks.py) weigh their entries with this, not with a guess per kind: a guess
    per character of config text misjudges a parsed file by a large factor either way, and a report's
    key can pin its config's whole parsed entries, which no guess of a report's size counts.
    tests/webhook/test_webhook_memory.py checks
    it against tracemalloc's count of what building the objects allocated. The walk stops once the
    count passes `limit` (a cache does not keep what weighs more than all of it), so it costs at most
    that many bytes' worth of objects."""
    skip = _SHARED_TYPES + shared
    seen: set[int] = {id(None), id(True), id(False)}
    total = 0
    todo = list(objs)
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        referents = gc.get_referents(obj)
        if type(obj) is dict:
            referents.extend(obj)  # a dict whose keys are all str shows the collector its values only
        total += sys.getsizeof(obj)
        if type(obj).__flags__ & _MANAGED_DICT:
            # Its attributes live in an array getsizeof leaves out (CPython 3.11+: no dict until
            # __dict__ is asked for): a pointer per attribute and a header.
            total += 8 * len(referents) + 16
        if limit is not None and total > limit:
            return total
        todo.extend(referents)
    return total
