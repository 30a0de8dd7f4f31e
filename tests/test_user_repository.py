"""katra3d inside a user's own repository, one with its own ``scenes`` and ``harness`` packages (a
moderngl app quite likely has them): katra3d's code lives under ``katra3d`` only, so run, ``run
FILE.py``, ``scenes FILE:Class`` and its ``--param`` line, scene names after options, the pytest
fixture and a counted bisect work there, and a scene imports the app's packages beside katra3d's
API."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from katra3d.harness.run.config import RunConfig, parse_param, plan_run
from katra3d.scenes.builtin.clear import ClearScene
from katra3d.scenes.registry import (
    find_file_spec,
    get_scene,
    names_scene,
    split_file_spec,
    with_class,
)
from katra_trace import open_trace
from katra_trace.errors import ConfigError, SceneError
from tests.cli_helpers import katra

HAVE_VALGRIND = shutil.which("valgrind") is not None
#: the katra3d command in the app's repository: the repository first on PYTHONPATH (as its own code
#: needs)
APP_ENV = {"PYTHONPATH": "."}

#: The app's own packages: names that have nothing to do with katra3d's (a `Param` that is not
#: katra3d's).
APP_SCENES = '''"""The app's levels."""
LEVELS = ("intro", "boss")


def Param(x):
    return ("app-param", x)
'''
APP_HARNESS = '''"""The app's own test harness."""


def ring_count() -> int:
    return 3
'''
#: A scene of the app's: imports the app's `scenes` and `harness` beside katra3d's API. WORK clears
#: a frame.
SCENE = """import harness
import scenes
from katra3d import Param, Scene


class Cubes(Scene):
    name = "cubes"
    description = "the app's cubes"
    params = {"count": Param(4, min=1, max=1000, help="cubes")}

    def setup(self, ctx, size, params):
        self.ctx = ctx
        self.rings = harness.ring_count() * len(scenes.LEVELS)

    def render(self, frame):
        with frame.zone("clear"):
            for _ in range(WORK):
                self.ctx.clear(0.1 * (frame.index % 5), 0.2, 0.3, 1.0)
"""
SMALL = ("--frames", "2", "--warmup", "1", "--size", "16x16", "--quiet")


def _app(root: Path, work: int = 1) -> Path:
    """The user's repository: its own scenes/ and harness/ packages and my_scene.py."""
    (root / "scenes").mkdir(parents=True, exist_ok=True)
    (root / "harness").mkdir(exist_ok=True)
    (root / "scenes" / "__init__.py").write_text(APP_SCENES)
    (root / "harness" / "__init__.py").write_text(APP_HARNESS)
    (root / "my_scene.py").write_text(SCENE.replace("WORK", str(work)))
    return root


def _scenes(path: Path) -> list[dict[str, object]]:
    """The scenes the trace's header records: label, spec and params of each, in run order."""
    return [dict(s) for s in open_trace(path).header.capture_options.resolved.scenes or ()]


def _scene_params(path: Path) -> dict[str, dict[str, object]]:
    return {str(s["label"]): dict(s["params"]) for s in _scenes(path)}  # type: ignore[call-overload]


# --- the pieces, pure
# ------------------------------------------------------------------------------------------


def test_a_param_names_its_scene_by_any_spelling_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert parse_param("./my_scene.py:Cubes.count=400") == ("./my_scene.py:Cubes", "count", "400")
    assert parse_param("../d/x.py.count=1.5") == ("../d/x.py", "count", "1.5")
    assert parse_param("fillrate.layers=4") == ("fillrate", "layers", "4")
    assert parse_param("speed=0.5") == ("", "speed", "0.5")
    assert parse_param("triangle.note=a=b") == ("triangle", "note", "a=b")
    for bad in ("count", ".count=3", "x.py:Cubes.=3", "x.3d=1"):
        with pytest.raises(ConfigError, match="bad --param"):
            parse_param(bad)
    _app(tmp_path / "app")
    monkeypatch.chdir(tmp_path / "app")

    class Cubes(ClearScene):
        name = "cubes"

    spec = "./my_scene.py:Cubes"
    for spelling in (
        "cubes",
        spec,
        "my_scene.py:Cubes",
        "my_scene.py",
        "../app/my_scene.py:Cubes",
        f"{tmp_path}/app/my_scene.py",
        "./sub/../my_scene.py:Cubes",
    ):
        assert names_scene(spelling, spec, Cubes), spelling
    for other in ("clear", "other.py:Cubes", "my_scene.py:Cones", "my_scene"):
        assert not names_scene(other, spec, Cubes), other
    assert (
        split_file_spec("my_scene.py") == ("my_scene.py", "")
        and split_file_spec("pkg.mod:Cubes") is None
    )
    assert (
        with_class("my_scene.py", Cubes) == "my_scene.py:Cubes"
        and with_class("clear", ClearScene) == "clear"
    )


def test_a_relative_scene_file_is_found_beside_the_caller_then_here(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "scene.py").write_text("")
    (tmp_path / "other.py").write_text("")
    bases = (tmp_path / "tests", tmp_path)
    assert find_file_spec("scene.py:Cubes", bases) == f"{tmp_path}/tests/scene.py:Cubes"
    assert find_file_spec("other.py", bases) == f"{tmp_path}/other.py"
    assert (
        find_file_spec("clear", bases) == "clear"
        and find_file_spec("/abs/x.py:C", bases) == "/abs/x.py:C"
    )
    with pytest.raises(SceneError) as err:
        find_file_spec("nothere.py:Cubes", bases)
    assert str(err.value) == (
        f"scene file 'nothere.py' not found; tried {tmp_path}/tests/nothere.py, "
        f"{tmp_path}/nothere.py"
    )


def test_a_file_with_one_scene_class_runs_by_its_name_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(_app(tmp_path)))
    plan = plan_run(
        RunConfig(scenes=("my_scene.py",), params=(("my_scene.py", "count", "9"),), frames=2)
    )
    assert [(e.label, e.spec, dict(e.params)) for e in plan.entries] == [
        ("cubes", "my_scene.py:Cubes", {"count": 9})
    ]
    two = tmp_path / "two.py"
    two.write_text(SCENE.replace("WORK", "1") + "\n\nclass Cones(Cubes):\n    name = 'cones'\n")
    with pytest.raises(SceneError) as err:
        plan_run(RunConfig(scenes=("two.py",), frames=2))
    assert str(err.value) == (
        "file 'two.py' defines 2 scene classes (Cones, Cubes); name one, e.g. 'two.py:Cones'"
    )
    (tmp_path / "none.py").write_text("x = 1\n")
    with pytest.raises(
        SceneError, match=r"^file 'none.py' defines no scene class \(a subclass of katra3d.Scene\)$"
    ):
        plan_run(RunConfig(scenes=("none.py",), frames=2))


# --- the commands, in the user's repository
# ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.gl
def test_run_scenes_and_the_printed_param_work_in_a_repository_with_its_own_scenes_package(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path / "app")
    r = katra("run", "my_scene.py:Cubes", *SMALL, "-o", "a.katra", cwd=app, env=APP_ENV)
    assert r.returncode == 0, r.stderr
    # the file's one scene class
    r = katra("run", "my_scene.py", *SMALL, "-o", "b.katra", cwd=app, env=APP_ENV)
    assert r.returncode == 0, r.stderr
    assert _scene_params(app / "b.katra") == {"cubes": {"count": 4}}
    assert _scenes(app / "b.katra")[0]["spec"] == "my_scene.py:Cubes"

    listed = katra("scenes", "./my_scene.py:Cubes", cwd=app, env=APP_ENV)
    assert listed.returncode == 0, listed.stderr
    printed = re.search(r"--param (\S+)=4\b", listed.stdout)
    assert printed is not None and printed.group(1) == "./my_scene.py:Cubes.count", listed.stdout
    r = katra(
        "run",
        "./my_scene.py:Cubes",
        "--param",
        f"{printed.group(1)}=400",
        *SMALL,
        "-o",
        "c.katra",
        cwd=app,
        env=APP_ENV,
    )
    assert r.returncode == 0, r.stderr
    assert _scene_params(app / "c.katra") == {"cubes": {"count": 400}}
    # another spelling of the same file, as a user may write it
    r = katra(
        "run",
        "./my_scene.py:Cubes",
        "--param",
        "my_scene.py:Cubes.count=401",
        *SMALL,
        "-o",
        "d.katra",
        cwd=app,
        env=APP_ENV,
    )
    assert r.returncode == 0, r.stderr
    assert _scene_params(app / "d.katra") == {"cubes": {"count": 401}}
    r = katra(
        "run",
        "./my_scene.py:Cubes",
        "--param",
        "other.py:Cubes.count=4",
        *SMALL,
        "-o",
        "e.katra",
        cwd=app,
        env=APP_ENV,
    )
    assert r.returncode == 2 and r.stderr.strip() == (
        "katra3d: error: --param names scene 'other.py:Cubes', which "
        "is not in this run; scenes in this run: cubes"
    )

    # scene names before, between and after the options, in the order given
    r = katra(
        "run",
        "--frames",
        "2",
        "triangle",
        "--param",
        "fillrate.layers=2",
        "fillrate",
        "--size",
        "16x16",
        "my_scene.py",
        "--warmup",
        "1",
        "--quiet",
        "-o",
        "f.katra",
        cwd=app,
        env=APP_ENV,
    )
    assert r.returncode == 0, r.stderr
    assert [(s["label"], s["params"]) for s in _scenes(app / "f.katra")] == [
        ("triangle", {"speed": 0.25}),
        ("fillrate", {"layers": 2}),
        ("cubes", {"count": 4}),
    ]
    r = katra("run", "triangle", "--frames", "2", "--bogus", "clear", cwd=app, env=APP_ENV)
    assert r.returncode == 2 and "unrecognized arguments: --bogus clear" in r.stderr

    # no PYTHONPATH, another working directory: the scene file's folder is on the import path, as a
    # script's is
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = katra(
        "run", str(app / "my_scene.py"), *SMALL, "-o", str(app / "g.katra"), cwd=tmp_path, env=env
    )
    assert r.returncode == 0, r.stderr


def test_a_scene_files_folder_goes_last_on_the_import_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Last, so that a file beside the scene never hides an installed package: a ``numpy.py`` there
    is not numpy.
    """
    app = _app(tmp_path / "app")
    (app / "numpy.py").write_text("raise ImportError('the folder hid an installed package')\n")
    # katra3d's own tree, whose scenes/ is not a top-level package
    repo = Path(__file__).resolve().parent.parent
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != repo])
    for name in ("scenes", "harness"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert get_scene(f"{app / 'my_scene.py'}:Cubes").name == "cubes"
    assert sys.path[-1] == str(app) and sys.modules["scenes"].__file__ == str(
        app / "scenes" / "__init__.py"
    )


@pytest.mark.gl
def test_the_fixture_finds_a_scene_beside_the_test_file_from_the_repository_root(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path / "app")
    (app / "ptest").mkdir()
    shutil.move(app / "my_scene.py", app / "ptest" / "scene.py")
    (app / "ptest" / "test_cubes.py").write_text(
        "import harness\n\n\n"
        "def test_cubes(katra_scene):\n"
        "    run = katra_scene('scene.py:Cubes', frames=3, warmup=1, size=(16, 16), "
        "params={'count': 7})\n"
        "    assert harness.ring_count() == 3 and run.info['params'] == {'count': 7}\n\n\n"
        "def test_missing(katra_scene):\n"
        "    katra_scene('nothere.py:Cubes', frames=3)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "KATRA3D_BACKEND"}
    env["PYTHONPATH"] = "."
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "ptest/test_cubes.py"],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert "1 failed, 1 passed" in r.stdout, r.stdout + r.stderr
    assert (
        f"scene file 'nothere.py' not found; tried {app}/ptest/nothere.py, {app}/nothere.py"
        in r.stdout
    ), r.stdout


@pytest.mark.slow
@pytest.mark.gl
@pytest.mark.skipif(not HAVE_VALGRIND, reason="valgrind is not installed (ci/system-deps.sh)")
def test_a_counted_bisect_names_the_right_commit_in_such_a_repository(tmp_path: Path) -> None:
    app = _app(tmp_path / "app")

    def git(*args: str) -> str:
        return subprocess.run(
            [
                "git",
                "-C",
                str(app),
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.invalid",
                "-c",
                "commit.gpgsign=false",
                *args,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    git("init", "-q")
    shas = []
    for i in range(8):  # c5 clears each frame 40 times instead of once
        _app(app, work=40 if i >= 5 else 1)
        (app / "scenes" / "__init__.py").write_text(APP_SCENES + f"# {i}\n")
        git("add", "-A")
        git("commit", "-q", "-m", f"c{i}")
        shas.append(git("rev-parse", "HEAD"))
    # --jobs 1: the fewest captures (5; --jobs 2 spends a sixth to save a round, which the suite's
    # other worker pays for here); bisect --jobs has its own tests
    r = katra(
        "bisect",
        shas[0],
        "HEAD",
        "my_scene.py:Cubes",
        "-m",
        "instructions",
        "-a",
        "--size 16x16",
        "--jobs",
        "1",
        "-o",
        str(tmp_path / "out"),
        cwd=app,
        env=APP_ENV,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert result["status"] == "found" and result["first_bad"] == shas[5], result


#: A scene that clears in its folder's colour, with a param default from its folder's package.
FLAT = """from katra3d import Param, Scene
from scenes import COLOUR


class Flat(Scene):
    name = "flat"
    description = "one clear in the app's colour"
    params = {"red": Param(int(COLOUR[0] * 100), int, 0, 100, "the colour's red, percent")}

    def setup(self, ctx, size, params):
        self.bind_target(ctx, size)

    def render(self, frame):
        with frame.zone("clear"):
            self.target.use()
            self.target.clear(*COLOUR, 1.0)

    def release(self):
        self.release_target()
"""


def _versions(root: Path) -> tuple[Path, Path]:
    """Two copies of one scene file, ``old/`` red and ``new/`` blue by their own ``scenes``."""
    out = []
    for name, colour in (("old", "(1.0, 0.0, 0.0)"), ("new", "(0.0, 0.0, 1.0)")):
        (root / name / "scenes").mkdir(parents=True)
        (root / name / "scenes" / "__init__.py").write_text(f"COLOUR = {colour}\n")
        (root / name / "bench_scene.py").write_text(FLAT)
        out.append(root / name / "bench_scene.py")
    return out[0], out[1]


def test_two_copies_of_a_scene_file_each_import_their_own_folders_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = {k: m for k, m in sys.modules.items() if k.partition(".")[0] == "scenes"}
    try:
        for first, second in ("old", "new"), ("new", "old"):
            for name in [k for k in sys.modules if k.partition(".")[0] == "scenes"]:
                del sys.modules[name]
            files = dict(zip(("old", "new"), _versions(tmp_path / first), strict=True))
            # the first folder also earlier on the import path, as pytest and PYTHONPATH put it
            sys.path.insert(0, str(files[first].parent))
            reds = {v: get_scene(str(files[v])).params["red"].default for v in (first, second)}
            assert reds == {"old": 100, "new": 0}, (first, reds)
            # what was cached before the second load is cached after it
            assert sys.modules["scenes"].__file__ == str(files[first].parent / "scenes/__init__.py")
            assert sys.path[0] == str(files[first].parent)
    finally:
        for name in [k for k in sys.modules if k.partition(".")[0] == "scenes"]:
            del sys.modules[name]
        sys.modules.update(before)


def test_a_scene_files_sibling_never_hides_the_standard_library(tmp_path: Path) -> None:
    (tmp_path / "random.py").write_text(
        "raise ImportError('the folder hid the standard library')\n"
    )
    (tmp_path / "s.py").write_text(SCENE.replace("import harness\n", "import random\n"))
    (tmp_path / "scenes").mkdir()
    (tmp_path / "scenes" / "__init__.py").write_text(APP_SCENES)
    assert get_scene(str(tmp_path / "s.py")).name == "cubes"


@pytest.mark.gl
def test_two_copies_of_a_scene_file_in_one_run_give_their_own_images(
    tmp_path: Path, gl_ctx: object
) -> None:
    from katra3d.harness.run.offscreen import run_offscreen
    from katra_trace.io.images import read_frame_images

    old, new = _versions(tmp_path)
    sums = {}
    for order in ((old, new), (new, old)):
        out = tmp_path / f"{order[0].parent.name}-first.katra"
        r = katra("run", *order, *SMALL, "-o", out)
        assert r.returncode == 0, r.stderr
        images = read_frame_images(out)
        sums[order] = [images[label].sha256 for label in ("flat", "flat#2")]
    assert sums[(old, new)] == sums[(new, old)][::-1] and len(set(sums[(old, new)])) == 2, sums
    # in one process too, as run_offscreen and the pytest fixture load them
    checksums = [
        run_offscreen(gl_ctx, get_scene(str(f)), (16, 16), {}, frames=1).checksum
        for f in (new, old)
    ]
    assert checksums == sums[(new, old)]


@pytest.mark.gl
def test_two_fixture_tests_in_one_session_each_load_their_own_folders_package(
    tmp_path: Path,
) -> None:
    _versions(tmp_path)
    for name, red in (("old", 100), ("new", 0)):
        (tmp_path / name / f"test_{name}.py").write_text(
            f"def test_{name}(katra_scene):\n"
            "    run = katra_scene('bench_scene.py', frames=1, warmup=0, size=(16, 16))\n"
            f"    assert run.info['params'] == {{'red': {red}}}\n"
        )
    env = {k: v for k, v in os.environ.items() if k != "KATRA3D_BACKEND"}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "new", "old"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert "2 passed" in r.stdout, r.stdout + r.stderr
