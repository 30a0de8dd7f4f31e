"""Keep freed C heap memory in the process: glibc handed llvmpipe's per-frame memory back after each
frame, and faulting it in again cost ~25 % process time on glmark2's bunny (docs/timing.md)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

# malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's largest dynamic mmap threshold (64-bit) and 2x it for trim
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 64 << 20


@functools.lru_cache(maxsize=1)
def keep_freed_memory() -> bool:
    """Fix glibc's thresholds where its dynamic rule settles, once; False without ``mallopt``."""
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
