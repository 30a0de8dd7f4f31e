"""The pytest plugin (entry point pytest11 ``katra3d``), exercised through ``pytester``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

STRICT = ("-p", "no:cacheprovider", "--strict-markers", "-W", "error")


def test_plugin_is_registered_and_imports_no_gl() -> None:
    code = ("import importlib.metadata as m, sys\n"
            "eps = [e.value for e in m.entry_points(group='pytest11') if e.name == 'katra3d']\n"
            "assert eps == ['harness.pytest_plugin'], eps\n"
            "import harness.pytest_plugin\n"
            "gl = [n for n in ('moderngl', 'glfw', 'OpenGL', 'glcontext') if n in sys.modules]\n"
            "assert not gl, gl\n")
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
    # without the plugin, --strict-markers rejects the unknown marker: the plugin is what registers it
    result = pytester.runpytest_subprocess(*STRICT, "-p", "no:katra3d")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*'gl' not found in `markers` configuration option*"])


@pytest.mark.gl
def test_katra_scene_fixture_runs_a_scene(pytester: pytest.Pytester, gl_ctx: object) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gl
        def test_fill(katra_scene):
            run = katra_scene("fillrate", frames=12, warmup=2, size=(64, 64), params={"layers": 2}, zones=True)
            assert run.scene == "fillrate" and run.clock in run.stats
            assert run.primary["n"] == 12
            assert run.primary["median_ms"] > 0
            assert run.zones, "zones were requested"
            assert run.info["params"] == {"layers": 2}
            assert run.trace.is_file()

        def test_unknown_scene(katra_scene):
            from katra_trace.errors import SceneError
            with pytest.raises(SceneError, match="unknown scene"):
                katra_scene("no-such-scene")
    """)
    result = pytester.runpytest_subprocess(*STRICT, timeout=240)
    result.assert_outcomes(passed=2)


@pytest.mark.gl
def test_frames_land_in_pytest_benchmark_stats(pytester: pytest.Pytester, gl_ctx: object,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile("""
        def test_fill_bench(katra_scene, benchmark):
            run = katra_scene("fillrate", frames=15, warmup=2, size=(64, 64), params={"layers": 2},
                              benchmark=benchmark)
            assert run.primary["n"] == 15
    """)
    out = pytester.path / "bench.json"
    # The inner pytest is its own session, not an xdist worker: pytest-benchmark reads this variable and would
    # disable benchmarks when the outer run is distributed (make test runs with -n auto).
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    result = pytester.runpytest_subprocess(*STRICT, f"--benchmark-json={out}", timeout=240)
    result.assert_outcomes(passed=1)
    bench = json.loads(out.read_text())["benchmarks"]
    assert len(bench) == 1
    stats, extra = bench[0]["stats"], bench[0]["extra_info"]["katra3d"]
    assert stats["rounds"] == 15 and stats["iterations"] == 1  # one round per measured frame
    assert extra["scene"] == "fillrate" and extra["gl_renderer"] and extra["timing_mode"] in ("sync", "gpu")
    assert extra["median_ms"] > 0 and extra["size"] == [64, 64]
    # with benchmarking disabled the scene still runs all its frames
    result = pytester.runpytest_subprocess(*STRICT, "--benchmark-disable", timeout=240)
    result.assert_outcomes(passed=1)
