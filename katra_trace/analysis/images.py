"""The image verdict: is NEW's last frame of a scene the same picture as BASE's?

One definition, which compare, ab, the report and bisect call: :func:`image_verdict`.

* *identical*: the same SHA-256 of the pixels (or, for bare arrays, the same bytes);
* *within tolerance*: FLIP (NVIDIA's perceptual image difference, the ``flip-evaluator`` package, LDR mode)
  finds a mean error at or below :attr:`ImageThresholds.max_mean` and a share of pixels whose error is over
  :attr:`ImageThresholds.outlier_level` at or below :attr:`ImageThresholds.max_outlier_pct`: another code
  generator rounded differently;
* *changed*: either is over its threshold, or (without FLIP, or without pixels) the checksums differ;
* *incomparable*: an image is missing on one side, or the sizes differ.

The defaults live in :mod:`katra_trace.analysis.defaults` and were measured on llvmpipe renders of every
built-in scene (docs/images.md). FLIP and Pillow are the optional extra ``katra3d[images]``; without FLIP the
verdict rests on checksums alone and :func:`flip_missing` gives the install line to say once.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from katra_trace.analysis.defaults import (
    DEFAULT_IMAGE_MAX_MEAN,
    DEFAULT_IMAGE_MAX_OUTLIER_PCT,
    DEFAULT_IMAGE_OUTLIER_LEVEL,
    check_image_max_mean,
    check_image_max_outlier_pct,
    check_image_outlier_level,
)
from katra_trace.io.claim import check_output_dir, missing_directory, open_output
from katra_trace.io.images import encode_png, read_frame_images
from katra_trace.jsontext import record_dict
from katra_trace.optional import MissingDependencyError, require

#: The verdicts of :func:`image_verdict`, from best to worst.
IMAGE_VERDICTS = ("identical", "within_tolerance", "changed", "incomparable")
#: The format minor version that added kept frames (IMAGE blocks, katra_trace/io/image_block.py).
KEPT_FRAMES_MINOR = 2
#: What needs FLIP, as the install line names it.
FLIP_PURPOSE = "an image tolerance (identical / within tolerance / changed)"


class ImageLike(Protocol):
    """A scene's last frame as a comparison needs it: its checksum and, when kept, its pixels.

    ``katra_trace.io.images.FrameImage`` (a trace's kept frame) and :class:`ImageRef` both are one."""

    @property
    def sha256(self) -> str: ...

    @property
    def pixels(self) -> np.ndarray | None: ...


@dataclasses.dataclass(frozen=True)
class ImageRef:
    """An image known by its checksum (hex SHA-256 of the RGBA bytes), with its pixels when they were kept
    (an (H, W, 3|4) uint8 array, rows top to bottom)."""

    sha256: str
    pixels: np.ndarray | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class ImageThresholds:
    """Where *within tolerance* ends. ``max_mean``: FLIP mean error (0-1); ``outlier_level``: the per-pixel
    FLIP error (0-1) over which a pixel is an outlier; ``max_outlier_pct``: the share of outlier pixels, in
    percent. Checked on construction (OptionError, exit 2)."""

    max_mean: float = DEFAULT_IMAGE_MAX_MEAN
    max_outlier_pct: float = DEFAULT_IMAGE_MAX_OUTLIER_PCT
    outlier_level: float = DEFAULT_IMAGE_OUTLIER_LEVEL

    def __post_init__(self) -> None:
        check_image_max_mean(self.max_mean)
        check_image_max_outlier_pct(self.max_outlier_pct)
        check_image_outlier_level(self.outlier_level)


@dataclasses.dataclass(frozen=True)
class ImageVerdict:
    """What the image comparison of one scene says.

    ``flip_mean`` (0-1) and ``outlier_pct`` (percent of pixels over ``outlier_level``) are NaN when FLIP did
    not run (identical, checksums only, incomparable). ``checksum_only``: the verdict rests on checksums (no
    FLIP installed, or a side kept no pixels). ``reason`` says why, in words."""

    verdict: str
    reason: str
    flip_mean: float = math.nan
    outlier_pct: float = math.nan
    outlier_level: float = DEFAULT_IMAGE_OUTLIER_LEVEL
    checksum_only: bool = False
    base_sha256: str = ""
    new_sha256: str = ""

    @property
    def line(self) -> str:
        """The output line: "image changed: FLIP mean 0.031, 2.4 % of pixels over 0.1"."""
        return f"image {self.verdict.replace('_', ' ')}: {self.reason}"

    @property
    def is_regression(self) -> bool:
        """A changed image is a regression (exit 1 under ``--images gate``)."""
        return self.verdict == "changed"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict; NaN becomes None."""
        out = record_dict(self)
        out["line"] = self.line
        return out


def flip_module() -> ModuleType:
    """``flip_evaluator``, or :class:`MissingDependencyError` with the install line of ``katra3d[images]``."""
    return require("flip_evaluator", extra="images", purpose=FLIP_PURPOSE, what="FLIP (flip-evaluator)")


def flip_missing() -> str | None:
    """The one-line install message when FLIP is not installed (say it once per command), else None."""
    try:
        flip_module()
    except MissingDependencyError as exc:
        return str(exc)
    return None


def _rgb01(pixels: np.ndarray) -> np.ndarray:
    """(H, W, 3) float32 in [0, 1] of an (H, W, 3|4) uint8 image: what FLIP's LDR mode reads (alpha dropped)."""
    arr = np.asarray(pixels)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, 3|4) uint8 image, got {arr.dtype} {arr.shape}")
    out: np.ndarray = np.ascontiguousarray(arr[:, :, :3], dtype=np.float32) / np.float32(255.0)
    return out


def flip_errors(base: np.ndarray, new: np.ndarray) -> np.ndarray:
    """FLIP's per-pixel error (H, W) float32 in [0, 1] of NEW against BASE (uint8 images of one size).

    Raises :class:`MissingDependencyError` without ``flip-evaluator``."""
    flip = flip_module()
    errors, _mean, _params = flip.evaluate(_rgb01(base), _rgb01(new), "LDR", applyMagma=False)
    out: np.ndarray = np.asarray(errors, dtype=np.float32).reshape(base.shape[0], base.shape[1])
    return out


def flip_error_map(base: np.ndarray, new: np.ndarray) -> np.ndarray:
    """FLIP's error map of NEW against BASE as an (H, W, 3) uint8 image in the magma colour map (black: no
    visible difference, yellow: the largest): the picture ``compare --image-diff`` and the report show."""
    flip = flip_module()
    coloured, _mean, _params = flip.evaluate(_rgb01(base), _rgb01(new), "LDR", applyMagma=True)
    rgb = np.clip(np.asarray(coloured, dtype=np.float32), 0.0, 1.0)
    return np.ascontiguousarray(np.rint(rgb * 255.0).astype(np.uint8))


def _size(pixels: np.ndarray) -> str:
    return f"{pixels.shape[1]}x{pixels.shape[0]}"


def _sha(image: ImageLike | np.ndarray) -> str:
    return "" if isinstance(image, np.ndarray) else str(image.sha256)


def _pixels(image: ImageLike | np.ndarray) -> np.ndarray | None:
    return image if isinstance(image, np.ndarray) else image.pixels


def image_verdict(base: ImageLike | np.ndarray | None, new: ImageLike | np.ndarray | None,
                  thresholds: ImageThresholds | None = None) -> ImageVerdict:
    """The image verdict of NEW's last frame against BASE's (the rule is in this module's docstring).

    Each side is an :class:`ImageLike` (checksum, pixels when kept), a bare (H, W, 3|4) uint8 array, or None
    (no image). Without ``flip-evaluator`` different images are *changed* on their checksums alone."""
    limits = thresholds or ImageThresholds()
    if base is None or new is None:
        missing = " and ".join(side for side, image in (("BASE", base), ("NEW", new)) if image is None)
        return ImageVerdict("incomparable", f"no last frame in {missing}", outlier_level=limits.outlier_level,
                            base_sha256=_sha(base) if base is not None else "",
                            new_sha256=_sha(new) if new is not None else "")
    shas: dict[str, Any] = {"base_sha256": _sha(base), "new_sha256": _sha(new),
                            "outlier_level": limits.outlier_level}
    pb, pn = _pixels(base), _pixels(new)
    if shas["base_sha256"] and shas["new_sha256"]:
        same = shas["base_sha256"] == shas["new_sha256"]
    else:
        same = pb is not None and pn is not None and pb.shape == pn.shape and np.array_equal(pb, pn)
    if same:
        return ImageVerdict("identical", "same checksum", **shas)
    if pb is None or pn is None:
        where = " and ".join(side for side, p in (("BASE", pb), ("NEW", pn)) if p is None)
        return ImageVerdict("changed", f"checksums differ ({where} kept no pixels to measure by how much)",
                            checksum_only=True, **shas)
    if pb.shape[:2] != pn.shape[:2]:
        return ImageVerdict("incomparable", f"image sizes differ: {_size(pb)} vs {_size(pn)}",
                            **shas)
    if flip_missing() is not None:
        return ImageVerdict("changed", "checksums differ (FLIP is not installed: no tolerance)",
                            checksum_only=True, **shas)
    errors = flip_errors(pb, pn)
    mean = float(errors.mean())
    outliers = float((errors > limits.outlier_level).mean() * 100.0)
    changed = mean > limits.max_mean or outliers > limits.max_outlier_pct
    reason = f"FLIP mean {mean:.3g}, {outliers:.3g} % of pixels over {limits.outlier_level:g}"
    if not changed:
        reason += f" (limits {limits.max_mean:g} and {limits.max_outlier_pct:g} %)"
    return ImageVerdict("changed" if changed else "within_tolerance", reason, flip_mean=mean,
                        outlier_pct=outliers, **shas)


def image_verdicts(base: Mapping[str, ImageLike], new: Mapping[str, ImageLike],
                   thresholds: ImageThresholds | None = None, scenes: Iterable[str] | None = None,
                   not_comparable: Mapping[str, str] | None = None) -> dict[str, ImageVerdict]:
    """:func:`image_verdict` of every scene with an image on either side (or of ``scenes``), in order.

    ``not_comparable``: scene -> why the captures themselves do not compare (another size, other params,
    another renderer: the timing comparison's ``incomparable`` reason); such a scene's image is
    *incomparable* for the same reason, never *changed*, since a different picture is expected."""
    names = list(scenes) if scenes is not None else list(dict.fromkeys([*base, *new]))
    out = {}
    for name in names:
        why = (not_comparable or {}).get(name)
        if why is not None and name in base and name in new:
            out[name] = ImageVerdict("incomparable", f"the captures do not compare: {why}",
                                     base_sha256=str(base[name].sha256), new_sha256=str(new[name].sha256))
        else:
            out[name] = image_verdict(base.get(name), new.get(name), thresholds)
    return out


def trace_images(trace: Any) -> dict[str, ImageLike]:
    """The last frame of each scene of an opened trace, by scene label: the kept frame (pixels and checksum,
    :func:`katra_trace.io.images.read_frame_images`) where the trace keeps one, else the checksum its scene
    annotation recorded (``last_frame_sha256``; no pixels). Scenes with neither are absent."""
    images: dict[str, ImageLike] = {}
    for note in getattr(trace, "annotations", ()):
        if isinstance(note, dict) and note.get("type") == "scene" and isinstance(note.get("last_frame_sha256"), str):
            images[str(note.get("scene"))] = ImageRef(note["last_frame_sha256"])
    path = getattr(trace, "path", None)
    version = getattr(trace, "version", (1, KEPT_FRAMES_MINOR))
    if path is not None and tuple(version) >= (1, KEPT_FRAMES_MINOR):  # older formats keep no frames: no re-read
        images.update(read_frame_images(Path(path)))
    return images


def side_images(traces: Sequence[Any]) -> dict[str, ImageLike]:
    """The last frame of each scene of one side of a comparison (its runs): the first run's that has one,
    preferring a run whose frame kept its pixels. A scene renders the same frame in every run of one build,
    so any run stands for the side."""
    side: dict[str, ImageLike] = {}
    for trace in traces:
        for scene, image in trace_images(trace).items():
            if scene not in side or (side[scene].pixels is None and image.pixels is not None):
                side[scene] = image
    return side


def exit_code_with_images(timing_code: int, verdicts: Mapping[str, ImageVerdict], policy: str) -> int:
    """The exit code of compare and ab: 1 when the timing found a regression or, under the gate policy, an
    image changed; else the timing's own code (0, or 2 when nothing was comparable)."""
    gated = policy == "gate" and any(v.is_regression for v in verdicts.values())
    return 1 if gated else timing_code


def diff_pngs(base: np.ndarray, new: np.ndarray) -> dict[str, bytes]:
    """The pictures of one scene's difference as PNG bytes: ``base``, ``new`` and, when FLIP is installed and
    the sizes agree, ``flip`` (:func:`flip_error_map`)."""
    out = {"base": encode_png(base), "new": encode_png(new)}
    if base.shape[:2] == new.shape[:2] and flip_missing() is None:
        out["flip"] = encode_png(flip_error_map(base, new))
    return out


def file_stem(scene: str) -> str:
    """A scene label as a file name stem: characters other than letters, digits, '.', '-' and '_' become '_'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", scene).strip(".") or "scene"


def write_image_diff(directory: str | os.PathLike[str], verdicts: Mapping[str, ImageVerdict],
                     base: Mapping[str, ImageLike], new: Mapping[str, ImageLike]) -> list[Path]:
    """``compare --image-diff DIR``: for every scene whose image is not identical and whose pixels both sides
    kept, write ``DIR/<scene>.base.png``, ``.new.png`` and ``.flip.png`` (the FLIP error map, when FLIP is
    installed). DIR is made when missing; an existing file is never replaced (the output claim). Returns the
    paths written."""
    root = check_output_dir(directory, option="--image-diff")
    written: list[Path] = []
    stems: set[str] = set()
    for scene, verdict in verdicts.items():
        b, n = base.get(scene), new.get(scene)
        if verdict.verdict == "identical" or b is None or n is None or b.pixels is None or n.pixels is None:
            continue
        stem = file_stem(scene)
        while stem in stems:  # two labels that read alike as file names
            stem += "_"
        stems.add(stem)
        try:
            root.mkdir(exist_ok=True)
        except FileNotFoundError:
            raise missing_directory(root.parent) from None
        for what, data in diff_pngs(b.pixels, n.pixels).items():
            path = root / f"{stem}.{what}.png"
            with open_output(path, option="--image-diff", example="DIR") as f:
                f.write(data)
            written.append(path)
    return written


__all__ = [
    "FLIP_PURPOSE",
    "IMAGE_VERDICTS",
    "ImageLike",
    "ImageRef",
    "ImageThresholds",
    "ImageVerdict",
    "flip_error_map",
    "flip_errors",
    "flip_missing",
    "flip_module",
    "diff_pngs",
    "exit_code_with_images",
    "file_stem",
    "write_image_diff",
    "image_verdict",
    "image_verdicts",
    "side_images",
    "trace_images",
]
