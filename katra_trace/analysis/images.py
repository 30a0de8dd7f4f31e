"""The image verdict (identical / within tolerance / changed / incomparable) for compare, ab,
report and bisect; rule and defaults in docs/images.md. Kept frames are decoded one at a time;
FLIP runs once a pair and the verdict keeps its levels for the error map."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypedDict

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
from katra_trace.analysis.verdict import ValueEnum
from katra_trace.errors import ExitCode, KatraError, TraceTooLargeError
from katra_trace.io.claim import check_output_dir, missing_directory, open_output
from katra_trace.io.image_block import KeptFrame
from katra_trace.io.images import KeptFrameError, encode_png, frame_pixels
from katra_trace.jsontext import JsonObject, record_dict


class ImageOutcome(ValueEnum):
    """Best to worst."""

    IDENTICAL = "identical"
    WITHIN_TOLERANCE = "within_tolerance"
    CHANGED = "changed"
    INCOMPARABLE = "incomparable"


#: Largest frame FLIP measures (~4 us a pixel bounds its time); over it only checksums count.
FLIP_MAX_PIXELS = 1 << 22


class ImageLike(Protocol):
    @property
    def sha256(self) -> str: ...

    @property
    def pixels(self) -> np.ndarray | None: ...


@dataclasses.dataclass(frozen=True)
class ImageRef:
    """Hex SHA-256, with (H, W, 3|4) uint8 pixels when kept."""

    sha256: str
    pixels: np.ndarray | None = dataclasses.field(default=None, compare=False, repr=False)


Image = KeptFrame | ImageLike


@dataclasses.dataclass(frozen=True)
class ImageThresholds:
    """FLIP mean (0-1), outlier share (%) over ``outlier_level`` (0-1); OptionError if invalid."""

    max_mean: float = DEFAULT_IMAGE_MAX_MEAN
    max_outlier_pct: float = DEFAULT_IMAGE_MAX_OUTLIER_PCT
    outlier_level: float = DEFAULT_IMAGE_OUTLIER_LEVEL

    def __post_init__(self) -> None:
        check_image_max_mean(self.max_mean)
        check_image_max_outlier_pct(self.max_outlier_pct)
        check_image_outlier_level(self.outlier_level)


@dataclasses.dataclass(frozen=True)
class ImageVerdict:
    """``flip_mean`` and ``outlier_pct`` are NaN when FLIP did not run."""

    verdict: ImageOutcome
    reason: str
    flip_mean: float = math.nan
    outlier_pct: float = math.nan
    outlier_level: float = DEFAULT_IMAGE_OUTLIER_LEVEL
    checksum_only: bool = False
    base_sha256: str = ""
    new_sha256: str = ""
    readable: bool = dataclasses.field(default=True, repr=False)
    #: (H, W) uint8 colour-map levels: the error map without a second FLIP pass.
    error_levels: np.ndarray | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def line(self) -> str:
        return f"image {self.verdict.words}: {self.reason}"

    @property
    def is_regression(self) -> bool:
        return self.verdict is ImageOutcome.CHANGED

    def as_dict(self) -> JsonObject:
        out = record_dict(self)
        del out["readable"], out["error_levels"]
        out["line"] = self.line
        return out


def _sha(image: Image | np.ndarray) -> str:
    return "" if isinstance(image, np.ndarray) else str(image.sha256)


def _has_pixels(image: Image | np.ndarray) -> bool:
    return isinstance(image, (np.ndarray, KeptFrame)) or image.pixels is not None


def _dims(image: Image | np.ndarray) -> tuple[int, int]:
    if isinstance(image, KeptFrame):
        return image.width, image.height
    pixels = image if isinstance(image, np.ndarray) else image.pixels
    assert pixels is not None
    return int(pixels.shape[1]), int(pixels.shape[0])


def _load(image: Image | np.ndarray) -> np.ndarray:
    if isinstance(image, KeptFrame):
        return frame_pixels(image)
    pixels = image if isinstance(image, np.ndarray) else image.pixels
    assert pixels is not None
    return pixels


def unreadable(image: Image | np.ndarray | None) -> str | None:
    """Why a kept frame cannot be judged ("damaged: FILE: ..."), or None."""
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


class _Known(TypedDict):
    """The fields of every :class:`ImageVerdict` once both sides exist."""

    base_sha256: str
    new_sha256: str
    outlier_level: float


def image_verdict(
    base: Image | np.ndarray | None,
    new: Image | np.ndarray | None,
    thresholds: ImageThresholds | None = None,
) -> ImageVerdict:
    """A side is a kept frame, an :class:`ImageLike`, a (H, W, 3|4) uint8 array, or None."""
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
    shas = _Known(base_sha256=_sha(base), new_sha256=_sha(new), outlier_level=limits.outlier_level)
    problems = [p for p in (unreadable(base), unreadable(new)) if p is not None]
    if problems:
        return ImageVerdict(ImageOutcome.INCOMPARABLE, "; ".join(problems), readable=False, **shas)
    if shas["base_sha256"] and shas["new_sha256"]:
        same = shas["base_sha256"] == shas["new_sha256"]
    elif _has_pixels(base) and _has_pixels(new):
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
    except KatraError as exc:  # both frames together did not fit
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
    """Per scene; one in ``not_comparable`` (scene -> reason) is *incomparable*, never *changed*:
    a different picture is expected."""
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


def trace_images(trace: object) -> dict[str, Image]:
    """Each scene's kept last frame, else the checksum its scene annotation recorded."""
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


def side_images(traces: Sequence[object]) -> dict[str, Image]:
    """One side's last frames, preferring pixels and undamaged kept frames (every run of one build
    renders the same frame)."""
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
    """1 when an image changed under the gate policy, else the timing's code."""
    gated = policy == "gate" and any(v.is_regression for v in verdicts.values())
    return ExitCode.REGRESSION if gated else timing_code


def _png(image: Image | np.ndarray) -> bytes:
    return image.png if isinstance(image, KeptFrame) else encode_png(_load(image))


def diff_pngs(
    base: Image | np.ndarray, new: Image | np.ndarray, verdict: ImageVerdict | None = None
) -> dict[str, bytes]:
    """``base``, ``new`` and, when measurable, ``flip`` PNGs (from ``verdict``'s kept levels)."""
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
        except KatraError:  # its verdict says why
            pass
    return out


def has_pictures(verdict: ImageVerdict, base: Image | None, new: Image | None) -> bool:
    return (
        verdict.verdict is not ImageOutcome.IDENTICAL
        and verdict.readable
        and base is not None
        and new is not None
        and _has_pixels(base)
        and _has_pixels(new)
    )


_PLAIN_STEM = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")


def file_stem(scene: str) -> str:
    """A plain label is its own stem; others get ``~`` and 12 hex of their SHA-256, so ``clear#2``
    never shares ``clear_2``'s file."""
    if _PLAIN_STEM.fullmatch(scene):
        return scene
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", scene).strip(".")[:80] or "scene"
    digest = hashlib.sha256(scene.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{readable}~{digest}"


def legacy_file_stem(scene: str) -> str:
    """The older stem, so older reference folders are still found."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", scene).strip(".") or "scene"


def write_image_diff(
    directory: str | os.PathLike[str],
    verdicts: Mapping[str, ImageVerdict],
    base: Mapping[str, Image],
    new: Mapping[str, Image],
) -> list[Path]:
    """``--image-diff``: write ``<scene>.base/new/flip.png`` per difference; never replaces."""
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
