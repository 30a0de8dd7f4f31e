"""Keep freed C heap memory in the process, so that a frame does not pay page faults for the last
one's.

A software renderer allocates its per-frame working memory (llvmpipe: the
transformed vertices and the binned triangles of a draw, several MB for a
large mesh) with ``malloc`` and frees it by the frame's end. glibc's default
heuristics hand the top of the heap back to the kernel when more than its
trim threshold is free there, and whether that happens depends on what else
the process allocated above it: in ``katra3d run`` it did, after every
frame, so every frame faulted the same memory in again (kernel time on the
submitting thread). Measured on glmark2's ``build:model=bunny`` at 800x600
(bench/glmark2.py): about 1,170 page faults a frame (some 4.6 MB) and ~25 %
more process CPU time a frame than glmark2 spends on the same draw, which has
none. :func:`keep_freed_memory` sets glibc's thresholds to the values its own
dynamic rule settles at once a large block has been freed: blocks under
:data:`MMAP_THRESHOLD_BYTES` come from the heap, and the heap's free top is
kept up to :data:`TRIM_THRESHOLD_BYTES`. The frames' GL work is unchanged.

Only time measurements need it: page faults are kernel time, which counted
runs (``--measure instructions|cycles``) do not count, so the engine leaves a
counted run's allocator as it is (its counts stay those of earlier versions).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

#: glibc's ``mallopt`` parameter numbers (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks smaller than this come from the heap, not from mmap (glibc's largest dynamic threshold,
#: 64-bit).
MMAP_THRESHOLD_BYTES = 32 << 20
#: Free memory at the top of the heap is handed back to the kernel only above this (2x the above, as
#: glibc's dynamic rule sets it).
TRIM_THRESHOLD_BYTES = 64 << 20


@functools.lru_cache(maxsize=1)
def keep_freed_memory() -> bool:
    """Set the C heap's thresholds once per process (:data:`MMAP_THRESHOLD_BYTES`,
    :data:`TRIM_THRESHOLD_BYTES`); True when set, False where the C library has no
    ``mallopt`` (not glibc) or refused."""
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
