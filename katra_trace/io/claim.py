"""Claiming a trace's output path, so that no capture destroys a file or another capture.

A :class:`~katra_trace.io.writer.TraceWriter` never writes to its output path directly. It creates a
sibling ``<path>.part`` with ``O_CREAT | O_EXCL`` (two writers can never share it) and holds an
exclusive ``flock`` on it for its whole life (so a second writer can tell a live run from the
remnant of a crashed one). When the capture ends, whatever its status, the ``.part`` is moved
into place:

* without ``overwrite``, with a no-replace move (``link`` then ``unlink``): a file that appeared at
  the path meanwhile is never replaced; the capture stays in the ``.part`` and the error names it;
* with ``overwrite``, with ``os.replace`` (atomic: readers see the old file or the new one);
* except that a capture that ended without recording a single event (it failed or was
  interrupted first) never replaces a file that existed when it started: its ``.part`` is
  removed and the old file kept.

A killed writer leaves ``<path>.part``: a readable prefix of the capture. It is never deleted
automatically; the next writer for that path refuses and says how to recover it.
See docs/reliability.md.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import os
import stat
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path

from katra_trace.errors import ConfigError, KatraError, OutputBusyError, OutputExistsError, TraceIOError
from katra_trace.io.reader import file_kind, open_trace

PART_SUFFIX = ".part"

#: errno values of filesystems without hard links (vfat, some FUSE and network filesystems)
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK, errno.EXDEV}

def describe(exc: BaseException) -> str:
    """``No space left on device (ENOSPC)``: one line for an OSError (or any exception)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        return f"{exc.strerror or os.strerror(exc.errno)} ({name})"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def part_path_for(path: Path) -> Path:
    return path.with_name(path.name + PART_SUFFIX)


@dataclasses.dataclass
class Claim:
    """An output path claimed by one writer: its locked ``.part`` file descriptor."""

    final_path: Path
    part_path: Path
    fd: int
    overwrite: bool
    existed: bool  #: the final path held a file when the claim was made


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (following links; paths that do not exist compare resolved)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def check_output(text: str | os.PathLike[str], *, force: bool = False, inputs: Iterable[str | os.PathLike[str]] = (),
                 option: str = "-o/--output", example: str = "run.katra", part: bool = False) -> Path:
    """The one check of a command's output file, made before any work starts (``run -o``, ``export -o``,
    ``report -o``): returns the path, or raises with one set of messages.

    ConfigError (exit 2) for an empty path; a path that ends with a slash or is a directory; a
    missing parent directory; something that is not a regular file (a FIFO, a device such as
    /dev/stdout, a socket); one of the command's ``inputs`` (never overwritten, even with
    ``force``); with ``part``, a ``<path>.part`` of a running or crashed capture in the way; and a
    parent directory this process cannot write. OutputExistsError (exit 2) for an existing file
    without ``force``. ``option`` names the option in the messages; ``example`` is a file name
    the directory message suggests. Writing stays with the writer (:func:`claim`) or exporter.
    """
    raw = os.fspath(text)
    if not raw.strip():
        raise ConfigError(f"empty {option} path: give a file name, e.g. {option.split('/')[0]} {example}")
    output = Path(raw)
    if raw.endswith(("/", os.sep)):
        raise ConfigError(f"output {raw!r} names a directory (it ends with '/'); give a file path, e.g. "
                          f"{output / example}")
    if output.is_dir():
        raise ConfigError(f"output {raw!r} names a directory (it is a directory, not a file); give a file path, "
                          f"e.g. {output / example}")
    if not output.parent.is_dir():
        raise missing_directory(output.parent)
    try:
        mode: int | None = output.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise ConfigError(f"output {raw!r} cannot be checked: {describe(exc)}") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise ConfigError(f"output {raw!r} exists and is not a regular file (it is {file_kind(mode) or 'not a file'}); "
                          "give a file path")
    for source in inputs:
        if _same_file(output, Path(source)):
            raise ConfigError(f"output {raw!r} is one of this command's inputs ({os.fspath(source)!r}); it is "
                              f"never overwritten: choose another {option.split('/')[0]}")
    if mode is not None and not force:
        raise OutputExistsError(f"output {raw!r} already exists; give --force to replace it, or choose another "
                                f"{option.split('/')[0]}")
    if part:
        part_path = part_path_for(output)
        if os.path.lexists(part_path):
            raise ConfigError(f"'{part_path}' exists: another katra3d run is writing '{output}', or a run that was "
                              f"killed left its frames there (check it with 'katra3d validate {part_path}', then "
                              "rename or remove it)")
    try:
        with tempfile.TemporaryFile(dir=output.parent, prefix=".katra3d-write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write output {raw!r}: directory '{output.parent}' is not writable "
                          f"({describe(exc)})") from None
    return output


def missing_directory(parent: Path) -> ConfigError:
    """The error for an output whose directory does not exist (checked first, or found when writing)."""
    return ConfigError(f"output directory '{parent}' does not exist; create it first (an output is never written "
                       "where its directory does not exist)")


def check_output_dir(text: str | os.PathLike[str], *, option: str = "-o/--output") -> Path:
    """The check of a command's output directory (``ab -o DIR``), before any work: ConfigError (exit 2)
    for an empty path, or a path that exists and is not a directory. A missing directory is made later."""
    raw = os.fspath(text)
    if not raw.strip():
        raise ConfigError(f"empty {option} path: give a directory name")
    output = Path(raw)
    if os.path.lexists(output) and not output.is_dir():
        raise ConfigError(f"output {raw!r} exists and is not a directory; give a directory path with "
                          f"{option.split('/')[0]}")
    return output


def claim(path: Path, overwrite: bool) -> Claim:
    """Create and lock ``<path>.part``; raises OutputExistsError, OutputBusyError or TraceIOError.

    A symbolic link at ``path`` is followed: the trace goes where it points (``Claim.final_path``),
    and the link itself is never replaced (``/dev/stdout`` redirected to a file is that file).
    """
    if os.path.islink(path):
        path = Path(os.path.realpath(path))
    shown = str(path)
    part = part_path_for(path)
    for _ in range(5):  # a .part that vanishes while we look at it (its run just finished): try again
        existed = _check_final(path, overwrite)
        try:
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            if _refuse_part(path, part):
                continue
            raise AssertionError("unreachable")  # pragma: no cover - _refuse_part raises or returns True
        except OSError as exc:
            hint = (f" (it is written as {part.name!r} until it is complete: shorten the name)"
                    if exc.errno == errno.ENAMETOOLONG and len(os.fsencode(path.name)) <= 255 else "")
            raise TraceIOError(f"cannot create trace {shown!r}: {describe(exc)}{hint}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            _discard(part, fd)
            raise TraceIOError(f"cannot lock {str(part)!r}: {describe(exc)}") from None
        return Claim(path, part, fd, overwrite, existed)
    raise OutputBusyError(f"{str(part)!r} keeps appearing and disappearing: several katra3d runs are racing "
                          f"for {shown!r}; give each its own -o", str(part), stale=False)


def _check_final(path: Path, overwrite: bool) -> bool:
    """Whether ``path`` exists (a regular file); refuses what may not be replaced."""
    shown = str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise TraceIOError(f"cannot create trace {shown!r}: {describe(exc)}") from None
    what = file_kind(st.st_mode)
    if what is not None:
        raise TraceIOError(f"cannot write a trace to {shown!r}: it is {what}, not a regular file; "
                           "give -o a file name")
    if not overwrite:
        raise OutputExistsError(f"{shown!r} already exists: pass --force (overwrite=True in Python) to replace "
                                "it, or choose another -o")
    return True


def _refuse_part(path: Path, part: Path) -> bool:
    """``<path>.part`` exists: raise OutputBusyError saying whose it is, or return True if it vanished."""
    shown = str(part)
    try:
        fd = os.open(part, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError as exc:
        raise TraceIOError(f"cannot create trace {str(path)!r}: {shown!r} is in the way: {describe(exc)}") from None
    try:
        if file_kind(os.fstat(fd).st_mode) is not None:
            raise OutputBusyError(f"{shown!r} is in the way and is not a regular file; move it away or choose "
                                  "another -o", shown, stale=True)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            held = False
        except BlockingIOError:
            held = True
    finally:
        os.close(fd)
    pid = _writer_pid(part)
    who = f"pid {pid}" if pid is not None else "pid unknown"
    if held:
        raise OutputBusyError(f"another katra3d run ({who}) is writing {str(path)!r} (its capture is in {shown!r} "
                              "until it finishes); wait for it, or choose another -o", shown, stale=False, pid=pid)
    raise OutputBusyError(
        f"{shown!r} is left from a capture that never finished ({who}; killed or crashed); it holds that "
        f"capture's readable prefix and is never deleted automatically: keep it with `mv {shown} "
        f"{path.stem}-recovered{path.suffix or '.katra'}` (check it with `katra3d validate`), or delete it, "
        "then run again", shown, stale=True, pid=pid)


def _writer_pid(part: Path) -> int | None:
    """The pid in the HEADER of a .part (written and flushed when its writer started), if readable."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pid = open_trace(part, events=False).header.pid
    except KatraError:
        return None
    return pid if isinstance(pid, int) else None


def _discard(part: Path, fd: int) -> None:
    """Remove a .part this writer created and close it (only for a capture that holds nothing)."""
    try:
        os.unlink(part)
    except OSError:
        pass
    try:
        os.close(fd)
    except OSError:
        pass


def discard(c: Claim) -> None:
    """Give up a claim whose .part holds nothing worth keeping (the header could not be written)."""
    _discard(c.part_path, c.fd)


def publish(c: Claim, empty_failure: bool) -> bool:
    """Move the finished ``.part`` into place (the caller closes the file afterwards, releasing the lock).

    ``empty_failure``: the capture recorded no event and did not complete. Then a file that
    existed when the claim was made is kept, and the ``.part`` removed; returns False.
    Raises OutputExistsError (the path appeared meanwhile; the capture stays in the .part) or
    TraceIOError (the move failed; the capture stays in the .part).
    """
    part, final = str(c.part_path), str(c.final_path)
    if empty_failure and c.existed and os.path.lexists(final):
        os.unlink(part)
        return False
    try:
        if c.overwrite:
            os.replace(part, final)
            return True
        try:
            os.link(part, final)
        except FileExistsError:
            raise OutputExistsError(f"{final!r} appeared while this capture ran and was not replaced; this "
                                    f"capture is kept in {part!r}", part) from None
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
            # No hard links here: a plain rename, after a last look (a file appearing in between
            # would be replaced: the one race this filesystem leaves open).
            if os.path.lexists(final):
                raise OutputExistsError(f"{final!r} appeared while this capture ran and was not replaced; "
                                        f"this capture is kept in {part!r}", part) from None
            os.rename(part, final)
            return True
        os.unlink(part)
        return True
    except OSError as exc:
        raise TraceIOError(f"cannot move the finished capture {part!r} to {final!r}: {describe(exc)}; it is kept "
                           f"in {part!r}") from None
