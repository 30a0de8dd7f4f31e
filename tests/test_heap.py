"""The engine keeps freed C heap memory (harness/engine/heap.py): frames do not fault the last one's
memory in.

Without it, ``katra3d run geometry`` (65,536 triangles a frame) faulted about
1,480 pages in every frame, some 6 MB of llvmpipe's per-frame working memory
that glibc had handed back to the kernel at the previous frame's end.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from katra3d.harness.engine import heap

glibc_only = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="mallopt thresholds are glibc's"
)


@glibc_only
def test_thresholds_are_set_once_per_process() -> None:
    assert heap.keep_freed_memory() is True
    assert heap.keep_freed_memory() is True  # cached: set once
    assert (
        heap.MMAP_THRESHOLD_BYTES == 32 << 20
        and heap.TRIM_THRESHOLD_BYTES == 2 * heap.MMAP_THRESHOLD_BYTES
    )


def _minor_faults(tmp_path: Path, frames: int) -> int:
    """Minor page faults of one ``katra3d run geometry`` process (32x32, its default 65,536
    triangles).
    """
    command = [
        sys.executable,
        "-m",
        "katra3d",
        "run",
        "geometry",
        "--size",
        "32x32",
        "--warmup",
        "1",
        "--frames",
        str(frames),
        "--reference-every",
        "0",
        "-o",
        str(tmp_path / f"g{frames}.katra"),
        "--quiet",
    ]
    err = tmp_path / f"g{frames}.stderr"
    with open(err, "wb") as fh:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=fh)
        # the child's own resource usage, page faults included
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, err.read_text(encoding="utf-8", errors="replace")
    return int(usage.ru_minflt)


@glibc_only
@pytest.mark.gl
def test_run_does_not_fault_memory_in_every_frame(tmp_path: Path) -> None:
    few, many = _minor_faults(tmp_path, 2), _minor_faults(tmp_path, 22)
    per_frame = (many - few) / 20
    # a frame's own allocations (Python's, the event buffer's) fault a few pages at most; handing
    # llvmpipe's per-frame memory back to the kernel each frame cost ~1,480 pages a frame here
    assert per_frame < 200, f"{per_frame:.0f} page faults a frame"
