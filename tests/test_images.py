"""The image verdict (katra_trace/analysis/images.py) on synthetic frames, and its wiring into
``katra3d compare`` (lines, --json, exit codes, --images, --image-diff) on traces that keep frames,
written with tests.trace_helpers.write_trace (no GL; the metric on real renders is
tests/test_images_gl.py)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace.analysis.defaults import (
    DEFAULT_IMAGE_MAX_MEAN,
    DEFAULT_IMAGE_MAX_OUTLIER_PCT,
    image_policy,
)
from katra_trace.analysis.images import (
    ImageRef,
    ImageThresholds,
    exit_code_with_images,
    flip_error_map,
    flip_missing,
    image_verdict,
)
from katra_trace.errors import OptionError
from katra_trace.io.images import frame_record, image_checksum, load_png
from tests.cli_helpers import katra_main
from tests.trace_helpers import wall_frames, write_trace

SCENES = ("fill", "mesh")
RENDERER = "llvmpipe (LLVM 15.0.6, 256 bits)"


def picture(width: int = 96, height: int = 64) -> np.ndarray:
    """A frame like a render's: a smooth background, a bright disc and a dark bar, RGBA uint8."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    img = np.zeros((height, width, 4), dtype=np.float64)
    img[..., 0] = 40 + 120 * x / width
    img[..., 1] = 60 + 100 * y / height
    img[..., 2] = 90.0
    disc = (x - width * 0.6) ** 2 + (y - height * 0.5) ** 2 < (height * 0.3) ** 2
    img[disc, :3] = (230, 200, 60)
    img[int(height * 0.2) : int(height * 0.35), int(width * 0.1) : int(width * 0.4), :3] = 20
    img[..., 3] = 255
    return np.rint(img).astype(np.uint8)


def recoloured(pixels: np.ndarray, levels: int = 5) -> np.ndarray:
    """Every colour channel raised by ``levels`` of 255 (0.02 = 5 levels), alpha kept."""
    out = pixels.astype(np.int16)
    out[..., :3] += levels
    return np.clip(out, 0, 255).astype(np.uint8)


def nudged(pixels: np.ndarray, count: int = 3) -> np.ndarray:
    """``count`` pixels one level darker in red: the kind of rounding another
    code generator makes."""
    out = pixels.copy()
    for i in range(count):
        out[5 + 7 * i, 11 + 5 * i, 0] -= 1
    return out


def ref(pixels: np.ndarray) -> ImageRef:
    return ImageRef(image_checksum(pixels), pixels)


# --------------------------------------------------------------------------- the verdict


def test_identical_within_tolerance_and_changed() -> None:
    base = picture()
    same = image_verdict(ref(base), ref(base.copy()))
    assert same.verdict == "identical" and same.line == "image identical: same checksum"
    assert math.isnan(same.flip_mean)
    near = image_verdict(ref(base), ref(nudged(base)))
    assert near.verdict == "within_tolerance", near.line
    assert (
        0 < near.flip_mean <= DEFAULT_IMAGE_MAX_MEAN
        and near.outlier_pct <= DEFAULT_IMAGE_MAX_OUTLIER_PCT
    )
    moved = image_verdict(ref(base), ref(recoloured(base)))
    assert moved.verdict == "changed" and moved.is_regression
    assert moved.flip_mean > DEFAULT_IMAGE_MAX_MEAN
    assert moved.line.startswith(f"image changed: FLIP mean {moved.flip_mean:.3g}, ")
    assert moved.line.endswith(" % of pixels over 0.1")
    assert moved.as_dict()["verdict"] == "changed" and moved.as_dict()["line"] == moved.line
    assert same.as_dict()["flip_mean"] is None  # NaN is null in JSON


def test_thresholds_move_the_line_between_tolerance_and_change() -> None:
    base = picture()
    new = ref(recoloured(base, 2))
    loose = image_verdict(ref(base), new, ImageThresholds(max_mean=0.5, max_outlier_pct=100))
    strict = image_verdict(ref(base), new, ImageThresholds(max_mean=0.0, max_outlier_pct=100))
    assert loose.verdict == "within_tolerance" and strict.verdict == "changed"
    assert loose.flip_mean == strict.flip_mean


def test_bare_arrays_compare_by_their_bytes() -> None:
    base = picture()
    assert image_verdict(base, base.copy()).verdict == "identical"
    assert image_verdict(base, recoloured(base)).verdict == "changed"


def test_missing_image_and_other_size_are_incomparable() -> None:
    base = picture()
    v = image_verdict(ref(base), None)
    assert v.verdict == "incomparable" and v.reason == "no last frame in NEW"
    assert image_verdict(None, ref(base)).reason == "no last frame in BASE"
    v = image_verdict(ref(base), ref(picture(48, 32)))
    assert v.verdict == "incomparable" and v.reason == "image sizes differ: 96x64 vs 48x32"
    assert not v.is_regression


def test_checksums_alone_when_pixels_were_not_kept() -> None:
    base = picture()
    assert image_verdict(ImageRef("ab" * 32), ImageRef("ab" * 32)).verdict == "identical"
    v = image_verdict(ImageRef("ab" * 32), ref(base))
    assert v.verdict == "changed" and v.checksum_only
    assert v.reason == "checksums differ (BASE kept no pixels to measure by how much)"


def test_without_flip_the_verdict_rests_on_checksums(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flip_evaluator", None)  # as if not installed
    base = picture()
    assert image_verdict(ref(base), ref(base.copy())).verdict == "identical"
    # within tolerance with FLIP; changed without it
    v = image_verdict(ref(base), ref(nudged(base)))
    assert v.verdict == "changed" and v.checksum_only and "FLIP is not installed" in v.reason
    message = flip_missing()
    assert message is not None and "pip install 'katra3d[images]'" in message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_mean": 1.5}, "--image-max-mean must be a FLIP mean error between 0 and 1, got 1.5"),
        ({"max_mean": math.nan}, "--image-max-mean must be"),
        (
            {"max_outlier_pct": -1.0},
            "--image-max-outliers must be a percentage of pixels between 0 and 100",
        ),
        ({"outlier_level": 2.0}, "the outlier level must be"),
    ],
)
def test_bad_thresholds_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(OptionError, match="^" + message.replace("(", r"\(").replace("[", r"\[")):
        ImageThresholds(**kwargs)


def test_policy_default_and_exit_code() -> None:
    assert image_policy(None) == "gate" and image_policy(None, allow_param_mismatch=True) == "warn"
    assert image_policy("off", allow_param_mismatch=True) == "off"
    with pytest.raises(OptionError, match="^--images must be one of gate, warn, off"):
        image_policy("strict")
    base = picture()
    changed = {"mesh": image_verdict(ref(base), ref(recoloured(base)))}
    assert exit_code_with_images(0, changed, "gate") == 1
    assert exit_code_with_images(0, changed, "warn") == 0
    assert exit_code_with_images(2, changed, "gate") == 1
    assert exit_code_with_images(2, {}, "gate") == 2


def test_error_map_is_black_where_nothing_differs() -> None:
    base = picture()
    new = base.copy()
    new[40:50, 10:20, :3] = 255  # a white patch
    emap = flip_error_map(base, new)
    assert emap.shape == (64, 96, 3) and emap.dtype == np.uint8
    assert emap[40:50, 10:20].mean() > 3 * emap[:20, 60:].mean()


# --------------------------------------------------------------------------- compare on traces that
# keep frames


def write_capture(
    path: Path,
    frames: dict[str, np.ndarray],
    *,
    seed: int,
    renderer: str = RENDERER,
    layers: int = 1,
    n: int = 12,
) -> Path:
    """A synthetic capture of :data:`SCENES` (``n`` measured frames each)
    keeping ``frames[scene]``."""
    host = {
        "gl": {
            "renderer": renderer,
            "version": "4.5 (Core Profile) Mesa 22.3.6",
            "driver": {"name": "Mesa", "version": "22.3.6"},
            "software_renderer": True,
        }
    }
    opts = {
        "size": [96, 64],
        "samples": 0,
        "timing_mode": "sync",
        "params": {s: {"layers": layers} for s in SCENES},
    }
    events, strings = wall_frames(SCENES, n, seed=seed)
    write_trace(
        path,
        events,
        strings,
        batch_events=4096,
        summary={},
        header={"workload": "test", "capture_options": opts, "host_info": host},
        images=[
            frame_record(scene, n + 1, (n + 1) / 60, pixels, {"renderer": renderer})
            for scene, pixels in frames.items()
        ],
        annotations=[
            {"type": "scene", "scene": scene, "last_frame_sha256": image_checksum(pixels)}
            for scene, pixels in frames.items()
        ],
    )
    return path


@pytest.fixture
def sides(tmp_path: Path) -> tuple[Path, Path, Path]:
    """BASE, a NEW with identical frames, and a NEW whose 'mesh' frame moved its colours by 0.02."""
    frames = {"fill": picture(), "mesh": picture()[::-1].copy()}
    base = write_capture(tmp_path / "base.katra", frames, seed=1)
    same = write_capture(tmp_path / "same.katra", {k: v.copy() for k, v in frames.items()}, seed=2)
    changed = write_capture(
        tmp_path / "changed.katra", dict(frames, mesh=recoloured(frames["mesh"])), seed=3
    )
    return base, same, changed


def test_compare_identical_images_pass(
    sides: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base, same, _ = sides
    code, stdout, stderr = katra_main(capsys, "compare", str(base), str(same))
    assert code == 0, stdout + stderr
    assert "images (gate): 2 identical" in stdout and "image changed" not in stdout


def test_compare_changed_image_is_a_regression(
    sides: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base, _, changed = sides
    code, stdout, stderr = katra_main(capsys, "compare", str(base), str(changed))
    assert code == 1, stdout + stderr
    line = next(ln for ln in stdout.splitlines() if "image changed" in ln)
    assert line.split()[0] == "mesh" and "FLIP mean 0." in line and "% of pixels over 0.1" in line
    assert "images (gate): 1 identical, 1 changed" in stdout and "Traceback" not in stderr
    code, stdout, stderr = katra_main(
        capsys, "compare", str(base), str(changed), "--format", "json"
    )
    out = json.loads(stdout)
    assert code == 1 and out["exit_code"] == 1 and out["image_policy"] == "gate"
    assert (
        out["images"]["mesh"]["verdict"] == "changed"
        and out["images"]["fill"]["verdict"] == "identical"
    )
    assert out["images"]["mesh"]["flip_mean"] > DEFAULT_IMAGE_MAX_MEAN


def test_compare_images_warn_and_off(
    sides: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base, _, changed = sides
    code, stdout, stderr = katra_main(
        capsys, "compare", str(base), str(changed), "--images", "warn"
    )
    assert code == 0, stdout + stderr
    assert "image changed" in stdout and "(--images warn: not a regression)" in stdout
    code, stdout, stderr = katra_main(capsys, "compare", str(base), str(changed), "--images", "off")
    assert code == 0 and "image" not in stdout
    # warn is its default
    code, stdout, stderr = katra_main(
        capsys, "compare", str(base), str(changed), "--allow-param-mismatch"
    )
    assert code == 0 and "images (warn)" in stdout
    code, stdout, stderr = katra_main(
        capsys,
        "compare",
        str(base),
        str(changed),
        "--image-max-mean",
        "0.9",
        "--image-max-outliers",
        "100",
    )
    assert code == 0 and "images (gate): 1 identical, 1 within tolerance" in stdout
    code, stdout, stderr = katra_main(
        capsys, "compare", str(base), str(changed), "--image-max-mean", "2"
    )
    assert code == 2 and stderr.strip().endswith(
        "--image-max-mean must be a FLIP mean error between 0 and 1, got 2.0"
    )


def test_captures_that_do_not_compare_give_no_image_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Other params (or another size, renderer): a different picture is expected, so the image is
    incomparable for the captures' reason and the exit code stays 2 (nothing comparable), unless the
    mismatch is allowed."""
    frames = {"fill": picture(), "mesh": picture()[::-1].copy()}
    base = write_capture(tmp_path / "base.katra", frames, seed=1)
    other = write_capture(
        tmp_path / "other.katra", dict(frames, mesh=recoloured(frames["mesh"])), seed=2, layers=2
    )
    code, stdout, stderr = katra_main(capsys, "compare", str(base), str(other))
    assert code == 2, stdout + stderr
    assert (
        "mesh  image incomparable: the captures do not compare: " in stdout
        and "image changed" not in stdout
    )
    code, stdout, stderr = katra_main(
        capsys, "compare", str(base), str(other), "--allow-param-mismatch", "--images", "gate"
    )
    assert code == 1 and "image changed: FLIP mean" in stdout


def test_compare_image_diff_writes_three_pictures(
    sides: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _, changed = sides
    out = tmp_path / "diff"
    code, stdout, stderr = katra_main(
        capsys, "compare", str(base), str(changed), "--image-diff", str(out)
    )
    assert code == 1, stdout + stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "mesh.base.png",
        "mesh.flip.png",
        "mesh.new.png",
    ]
    frames = {p.name.split(".")[1]: load_png(p) for p in out.iterdir()}
    assert all(f.shape[:2] == (64, 96) for f in frames.values())
    assert not np.array_equal(frames["base"], frames["new"]) and frames["flip"].shape[2] == 3
    # never replaces a file
    code, stdout, stderr = katra_main(
        capsys, "compare", str(base), str(changed), "--image-diff", str(out)
    )
    assert code == 2 and "mesh.base.png" in stderr and "Traceback" not in stderr


def test_compare_without_flip_says_the_install_line_once(
    sides: tuple[Path, Path, Path], tmp_path: Path, katra_cli: Any
) -> None:
    """In a process where flip_evaluator cannot be imported (the way a missing package looks)."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nsys.modules['flip_evaluator'] = None  # as if not installed\n"
    )
    base, _, changed = sides
    r = katra_cli("compare", str(base), str(changed), env={"PYTHONPATH": str(blocker)})
    assert r.returncode == 1, r.stdout + r.stderr
    assert (
        "mesh" in r.stdout and "image changed: checksums differ (FLIP is not installed" in r.stdout
    )
    assert r.stderr.count("pip install 'katra3d[images]'") == 1


def test_report_shows_the_pictures_of_every_image_not_identical(tmp_path: Path) -> None:
    from katra_trace import open_trace
    from katra_trace.report import build_report

    frames = {"fill": picture(), "mesh": picture()[::-1].copy()}
    base = open_trace(write_capture(tmp_path / "b.katra", frames, seed=1))
    new = open_trace(
        write_capture(tmp_path / "n.katra", dict(frames, mesh=recoloured(frames["mesh"])), seed=2)
    )
    page = build_report([new], [base])
    section = page[page.index('<section id="images">') :]
    section = section[: section.index("</section>")]
    assert "policy <b>gate</b>: 1 identical, 1 changed" in section
    assert section.count("data:image/png;base64,") == 3 and 'alt="mesh: FLIP error map' in section
    assert "fill: " not in section  # an identical image shows no pictures
    assert '<section id="images">' not in build_report([new], [base], image_policy="off")
    assert '<section id="images">' not in build_report([new])  # no baseline, no verdict
