"""Keep freed C heap memory in the process, so that a frame does not pay page faults for the last
one's.

A software renderer mallocs and frees its per-frame memory (llvmpipe: several MB for a large mesh);
glibc handed the heap top back after every frame, so every frame faulted it in again (~25 % more
process time on glmark2's bunny; docs/timing.md). Counted runs do not count kernel time and leave
the allocator as it is."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

# glibc's ``mallopt`` parameter numbers (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's largest dynamic mmap threshold (64-bit) and 2x it for trim, as its dynamic rule sets them.
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 64 << 20


@functools.lru_cache(maxsize=1)
def keep_freed_memory() -> bool:
    """Set glibc's thresholds to what its dynamic rule settles at, once per process; False where
    there is no ``mallopt`` or it refused."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
    except OSError:
        return False
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mmap first: setting either one turns glibc's dynamic thresholds off
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )


__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "keep_freed_memory"]
