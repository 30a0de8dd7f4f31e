"""Reliability of ``katra3d run`` and the capture engine: real processes, signals, FIFOs and scenes
that misbehave. Each test names the fault (docs/reliability.md) it covers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from katra_trace import open_trace
from katra_trace.schema import Clock, Kind
from tests.cli_helpers import katra
from tests.trace_helpers import wait_for_measured_frames

KATRA3D = str(Path(sys.executable).with_name("katra3d"))
pytestmark = pytest.mark.gl

SCENES = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from katra3d import Param, Scene

    class _Base(Scene):
        stresses = ("test",)

        def setup(self, ctx, size, params):
            self.bind_target(ctx, size)
            self.ctx = ctx
            self.marker = os.environ.get("KATRA3D_TEST_MARKER")

        def render(self, frame):
            self.target.use()
            self.target.clear(0.2, 0.3, 0.4, 1.0)
            if frame.index == 10 and self.marker:
                open(self.marker, "w").close()
            if frame.index >= 10:
                self.stuck(frame)

        def stuck(self, frame):
            pass

    class Sleeps(_Base):
        name = "sleeps"
        def stuck(self, frame):
            time.sleep(1000)

    class Spins(_Base):
        name = "spins"
        def stuck(self, frame):
            while True:
                pass

    class Exits(_Base):
        name = "exits"
        def stuck(self, frame):
            sys.exit(0)

    class OutOfMemory(_Base):
        name = "oom"
        def stuck(self, frame):
            self.big = self.ctx.buffer(reserve=32 << 30)

    class SetupRaises(_Base):
        name = "setup-raises"
        def setup(self, ctx, size, params):
            raise RuntimeError("no")

    class ReleasesTarget(_Base):
        name = "releases-target"
        def release(self):
            self.target.release()
            raise RuntimeError("scene release failed on purpose")

    class BadShader(_Base):
        name = "bad-shader"
        def setup(self, ctx, size, params):
            ctx.program(vertex_shader="#version 330\\nvoid main() { gl_Position = oops; }",
                        fragment_shader="#version 330\\nout vec4 c; void main() { c = vec4(1); }")

    class Surrogate(_Base):
        name = "odd-\\udcff"

    class LongZones(_Base):
        name = "long-zones"
        def render(self, frame):
            self.target.use()
            with frame.zone("z" * 5000):  # over KHR_debug's 4,096-byte message limit on Mesa
                self.target.clear(0.1, 0.2, 0.3, 1.0)
            with frame.zone("odd-\\udcff"):
                self.target.clear(0.1, 0.2, 0.3, 1.0)
""")


@pytest.fixture
def scenes_file(tmp_path: Path) -> Path:
    path = tmp_path / "faulty.py"
    path.write_text(SCENES)
    return path


def _one_line_error(res: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert res.returncode == code, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("katra3d: error:")]
    assert len(errors) == 1, res.stderr
    return errors[0]


def _frames(path: Path) -> int:
    """Measured frames (warmup excluded) on the wall clock."""
    ev = open_trace(path).events
    return int(
        ((ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.WALL) & (ev["flags"] == 0)).sum()
    )


@pytest.fixture
def start_stuck(
    tmp_path: Path, scenes_file: Path
) -> Iterator[Callable[[str], tuple[subprocess.Popen[str], Path]]]:
    """``start_stuck(scene)``: a run of that scene of SCENES, started in the background and returned
    once it is stuck in frame 10 (the scene's marker is written there). A stuck run never ends by
    itself (``spins`` would hold a CPU core for the rest of the suite): one still running when the
    test ends is killed."""
    started: list[subprocess.Popen[str]] = []

    def start(scene: str) -> tuple[subprocess.Popen[str], Path]:
        marker = tmp_path / "frame10"
        out = tmp_path / f"{scene}.katra"
        proc = subprocess.Popen(
            [
                KATRA3D,
                "run",
                f"{scenes_file}:{scene.title()}",
                "--frames",
                "100",
                "--warmup",
                "0",
                "--size",
                "16x16",
                "-o",
                str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "KATRA3D_TEST_MARKER": str(marker)},
        )
        started.append(proc)
        deadline = time.monotonic() + 60
        while not marker.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                output = proc.communicate()
                pytest.fail(
                    f"the run did not reach frame 10 (exit status {proc.returncode}): {output}"
                )
            time.sleep(0.05)
        time.sleep(0.6)  # now stuck in frame 10
        return proc, out

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


# --------------------------------------------------------------------------- 1, 2: output claiming


def test_two_runs_one_path_never_corrupt_it(tmp_path: Path) -> None:
    cmd = [
        KATRA3D,
        "run",
        "triangle",
        "--frames",
        "300",
        "--size",
        "32x32",
        "--quiet",
        "-o",
        "same.katra",
    ]
    procs = [
        subprocess.Popen(
            cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    for p in procs:
        for stream in (p.stdout, p.stderr):
            if stream is not None:
                stream.close()
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert "Traceback" not in loser and (
        "another katra3d run" in loser or "already exists" in loser
    ), loser
    assert _frames(tmp_path / "same.katra") == 300
    assert open_trace(tmp_path / "same.katra").status == "complete"
    assert not list(tmp_path.glob("*.part"))


def test_two_runs_with_default_names_get_two_traces(tmp_path: Path) -> None:
    cmd = [KATRA3D, "run", "triangle", "--frames", "200", "--size", "32x32", "--quiet"]
    procs = [
        subprocess.Popen(
            cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    traces = sorted((tmp_path / "traces").glob("*.katra"))
    assert len(traces) == 2
    assert [_frames(t) for t in traces] == [200, 200]


def test_a_failed_run_never_replaces_an_existing_trace(tmp_path: Path, scenes_file: Path) -> None:
    assert (
        katra(
            "run",
            "triangle",
            "--frames",
            "30",
            "--size",
            "16x16",
            "--quiet",
            "-o",
            "keep.katra",
            cwd=tmp_path,
        ).returncode
        == 0
    )
    before = (tmp_path / "keep.katra").read_bytes()
    refused = katra("run", f"{scenes_file}:SetupRaises", "-o", "keep.katra", cwd=tmp_path)
    assert "already exists" in _one_line_error(refused) and "--force" in refused.stderr
    forced = katra("run", f"{scenes_file}:SetupRaises", "-o", "keep.katra", "--force", cwd=tmp_path)
    assert "failed in setup" in _one_line_error(forced)
    assert (tmp_path / "keep.katra").read_bytes() == before, (
        "a run that recorded nothing replaced the trace"
    )
    replaced = katra(
        "run",
        "triangle",
        "--frames",
        "5",
        "--size",
        "16x16",
        "--quiet",
        "-o",
        "keep.katra",
        "--force",
        cwd=tmp_path,
    )
    assert replaced.returncode == 0 and _frames(tmp_path / "keep.katra") == 5


# --------------------------------------------------------------------------- 3: stuck frames,
# signals


def _pending(pid: int, sig: signal.Signals) -> bool:
    """Whether ``sig`` is still pending for process ``pid`` (for the process or one of its threads):
    sent, and not yet taken by its handler. /proc/PID/task/*/status shows the pending sets as hex
    masks, bit n-1 for signal n."""
    bit = 1 << (int(sig) - 1)
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:  # the thread ended meanwhile
            continue
        if any(
            line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & bit
            for line in lines
        ):
            return True
    return False


@pytest.mark.parametrize(("scene", "sig"), [("sleeps", signal.SIGINT), ("spins", signal.SIGTERM)])
def test_a_second_signal_ends_a_stuck_frame_with_its_frames_kept(
    start_stuck: Any, scene: str, sig: signal.Signals
) -> None:
    proc, out = start_stuck(scene)
    proc.send_signal(sig)
    time.sleep(0.3)
    assert proc.poll() is None  # the first signal waits for the frame boundary
    # a second signal of a kind still pending merges with the first: send it once the run has taken
    # the first
    deadline = time.monotonic() + 30
    while _pending(proc.pid, sig):
        assert time.monotonic() < deadline, f"the run never took the first {sig.name}"
        time.sleep(0.01)
    proc.send_signal(sig)
    # the stuck frame never ends by itself (sleeps 1000 s, or spins): the run ending at all is the
    # keeper's work
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + int(sig), err
    assert "Traceback" not in err
    trace = open_trace(out)
    assert trace.status == "interrupted"
    assert _frames(out) == 10


def test_sigkill_in_a_stuck_frame_keeps_the_frames_before_it(start_stuck: Any) -> None:
    proc, out = start_stuck("sleeps")
    part = out.with_name(out.name + ".part")
    # the keeper hands the frames over while the frame is stuck (within ~0.5 s: waited for, not
    # assumed)
    wait_for_measured_frames(proc, part, limit_s=30, at_least=10)
    proc.kill()
    proc.communicate(timeout=30)
    assert part.exists() and not out.exists()
    with pytest.warns(Warning):  # an unfinished trace, read as far as it goes
        assert _frames(part) == 10


def test_sighup_finishes_the_trace_like_sigterm(tmp_path: Path) -> None:
    out = tmp_path / "hup.katra"
    proc = subprocess.Popen(
        [KATRA3D, "run", "triangle", "--frames", "1000000", "--size", "16x16", "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # stopped once measured frames are on disk: the .part appears before the scene's set-up and
    # warm-up
    wait_for_measured_frames(proc, out.with_name(out.name + ".part"))
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + int(signal.SIGHUP), err
    trace = open_trace(out)
    assert trace.status == "interrupted" and _frames(out) > 0


def test_sigint_during_start_up_is_quiet(tmp_path: Path) -> None:
    """From the first import of katra3d's own code on, a Ctrl-C never prints a traceback. (Before
    that, while the interpreter itself starts, Python reports a failed start-up its own way.)"""
    for delay in (0.05, 0.1, 0.2, 0.3):
        proc = subprocess.Popen(
            [
                KATRA3D,
                "run",
                "triangle",
                "--frames",
                "5",
                "--size",
                "16x16",
                "-o",
                str(tmp_path / f"s{delay}.katra"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        if "init_import_site" in err:  # still inside the interpreter's own start-up
            continue
        if "Traceback" in err and not any(
            f"/{pkg}/" in err for pkg in ("harness", "katra_trace", "scenes")
        ):
            # interrupted before the first line of katra3d's own code ran (the console script's
            # import)
            continue
        assert "Traceback" not in err, (delay, err)
        # 0: it finished first; 130: katra3d caught it; -SIGINT: it came while the interpreter was
        # shutting down, after Python put the default action back (the trace was already finished)
        assert proc.returncode in (0, 130, -int(signal.SIGINT)), (delay, proc.returncode, err)


# --------------------------------------------------------------------------- 6, 7, 12: hostile
# scenes


def test_gl_errors_fail_the_scene_and_are_recorded(tmp_path: Path, scenes_file: Path) -> None:
    res = katra(
        "run",
        f"{scenes_file}:OutOfMemory",
        "--frames",
        "20",
        "--warmup",
        "0",
        "--size",
        "16x16",
        "-o",
        "oom.katra",
        cwd=tmp_path,
    )
    line = _one_line_error(res)
    assert "GL_OUT_OF_MEMORY" in line and "frame 10" in line
    # a failed run never leaves its trace at -o (it would block the rerun): its frames are set aside
    assert line.endswith(
        "; the frames it measured are in 'oom.failed.katra' (the output was not written)"
    )
    assert not (tmp_path / "oom.katra").exists()
    trace = open_trace(tmp_path / "oom.failed.katra")
    assert trace.status == "aborted"
    assert any(
        a.get("type") == "gl_error" and a.get("error") == "GL_OUT_OF_MEMORY"
        for a in trace.annotations
    )
    assert _frames(tmp_path / "oom.failed.katra") == 11  # the frame with the error is recorded too


def test_sys_exit_in_a_scene_is_a_scene_error(tmp_path: Path, scenes_file: Path) -> None:
    res = katra(
        "run",
        f"{scenes_file}:Exits",
        "--frames",
        "20",
        "--warmup",
        "0",
        "--size",
        "16x16",
        "-o",
        "exit.katra",
        cwd=tmp_path,
    )
    assert "SystemExit" in _one_line_error(res)
    assert open_trace(tmp_path / "exit.failed.katra").status == "aborted"


def test_scene_releasing_the_harness_framebuffer_gets_its_own_error(
    tmp_path: Path, scenes_file: Path
) -> None:
    res = katra(
        "run",
        f"{scenes_file}:ReleasesTarget",
        "--frames",
        "3",
        "--size",
        "16x16",
        "-o",
        "r.katra",
        cwd=tmp_path,
    )
    assert "scene release failed on purpose" in _one_line_error(res)


def test_glsl_error_from_a_raw_program_call_is_one_line(tmp_path: Path, scenes_file: Path) -> None:
    res = katra(
        "run",
        f"{scenes_file}:BadShader",
        "--frames",
        "3",
        "--size",
        "16x16",
        "-o",
        "b.katra",
        cwd=tmp_path,
    )
    line = _one_line_error(res)
    assert "bad-shader" in line and "oops" in line


def test_scene_name_with_a_lone_surrogate_runs(tmp_path: Path, scenes_file: Path) -> None:
    res = katra(
        "run",
        f"{scenes_file}:Surrogate",
        "--frames",
        "3",
        "--warmup",
        "0",
        "--size",
        "16x16",
        "--quiet",
        "-o",
        "s.katra",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert _frames(tmp_path / "s.katra") == 3


def test_zone_names_past_the_debug_label_limit_run_and_keep_their_whole_name(
    tmp_path: Path, scenes_file: Path
) -> None:
    res = katra(
        "run",
        f"{scenes_file}:LongZones",
        "--frames",
        "3",
        "--warmup",
        "0",
        "--size",
        "16x16",
        "--zones",
        "--quiet",
        "-o",
        "z.katra",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    trace = open_trace(tmp_path / "z.katra")
    zones = trace.events[trace.events["kind"] == int(Kind.ZONE)]
    names = {trace.strings[i] for i in zones["name"]}
    # the trace stores the undecodable byte as U+FFFD
    assert "z" * 5000 in names and len(names) == 2


def test_a_file_name_that_is_not_utf8_is_written_and_recorded(tmp_path: Path) -> None:
    name = os.fsdecode(b"run-\xff.katra")
    res = katra(
        "run",
        "triangle",
        "--frames",
        "2",
        "--warmup",
        "0",
        "--size",
        "16x16",
        "-o",
        name,
        cwd=tmp_path,
    )
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert "trace: run-" in res.stdout
    assert _frames(tmp_path / name) == 2


# --------------------------------------------------------------------------- 10, 11, 14: bad
# outputs and options


def test_fifo_and_devices_are_refused_as_output_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (str(fifo), "/dev/stdout", "/dev/null"):
        res = katra(
            "run",
            "triangle",
            "--frames",
            "2",
            "--size",
            "16x16",
            "-o",
            target,
            cwd=tmp_path,
            timeout=30,
        )
        assert "not a regular file" in _one_line_error(res), target


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", "empty -o/--output path"),
        ("newdir/", "names a directory"),
        ("/proc/version", "already exists"),
    ],
)
def test_unclear_outputs_get_clear_messages(tmp_path: Path, output: str, message: str) -> None:
    res = katra("run", "triangle", "--frames", "2", "--size", "16x16", "-o", output, cwd=tmp_path)
    assert message in _one_line_error(res)
    assert not (tmp_path / "newdir").exists()


def test_forced_write_to_an_unwritable_place_is_one_line(tmp_path: Path) -> None:
    res = katra(
        "run",
        "triangle",
        "--frames",
        "2",
        "--size",
        "16x16",
        "-o",
        "/proc/version",
        "--force",
        cwd=tmp_path,
    )
    line = _one_line_error(res)
    assert "/proc/version" in line


def test_samples_must_be_a_power_of_two(tmp_path: Path) -> None:
    res = katra(
        "run",
        "triangle",
        "--frames",
        "2",
        "--size",
        "16x16",
        "--samples",
        "3",
        "-o",
        "x.katra",
        cwd=tmp_path,
    )
    assert "power of two" in _one_line_error(res)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- 15: handlers installed
# from C


def test_a_signal_handler_installed_from_c_is_restored_as_default(tmp_path: Path) -> None:
    """Under apitrace (or any host whose preloaded library installs a C-level handler before Python
    starts) signal.signal() returns None for it; the run must still end cleanly and leave SIG_DFL.
    """
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the preloaded handler library")
    src = tmp_path / "preload.c"
    src.write_text(
        "#include <signal.h>\nstatic void on_term(int s) { (void)s; }\n"
        "__attribute__((constructor)) static void init(void) { signal(SIGTERM, on_term); }\n"
    )
    lib = tmp_path / "libpreload.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True
    )
    program = textwrap.dedent(f"""
        import signal
        assert signal.getsignal(signal.SIGTERM) is None  # a handler Python did not install
        from katra3d.harness.run.config import RunConfig
        from katra3d.harness.run.runner import run
        config = RunConfig(
            scenes=("triangle",), frames=3, size=(16, 16), output={str(tmp_path / "c.katra")!r}
        )
        result = run(config, quiet=True)
        assert result.status == "complete"
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        print("ok")
    """)
    res = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "LD_PRELOAD": str(lib)},
    )
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr
