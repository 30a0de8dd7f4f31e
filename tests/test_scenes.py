"""Scenes library, pure parts: registry, params, suites, PNG encoding, ``katra3d scenes``.

GL rendering of the scenes is tested in test_scenes_gl.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from katra3d.scenes.api import Param, Scene
from katra3d.scenes.registry import builtin_scenes, describe_range, get_scene, resolve_params
from katra3d.scenes.suites import SUITES, get_suite
from katra_trace.errors import ConfigError, SceneError
from katra_trace.io.images import image_checksum

DATA = Path(__file__).resolve().parent / "data"
USER_FILE = DATA / "user_scenes" / "my_scene.py"

EXPECTED_BUILTINS = (
    "clear",
    "triangle",
    "geometry",
    "drawcalls",
    "instancing",
    "fillrate",
    "shader",
    "texture",
    "buffer",
    "shadow",
    "postfx",
    "compute",
)


# -- registry -------------------------------------------------------------------------


def test_builtins_are_the_twelve_scenes_with_declared_metadata() -> None:
    scenes = builtin_scenes()
    assert tuple(scenes) == EXPECTED_BUILTINS
    for name, cls in scenes.items():
        assert issubclass(cls, Scene)
        assert cls.name == name
        assert cls.description and "\n" not in cls.description
        assert cls.stresses, name
        for key, param in cls.params.items():
            assert isinstance(param, Param)
            # every default is valid for its own param
            assert resolve_params(cls, {})[key] == param.default
    assert scenes["compute"].min_gl_version == 430


def test_get_scene_by_builtin_name() -> None:
    assert get_scene("geometry") is builtin_scenes()["geometry"]


def test_unknown_scene_suggests_the_closest_and_lists_all() -> None:
    with pytest.raises(SceneError) as info:
        get_scene("geometri")
    msg = str(info.value)
    assert "unknown scene 'geometri'" in msg
    assert "did you mean 'geometry'" in msg
    assert "available: clear, triangle, geometry" in msg
    assert "compute" in msg


def test_unknown_scene_without_close_match_has_no_suggestion() -> None:
    with pytest.raises(SceneError) as info:
        get_scene("zzzzzz")
    assert "did you mean" not in str(info.value)
    assert "available:" in str(info.value)


def test_scene_from_file_path() -> None:
    cls = get_scene(f"{USER_FILE}:Checker")
    assert cls.name == "user-checker"
    assert issubclass(cls, Scene)
    # loading twice gives the same class (the module is cached by resolved path)
    assert get_scene(f"{USER_FILE}:Checker") is cls


def test_scene_from_module_path() -> None:
    cls = get_scene("katra3d.scenes.builtin.fillrate:FillrateScene")
    assert cls is builtin_scenes()["fillrate"]


def test_file_without_the_class_says_what_it_has() -> None:
    with pytest.raises(SceneError) as info:
        get_scene(f"{USER_FILE}:Nope")
    msg = str(info.value)
    assert "defines no class 'Nope'" in msg
    assert "scene classes in it: Checker" in msg


def test_class_that_is_not_a_scene() -> None:
    with pytest.raises(SceneError, match="not a katra3d scene"):
        get_scene(f"{USER_FILE}:NotAScene")


def test_missing_file_and_module() -> None:
    with pytest.raises(SceneError, match=r"scene file 'no/such/file.py' not found"):
        get_scene("no/such/file.py:X")
    with pytest.raises(SceneError, match=r"cannot import scene module 'no_such_pkg_k3d.mod'"):
        get_scene("no_such_pkg_k3d.mod:X")


def test_file_that_raises_on_import(tmp_path: Path) -> None:
    bad = tmp_path / "boom.py"
    bad.write_text("raise RuntimeError('kaboom')\n")
    with pytest.raises(
        SceneError, match=r"error while importing scene file .*RuntimeError: kaboom"
    ):
        get_scene(f"{bad}:X")


def test_scene_from_entry_point(installed_user_scene_package: Path) -> None:
    cls = get_scene("user-stripes")
    assert cls.name == "user-stripes"
    assert cls.__module__ == "katra3d_user_demo"
    # entry-point names show up in the unknown-scene listing and suggestions
    with pytest.raises(SceneError) as info:
        get_scene("user-stripe")
    assert "did you mean 'user-stripes'" in str(info.value)


def test_entry_point_that_cannot_load(installed_user_scene_package: Path) -> None:
    with pytest.raises(SceneError, match=r"cannot load scene 'user-broken' from entry point"):
        get_scene("user-broken")


# -- params ---------------------------------------------------------------------------


def test_resolve_params_converts_cli_strings() -> None:
    geo = get_scene("geometry")
    assert resolve_params(geo, {"detail": "08", "indexed": "false", "cull": "yes"}) == {
        "detail": 8,
        "indexed": False,
        "cull": True,
    }
    tex = get_scene("texture")
    assert resolve_params(tex, {"filter": "linear"})["filter"] == "linear"
    buf = get_scene("buffer")
    assert resolve_params(buf, {"update_fraction": "0.25"})["update_fraction"] == 0.25
    assert resolve_params(buf, {"update_fraction": 1})["update_fraction"] == 1.0


def test_unknown_param_names_scene_param_and_valid_ones() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_params(get_scene("fillrate"), {"layer": 3})
    msg = str(info.value)
    assert "scene 'fillrate' has no param 'layer'" in msg
    assert "did you mean 'layers'" in msg
    assert "valid params: layers" in msg


@pytest.mark.parametrize(
    ("scene", "key", "value", "expected"),
    [
        (
            "fillrate",
            "layers",
            "0",
            r"scene 'fillrate': param 'layers' is out of range: 0; valid: 1\.\.256",
        ),
        ("fillrate", "layers", 1000, r"param 'layers' is out of range: 1000; valid: 1\.\.256"),
        (
            "fillrate",
            "layers",
            "many",
            r"param 'layers' expects an integer, got 'many'; valid: 1\.\.256",
        ),
        ("fillrate", "layers", 2.5, r"param 'layers' expects int, got float 2\.5"),
        ("fillrate", "layers", True, r"param 'layers' expects an integer, got True"),
        (
            "geometry",
            "indexed",
            "maybe",
            r"param 'indexed' expects true/false, got 'maybe'; valid: true/false",
        ),
        (
            "texture",
            "filter",
            "cubic",
            r"param 'filter' got 'cubic'; valid: choices: nearest, linear, "
            r"trilinear, anisotropic",
        ),
        (
            "buffer",
            "update_fraction",
            "1.5",
            r"param 'update_fraction' is out of range: 1\.5; valid: 0\.\.1",
        ),
        ("buffer", "update_fraction", "nan", r"param 'update_fraction' must be finite"),
    ],
)
def test_bad_param_values(scene: str, key: str, value: object, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        resolve_params(get_scene(scene), {key: value})


def test_describe_range_forms() -> None:
    assert describe_range(Param(1, int, 0, None)) == ">= 0"
    assert describe_range(Param(1, int, None, 9)) == "<= 9"
    assert describe_range(Param(1.5, float)) == "any float"


# -- suites ---------------------------------------------------------------------------


def test_suites_cover_every_builtin_with_valid_params() -> None:
    assert set(SUITES) == {"ci", "default", "stress"}
    for suite in SUITES.values():
        assert suite.frames > 0 and suite.warmup >= 0
        assert set(suite.scene_names()) == set(EXPECTED_BUILTINS), suite.name
        for name, overrides in suite.entries:
            resolve_params(get_scene(name), overrides)  # raises if a suite param is invalid
    assert SUITES["default"].size == (1280, 720)
    assert SUITES["ci"].size[0] * SUITES["ci"].size[1] < 1280 * 720


def test_unknown_suite_lists_valid_names() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown suite 'nightly'; available: ci, default, stress"
    ):
        get_suite("nightly")


# -- images ---------------------------------------------------------------------------


def test_checksum_is_sha256_of_pixel_bytes() -> None:
    import hashlib

    a = np.zeros((2, 3, 4), np.uint8)
    b = a.copy()
    b[1, 2, 0] = 1
    assert image_checksum(a) == hashlib.sha256(a.tobytes()).hexdigest()
    assert image_checksum(a) != image_checksum(b)


# -- katra3d scenes ---------------------------------------------------------------------


def test_cli_scenes_json_lists_every_scene(katra_cli) -> None:  # type: ignore[no-untyped-def]
    proc = katra_cli("scenes", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    names = [s["name"] for s in data["scenes"]]
    assert names == list(EXPECTED_BUILTINS)
    fill = next(s for s in data["scenes"] if s["name"] == "fillrate")
    assert fill["params"]["layers"]["default"] == 8
    assert fill["params"]["layers"]["range"] == "1..256"
    assert set(fill["suites"]) == {"ci", "default", "stress"}
    assert "fill" in fill["stresses"]
    assert data["suites"]["default"]["size"] == [1280, 720]


def test_cli_scenes_text_and_entry_point(  # type: ignore[no-untyped-def]
    katra_cli, installed_user_scene_package: Path
) -> None:
    env = {"PYTHONPATH": f"{installed_user_scene_package}:{DATA / 'user_scene_pkg'}"}
    proc = katra_cli("scenes", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "geometry  -  procedural high-poly lit mesh" in proc.stdout
    assert "--param fillrate.layers=8   [1..256]" in proc.stdout
    assert "user-stripes  -  vertical stripes" in proc.stdout
    assert "installed scene 'user-broken' cannot be loaded" in proc.stdout


def test_own_releases_newest_first_and_keeps_going_after_a_failure() -> None:
    """Scene.own() registers anything with release(); the inherited release() frees it all."""
    from katra3d.scenes.api import Scene

    released: list[str] = []

    class Obj:
        def __init__(self, name: str, fail: bool = False) -> None:
            self.name, self.fail = name, fail

        def release(self) -> None:
            released.append(self.name)
            if self.fail:
                raise RuntimeError(f"{self.name} failed")

    scene = Scene()
    a = scene.own(Obj("a"))
    scene.own(Obj("b", fail=True))
    scene.own(Obj("c"))
    assert a.name == "a"
    with pytest.raises(RuntimeError, match="b failed"):
        scene.release()
    assert released == ["c", "b", "a"]
    scene.release()  # a second call frees nothing twice
    assert released == ["c", "b", "a"]
