"""glretrace as katra3d drives it: timed replays, counted replays under callgrind, and the last
frame's snapshot.

Every replayer process leads a process group of its own (:func:`katra3d.harness.supervisor.spawn`)
and is stopped (SIGTERM, then SIGKILL) when its part is done, on an error and on a stop signal: none
is left behind.

* :func:`timed_frames`: ``glretrace --pframe-times`` (with ``--pcpu --min-cpu-time=0`` for draw
  zones), read line by line until enough frames ended; a trace shorter than the frames asked for is
  replayed again from its start by a new process (glretrace cannot replay a trace twice in one
  process), and the frame where each replay starts is noted: that frame (a new replayer's context
  and compiles) is left out of the statistics, so one more frame is replayed (:func:`wanted`). A
  replay's first frame starts at the replayer's first call: glretrace prints its profile's column
  line (``# call no ...``, flushed) just before it reads the trace's first call, where its own
  ``-b`` clock starts too; the process's start-up before it (loading its libraries) is no frame's.
* :func:`counted_frames`: the replayer under ``valgrind --tool=callgrind`` with a dump after every
  SwapBuffers, single-threaded llvmpipe and the counted run's pinned environment, on the trace's
  first frames only (:func:`trimmed`: ``apitrace trim --frames=0-N``, which keeps the calls and
  their numbers), so that a long trace is not replayed to its end under callgrind for a few frames.
* :func:`snapshot`: one more replay, untimed, that writes the image after one call (``-s DIR/ -S
  CALL``).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from katra3d.harness.engine.counting import read_summary
from katra3d.harness.replay.output import Frame, FrameReader
from katra3d.harness.replay.tool import Replayer, trim
from katra3d.harness.supervisor import spawn
from katra_trace.errors import KatraError, SceneError

#: The swap functions a counted replay dumps after, by the trace's window system.
SWAP_FUNCTION = {"glx": "glXSwapBuffers", "egl": "eglSwapBuffers"}


#: The start of the column line glretrace's profiler prints before the trace's first call.
HEADER_LINE = "# call no "
#: Seconds between two reads of a timed replayer's output, and until its first call (its frames'
#: start).
POLL_S = 0.02
FAST_POLL_S = 0.0005
#: The most basic blocks between two dumps of one SwapBuffers (a nested swap's return; one in Mesa
#: 22.3 GLX).
SAME_SWAP_BLOCKS = 64


class ReplayFailed(SceneError):
    """The replayer could not replay the trace (a missing extension, an
    unreadable call, a crash)."""


@dataclasses.dataclass
class TimedReplay:
    """What timed replays gave: ``frames`` in order, ``starts_ns`` (host clock) of the processes and
    ``restarts`` (the 0-based index of each frame that began a new replay of the trace after the
    first)."""

    frames: list[Frame] = dataclasses.field(default_factory=list)
    #: per process: its first call's start (its profile's column line arrived), else its start
    starts_ns: list[int] = dataclasses.field(default_factory=list)
    #: per process: its start to its first call
    startup_ns: list[int] = dataclasses.field(default_factory=list)
    restarts: list[int] = dataclasses.field(default_factory=list)
    #: which process replayed each frame
    process_of: list[int] = dataclasses.field(default_factory=list)


def wanted(count: int, warmup: int, restarts: list[int]) -> int:
    """Frames to replay for ``count`` (warmup included) to count: each restart's frame after the
    first ``warmup`` is one more, as it is left out of the statistics (``restarts`` ascending)."""
    return count + len(restarts) - bisect.bisect_left(restarts, warmup)


def replay_args(replayer: Replayer, *, timed: bool, zones: bool) -> list[str]:
    """The replayer's options for one kind of replay (recorded in the header as they are)."""
    args = ["--headless"] if replayer.headless else []
    args.append("--pframe-times")  # a glFinish ends each frame; its end and last call are printed
    if zones:
        args += ["--pcpu", "--min-cpu-time=0"]
    if not timed:
        # counted: the trace's calls on one thread, the one callgrind counts
        args.append("--singlethread")
    return args


@contextlib.contextmanager
def _started(
    command: list[str], env: Mapping[str, str], stderr: Path, stdout: Path, *, grace_s: float = 5.0
) -> Iterator[subprocess.Popen[bytes]]:
    """The replayer started in its own process group, its output in the files ``stdout`` and
    ``stderr``; its group stopped (SIGTERM, SIGKILL after ``grace_s``) when the block ends."""
    with open(stderr, "wb") as err, open(stdout, "wb") as out:
        try:
            group = spawn(
                command,
                session=False,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        except OSError as exc:
            raise ReplayFailed(f"cannot start {command[0]}: {exc}") from None
    try:
        yield group.proc
    finally:
        group.end(grace_s)


def _no_frame_yet(out: TimedReplay, before: int) -> bool:
    """Whether the replayer started last has not yet started or read a frame."""
    return not out.startup_ns[-1] and len(out.frames) == before


def _lines(
    proc: subprocess.Popen[bytes],
    path: Path,
    *,
    fast: Callable[[], bool],
    stopped: Callable[[], bool],
) -> Iterator[str]:
    """The complete lines the replayer writes to the file ``path`` (its stdout), as they come, until
    it exits or ``stopped()``. A file, not a pipe: the replayer never waits on katra3d nor wakes it
    at each of its lines (one a call); the file is read every :data:`POLL_S`, every
    :data:`FAST_POLL_S` while ``fast()``."""
    pending = b""
    with open(path, "rb") as fh:
        while not stopped():
            chunk = fh.read()
            if chunk:
                pending += chunk
                *done, pending = pending.split(b"\n")
                for line in done:
                    yield line.decode("utf-8", "replace") + "\n"
                continue
            if proc.poll() is not None:
                rest = fh.read()
                if rest:
                    pending += rest
                    continue
                if pending:
                    yield pending.decode("utf-8", "replace")
                return
            time.sleep(FAST_POLL_S if fast() else POLL_S)


def _failure(what: str, code: int | None, stderr: Path) -> ReplayFailed:
    try:
        lines = [ln.strip() for ln in stderr.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    # glretrace prints the traced program's name first; the error is the last line that says
    # something
    said = [ln for ln in lines if "error" in ln.lower() or "warning" in ln.lower()] or lines
    tail = said[-1][:300] if said else "no message"
    how = f"exit status {code}" if code is None or code >= 0 else f"signal {-code}"
    return ReplayFailed(f"{what} failed ({how}): {tail}")


def timed_frames(
    replayer: Replayer,
    trace: str,
    count: int,
    env: Mapping[str, str],
    *,
    zones: bool,
    stopped: Callable[[], bool],
    warmup: int = 0,
    on_frame: Callable[[int], None] | None = None,
    on_restart: Callable[[int], None] | None = None,
    where: Path | None = None,
) -> TimedReplay:
    """Replay ``trace`` until ``count`` frames ended, more after restarts (:func:`wanted`), or
    ``stopped()``; each frame's end on the host clock. ``on_restart(k)``: a new replay begins at
    frame ``k``. ``where``: the directory its files go in (a run's own,
    :func:`katra3d.harness.run.replay.run`)."""
    out = TimedReplay()
    command = [replayer.path, *replay_args(replayer, timed=True, zones=zones), trace]
    with tempfile.TemporaryDirectory(prefix="katra3d-replay-", dir=where) as tmp:
        stderr, stdout = Path(tmp) / "stderr.txt", Path(tmp) / "stdout.txt"
        while len(out.frames) < wanted(count, warmup, out.restarts) and not stopped():
            before = len(out.frames)
            if before:
                out.restarts.append(before)
                if on_restart is not None:
                    on_restart(before)
            spawned = time.perf_counter_ns()
            out.starts_ns.append(spawned)
            out.startup_ns.append(0)
            reader = FrameReader()
            with _started(command, env, stderr, stdout) as proc:
                for line in _lines(
                    proc,
                    stdout,
                    fast=functools.partial(_no_frame_yet, out, before),
                    stopped=stopped,
                ):
                    if line.startswith(HEADER_LINE) and len(out.frames) == before:
                        # the replayer is about to read its first call: its frames start here
                        out.starts_ns[-1] = time.perf_counter_ns()
                        out.startup_ns[-1] = out.starts_ns[-1] - spawned
                        continue
                    frame = reader.feed(line)
                    if frame is None:
                        continue
                    out.frames.append(frame)
                    out.process_of.append(len(out.starts_ns) - 1)
                    if on_frame is not None:
                        on_frame(len(out.frames))
                    if len(out.frames) >= wanted(count, warmup, out.restarts) or stopped():
                        break
                else:
                    if stopped():
                        break
                    code = proc.wait()
                    made = len(out.frames) - before
                    if code != 0:
                        raise _failure(
                            f"replaying {trace} with {Path(replayer.path).name}", code, stderr
                        )
                    if made == 0:
                        raise ReplayFailed(
                            f"trace {trace} has no frames: {Path(replayer.path).name} replayed it "
                            "without a SwapBuffers (a program that never swaps, e.g. glmark2 "
                            "--off-screen, records none)"
                        )
    return out


def _untimed(
    replayer: Replayer,
    args: list[str],
    trace: str,
    env: Mapping[str, str],
    tmp: Path,
    *,
    stopped: Callable[[], bool],
    until: Callable[[str], bool],
) -> int | None:
    """A replay that is not timed (``args`` before the trace), its output read until ``until(line)``
    or ``stopped()`` (None, within :data:`POLL_S`); else its exit status. Its stderr is
    ``tmp/stderr.txt``."""
    command = [replayer.path, *(["--headless"] if replayer.headless else []), *args, trace]
    with _started(command, env, tmp / "stderr.txt", tmp / "stdout.txt") as proc:
        for line in _lines(proc, tmp / "stdout.txt", fast=lambda: False, stopped=stopped):
            if until(line):
                return None
        return None if stopped() else proc.wait()


def snapshot(
    replayer: Replayer,
    trace: str,
    call_no: int,
    env: Mapping[str, str],
    *,
    stopped: Callable[[], bool],
    where: Path | None = None,
) -> bytes | None:
    """The PNG glretrace writes of the draw buffer after call ``call_no``; None when stopped."""
    with tempfile.TemporaryDirectory(prefix="katra3d-snapshot-", dir=where) as tmp:
        png = Path(tmp) / f"s{call_no:010d}.png"
        args = ["-s", os.path.join(tmp, "s"), "-S", str(call_no)]
        code = _untimed(
            replayer,
            args,
            trace,
            env,
            Path(tmp),
            stopped=stopped,
            until=lambda line: line.startswith("Wrote ") and png.is_file(),
        )
        if stopped():
            return None
        if not png.is_file():
            raise _failure(
                f"the snapshot of call {call_no} of {trace}", code, Path(tmp) / "stderr.txt"
            )
        try:
            return png.read_bytes()
        except OSError as exc:
            raise ReplayFailed(f"cannot read the snapshot of call {call_no}: {exc}") from None


#: A string of the context in the replayer's state dump: ``"GL_VERSION": "4.5 (...) Mesa 22.3.6",``.
_STATE_LINE = re.compile(
    r'^\s*"(GL_VERSION|GL_SHADING_LANGUAGE_VERSION|GL_CONTEXT_PROFILE_MASK)":\s*"?([^"]*?)"?,?\s*$'
)


def context_strings(
    replayer: Replayer,
    trace: str,
    call_no: int,
    env: Mapping[str, str],
    *,
    where: Path | None = None,
) -> dict[str, str]:
    """The version, GLSL version and profile mask of the context the replayer makes for ``trace``
    (``{GL_VERSION: ...}``): its state dumped after call ``call_no`` (``-D``); {} when none."""
    found: dict[str, str] = {}

    def take(line: str) -> bool:
        if m := _STATE_LINE.match(line):
            found[m.group(1)] = m.group(2)
        return len(found) == 3

    with tempfile.TemporaryDirectory(prefix="katra3d-context-", dir=where) as tmp:
        args = ["-D", str(call_no), "--dump-format=json"]
        _untimed(replayer, args, trace, env, Path(tmp), stopped=lambda: False, until=take)
    return found


# --------------------------------------------------------------------------- counted


def counted_command(
    valgrind: str, replayer: Replayer, trace: str, dump_base: Path, *, cycles: bool
) -> list[str]:
    """valgrind's command line for one counted replay (address-space randomization off, as the
    counted run).
    """
    cmd = [
        valgrind,
        "--tool=callgrind",
        "-q",
        f"--dump-after={SWAP_FUNCTION[replayer.api]}",
        "--separate-threads=yes",
        "--dump-instr=no",
        f"--callgrind-out-file={dump_base}",
    ]
    if cycles:
        cmd.append("--cache-sim=yes")
    setarch = shutil.which("setarch")
    prefix = [setarch, platform.machine(), "-R"] if setarch else []
    return [*prefix, *cmd, replayer.path, *replay_args(replayer, timed=False, zones=False), trace]


def counted_frames(
    command: list[str],
    env: Mapping[str, str],
    count: int,
    *,
    stopped: Callable[[], bool],
    warmup: int = 0,
    on_restart: Callable[[int], None] | None = None,
    where: Path | None = None,
) -> tuple[list[dict[str, int]], list[int], list[int]]:
    """Per-frame callgrind counts (event -> count, main thread) of ``count`` frames, more after
    restarts (:func:`wanted`), each frame's last call before its SwapBuffers, and the restarts.

    Each replay runs the trace's first ``count`` frames (a trimmed copy, :func:`trim`) to their end
    under callgrind (its dumps are read afterwards); a nested SwapBuffers (GLX's dispatch, then
    Mesa's) dumps more than once a frame: a frame is the sum of its swap's dumps. When
    ``stopped()``, the replay in progress is stopped and the frames it had ended are kept
    (:func:`_counted_replay`).
    """
    frames: list[dict[str, int]] = []
    last_calls: list[int] = []
    restarts: list[int] = []
    base_index = command.index(next(c for c in command if c.startswith("--callgrind-out-file=")))
    per: list[int] = []  #: dumps a SwapBuffers, once a replay ran to its end
    with tempfile.TemporaryDirectory(prefix="katra3d-trimmed-", dir=where) as keep:
        try:
            first = trim(command[-1], count, Path(keep) / "first-frames.trace")
        except SceneError:
            if stopped():  # Ctrl-C reached apitrace trim too
                return frames, last_calls, restarts
            raise
        while len(frames) < wanted(count, warmup, restarts) and not stopped():
            if frames:
                restarts.append(len(frames))
                if on_restart is not None:
                    on_restart(len(frames))
            more = wanted(count, warmup, restarts) - len(frames)
            got, calls = _counted_replay(command, base_index, first, env, more, stopped, per, where)
            frames += got
            last_calls += calls
            if not got:
                break
    return frames, last_calls, restarts


def _counted_replay(
    command: list[str],
    base_index: int,
    trace: Path,
    env: Mapping[str, str],
    wanted: int,
    stopped: Callable[[], bool],
    per: list[int],
    where: Path | None,
) -> tuple[list[dict[str, int]], list[int]]:
    """One counted replay of ``trace`` (the trimmed copy): its first ``wanted`` frames' counts and
    last calls.

    A stop is seen within :data:`POLL_S`: the replayer's group is stopped then, and the frames it
    had ended (their lines in its output, a file read once it is stopped) are kept: their dumps were
    written at their SwapBuffers, before their lines. ``per`` holds the dumps a SwapBuffers makes,
    learnt from the first replay that ran to its end."""
    with tempfile.TemporaryDirectory(prefix="katra3d-counted-replay-", dir=where) as tmp:
        dump_base = Path(tmp) / "cg.out"
        cmd = [*command[:-1], str(trace)]
        cmd[base_index] = f"--callgrind-out-file={dump_base}"
        stderr, stdout = Path(tmp) / "stderr.txt", Path(tmp) / "stdout.txt"
        # no grace: valgrind's end on SIGTERM writes its last dump (seconds), which no frame needs
        with _started(cmd, env, stderr, stdout, grace_s=0.0) as proc:
            while proc.poll() is None and not stopped():
                time.sleep(POLL_S)
            code = proc.poll()
        # the replayer's group is stopped (the block's end): its output is whole
        reader = FrameReader()
        with open(stdout, encoding="utf-8", errors="replace") as fh:
            ended = [f for f in map(reader.feed, fh) if f is not None]
        # its group was stopped (the block's end): keep its frames
        if code is None or (code != 0 and stopped()):
            got = _frames_of(dump_base, None, len(ended), per[0] if per else None)
        else:
            if code != 0:
                raise _failure(f"the counted replay of {command[-1]}", code, stderr)
            rendered = reader.rendered or len(ended)
            got = _frames_of(dump_base, rendered, wanted)
            if not per:
                per.append(len(_parts(dump_base)) // rendered)
        return got[:wanted], [f.last_call for f in ended[: min(len(got), wanted)]]


def _parts(dump_base: Path) -> list[int]:
    """The numbers of callgrind's dumps at SwapBuffers (``cg.out.N-01``, main thread), in order."""
    return sorted(
        int(p.name[len(dump_base.name) + 1 :].split("-")[0])
        for p in dump_base.parent.iterdir()
        if p.name.startswith(dump_base.name + ".") and p.name.endswith("-01")
    )


def _blocks(dump: Path) -> int | None:
    """The basic blocks a callgrind dump spans (its ``desc: Timerange: Basic block A - B``), None if
    unsaid.
    """
    try:
        with open(dump, encoding="utf-8", errors="replace") as fh:
            for _, line in zip(range(40), fh, strict=False):
                if line.startswith("desc: Timerange: Basic block "):
                    first, _, last = line.split("block ", 1)[1].partition(" - ")
                    return int(last) - int(first)
    except (OSError, ValueError):
        return None
    return None


def _dumps_a_swap(dump_base: Path, parts: list[int]) -> int:
    """The dumps one SwapBuffers makes, read from the dumps themselves (a stopped replay has no
    frame count to divide them by): the first frame's first dump, then those right after it, each
    within the return of a nested SwapBuffers (a few basic blocks: the next frame's first dump spans
    its calls)."""
    per = 1
    for part in parts[1:]:
        blocks = _blocks(dump_base.with_name(f"{dump_base.name}.{part}-01"))
        if blocks is None or blocks > SAME_SWAP_BLOCKS:
            break
        per += 1
    return per


def _frames_of(
    dump_base: Path, rendered: int | None, wanted: int, per: int | None = None
) -> list[dict[str, int]]:
    """The counts of the first ``wanted`` frames: ``rendered`` frames ran to the replay's end (its
    dumps divide among them), else (``rendered`` None, a stopped replay) the ``wanted`` frames that
    ended, ``per`` dumps each when known (else :func:`_dumps_a_swap`)."""
    parts = _parts(dump_base)
    if rendered is None:
        per = per or _dumps_a_swap(dump_base, parts)
        rendered = min(wanted, len(parts) // per)
    elif not rendered or not parts or len(parts) % rendered:
        raise ReplayFailed(
            f"the counted replay rendered {rendered or 0} frames but callgrind dumped {len(parts)} "
            "times at SwapBuffers: cannot tell the frames apart"
        )
    else:
        per = len(parts) // rendered
    out: list[dict[str, int]] = []
    for k in range(min(rendered, wanted)):
        total: dict[str, int] = {}
        for part in parts[k * per : (k + 1) * per]:
            try:
                counts = read_summary(dump_base.with_name(f"{dump_base.name}.{part}-01"))
            except KatraError as exc:
                raise ReplayFailed(str(exc)) from None
            for event, value in counts.items():
                total[event] = total.get(event, 0) + value
        out.append(total)
    return out


__all__ = [
    "ReplayFailed",
    "SWAP_FUNCTION",
    "TimedReplay",
    "context_strings",
    "counted_command",
    "counted_frames",
    "replay_args",
    "snapshot",
    "timed_frames",
    "wanted",
]
