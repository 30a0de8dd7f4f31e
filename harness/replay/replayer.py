"""glretrace driven by katra3d: timed and counted replays, snapshots; docs/replay.md.

glretrace cannot replay twice in one process, so a short trace restarts in a new process whose
first frame is left out (:func:`wanted`)."""

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

SWAP_FUNCTION = {"glx": "glXSwapBuffers", "egl": "eglSwapBuffers"}


#: Printed before the trace's first call.
HEADER_LINE = "# call no "
POLL_S = 0.02
FAST_POLL_S = 0.0005
#: The most basic blocks between two dumps of one nested SwapBuffers (Mesa 22.3 GLX).
SAME_SWAP_BLOCKS = 64


class ReplayFailed(SceneError):
    """The replayer could not replay the trace."""


@dataclasses.dataclass
class TimedReplay:
    """Timed frames, each process's start (host clock) and ``restarts`` (frames that began one)."""

    frames: list[Frame] = dataclasses.field(default_factory=list)
    starts_ns: list[int] = dataclasses.field(default_factory=list)
    startup_ns: list[int] = dataclasses.field(default_factory=list)
    restarts: list[int] = dataclasses.field(default_factory=list)
    process_of: list[int] = dataclasses.field(default_factory=list)


def wanted(count: int, warmup: int, restarts: list[int]) -> int:
    """Frames to replay: ``count`` plus one for each restart after ``warmup`` (left out)."""
    return count + len(restarts) - bisect.bisect_left(restarts, warmup)


def replay_args(replayer: Replayer, *, timed: bool, zones: bool) -> list[str]:
    args = ["--headless"] if replayer.headless else []
    args.append("--pframe-times")  # a glFinish ends each frame
    if zones:
        args += ["--pcpu", "--min-cpu-time=0"]
    if not timed:
        args.append("--singlethread")
    return args


@contextlib.contextmanager
def _started(
    command: list[str], env: Mapping[str, str], stderr: Path, stdout: Path, *, grace_s: float = 5.0
) -> Iterator[subprocess.Popen[bytes]]:
    """The replayer in its own process group, stopped when the block ends."""
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
    return not out.startup_ns[-1] and len(out.frames) == before


def _lines(
    proc: subprocess.Popen[bytes],
    path: Path,
    *,
    fast: Callable[[], bool],
    stopped: Callable[[], bool],
) -> Iterator[str]:
    """Lines the replayer writes to ``path`` (a file, so it never waits on katra3d)."""
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
    """Replay ``trace`` until :func:`wanted` frames ended or ``stopped()``."""
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
            # no grace: its frames are read already, and glretrace 11.1 can take 10 s and a
            # SIGKILL to end after a SIGTERM
            with _started(command, env, stderr, stdout, grace_s=0.0) as proc:
                for line in _lines(
                    proc,
                    stdout,
                    fast=functools.partial(_no_frame_yet, out, before),
                    stopped=stopped,
                ):
                    if line.startswith(HEADER_LINE) and len(out.frames) == before:
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
    """Exit code of an untimed replay; None when ``until(line)`` or ``stopped()``."""
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
    """GL_VERSION, GLSL version and profile mask from the state dump after ``call_no``."""
    found: dict[str, str] = {}

    def take(line: str) -> bool:
        if m := _STATE_LINE.match(line):
            found[m.group(1)] = m.group(2)
        return len(found) == 3

    with tempfile.TemporaryDirectory(prefix="katra3d-context-", dir=where) as tmp:
        args = ["-D", str(call_no), "--dump-format=json"]
        _untimed(replayer, args, trace, env, Path(tmp), stopped=lambda: False, until=take)
    return found


def counted_command(
    valgrind: str, replayer: Replayer, trace: str, dump_base: Path, *, cycles: bool
) -> list[str]:
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
    """Per-frame callgrind counts, each frame's last call, and the restarts; a stop keeps the
    frames ended. A nested SwapBuffers dumps more than once: a frame sums its dumps."""
    frames: list[dict[str, int]] = []
    last_calls: list[int] = []
    restarts: list[int] = []
    base_index = command.index(next(c for c in command if c.startswith("--callgrind-out-file=")))
    per: list[int] = []
    with tempfile.TemporaryDirectory(prefix="katra3d-trimmed-", dir=where) as keep:
        try:
            first = trim(command[-1], count, Path(keep) / "first-frames.trace")
        except SceneError:
            if stopped():
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
    """Counts and last calls of one counted replay; ``per`` (dumps a swap) is learnt from the
    first complete one."""
    with tempfile.TemporaryDirectory(prefix="katra3d-counted-replay-", dir=where) as tmp:
        dump_base = Path(tmp) / "cg.out"
        cmd = [*command[:-1], str(trace)]
        cmd[base_index] = f"--callgrind-out-file={dump_base}"
        stderr, stdout = Path(tmp) / "stderr.txt", Path(tmp) / "stdout.txt"
        # no grace: valgrind's SIGTERM exit writes a last dump no frame needs
        with _started(cmd, env, stderr, stdout, grace_s=0.0) as proc:
            while proc.poll() is None and not stopped():
                time.sleep(POLL_S)
            code = proc.poll()
        reader = FrameReader()
        with open(stdout, encoding="utf-8", errors="replace") as fh:
            ended = [f for f in map(reader.feed, fh) if f is not None]
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
    return sorted(
        int(p.name[len(dump_base.name) + 1 :].split("-")[0])
        for p in dump_base.parent.iterdir()
        if p.name.startswith(dump_base.name + ".") and p.name.endswith("-01")
    )


def _blocks(dump: Path) -> int | None:
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
    """Dumps per SwapBuffers: the first plus those that span only a nested swap's return."""
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
    """Counts of the first ``wanted`` frames; a stopped replay (``rendered`` None) uses ``per``."""
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
