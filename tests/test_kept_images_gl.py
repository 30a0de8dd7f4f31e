"""Kept frames on real llvmpipe renders: every built-in scene's frame is identical across processes;
keeping on and off; --duration keeps none; katra3d.capture hands its frame over; --expect-images and
--update-images, with a device that has no reference skipped; the traces validate."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import katra3d
from katra3d.scenes.image import read_pixels
from katra3d.scenes.registry import builtin_scenes
from katra_trace.errors import ConfigError
from katra_trace.io.images import image_checksum, image_key, key_id, read_frame_images, save_png
from katra_trace.io.reader import open_trace

pytestmark = pytest.mark.gl

SMALL = ("--size", "48x32", "--warmup", "1", "--frames", "2", "--quiet")


def _scene_notes(path: Path) -> dict[str, dict[str, Any]]:
    return {a["scene"]: a for a in open_trace(path).annotations if a.get("type") == "scene"}


@pytest.mark.slow
def test_every_builtin_scene_keeps_the_same_frame_in_two_processes(
    katra_cli: Any, tmp_path: Path
) -> None:
    for name in ("a", "b"):
        res = katra_cli("run", "--suite", "ci", *SMALL, "-o", f"{name}.katra")
        assert res.returncode == 0, res.stderr
    a, b = read_frame_images(tmp_path / "a.katra"), read_frame_images(tmp_path / "b.katra")
    assert set(a) == set(builtin_scenes()) == set(b)
    notes = _scene_notes(tmp_path / "a.katra")
    for scene, image in a.items():
        assert image.sha256 == b[scene].sha256, f"{scene}: two processes kept different frames"
        assert np.array_equal(image.pixels, b[scene].pixels)
        assert image.pixels.shape == (32, 48, 4) and image.sha256 == image_checksum(image.pixels)
        # the last measured frame: warmup 1 + 2 - 1
        assert (image.frame_index, image.time_s) == (2, 2 / 60)
        assert (
            image.sha256 == notes[scene]["last_frame_sha256"] and notes[scene]["image_kept"] is True
        )
        assert image.key == b[scene].key and image.key["renderer"].startswith("llvmpipe")
    validated = katra_cli("validate", "a.katra")
    assert validated.returncode == 0 and ": ok:" in validated.stdout, (
        validated.stdout + validated.stderr
    )
    assert f", {len(a)} kept frames (pixels checked)" in validated.stdout


def test_keeping_off_and_duration_runs_keep_nothing(katra_cli: Any, tmp_path: Path) -> None:
    off = katra_cli("run", "triangle", *SMALL, "--no-keep-image", "-o", "off.katra")
    assert off.returncode == 0, off.stderr
    assert read_frame_images(tmp_path / "off.katra") == {}
    resolved = open_trace(tmp_path / "off.katra").header.as_dict()["capture_options"]["resolved"]
    assert resolved["images"].startswith("off")
    assert "image_kept" not in _scene_notes(tmp_path / "off.katra")["triangle"]
    timed = katra_cli("run", "triangle", "--size", "48x32", "--duration", "0.2", "-o", "d.katra")
    assert timed.returncode == 0, timed.stderr
    assert timed.stderr.count("notice: a --duration run keeps no frame for image checks") == 1
    assert read_frame_images(tmp_path / "d.katra") == {}
    resolved = open_trace(tmp_path / "d.katra").header.as_dict()["capture_options"]["resolved"]
    assert resolved["images"].startswith("not kept: a --duration run")
    refused = katra_cli(
        "run", "triangle", "--duration", "0.2", "--expect-images", ".", "-o", "x.katra"
    )
    assert (
        refused.returncode == 2
        and "needs --frames" in refused.stderr
        and "Traceback" not in refused.stderr
    )
    assert not (tmp_path / "x.katra").exists()


def test_capture_hands_over_its_frame(gl_ctx: Any, tmp_path: Path) -> None:
    fbo = gl_ctx.simple_framebuffer((24, 16))
    fbo.use()
    path = tmp_path / "c.katra"
    with katra3d.capture(gl_ctx, path, scene="mine", zones=False) as cap:
        for i in range(3):
            with cap.frame():
                gl_ctx.clear(0.1 * i, 0.5, 0.25, 1.0)
        pixels = read_pixels(gl_ctx, None)
        sha = cap.keep_image(pixels, time_s=0.5)
        cap.scene("second")
        with cap.frame():
            gl_ctx.clear(1.0, 0.0, 0.0, 1.0)
        png = tmp_path / "p.png"
        save_png(png, read_pixels(gl_ctx, None))
        cap.keep_image(png.read_bytes(), frame=0)
    # never leave a released framebuffer bound (conftest's gl_ctx)
    gl_ctx.detect_framebuffer(0).use()
    fbo.release()
    images = read_frame_images(path)
    mine = images["mine"]
    assert mine.sha256 == sha == image_checksum(pixels) and (mine.frame_index, mine.time_s) == (
        2,
        0.5,
    )
    assert tuple(mine.pixels[0, 0]) == (51, 128, 64, 255)  # clear colour of frame 2, rounded by GL
    assert images["second"].frame_index == 0 and tuple(images["second"].pixels[5, 5]) == (
        255,
        0,
        0,
        255,
    )
    assert mine.key == image_key(open_trace(path).header.as_dict()["host_info"])


def test_capture_keep_image_refuses_misuse(gl_ctx: Any, tmp_path: Path) -> None:
    with katra3d.capture(gl_ctx, tmp_path / "c.katra", zones=False) as cap:
        with pytest.raises(ConfigError, match="no frame recorded yet"):
            cap.keep_image(np.zeros((2, 2, 4), np.uint8))
        with cap.frame():
            with pytest.raises(ConfigError, match="between frames"):
                cap.keep_image(np.zeros((2, 2, 4), np.uint8))
        with pytest.raises(ConfigError, match="expected an"):
            cap.keep_image(np.zeros((2, 2), np.uint8))


@pytest.mark.slow
def test_expect_and_update_images(katra_cli: Any, tmp_path: Path) -> None:
    scenes = ("triangle", "clear")
    missing = katra_cli("run", *scenes, *SMALL, "-o", "m.katra", "--expect-images", "refs")
    assert missing.returncode == 2 and "--update-images" in missing.stderr
    rec = katra_cli(
        "run", *scenes, *SMALL, "-o", "r.katra", "--expect-images", "refs", "--update-images"
    )
    assert rec.returncode == 0, rec.stderr
    key = read_frame_images(tmp_path / "r.katra")["triangle"].key
    for scene in scenes:
        facts = json.loads((tmp_path / "refs" / scene / f"{key_id(key)}.json").read_text())
        assert facts["key"] == key and facts["frame_index"] == 2 and facts["scene"] == scene
        assert f"image reference recorded: {scene}" in rec.stdout
    same = katra_cli("run", *scenes, *SMALL, "-o", "s.katra", "--expect-images", "refs")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "image identical: triangle" in same.stdout and "image identical: clear" in same.stdout
    # another device: the vector width changes the key, and it has no reference yet
    other = katra_cli(
        "run",
        "triangle",
        *SMALL,
        "-o",
        "o.katra",
        "--expect-images",
        "refs",
        env={"LP_NATIVE_VECTOR_WIDTH": "128"},
    )
    assert other.returncode == 0, other.stdout + other.stderr
    assert "image check: triangle: skipped, no reference for this device" in other.stdout
    # a changed scene (its colour param) against the recorded reference: exit 1, its own line
    changed = katra_cli(
        "run",
        "clear",
        *SMALL,
        "--param",
        "clear.bands=2",
        "-o",
        "c.katra",
        "--expect-images",
        "refs",
    )
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert "image changed: clear" in changed.stdout and "Traceback" not in changed.stderr
    other_frame = katra_cli(
        "run",
        "triangle",
        "--size",
        "48x32",
        "--warmup",
        "1",
        "--frames",
        "3",
        "--quiet",
        "-o",
        "f.katra",
        "--expect-images",
        "refs",
    )
    assert other_frame.returncode == 2 and "this run kept frame 3" in other_frame.stdout


_NO_TARGET = '''
import numpy as np
from katra3d import Scene


class Plain(Scene):
    """Draws into whatever framebuffer is bound (no bind_target of its own)."""

    name = "plain"

    def setup(self, ctx, size, params):
        self.ctx = ctx

    def render(self, frame):
        self.ctx.clear(0.25, 0.5, 0.75, 1.0)
'''


def test_a_reference_draw_after_the_last_frame_does_not_replace_the_kept_frame(
    katra_cli: Any, tmp_path: Path
) -> None:
    """A scene without a target of its own is read from the bound framebuffer: the reference draw
    after the last frame (every 4th frame; 4 frames) must leave the harness's framebuffer bound, or
    the reference's own image (another size) would be kept and gated in place of the scene's."""
    (tmp_path / "plain.py").write_text(_NO_TARGET, encoding="utf-8")
    res = katra_cli(
        "run",
        "plain.py:Plain",
        "--size",
        "24x16",
        "--warmup",
        "1",
        "--frames",
        "4",
        "--reference-every",
        "4",
        "--quiet",
        "-o",
        "p.katra",
    )
    assert res.returncode == 0, res.stderr
    kept = read_frame_images(tmp_path / "p.katra")["plain"]
    assert (kept.width, kept.height) == (24, 16)
    assert (kept.pixels[..., :3] == np.array([64, 128, 191], dtype=np.uint8)).all(), kept.pixels[
        0, 0
    ]
    # info names the kept frame; --json lists it with its key
    shown = katra_cli("info", "p.katra")
    assert (
        shown.returncode == 0
        and f"plain: frame 4, 24x16, sha256 {kept.sha256[:12]}" in shown.stdout
    ), shown.stdout
    listed = json.loads(katra_cli("info", "p.katra", "--json").stdout)["images"]
    assert [(i["scene"], i["width"], i["key"]) for i in listed] == [("plain", 24, kept.key)]


@pytest.mark.slow
def test_expect_images_with_hostile_reference_files_is_one_line_exit_2(
    katra_cli: Any, tmp_path: Path
) -> None:
    """Through the command itself: reference facts that are a link to /dev/zero, a FIFO or malformed
    JSON are one line and exit 2, never a MemoryError or a ValueError/OverflowError/TypeError
    traceback, exit 1, or a hang."""
    rec = katra_cli(
        "run", "clear", *SMALL, "-o", "r.katra", "--expect-images", "refs", "--update-images"
    )
    assert rec.returncode == 0, rec.stderr
    (facts,) = (tmp_path / "refs" / "clear").glob("*.json")
    good = facts.read_text()
    cases = {
        "dev-zero": None,
        "fifo": None,
        "frame_index abc": {"frame_index": "abc"},
        "frame_index Infinity": {"frame_index": float("inf")},
        "frame_index [1]": {"frame_index": [1]},
        "time_s x": {"time_s": "x"},
        "time_s {}": {"time_s": {}},
    }
    for i, (case, change) in enumerate(cases.items()):
        facts.unlink()
        if case == "dev-zero":
            facts.symlink_to("/dev/zero")
        elif case == "fifo":
            os.mkfifo(facts)
        else:
            # Infinity: json writes it as is
            facts.write_text(json.dumps({**json.loads(good), **change}))
        res = katra_cli(
            "run", "clear", *SMALL, "-o", f"t{i}.katra", "--expect-images", "refs", timeout=120
        )
        assert res.returncode == 2, (case, res.stdout, res.stderr)
        last = res.stderr.strip().splitlines()[-1]
        assert last.startswith("katra3d: error: ") and f"refs/clear/{facts.name}" in last, (
            case,
            res.stderr,
        )
        assert "Traceback" not in res.stderr, case
