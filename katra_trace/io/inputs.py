"""The one rule for a file katra3d reads: a regular file outside ``/proc`` and ``/sys`` (sizes lie
there), else refused in one line. Standard library only: the scene registry uses it too."""

from __future__ import annotations

import functools
import os
import stat
from typing import BinaryIO

from katra_trace.errors import ConfigError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a pipe or FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
KERNEL_ROOTS = ("/proc", "/sys")


def file_kind(mode: int) -> str | None:
    """``"a directory"``, ``"a pipe or FIFO"``, ...; None for a regular file."""
    return next((what for test, what in _KINDS if test(mode)), None)


@functools.cache
def _kernel_devices() -> dict[int, str]:
    found = {}
    for root in KERNEL_ROOTS:
        try:
            found[os.stat(root).st_dev] = root
        except OSError:
            continue
    return found


def open_regular(
    path: str | os.PathLike[str], *, what: str = "trace file", max_bytes: int | None = None
) -> BinaryIO:
    """Open a regular file (links followed) of at most ``max_bytes``, else ConfigError; never
    hangs."""
    shown = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"no such {what}: {shown!r}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {shown!r}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        kind = file_kind(st.st_mode)
        if kind == "a directory":
            raise ConfigError(f"{shown!r} is a directory, not a {what}")
        reads = (
            "traces from regular files" if what == "trace file" else f"a {what} from a regular file"
        )
        root = _kernel_devices().get(st.st_dev)
        if kind is not None or root is not None:
            kind = kind or f"a file of the kernel under {root}"
            raise ConfigError(
                f"{shown!r} is not a regular file ({kind}): katra3d reads {reads} only; save it "
                "to a file first"
            )
        if st.st_size == 0 and os.pread(fd, 1, 0):
            raise ConfigError(
                f"{shown!r} is not a regular file (it reports size 0 but has content, like the "
                f"kernel's files): not a katra3d {what}"
            )
        if max_bytes is not None and st.st_size > max_bytes:
            raise ConfigError(
                f"{shown!r} is {st.st_size} bytes, more than a {what} may be ({max_bytes} bytes)"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except OSError as exc:
        os.close(fd)
        raise ConfigError(f"cannot read {shown!r}: {exc.strerror or exc}") from None
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], *, what: str, max_bytes: int) -> bytes:
    """The bytes of a small file under :func:`open_regular`'s rule."""
    with open_regular(path, what=what, max_bytes=max_bytes) as f:
        try:
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise ConfigError(f"{str(path)!r} is more than a {what} may be ({max_bytes} bytes)")
    return data


__all__ = ["KERNEL_ROOTS", "file_kind", "open_regular", "read_regular"]
