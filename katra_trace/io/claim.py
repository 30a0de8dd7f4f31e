"""Claiming output paths: a writer fills a ``flock``-ed ``<path>.part`` (the lock tells a live run
from a crashed one's leftover) and moves it into place (docs/reliability.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import os
import secrets
import stat
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from katra_trace.errors import (
    ConfigError,
    KatraError,
    OutputBusyError,
    OutputExistsError,
    TraceIOError,
)
from katra_trace.io.inputs import file_kind
from katra_trace.io.reader import is_trace_file, open_trace
from katra_trace.schema import Flag, Kind
from katra_trace.text import escape, shown

PART_SUFFIX = ".part"

# errno of filesystems without hard links
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK, errno.EXDEV}


def describe(exc: BaseException) -> str:
    """One line for an exception."""
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        return f"{exc.strerror or os.strerror(exc.errno)} ({name})"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


MIN_FREE_BYTES = 1 << 20


def check_free_space(path: Path) -> None:
    """TraceIOError when ``path``'s file system has under :data:`MIN_FREE_BYTES` free (checked
    before minutes of counting)."""
    try:
        st = os.statvfs(path if path.is_dir() else path.parent)
    except OSError:
        return
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        raise TraceIOError(
            f"cannot write {shown(path)}: {free // 1024} KiB free on its file system, less than "
            f"the {MIN_FREE_BYTES >> 10} KiB a counted run needs: No space left on device (ENOSPC)"
        )


def part_path_for(path: Path) -> Path:
    return path.with_name(path.name + PART_SUFFIX)


@dataclasses.dataclass
class Claim:
    """An output path claimed by one writer (its locked ``.part``)."""

    final_path: Path
    part_path: Path
    fd: int
    overwrite: bool
    existed: bool  # a file was at final_path when claimed


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _is_input(output: Path, source: str | os.PathLike[str]) -> bool:
    """Whether ``output`` is ``source`` (by inode) or a trace in it."""
    mine = _identity(output)
    if mine is None:
        return False
    theirs = _identity(source)
    if theirs == mine:
        return True
    if theirs is None or not os.path.isdir(source):
        return False
    return _identity(Path(os.path.realpath(output)).parent) == theirs and is_trace_file(output)


def exists_error(path: str | os.PathLike[str], option: str) -> OutputExistsError:
    return OutputExistsError(
        f"output {shown(path)} already exists; give --force (overwrite=True in Python) to "
        f"replace it, or choose another {option.split('/')[0]}"
    )


def check_output(
    text: str | os.PathLike[str],
    *,
    force: bool = False,
    inputs: Iterable[str | os.PathLike[str]] = (),
    option: str = "-o/--output",
    example: str = "run.katra",
    part: bool = False,
    append: bool = False,
) -> Path:
    """The one check of a command's output file, before any work; returns the path.

    ConfigError for a non-writable/non-regular path, one of ``inputs`` or a ``.part`` in the way;
    OutputExistsError for an existing file without ``force`` (unless ``append``).
    """
    raw = os.fspath(text)
    if not raw.strip():
        raise ConfigError(
            f"empty {option} path: give a file name, e.g. {option.split('/')[0]} {example}"
        )
    output = Path(raw)
    if raw.endswith(("/", os.sep)):
        raise ConfigError(
            f"output {shown(raw)} names a directory (it ends with '/'); give a file path, e.g. "
            f"{escape(str(output / example))}"
        )
    try:
        mode: int | None = output.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as exc:
        raise ConfigError(f"output {shown(raw)} cannot be checked: {describe(exc)}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise ConfigError(
            f"output {shown(raw)} names a directory (it is a directory, not a file); give a file "
            f"path, e.g. {escape(str(output / example))}"
        )
    if mode is not None and not stat.S_ISREG(mode):
        raise ConfigError(
            f"output {shown(raw)} exists and is not a regular file (it is "
            f"{file_kind(mode) or 'not a file'}); give a file path"
        )
    parent = Path(os.path.realpath(output)).parent if mode is not None else output.parent
    try:
        parent_mode: int | None = parent.stat().st_mode
    except FileNotFoundError:
        parent_mode = None
    except OSError as exc:
        raise ConfigError(f"output {shown(raw)} cannot be checked: {describe(exc)}") from None
    if parent_mode is None or not stat.S_ISDIR(parent_mode):
        raise missing_directory(parent)
    for source in inputs:
        if _is_input(output, source):
            raise ConfigError(
                f"output {shown(raw)} is one of this command's inputs ({shown(source)}); it is "
                f"never overwritten: choose another {option.split('/')[0]}"
            )
    if mode is not None and not force and not append:
        raise exists_error(raw, option)
    if part:
        part_path = part_path_for(output)
        if os.path.lexists(part_path):
            raise ConfigError(
                f"{shown(part_path)} exists: another katra3d run is writing {shown(output)}, or a "
                "run "
                f"that was killed left its frames there (check it with 'katra3d validate "
                f"{part_path}', then rename or remove it)"
            )
    try:
        with tempfile.TemporaryFile(dir=parent, prefix=".katra3d-write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"cannot write output {shown(raw)}: directory {shown(parent)} is not writable "
            f"({describe(exc)})"
        ) from None
    return output


def missing_directory(parent: Path) -> ConfigError:
    return ConfigError(
        f"output directory {shown(parent)} does not exist; create it first (an output is never "
        "written where its directory does not exist)"
    )


def check_output_dir(text: str | os.PathLike[str], *, option: str = "-o/--output") -> Path:
    """Check an output directory before any work (ConfigError)."""
    raw = os.fspath(text)
    if not raw.strip():
        raise ConfigError(f"empty {option} path: give a directory name")
    output = Path(raw)
    try:
        mode = os.stat(output).st_mode
    except FileNotFoundError:
        return output
    except OSError as exc:
        raise ConfigError(f"output {shown(raw)} cannot be checked: {describe(exc)}") from None
    if not stat.S_ISDIR(mode):
        raise ConfigError(
            f"output {shown(raw)} exists and is not a directory; give a directory path with "
            f"{option.split('/')[0]}"
        )
    return output


@contextlib.contextmanager
def open_output(
    text: str | os.PathLike[str],
    *,
    force: bool = False,
    inputs: Iterable[str | os.PathLike[str]] = (),
    option: str = "-o",
    example: str = "out",
) -> Iterator[BinaryIO]:
    """The one way a command writes a file: it appears only if the block succeeds."""
    check_output(text, force=force, inputs=inputs, option=option, example=example)
    path = Path(os.path.realpath(text)) if os.path.islink(text) else Path(text)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        f = open(tmp, "xb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise missing_directory(path.parent) from None
    except OSError as exc:
        raise TraceIOError(f"cannot write {shown(path)}: {describe(exc)}") from None
    try:
        with f:
            yield f
        try:
            move_into_place(tmp, path, force)
        except OutputExistsError:
            raise OutputExistsError(
                f"output {shown(path)} appeared while it was being written; nothing was "
                "replaced (--force replaces it)"
            ) from None
    except OSError as exc:
        raise TraceIOError(f"cannot write {shown(path)}: {describe(exc)}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def move_into_place(source: Path, target: Path, replace: bool) -> None:
    """The one move of every output; on failure ``source`` stays. ``replace``: atomic, refusing a
    non-regular ``target`` (TraceIOError); else no-replace (OutputExistsError)."""
    if replace:
        try:
            mode = os.lstat(target).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            raise TraceIOError(
                f"output {shown(target)} became something that is not a regular file (it is "
                f"{file_kind(mode) or 'a symbolic link'}); nothing was replaced"
            )
        os.replace(source, target)
        return
    try:
        os.link(source, target)
    except FileExistsError:
        raise OutputExistsError(f"output {shown(target)} exists; nothing was replaced") from None
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
        # No hard links: rename after a last look (a race left open).
        if os.path.lexists(target):
            raise OutputExistsError(
                f"output {shown(target)} exists; nothing was replaced"
            ) from None
        os.rename(source, target)
        return
    os.unlink(source)


def claim(path: Path, overwrite: bool) -> Claim:
    """Create and lock ``<path>.part``; raises OutputExistsError, OutputBusyError, TraceIOError."""
    if os.path.islink(path):
        path = Path(os.path.realpath(path))
    shown = str(path)
    part = part_path_for(path)
    # a .part that vanishes meanwhile: try again
    for _ in range(5):
        _check_final(path, overwrite)
        try:
            fd = _create_locked(part)
        except FileExistsError:
            if _refuse_part(path, part):
                continue
            raise AssertionError("unreachable") from None  # pragma: no cover
        except OSError as exc:
            hint = (
                f" (it is written as {part.name!r} until it is complete: shorten the name)"
                if exc.errno == errno.ENAMETOOLONG and len(os.fsencode(path.name)) <= 255
                else ""
            )
            raise TraceIOError(f"cannot create trace {shown!r}: {describe(exc)}{hint}") from None
        # a run holding the .part may have moved it into place meanwhile
        try:
            existed = _check_final(path, overwrite)
        except BaseException:
            _discard(part, fd)
            raise
        return Claim(path, part, fd, overwrite, existed)
    raise OutputBusyError(
        f"{str(part)!r} keeps appearing and disappearing: several katra3d runs are racing "
        f"for {shown!r}; give each its own -o",
        str(part),
        stale=False,
    )


def _create_locked(part: Path) -> int:
    """Create ``part`` born locked (under a private name, then linked): seen unlocked, a live
    capture would pass for a dead one."""
    own = part.with_name(f".{part.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(own, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:  # else only the private name is too long
            raise
    else:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.link(own, part)
            return fd
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
                raise
        finally:
            with contextlib.suppress(OSError):
                os.unlink(own)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        _discard(part, fd)
        raise TraceIOError(f"cannot lock {str(part)!r}: {describe(exc)}") from None
    return fd


def _check_final(path: Path, overwrite: bool) -> bool:
    shown = str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise TraceIOError(f"cannot create trace {shown!r}: {describe(exc)}") from None
    what = file_kind(st.st_mode)
    if what is not None:
        raise TraceIOError(
            f"cannot write a trace to {shown!r}: it is {what}, not a regular file; "
            "give -o a file name"
        )
    if not overwrite:
        raise exists_error(path, "-o")
    return True


def _refuse_part(path: Path, part: Path) -> bool:
    """Raise OutputBusyError, or return True if ``part`` vanished."""
    shown = str(part)
    try:
        fd = os.open(part, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError as exc:
        raise TraceIOError(
            f"cannot create trace {str(path)!r}: {shown!r} is in the way: {describe(exc)}"
        ) from None
    try:
        if file_kind(os.fstat(fd).st_mode) is not None:
            raise OutputBusyError(
                f"{shown!r} is in the way and is not a regular file; move it away or choose "
                "another -o",
                shown,
                stale=True,
            )
        held = held_by_writer(fd)
    finally:
        os.close(fd)
    pid = _writer_pid(part)
    who = f"pid {pid}" if pid is not None else "pid unknown"
    if held:
        raise OutputBusyError(
            f"another katra3d run ({who}) is writing {str(path)!r} (its capture is in {shown!r} "
            "until it finishes); wait for it, or choose another -o",
            shown,
            stale=False,
            pid=pid,
        )
    raise OutputBusyError(
        f"{shown!r} is left from a capture that never finished ({who}; killed or crashed); it "
        "holds that capture's readable prefix and is never deleted automatically: keep it with `mv "
        f"{shown} {path.stem}-recovered{path.suffix or '.katra'}` (check it with `katra3d "
        "validate`), or delete it, then run again",
        shown,
        stale=True,
        pid=pid,
    )


def held_by_writer(fd: int) -> bool:
    """Whether a live writer holds the ``.part`` open as ``fd`` (a killed one's lock is free)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    return False


def _writer_pid(part: Path) -> int | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pid = open_trace(part, events=False).header.pid
    except KatraError:
        return None
    return pid if isinstance(pid, int) else None


def _discard(part: Path, fd: int) -> None:
    try:
        os.unlink(part)
    except OSError:
        pass
    try:
        os.close(fd)
    except OSError:
        pass


def discard(c: Claim) -> None:
    """Give up a claim whose .part holds nothing."""
    _discard(c.part_path, c.fd)


def failed_path_for(path: Path) -> Path:
    """``br2.katra`` -> ``br2.failed.katra``: where a failed capture keeps its frames."""
    return path.with_name(
        f"{path.stem}.failed{path.suffix}" if path.suffix else f"{path.name}.failed"
    )


def has_measured_frames(path: Path) -> bool:
    """Whether the trace holds a measured frame (False if unreadable)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            events = open_trace(path).events
    except KatraError:
        return False
    return bool(
        ((events["kind"] == int(Kind.FRAME)) & ((events["flags"] & int(Flag.WARMUP)) == 0)).any()
    )


def set_aside(c: Claim, keep: bool) -> Path | None:
    """Keep a failed run off the output path: ``keep`` moves it to :func:`failed_path_for` and
    returns that; else removes the ``.part`` and returns None."""
    if not keep:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(c.part_path)
        return None
    first = failed_path_for(c.final_path)
    for n in range(1, 100):
        target = first if n == 1 else first.with_name(f"{first.stem}-{n}{first.suffix}")
        try:
            move_into_place(c.part_path, target, replace=_earlier_failure(target))
            return target
        except (OutputExistsError, TraceIOError):
            continue
        except OSError as exc:
            raise TraceIOError(
                f"cannot move the failed capture {str(c.part_path)!r} to {str(target)!r}: "
                f"{describe(exc)}; it is kept in {str(c.part_path)!r}"
            ) from None
    raise TraceIOError(
        f"no free name for the failed capture beside {str(first)!r}; it is kept in "
        f"{str(c.part_path)!r}"
    )


def place(c: Claim, *, empty_failure: bool, aside: bool) -> tuple[bool, Path | None]:
    """End a capture; returns (whether it is kept, where it was set aside)."""
    if not aside:
        return publish(c, empty_failure), None
    kept = set_aside(c, keep=not empty_failure and has_measured_frames(c.part_path))
    return kept is not None, kept


def _earlier_failure(path: Path) -> bool:
    if not os.path.isfile(path) or os.path.islink(path):
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return open_trace(path, events=False).status == "aborted"
    except KatraError:
        return False


def publish(c: Claim, empty_failure: bool) -> bool:
    """Move the finished ``.part`` into place (on failure it stays); ``empty_failure`` keeps an
    existing file, removes the ``.part`` and returns False."""
    part, final = str(c.part_path), str(c.final_path)
    if empty_failure and c.existed and os.path.lexists(final):
        os.unlink(part)
        return False
    try:
        move_into_place(c.part_path, c.final_path, c.overwrite)
    except OutputExistsError:
        raise OutputExistsError(
            f"{final!r} appeared while this capture ran and was not replaced; this "
            f"capture is kept in {part!r}",
            part,
        ) from None
    except TraceIOError as exc:
        raise TraceIOError(f"{exc}; this capture is kept in {part!r}") from None
    except OSError as exc:
        raise TraceIOError(
            f"cannot move the finished capture {part!r} to {final!r}: {describe(exc)}; it is kept "
            f"in {part!r}"
        ) from None
    return True
