"""glmark2 parity: katra3d against glmark2 on glmark2's own ``build:model=bunny`` workload at
800x600.

Both sides render the same work, off-screen, on the same machine, one after
the other, round by round (:func:`bench._core.interleave`), each for the same
N frames counted from the first frame after set-up:

* **glmark2** (``glmark2-x11``): ``glmark2 --off-screen -s 800x600 --results
  fps:cpu -b build:model=bunny:nframes=N`` under an Xvfb this bench starts
  itself (glmark2's GLX needs an X display; nothing is shown). Off-screen,
  glmark2 draws into an RGBA8 + depth renderbuffer pair and ends every frame
  with ``glFinish``. Its figure is its own ``FrameTime``: the time from the end
  of the scene's set-up to the end of its last frame (after that frame's
  ``glFinish``), over the frame count; it has no warmup, so its first, cold
  frame (shader variants compiled on first use) counts.
* **katra3d**: ``katra3d run bench/_glmark2_scene.py:Glmark2Build --size
  800x600 --frames N --warmup 0 --timing sync`` in its own process (the
  command-line path of a user scene), drawing glmark2-data's installed
  ``bunny.obj``, read at run time, with the same shading and draw path
  (bench/_glmark2_scene.py says what is the same). ``sync`` timing ends every
  frame with ``glFinish``, as glmark2 does, and ``--warmup 0`` counts the
  cold first frame, as glmark2 does. Its figure is read from the trace the
  run wrote, on glmark2's definition: from the first frame's start to the last
  frame's end, over the frame count, so whatever katra3d does between frames
  (events, checks, reference draws) is in it.

Rows (per round, katra3d's frame rate over glmark2's: > 1 is faster):

* ``build:model=bunny 800x600``: katra3d with no reference draw
  (``--reference-every 0``): the same work as glmark2, which has no such
  draw. Target >= 1.0, shown as a pass from 0.98 (the pair-to-pair spread is
  about 2 %);
* ``... reference every 4``: katra3d's default run, which also times a small
  fixed reference draw after every 4th frame (drift normalization,
  docs/timing.md): what that draw costs on this workload, for information;
* ``... as reported``: the default run's average frame rate as katra3d's
  end-of-run table reports it (frames over the sum of their ``wall`` times)
  over glmark2's: the two tools' printed numbers side by side;
* ``... CPU a frame``: process CPU time a frame (every thread: llvmpipe's
  rasterizer threads too), glmark2's over katra3d's: the work each does per
  frame, which a busy neighbour stretches in wall time but hardly in CPU time.

Where glmark2, its bunny model or Xvfb is missing, the rows are skipped with a
notice naming the apt line (``make bench`` installs them where it can:
ci/system-deps.sh bench).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import select
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bench._core import (
    BenchContext,
    Row,
    at_least,
    bench,
    interleave,
    median_iqr,
    pair_ratios,
    ratio_row,
)
from bench._glmark2_scene import Glmark2Build
from bench._proc import KATRA_RUN
from katra3d.harness.supervisor import spawn
from katra_trace import Clock, Flag, Kind, open_trace
from katra_trace.analysis.stats import frame_stats

#: The Debian/Ubuntu packages the row needs; ci/system-deps.sh's bench part installs the same list.
APT_PACKAGES: tuple[str, ...] = ("glmark2-x11", "glmark2-data", "xvfb")
#: The line that installs them (root).
APT_LINE = "apt-get install -y --no-install-recommends " + " ".join(APT_PACKAGES)
#: Where glmark2-data may be installed (glmark2's ``--data-path``), first match wins.
DATA_DIRS: tuple[Path, ...] = (Path("/usr/share/glmark2"), Path("/usr/local/share/glmark2"))
#: glmark2's model name and the file it reads under ``DATA_DIR/models``.
MODEL = "bunny"
MODEL_FILE = "bunny.obj"
SIZE = (800, 600)
#: Frames per side and round (each side ~2-6 s on llvmpipe, 2 cores), rounds (pairs) kept: 15,
#: because one pair's ratio spreads by about +-10 % on a 2-core machine with any other load
#: (0.78-1.13 in 6 pairs at load 2.4-3.1), and the median of 9 pairs then moved by several percent
#: from one run of the bench to the next.
FRAMES = 200
ROUNDS = 15
#: katra3d's default ``--reference-every`` (the second row's run).
REFERENCE_EVERY = 4
#: Target: at least glmark2's frame rate; 0.98 is shown as a pass (pair-to-pair spread ~2 %).
TARGET = at_least(1.0, floor=0.98)
#: The user scene katra3d runs: the file and class, for ``katra3d run FILE.py:Class``.
SCENE_FILE = Path(__file__).resolve().with_name("_glmark2_scene.py")
SCENE_SPEC = f"{SCENE_FILE}:{Glmark2Build.__name__}"
#: How long one side of one round may take before the bench gives up (s).
SIDE_TIMEOUT_S = 300.0

#: glmark2's result line with ``--results fps:cpu``: frame time, then user and system CPU time a
#: frame (ms).
_RESULT = re.compile(
    r"FrameTime:\s*([0-9.]+)\s*ms\s*\(User:\s*([0-9.]+)\s*ms,\s*System:\s*([0-9.]+)\s*ms\)"
)


@dataclasses.dataclass(frozen=True)
class Glmark2Tools:
    """What the row needs on this machine: the glmark2 and Xvfb executables and glmark2's data
    directory.
    """

    glmark2: str
    xvfb: str
    data_dir: Path

    @property
    def model(self) -> Path:
        """glmark2-data's bunny model, which katra3d's scene reads at run time."""
        return self.data_dir / "models" / MODEL_FILE


def find_tools(search_path: str | None = None) -> Glmark2Tools | str:
    """The tools found on ``search_path`` (PATH when None), or a one-line reason naming the apt
    line.
    """
    glmark2 = shutil.which("glmark2", path=search_path)
    xvfb = shutil.which("Xvfb", path=search_path)
    data_dir = next((d for d in DATA_DIRS if (d / "models" / MODEL_FILE).is_file()), None)
    missing = [
        what
        for what, found in (
            ("glmark2 (glmark2-x11)", glmark2),
            ("Xvfb (xvfb)", xvfb),
            (f"glmark2-data's {MODEL_FILE}", data_dir),
        )
        if found is None
    ]
    if missing or glmark2 is None or xvfb is None or data_dir is None:
        return f"skipped: no {', no '.join(missing)}; install with: {APT_LINE}"
    return Glmark2Tools(glmark2, xvfb, data_dir)


@contextlib.contextmanager
def xvfb_display(xvfb: str, timeout_s: float = 30.0) -> Iterator[str]:
    """An Xvfb of its own for glmark2's GLX: yields its DISPLAY (``:N``, a free number Xvfb chose);
    stopped on exit. RuntimeError when it does not come up within ``timeout_s``."""
    read_fd, write_fd = os.pipe()
    try:
        group = spawn(
            [xvfb, "-displayfd", str(write_fd), "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
            session=False,
            pass_fds=(write_fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    try:
        with os.fdopen(read_fd, "rb") as pipe:
            ready, _, _ = select.select([pipe], [], [], timeout_s)
            number = pipe.readline().strip() if ready else b""
        if not number.isdigit():
            raise RuntimeError(
                f"Xvfb did not start within {timeout_s:.0f} s (exit status {group.proc.poll()})"
            )
        yield f":{number.decode()}"
    finally:
        group.end(10.0)


@dataclasses.dataclass(frozen=True)
class Glmark2Frames:
    """glmark2's own figures for one run (s): ``frame_s``, its ``FrameTime`` (the time from the end
    of the scene's set-up to the end of its last frame, over the frame count) and ``cpu_s``, the
    process CPU time (user + system, every thread) a frame over the same span."""

    frame_s: float
    cpu_s: float


def glmark2_frames(tools: Glmark2Tools, display: str, frames: int) -> Glmark2Frames:
    """Run glmark2's ``build:model=bunny`` over ``frames`` frames, off-screen, and read its own
    figures.
    """
    command = [
        tools.glmark2,
        "--off-screen",
        "-s",
        f"{SIZE[0]}x{SIZE[1]}",
        "--data-path",
        str(tools.data_dir),
        "--results",
        "fps:cpu",
        "-b",
        f"build:model={MODEL}:nframes={frames}",
    ]
    done = subprocess.run(
        command,
        env={**os.environ, "DISPLAY": display},
        capture_output=True,
        text=True,
        timeout=SIDE_TIMEOUT_S,
        check=False,
    )
    found = _RESULT.findall(done.stdout)
    if done.returncode != 0 or len(found) != 1:
        tail = " / ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        raise RuntimeError(f"glmark2 exited {done.returncode} without one FrameTime: {tail}")
    frame_ms, user_ms, system_ms = (float(x) for x in found[0])
    return Glmark2Frames(frame_ms / 1e3, (user_ms + system_ms) / 1e3)


@dataclasses.dataclass(frozen=True)
class KatraFrames:
    """One katra3d run's figures (s).

    ``frame_s``: on glmark2's definition, from the first frame's start to the
    last frame's end, over the frame count (what katra3d does between frames
    included); ``reported_s``: one over katra3d's own average frame rate
    (``fps_avg`` of the end-of-run table: frames over the sum of their ``wall``
    times); ``cpu_s``: the mean ``process`` time of a frame (CPU time of every
    thread across the frame span); and the medians of a frame's parts:
    ``submit_s`` (render: the scene's GL calls), ``finish_s`` (``glFinish``),
    ``between_s`` (the harness's work from one frame's end to the next one's start).
    """

    frame_s: float
    reported_s: float
    cpu_s: float
    submit_s: float
    finish_s: float
    between_s: float


def katra_frames(
    tools: Glmark2Tools, frames: int, output: Path, reference_every: int
) -> KatraFrames:
    """Run ``katra3d run`` on the glmark2 scene in its own process and read its figures from the
    trace.
    """
    command = [
        *KATRA_RUN,
        SCENE_SPEC,
        "--size",
        f"{SIZE[0]}x{SIZE[1]}",
        "--frames",
        str(frames),
        "--warmup",
        "0",
        "--timing",
        "sync",
        "--reference-every",
        str(reference_every),
        "--param",
        f"{Glmark2Build.name}.model={tools.model}",
        "-o",
        str(output),
        "--force",
        "--quiet",
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=SIDE_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        tail = " / ".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"katra3d run exited {done.returncode}: {tail}")
    try:
        return read_frames(output, frames)
    finally:
        output.unlink(missing_ok=True)


def read_frames(path: Path, frames: int) -> KatraFrames:
    """:class:`KatraFrames` of the measured frames in the trace at ``path`` (RuntimeError unless
    ``frames``).
    """
    events = open_trace(path).events
    measured = events[
        (events["kind"] == int(Kind.FRAME)) & ((events["flags"] & int(Flag.WARMUP)) == 0)
    ]
    by_clock = {
        clock: np.sort(measured[measured["clock"] == int(clock)], order="start_ns")
        for clock in (Clock.WALL, Clock.CPU, Clock.PROCESS)
    }
    if any(len(v) != frames for v in by_clock.values()):
        raise RuntimeError(
            f"the run wrote {len(by_clock[Clock.WALL])} measured frames, not {frames}"
        )
    wall, cpu = by_clock[Clock.WALL], by_clock[Clock.CPU]
    ends = wall["start_ns"] + wall["dur_ns"]
    span_ns = int(ends[-1] - wall["start_ns"][0])
    between = wall["start_ns"][1:] - ends[:-1] if frames > 1 else np.zeros(1)
    return KatraFrames(
        frame_s=span_ns / frames / 1e9,
        reported_s=1.0 / frame_stats(wall["dur_ns"]).fps_avg,
        cpu_s=float(by_clock[Clock.PROCESS]["dur_ns"].mean()) / 1e9,
        submit_s=float(np.median(cpu["dur_ns"])) / 1e9,
        finish_s=float(np.median(wall["dur_ns"] - cpu["dur_ns"])) / 1e9,
        between_s=float(np.median(between)) / 1e9,
    )


@bench(
    "glmark2",
    about="katra3d / glmark2 frame rate on glmark2's build:model=bunny, 800x600 off-screen",
    needs_gl=True,
)
def glmark2_parity(ctx: BenchContext) -> list[Row]:
    """katra3d's frame rate over glmark2's on the same work (build:model=bunny, 800x600), round by
    round.
    """
    tools = find_tools()
    label = f"build:model={MODEL} {SIZE[0]}x{SIZE[1]}"
    if isinstance(tools, str):
        ctx.log(tools)
        return [Row(label, "frame rate: katra3d / glmark2", math.nan, notes=tools)]
    frames = ctx.scale(FRAMES, 10)
    ctx.facts.update(
        {
            "glmark2": tools.glmark2,
            "model": str(tools.model),
            "frames": frames,
            "loadavg_at_start": list(os.getloadavg()),
        }
    )
    glmark2_runs: list[Glmark2Frames] = []
    katra_runs: dict[str, list[KatraFrames]] = {"katra": [], "katra_ref": []}

    def glmark2(display: str) -> float:
        got = glmark2_frames(tools, display, frames)
        glmark2_runs.append(got)
        return got.frame_s

    def katra(key: str, reference_every: int) -> float:
        got = katra_frames(tools, frames, ctx.tmp / f"{key}.katra", reference_every)
        katra_runs[key].append(got)
        return got.frame_s

    with xvfb_display(tools.xvfb) as display:
        ctx.log(f"{label}, {frames} frames a side, Xvfb on {display}")
        samples = interleave(
            {
                "glmark2": lambda: glmark2(display),
                "katra": lambda: katra("katra", 0),
                "katra_ref": lambda: katra("katra_ref", REFERENCE_EVERY),
            },
            rounds=ctx.scale(ROUNDS, 2),
            progress=ctx.log,
        )
    ctx.facts["loadavg_at_end"] = list(os.getloadavg())
    # interleave's warmup round called every variant too: keep the kept rounds' figures only
    n = len(samples["glmark2"])
    glmark2_kept = glmark2_runs[-n:]
    katra_kept = {k: v[-n:] for k, v in katra_runs.items()}
    ctx.facts["glmark2_runs"] = [dataclasses.asdict(r) for r in glmark2_kept]
    ctx.facts.update(
        {f"{key}_runs": [dataclasses.asdict(r) for r in runs] for key, runs in katra_kept.items()}
    )

    def ms(runs: list[Any], field: str) -> str:
        return f"{1e3 * median_iqr([getattr(r, field) for r in runs])[0]:.2f}"

    def split(key: str) -> str:
        runs = katra_kept[key]
        return (
            f"katra3d a frame: submit {ms(runs, 'submit_s')} ms, glFinish {ms(runs, 'finish_s')} "
            "ms, "
            f"between frames {ms(runs, 'between_s')} ms"
        )

    def glmark2_over(field: str, key: str, katra_field: str) -> list[float]:
        """Per round: glmark2's ``field`` over katra3d's ``katra_field`` (run ``key``)."""
        return [
            getattr(g, field) / getattr(k, katra_field)
            for g, k in zip(glmark2_kept, katra_kept[key], strict=True)
        ]

    return [
        ratio_row(
            label,
            "frame rate: katra3d / glmark2 (no reference draw)",
            pair_ratios(samples, "glmark2", "katra"),
            target=TARGET,
            notes=f"glmark2 ~{ms(glmark2_kept, 'frame_s')} ms a frame; {split('katra')}",
        ),
        ratio_row(
            f"{label} reference every {REFERENCE_EVERY}",
            "frame rate: katra3d default run / glmark2",
            pair_ratios(samples, "glmark2", "katra_ref"),
            notes=split("katra_ref"),
        ),
        ratio_row(
            f"{label} as reported",
            "avg FPS in katra3d's table (default run) / glmark2's FPS",
            glmark2_over("frame_s", "katra_ref", "reported_s"),
            notes="katra3d's avg FPS counts the frames' wall times only; glmark2's its whole loop",
        ),
        ratio_row(
            f"{label} CPU a frame",
            "process CPU time a frame: glmark2 / katra3d (no reference draw)",
            glmark2_over("cpu_s", "katra", "cpu_s"),
            notes=f"glmark2 ~{ms(glmark2_kept, 'cpu_s')} ms CPU a frame, katra3d "
            f"~{ms(katra_kept['katra'], 'cpu_s')} "
            "ms; > 1: katra3d spends less CPU on a frame; stable under load, unlike frame rate",
        ),
    ]
