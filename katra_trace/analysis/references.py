"""Reference images per device: ``katra3d run --expect-images DIR`` and ``--update-images``.

A reference is one scene's kept frame (:mod:`katra_trace.io.images`) for one image key (which
device and code generator drew it), stored as ``DIR/<scene>/<key id>.png`` with
``DIR/<scene>/<key id>.json`` beside it: the key itself, the frame index, animation time, size and
the SHA-256 of the pixels. A scene may have references for many devices; a run is checked against
the one for its own key, and a device with none is skipped with a notice (as Mesa's trace CI
does). The comparison is the image verdict (identical / within tolerance / changed:
:func:`katra_trace.analysis.images.image_verdict`, FLIP with the thresholds of docs/images.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from katra_trace.analysis.images import ImageThresholds, ImageVerdict, image_verdict
from katra_trace.errors import ConfigError, TraceIOError
from katra_trace.io.images import FrameImage, encode_png, image_checksum, key_id, load_png

#: What a ``--duration`` run says once, and what its header records: no frame is kept or checked.
DURATION_NOTICE = ("a --duration run keeps no frame for image checks: how many frames it renders depends on "
                   "speed, so its last frame is a different one in every run (use --frames N)")

#: What an image check can say about one scene.
CHECK_STATUSES = ("identical", "within tolerance", "changed", "other frame", "no reference", "recorded",
                  "not kept")


def images_policy(keep: bool, duration: bool) -> str:
    """What a run's header records about kept frames (``capture_options.resolved.images``)."""
    if duration:
        return f"not kept: {DURATION_NOTICE}"
    return "kept: each scene's last measured frame" if keep else "off (--no-keep-image)"


def file_stem(label: str) -> str:
    """A scene label as a file or folder name (``--screenshot``, reference folders)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label) or "_"


@dataclasses.dataclass(frozen=True)
class ImageCheck:
    """One scene's image check: ``status`` (one of :data:`CHECK_STATUSES`), ``line`` (what to print,
    one line), ``reference`` (the reference PNG, when there is one), ``verdict`` (the image verdict,
    when the frame was compared)."""

    scene: str
    status: str
    line: str
    reference: Path | None = None
    verdict: ImageVerdict | None = None

    @property
    def regression(self) -> bool:
        """The image changed: a regression (exit 1)."""
        return self.status == "changed"

    @property
    def error(self) -> bool:
        """The reference is of another frame than the run kept: the check cannot be made (exit 2)."""
        return self.status == "other frame"


def reference_paths(directory: Path, scene: str, key: Mapping[str, str]) -> tuple[Path, Path]:
    """The reference PNG and its JSON facts for ``scene`` drawn under image key ``key``."""
    folder = Path(directory) / file_stem(scene)
    kid = key_id(key)
    return folder / f"{kid}.png", folder / f"{kid}.json"


def record_references(directory: Path, images: Mapping[str, FrameImage]) -> list[ImageCheck]:
    """Store each kept frame of ``images`` as its scene's reference for its key (replacing the old one)."""
    checks = []
    for scene, image in images.items():
        png, facts = reference_paths(directory, scene, image.key)
        record = {"scene": scene, "frame_index": image.frame_index, "time_s": image.time_s, "width": image.width,
                  "height": image.height, "sha256": image.sha256, "key": dict(image.key)}
        try:
            png.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(png, encode_png(image.pixels))
            _write_atomic(facts, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8"))
        except OSError as exc:
            raise TraceIOError(f"recording reference image {str(png)!r} failed: {exc.strerror or exc}") from None
        checks.append(ImageCheck(scene, "recorded", f"image reference recorded: {scene}: {png}", png))
    return checks


def load_reference(png: Path, facts: Path) -> FrameImage:
    """The reference at ``png`` and ``facts``; ConfigError (exit 2) if either is unreadable or they disagree."""
    try:
        record: Any = json.loads(facts.read_text(encoding="utf-8"))
        pixels = load_png(png)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"reference image {str(png)!r}: {exc}") from None
    if not isinstance(record, dict) or not isinstance(record.get("key"), dict):
        raise ConfigError(f"reference image {str(png)!r}: {str(facts)!r} is not a reference's facts")
    sha = image_checksum(pixels)
    if record.get("sha256") != sha:
        raise ConfigError(f"reference image {str(png)!r} does not match the SHA-256 in {str(facts)!r}")
    return FrameImage(str(record.get("scene", "")), int(record.get("frame_index", -1)),
                      float(record.get("time_s", 0.0)), pixels.shape[1], pixels.shape[0], sha,
                      {str(k): str(v) for k, v in record["key"].items()}, pixels)


def check_references(directory: Path, images: Mapping[str, FrameImage], scenes: Sequence[str],
                     thresholds: ImageThresholds | None = None) -> list[ImageCheck]:
    """Check the kept frame of every scene in ``scenes`` against its reference in ``directory`` for its key,
    by the image verdict with ``thresholds`` (None: the defaults)."""
    checks = []
    for scene in scenes:
        image = images.get(scene)
        if image is None:
            checks.append(ImageCheck(scene, "not kept", f"image check: {scene}: no frame kept (skipped or "
                                     "interrupted), not checked"))
            continue
        png, facts = reference_paths(directory, scene, image.key)
        if not png.is_file():
            what = ", ".join(f"{k} {v}" for k, v in image.key.items() if v) or "an unknown device"
            checks.append(ImageCheck(scene, "no reference", f"image check: {scene}: skipped, no reference for this "
                                     f"device (key {key_id(image.key)}: {what}); record one with --update-images"))
            continue
        checks.append(_check(scene, load_reference(png, facts), image, png, thresholds))
    return checks


def _check(scene: str, ref: FrameImage, new: FrameImage, png: Path, thresholds: ImageThresholds | None) -> ImageCheck:
    if (ref.frame_index, ref.width, ref.height) != (new.frame_index, new.width, new.height):
        return ImageCheck(scene, "other frame", f"image check: {scene}: the reference is frame {ref.frame_index} "
                          f"at {ref.width}x{ref.height}, this run kept frame {new.frame_index} at "
                          f"{new.width}x{new.height}: run with the reference's --warmup, --frames and --size, "
                          "or record it again with --update-images", png)
    verdict = image_verdict(ref, new, thresholds)
    status = verdict.verdict.replace("_", " ")
    if status not in CHECK_STATUSES:  # incomparable: the sizes were checked above, so this is not expected
        status = "other frame"
    return ImageCheck(scene, status, f"image {status}: {scene}: {verdict.reason}", png, verdict)


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in its folder, moved into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


__all__ = ["CHECK_STATUSES", "DURATION_NOTICE", "ImageCheck", "check_references", "file_stem", "images_policy",
           "load_reference", "record_references", "reference_paths"]
