"""The pytest plugin (entry point pytest11 ``katra3d``), exercised through ``pytester``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from katra3d.harness.pytest_plugin import run_scene
from katra_trace.errors import OutputExistsError

STRICT = ("-p", "no:cacheprovider", "--strict-markers", "-W", "error")


def test_plugin_is_registered_and_imports_no_gl() -> None:
    code = (
        "import importlib.metadata as m, sys\n"
        "eps = [e.value for e in m.entry_points(group='pytest11') if e.name == 'katra3d']\n"
        "assert eps == ['katra3d.harness.pytest_plugin'], eps\n"
        "import katra3d.harness.pytest_plugin\n"
        "gl = [n for n in ('moderngl', 'glfw', 'OpenGL', 'glcontext') if n in sys.modules]\n"
        "assert not gl, gl\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_gl_marker_is_registered_by_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gl
        def test_marked():
            pass
    """)
    pytester.runpytest_subprocess(*STRICT).assert_outcomes(passed=1)
    # without the plugin, --strict-markers rejects the unknown marker: the plugin is what registers
    # it
    result = pytester.runpytest_subprocess(*STRICT, "-p", "no:katra3d")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*'gl' not found in `markers` configuration option*"])


@pytest.mark.gl
def test_katra_scene_fixture_runs_a_scene(pytester: pytest.Pytester, gl_ctx: object) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gl
        def test_fill(katra_scene):
            run = katra_scene(
                "fillrate", frames=12, warmup=2, size=(64, 64), params={"layers": 2}, zones=True
            )
            assert run.scene == "fillrate" and run.clock in run.stats
            assert run.primary["n"] == 12
            assert run.primary["median_ms"] > 0
            assert run.zones, "zones were requested"
            assert run.info["params"] == {"layers": 2}
            assert run.trace.is_file()

        def test_unknown_scene(katra_scene):
            katra_scene("no-such-scene")
    """)
    result = pytester.runpytest_subprocess(*STRICT, timeout=240)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["SceneError: unknown scene 'no-such-scene'; available: clear, *"])


@pytest.mark.slow
@pytest.mark.gl
def test_frames_land_in_pytest_benchmark_stats(
    pytester: pytest.Pytester, gl_ctx: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile("""
        def test_fill_bench(katra_scene, benchmark):
            run = katra_scene("fillrate", frames=15, warmup=2, size=(64, 64), params={"layers": 2},
                              benchmark=benchmark)
            assert run.primary["n"] == 15
    """)
    out = pytester.path / "bench.json"
    # The inner pytest is its own session, not an xdist worker: pytest-benchmark reads this variable
    # and would disable benchmarks when the outer run is distributed (make test runs with -n auto).
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    result = pytester.runpytest_subprocess(*STRICT, f"--benchmark-json={out}", timeout=240)
    result.assert_outcomes(passed=1)
    bench = json.loads(out.read_text())["benchmarks"]
    assert len(bench) == 1
    stats, extra = bench[0]["stats"], bench[0]["extra_info"]["katra3d"]
    assert stats["rounds"] == 15 and stats["iterations"] == 1  # one round per measured frame
    assert (
        extra["scene"] == "fillrate"
        and extra["gl_renderer"]
        and extra["timing_mode"] in ("sync", "gpu")
    )
    assert extra["median_ms"] > 0 and extra["size"] == [64, 64]
    # with benchmarking disabled the scene still runs all its frames
    result = pytester.runpytest_subprocess(*STRICT, "--benchmark-disable", timeout=240)
    result.assert_outcomes(passed=1)


def test_kept_trace_names() -> None:
    from katra3d.harness.pytest_plugin import MAX_NAME_CHARS, kept_trace_name

    assert kept_trace_name("tests/test_fill.py::test_fast[4]", 1, "fillrate") == (
        "tests.test_fill.py.test_fast[4]-01-fillrate.katra"
    )
    assert kept_trace_name("t.py::TestX::test_y[a b/c]", 12, "my/x.py:Cls") == (
        "t.py.TestX.test_y[a_b.c]-12-my_x.py_Cls.katra"
    )
    long_a, long_b = (
        kept_trace_name(f"t.py::test_{'x' * 200}{end}", 1, "fillrate") for end in "ab"
    )
    assert (
        len(long_a) == MAX_NAME_CHARS and long_a != long_b and long_a.endswith("-01-fillrate.katra")
    )


def test_keep_dir_that_is_a_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    (pytester.path / "taken").write_text("a file")
    result = pytester.runpytest_subprocess(*STRICT, "--katra3d-keep", "taken")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--katra3d-keep '*taken' is not a directory*"])


@pytest.mark.slow
@pytest.mark.gl
def test_keep_option_keeps_traces_and_a_rerun_replaces_them(
    pytester: pytest.Pytester, gl_ctx: object
) -> None:
    pytester.makepyfile(
        test_kept="""
        def test_two(katra_scene):
            first = katra_scene("triangle", frames=4, warmup=1, size=(32, 32))
            second = katra_scene("triangle", frames=4, warmup=1, size=(32, 32))
            assert first.trace != second.trace and first.trace.is_file()
            print("TRACE", first.trace)
    """
    )
    kept = pytester.path / "kept"
    names = ["test_kept.py.test_two-01-triangle.katra", "test_kept.py.test_two-02-triangle.katra"]
    result = pytester.runpytest_subprocess(*STRICT, "-s", "--katra3d-keep", "kept", timeout=240)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"*TRACE {kept / names[0]}", f"katra3d: 2 trace(s) kept in {kept}"]
    )
    assert sorted(p.name for p in kept.iterdir()) == names
    before = (kept / names[0]).read_bytes()
    # a rerun replaces the test's own traces (it does not trip on them)
    pytester.runpytest_subprocess(*STRICT, "--katra3d-keep", "kept", timeout=240).assert_outcomes(
        passed=1
    )
    assert (
        sorted(p.name for p in kept.iterdir()) == names and (kept / names[0]).read_bytes() != before
    )
    # the ini option, relative to the ini file
    pytester.makeini("[pytest]\nkatra3d_keep = from-ini\n")
    pytester.runpytest_subprocess(*STRICT, timeout=240).assert_outcomes(passed=1)
    assert sorted(p.name for p in (pytester.path / "from-ini").iterdir()) == names
    from katra_trace import open_trace

    assert open_trace(pytester.path / "from-ini" / names[1]).summary.status == "complete"


@pytest.mark.gl
@pytest.mark.parametrize("measure", ["time", "instructions"])
def test_both_paths_refuse_to_replace_a_trace_unless_told(
    measure: str, tmp_path: Path, gl_ctx: object
) -> None:
    """run_scene's time and counted paths follow one rule: an existing file at ``trace`` is refused
    (OutputExistsError, the file untouched) unless ``overwrite``."""
    trace = tmp_path / "t.katra"
    trace.write_bytes(b"someone else's file")
    with pytest.raises(OutputExistsError):
        run_scene("clear", trace, frames=2, warmup=1, size=(8, 8), measure=measure)
    assert trace.read_bytes() == b"someone else's file"


BAD_ARGUMENTS = {
    "size=('a', 'b')": "bad size ('a', 'b'): width and height must be whole numbers in 1..16384",
    "size=16": "bad size 16: expected (WIDTH, HEIGHT), e.g. (640, 360)",
    "frames='3'": "bad frames '3': expected a whole number in 1..10000000",
    "frames=2.5": "bad frames 2.5: expected a whole number in 1..10000000",
    "seed='x'": "bad seed 'x': expected a whole number in 0..9223372036854775807",
    "seed=2**80": f"bad seed {2**80}: must be in 0..9223372036854775807",
}


def test_a_katra3d_error_fails_the_test_in_one_line(pytester: pytest.Pytester) -> None:
    """Bad arguments get the command line's checks (harness.run.config.check_numbers), before any GL
    work; a scene file is looked up beside the test, in the working directory and in pytest's
    rootdir, each path named once."""
    (pytester.path / "tests").mkdir()
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    (pytester.path / "broken.py").write_text("raise RuntimeError('found in the rootdir')\n")
    tests = [
        f"def test_{i}(katra_scene):\n    katra_scene('clear', {a})\n"
        for i, a in enumerate(BAD_ARGUMENTS)
    ]
    tests.append("def test_root(katra_scene):\n    katra_scene('broken.py')\n")
    tests.append("def test_missing(katra_scene):\n    katra_scene('nothere.py:C')\n")
    (pytester.path / "tests" / "test_args.py").write_text("\n\n".join(tests))
    r = subprocess.run(
        [sys.executable, "-m", "pytest", *STRICT, "-q", "test_args.py"],
        cwd=pytester.path / "tests",
        capture_output=True,
        text=True,
        timeout=120,
    )
    root = pytester.path
    expected = [f"ConfigError: {m}" for m in BAD_ARGUMENTS.values()] + [
        f"SceneError: error while importing scene file '{root}/broken.py': RuntimeError: found in "
        "the rootdir",
        f"SceneError: scene file 'nothere.py' not found; tried {root}/tests/nothere.py, "
        f"{root}/nothere.py",
    ]
    errors = [line for line in r.stdout.splitlines() if line.startswith(("Config", "Scene"))]
    assert errors == expected, r.stdout
    assert f"{len(expected)} failed" in r.stdout, r.stdout
    assert "katra3d/" not in r.stdout and "During handling" not in r.stdout, r.stdout


@pytest.mark.gl
def test_a_failed_rerun_keeps_the_kept_trace(pytester: pytest.Pytester, gl_ctx: object) -> None:
    """As ``katra3d run --force``: a rerun whose scene fails leaves the earlier trace as it was and
    keeps its own frames beside it."""
    pytester.makepyfile(
        flaky="""
        from pathlib import Path

        from katra3d import Scene


        class Flaky(Scene):
            name = "flaky"
            description = "fails at its second frame once the file 'fail' exists"

            def setup(self, ctx, size, params):
                self.bind_target(ctx, size)

            def render(self, frame):
                with frame.zone("clear"):
                    self.target.use()
                    self.target.clear(1.0, 0.0, 0.0, 1.0)
                if frame.index >= 1 and Path("fail").exists():
                    raise RuntimeError("it failed this time")

            def release(self):
                self.release_target()
        """,
        test_flaky="""
        def test_flaky(katra_scene):
            katra_scene("flaky.py", frames=3, warmup=0, size=(8, 8))
        """,
    )
    kept = pytester.path / "kept"
    trace = kept / "test_flaky.py.test_flaky-01-flaky.py.katra"
    pytester.runpytest_subprocess(*STRICT, "--katra3d-keep", "kept", timeout=120).assert_outcomes(
        passed=1
    )
    before = trace.read_bytes()
    (pytester.path / "fail").write_text("")
    result = pytester.runpytest_subprocess(*STRICT, "--katra3d-keep", "kept", timeout=120)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["SceneError: scene 'flaky' failed while rendering*"])
    from katra_trace import open_trace

    assert trace.read_bytes() == before and open_trace(trace).status == "complete"
    assert open_trace(trace.with_name(trace.stem + ".failed.katra")).status == "aborted"
