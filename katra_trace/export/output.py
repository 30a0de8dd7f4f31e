"""What every exporter shares: safe output files, optional imports (:mod:`katra_trace.optional`),
progress callbacks.

An export checks its output first (:func:`katra_trace.io.claim.check_output`: never an input,
never a FIFO or device) and never replaces a file unless asked: it writes ``.<name>.<pid>.tmp``
beside the target (through a symbolic link: beside the file it points to) and moves it into
place with a hard link that fails if the target exists (``overwrite=False``), or with
``os.replace`` (``overwrite=True``), never over something that is not a regular file. A failed
export leaves no partial file behind.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from katra_trace.errors import OutputExistsError, TraceIOError
from katra_trace.io.claim import check_output, missing_directory
from katra_trace.optional import MissingDependencyError, require

#: ``progress(done, total)``: called now and then during a long export (units: events).
ProgressFn = Callable[[int, int], None]


@contextlib.contextmanager
def open_output(path: Path, overwrite: bool = False, *, inputs: Iterable[str | os.PathLike[str]] = (),
                example: str = "out") -> Iterator[BinaryIO]:
    """A binary file to write ``path`` through; it appears at ``path`` only if the block succeeds.

    ``path`` is first checked by :func:`katra_trace.io.claim.check_output` (one set of messages; never
    one of ``inputs``). A symbolic link at ``path`` is followed: the file is written where it points
    and the link is kept. The replace never swaps out something that is not a regular file.
    """
    path = Path(path)
    check_output(path, force=overwrite, inputs=inputs, option="-o", example=example)
    if os.path.islink(path):
        path = Path(os.path.realpath(path))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        f = open(tmp, "xb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise missing_directory(path.parent) from None
    except OSError as exc:
        raise TraceIOError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    try:
        with f:
            yield f
        if overwrite:
            _refuse_non_regular(path)
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise OutputExistsError(f"output {str(path)!r} appeared while exporting; nothing was replaced "
                                        "(--force replaces it)") from None
            os.unlink(tmp)
    except OSError as exc:
        raise TraceIOError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _refuse_non_regular(path: Path) -> None:
    """TraceIOError when ``path`` is now something a replace must not swap out (a FIFO, a device, a link ...)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise TraceIOError(f"output {str(path)!r} became something that is not a regular file while exporting; "
                           "nothing was replaced")


__all__ = ["MissingDependencyError", "ProgressFn", "open_output", "require"]
