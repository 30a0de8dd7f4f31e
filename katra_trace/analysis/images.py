"""The image verdict: is NEW's last frame of a scene the same picture as BASE's?

One definition, which compare, ab, the report and bisect call: :func:`image_verdict`.

* *identical*: the same SHA-256 of the pixels (or, for bare arrays, the same bytes);
* *within tolerance*: FLIP (NVIDIA's perceptual image difference, the ``flip-evaluator`` package,
  LDR mode) finds a mean error at or below :attr:`ImageThresholds.max_mean` and a share of pixels
  whose error is over :attr:`ImageThresholds.outlier_level` at or below
  :attr:`ImageThresholds.max_outlier_pct`: another code generator rounded differently;
* *changed*: either is over its threshold, or (without FLIP, without pixels, or over FLIP's pixel
  cap :data:`FLIP_MAX_PIXELS`) the checksums differ;
* *incomparable*: an image is missing on one side, the sizes differ, or a kept frame cannot be read:
  damaged (its PNG does not hold what its record says) or too large for its trace's reading budget;
  the reason names the trace file.

A trace's kept frames come from the reader's one scan (``trace.kept_frames``); their pixels are
decoded here, one frame a side at a time, only when the verdict needs them
(:func:`katra_trace.io.images.frame_pixels`).

The defaults live in :mod:`katra_trace.analysis.defaults` and were measured on llvmpipe renders of
every built-in scene (docs/images.md). FLIP and Pillow are the optional extra ``katra3d[images]``;
without FLIP the verdict rests on checksums alone and :func:`flip_missing` gives the install line to
say once.

FLIP runs once a pair (:mod:`katra_trace.analysis.flip`): a verdict that measured its pair keeps the
errors as its colour map's levels (``ImageVerdict.error_levels``), and the error map that ``compare
--image-diff`` and the report show (:func:`diff_pngs`) is drawn from them.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
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
from katra_trace.analysis.flip import (
    FLIP_PURPOSE,
    flip_error_map,
    flip_errors,
    flip_levels,
    flip_missing,
    flip_module,
    levels_picture,
    magma_colours,
)
from katra_trace.errors import ExitCode, KatraError, TraceTooLargeError
from katra_trace.io.claim import check_output_dir, missing_directory, open_output
from katra_trace.io.image_block import KeptFrame
from katra_trace.io.images import KeptFrameError, encode_png, frame_pixels
from katra_trace.jsontext import record_dict


class ImageOutcome(str, enum.Enum):
    """What :func:`image_verdict` says of a pair of frames, from best to worst. A str, so JSON and
    a recorded string compare equal to it; :attr:`words` is how a line says it."""

    IDENTICAL = "identical"
    WITHIN_TOLERANCE = "within_tolerance"
    CHANGED = "changed"
    INCOMPARABLE = "incomparable"

    @property
    def words(self) -> str:
        return self.value.replace("_", " ")

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


#: The largest frame FLIP measures, in pixels (2048 x 2048): FLIP takes about 4 us a pixel on one
#: core, so this bounds its time (about 10-20 s on the loaded 2-core machine this was measured on;
#: an 8192x8192 frame took 291 s). Its memory is bounded by the tiles
#: (:data:`katra_trace.analysis.flip.FLIP_TILE`). Over the cap the verdict rests on the checksums,
#: and says so.
FLIP_MAX_PIXELS = 1 << 22


class ImageLike(Protocol):
    """A scene's last frame as a comparison needs it: its checksum and, when kept, its pixels.

    ``katra_trace.io.images.FrameImage`` (a kept frame with its pixels) and :class:`ImageRef` both
    are one; a trace's :class:`~katra_trace.io.image_block.KeptFrame` (pixels decoded on demand)
    stands beside them (:data:`Image`)."""

    @property
    def sha256(self) -> str: ...

    @property
    def pixels(self) -> np.ndarray | None: ...


@dataclasses.dataclass(frozen=True)
class ImageRef:
    """An image known by its checksum (hex SHA-256 of the RGBA bytes), with its pixels when they
    were kept (an (H, W, 3|4) uint8 array, rows top to bottom)."""

    sha256: str
    pixels: np.ndarray | None = dataclasses.field(default=None, compare=False, repr=False)


#: A side's last frame: a kept frame as the reader keeps it (pixels decoded when needed) or an
#: :class:`ImageLike`.
Image = KeptFrame | ImageLike


@dataclasses.dataclass(frozen=True)
class ImageThresholds:
    """Where *within tolerance* ends. ``max_mean``: FLIP mean error (0-1); ``outlier_level``: the
    per-pixel FLIP error (0-1) over which a pixel is an outlier; ``max_outlier_pct``: the share of
    outlier pixels, in percent. Checked on construction (OptionError, exit 2)."""

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

    ``flip_mean`` (0-1) and ``outlier_pct`` (percent of pixels over ``outlier_level``) are NaN when
    FLIP did not run (identical, checksums only, incomparable). ``checksum_only``: the verdict rests
    on checksums (no FLIP installed, or a side kept no pixels). ``reason`` says why, in words."""

    verdict: ImageOutcome
    reason: str
    flip_mean: float = math.nan
    outlier_pct: float = math.nan
    outlier_level: float = DEFAULT_IMAGE_OUTLIER_LEVEL
    checksum_only: bool = False
    base_sha256: str = ""
    new_sha256: str = ""
    #: False when a side's kept frame could not be read (damaged, or over its trace's budget): no
    #: pictures
    readable: bool = dataclasses.field(default=True, repr=False)
    #: FLIP's errors as its colour map's levels ((H, W) uint8,
    #: :func:`~katra_trace.analysis.flip.flip_levels`) when FLIP measured the pair and its colours
    #: are known: the error map is drawn from them (:func:`diff_pngs`) without a second FLIP pass.
    #: One byte a pixel, at most :data:`FLIP_MAX_PIXELS`.
    error_levels: np.ndarray | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def line(self) -> str:
        """The output line: "image changed: FLIP mean 0.031, 2.4 % of pixels over 0.1"."""
        return f"image {self.verdict.words}: {self.reason}"

    @property
    def is_regression(self) -> bool:
        """A changed image is a regression (exit 1 under ``--images gate``)."""
        return self.verdict is ImageOutcome.CHANGED

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict; NaN becomes None."""
        out = record_dict(self)
        del out["readable"], out["error_levels"]
        out["line"] = self.line
        return out


def _sha(image: Image | np.ndarray) -> str:
    return "" if isinstance(image, np.ndarray) else str(image.sha256)


def _has_pixels(image: Image | np.ndarray) -> bool:
    """Whether the side has pixels to measure by (a kept frame does, decoded when needed)."""
    return isinstance(image, (np.ndarray, KeptFrame)) or image.pixels is not None


def _dims(image: Image | np.ndarray) -> tuple[int, int]:
    """(width, height) of a side with pixels, from a kept frame's record without decoding it."""
    if isinstance(image, KeptFrame):
        return image.width, image.height
    pixels = image if isinstance(image, np.ndarray) else image.pixels
    assert pixels is not None
    return int(pixels.shape[1]), int(pixels.shape[0])


def _load(image: Image | np.ndarray) -> np.ndarray:
    """The pixels of a side with pixels (a kept frame decoded now: KatraError when it cannot be
    read).
    """
    if isinstance(image, KeptFrame):
        return frame_pixels(image)
    pixels = image if isinstance(image, np.ndarray) else image.pixels
    assert pixels is not None
    return pixels


def unreadable(image: Image | np.ndarray | None) -> str | None:
    """Why a side's kept frame cannot be judged, naming its trace file ("damaged: FILE: kept frame
    of scene 's' at offset N: ..." or "too large: FILE: ..."); None when it can (or is not a kept
    frame). The frame is decoded and checked against its record, then dropped: one frame at a time.
    """
    if not isinstance(image, KeptFrame):
        return None
    try:
        frame_pixels(image)
    except KeptFrameError as exc:
        return f"damaged: {exc}"
    except TraceTooLargeError as exc:
        return f"too large: {exc}"
    except KatraError as exc:
        return f"unreadable: {exc}"
    return None


def image_verdict(
    base: Image | np.ndarray | None,
    new: Image | np.ndarray | None,
    thresholds: ImageThresholds | None = None,
) -> ImageVerdict:
    """The image verdict of NEW's last frame against BASE's (the rule is in this module's
    docstring).

    Each side is a trace's :class:`~katra_trace.io.image_block.KeptFrame`, an :class:`ImageLike`
    (checksum, pixels when kept), a bare (H, W, 3|4) uint8 array, or None (no image). A kept frame
    is decoded (inside its trace's budget) and checked against its record before anything is said of
    it. Without ``flip-evaluator``, or over :data:`FLIP_MAX_PIXELS`, different images are *changed*
    on their checksums alone."""
    limits = thresholds or ImageThresholds()
    if base is None or new is None:
        missing = " and ".join(
            side for side, image in (("BASE", base), ("NEW", new)) if image is None
        )
        return ImageVerdict(
            ImageOutcome.INCOMPARABLE,
            f"no last frame in {missing}",
            outlier_level=limits.outlier_level,
            base_sha256=_sha(base) if base is not None else "",
            new_sha256=_sha(new) if new is not None else "",
        )
    shas: dict[str, Any] = {
        "base_sha256": _sha(base),
        "new_sha256": _sha(new),
        "outlier_level": limits.outlier_level,
    }
    problems = [p for p in (unreadable(base), unreadable(new)) if p is not None]
    if problems:
        return ImageVerdict(ImageOutcome.INCOMPARABLE, "; ".join(problems), readable=False, **shas)
    if shas["base_sha256"] and shas["new_sha256"]:
        same = shas["base_sha256"] == shas["new_sha256"]
    elif _has_pixels(base) and _has_pixels(new):  # a bare array: its bytes
        pb, pn = _load(base), _load(new)
        same = pb.shape == pn.shape and np.array_equal(pb, pn)
    else:
        same = False
    if same:
        return ImageVerdict(ImageOutcome.IDENTICAL, "same checksum", **shas)
    if not _has_pixels(base) or not _has_pixels(new):
        where = " and ".join(
            side for side, image in (("BASE", base), ("NEW", new)) if not _has_pixels(image)
        )
        return ImageVerdict(
            ImageOutcome.CHANGED,
            f"checksums differ ({where} kept no pixels to measure by how much)",
            checksum_only=True,
            **shas,
        )
    (wb, hb), (wn, hn) = _dims(base), _dims(new)
    if (wb, hb) != (wn, hn):
        return ImageVerdict(
            ImageOutcome.INCOMPARABLE, f"image sizes differ: {wb}x{hb} vs {wn}x{hn}", **shas
        )
    if flip_missing() is not None:
        return ImageVerdict(
            ImageOutcome.CHANGED,
            "checksums differ (FLIP is not installed: no tolerance)",
            checksum_only=True,
            **shas,
        )
    if wb * hb > FLIP_MAX_PIXELS:
        return ImageVerdict(
            ImageOutcome.CHANGED,
            f"checksums differ ({wb}x{hb} is over FLIP's cap of {FLIP_MAX_PIXELS} "
            "pixels: no tolerance measured)",
            checksum_only=True,
            **shas,
        )
    try:
        errors = flip_errors(_load(base), _load(new))
    except KatraError as exc:  # the two frames together did not fit where each alone did
        return ImageVerdict(ImageOutcome.INCOMPARABLE, f"too large: {exc}", readable=False, **shas)
    mean = float(errors.mean())
    outliers = float((errors > limits.outlier_level).mean() * 100.0)
    changed = mean > limits.max_mean or outliers > limits.max_outlier_pct
    reason = f"FLIP mean {mean:.3g}, {outliers:.3g} % of pixels over {limits.outlier_level:g}"
    if not changed:
        reason += f" (limits {limits.max_mean:g} and {limits.max_outlier_pct:g} %)"
    levels = flip_levels(errors) if magma_colours() is not None else None
    return ImageVerdict(
        ImageOutcome.CHANGED if changed else ImageOutcome.WITHIN_TOLERANCE,
        reason,
        flip_mean=mean,
        outlier_pct=outliers,
        error_levels=levels,
        **shas,
    )


def image_verdicts(
    base: Mapping[str, Image],
    new: Mapping[str, Image],
    thresholds: ImageThresholds | None = None,
    scenes: Iterable[str] | None = None,
    not_comparable: Mapping[str, str] | None = None,
) -> dict[str, ImageVerdict]:
    """:func:`image_verdict` of every scene with an image on either side (or of ``scenes``), in
    order.

    ``not_comparable``: scene -> why the captures themselves do not compare (another size, other
    params, another renderer: the timing comparison's ``incomparable`` reason); such a scene's image
    is *incomparable* for the same reason, never *changed*, since a different picture is expected.
    """
    names = list(scenes) if scenes is not None else list(dict.fromkeys([*base, *new]))
    out = {}
    for name in names:
        why = (not_comparable or {}).get(name)
        if why is not None and name in base and name in new:
            out[name] = ImageVerdict(
                ImageOutcome.INCOMPARABLE,
                f"the captures do not compare: {why}",
                base_sha256=str(base[name].sha256),
                new_sha256=str(new[name].sha256),
            )
        else:
            out[name] = image_verdict(base.get(name), new.get(name), thresholds)
    return out


def trace_images(trace: Any) -> dict[str, Image]:
    """The last frame of each scene of an opened trace, by scene label: the kept frame the reader
    kept (``trace.kept_frames``: facts and PNG, pixels decoded only when a verdict needs them; the
    file is not read again) where the trace keeps one, else the checksum its scene annotation
    recorded (``last_frame_sha256``; no pixels). Scenes with neither are absent."""
    images: dict[str, Image] = {}
    for note in getattr(trace, "annotations", ()):
        if (
            isinstance(note, dict)
            and note.get("type") == "scene"
            and isinstance(note.get("last_frame_sha256"), str)
        ):
            images[str(note.get("scene"))] = ImageRef(note["last_frame_sha256"])
    images.update(getattr(trace, "kept_frames", {}))
    return images


def side_images(traces: Sequence[Any]) -> dict[str, Image]:
    """The last frame of each scene of one side of a comparison (its runs): the first run's that has
    one, preferring a run whose frame kept its pixels, and an undamaged kept frame to a damaged one.
    A scene renders the same frame in every run of one build, so any run stands for the side."""
    side: dict[str, Image] = {}
    for trace in traces:
        for scene, image in trace_images(trace).items():
            held = side.get(scene)
            if (
                held is None
                or (not _has_pixels(held) and _has_pixels(image))
                or (
                    isinstance(held, KeptFrame)
                    and held.damage
                    and isinstance(image, KeptFrame)
                    and not image.damage
                )
            ):
                side[scene] = image
    return side


def exit_code_with_images(
    timing_code: int, verdicts: Mapping[str, ImageVerdict], policy: str
) -> int:
    """The exit code of compare and ab: 1 when the timing found a regression or, under the gate
    policy, an image changed; else the timing's own code (0, or 2 when nothing was comparable)."""
    gated = policy == "gate" and any(v.is_regression for v in verdicts.values())
    return ExitCode.REGRESSION if gated else timing_code


def _png(image: Image | np.ndarray) -> bytes:
    """A side's picture as PNG bytes: a kept frame's own PNG (checked by its verdict, not decoded
    again).
    """
    return image.png if isinstance(image, KeptFrame) else encode_png(_load(image))


def diff_pngs(
    base: Image | np.ndarray, new: Image | np.ndarray, verdict: ImageVerdict | None = None
) -> dict[str, bytes]:
    """The pictures of one scene's difference as PNG bytes: ``base``, ``new`` and, when FLIP is
    installed, the sizes agree and they are within :data:`FLIP_MAX_PIXELS`, ``flip``
    (:func:`flip_error_map`). Kept frames give their own PNGs and are decoded only for the FLIP map
    (left out when one cannot be read).

    ``verdict``: this pair's :func:`image_verdict`; when FLIP measured it, the map is drawn from the
    levels it kept (``ImageVerdict.error_levels``): FLIP runs once a pair, for the verdict, and no
    frame is decoded here."""
    out = {"base": _png(base), "new": _png(new)}
    (wb, hb), (wn, hn) = _dims(base), _dims(new)
    levels = verdict.error_levels if verdict is not None else None
    kept = (
        levels_picture(levels)
        if levels is not None and levels.shape == (hb, wb) == (hn, wn)
        else None
    )
    if kept is not None:
        out["flip"] = encode_png(kept)
    elif (wb, hb) == (wn, hn) and wb * hb <= FLIP_MAX_PIXELS and flip_missing() is None:
        try:
            out["flip"] = encode_png(flip_error_map(_load(base), _load(new)))
        except KatraError:  # a damaged or too large frame: its verdict says so
            pass
    return out


def has_pictures(verdict: ImageVerdict, base: Image | None, new: Image | None) -> bool:
    """Whether a scene's difference can be shown: not identical, pixels on both sides, both
    readable.
    """
    return (
        verdict.verdict is not ImageOutcome.IDENTICAL
        and verdict.readable
        and base is not None
        and new is not None
        and _has_pixels(base)
        and _has_pixels(new)
    )


#: A scene label that is its own file name stem: letters, digits, '.', '-' and '_', not starting
#: with '.'.
_PLAIN_STEM = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")


def file_stem(scene: str) -> str:
    """A scene label as a file name stem (reference folders, screenshots, ``--image-diff``
    pictures), one stem per label: a plain label (:data:`_PLAIN_STEM`: letters, digits, '.', '-',
    '_', at most 100) is its own stem; any other label has the characters outside that set replaced
    by '_' and ``~`` and 12 hex digits of its SHA-256 added, so ``clear#2`` (``clear_2~...``) never
    shares a file with ``clear_2``."""
    if _PLAIN_STEM.fullmatch(scene):
        return scene
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", scene).strip(".")[:80] or "scene"
    digest = hashlib.sha256(scene.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{readable}~{digest}"


def legacy_file_stem(scene: str) -> str:
    """The stem katra3d before 0.2 gave a label (other characters replaced by '_'; ``clear#2`` and
    ``clear_2`` shared one): reference folders recorded then are still found for the label their
    facts name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", scene).strip(".") or "scene"


def write_image_diff(
    directory: str | os.PathLike[str],
    verdicts: Mapping[str, ImageVerdict],
    base: Mapping[str, Image],
    new: Mapping[str, Image],
) -> list[Path]:
    """``compare --image-diff DIR``: for every scene whose image is not identical and whose pixels
    both sides kept, write ``DIR/<scene>.base.png``, ``.new.png`` and ``.flip.png`` (the FLIP error
    map, when FLIP is installed). DIR is made when missing; an existing file is never replaced (the
    output claim). Returns the paths written."""
    root = check_output_dir(directory, option="--image-diff")
    written: list[Path] = []
    for scene, verdict in verdicts.items():
        b, n = base.get(scene), new.get(scene)
        if b is None or n is None or not has_pictures(verdict, b, n):
            continue
        stem = file_stem(scene)
        try:
            root.mkdir(exist_ok=True)
        except FileNotFoundError:
            raise missing_directory(root.parent) from None
        for what, data in diff_pngs(b, n, verdict).items():
            path = root / f"{stem}.{what}.png"
            with open_output(path, option="--image-diff", example="DIR") as f:
                f.write(data)
            written.append(path)
    return written


__all__ = [
    "FLIP_MAX_PIXELS",
    "FLIP_PURPOSE",
    "ImageOutcome",
    "Image",
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
    "has_pictures",
    "legacy_file_stem",
    "unreadable",
    "write_image_diff",
    "image_verdict",
    "image_verdicts",
    "side_images",
    "trace_images",
]
