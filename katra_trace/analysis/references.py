"""Reference images per device (``run --expect-images DIR`` / ``--update-images``): one scene's
kept frame per image key, ``DIR/<scene>/<key id>.png`` + ``.json`` facts. Read as untrusted input
(size caps, checked facts); written through the output rule, never through a symbolic link."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from katra_trace.analysis.images import (
    ImageOutcome,
    ImageThresholds,
    ImageVerdict,
    file_stem,
    image_verdict,
    legacy_file_stem,
)
from katra_trace.analysis.verdict import ValueEnum
from katra_trace.errors import ConfigError, KatraError
from katra_trace.io.blocks import DecodeBudget
from katra_trace.io.claim import open_output
from katra_trace.io.image_block import MAX_IMAGE_BYTES, KeptFrame, png_problem
from katra_trace.io.images import (
    FrameImage,
    encode_png,
    frame_pixels,
    image_checksum,
    key_id,
    png_pixels,
)
from katra_trace.io.inputs import read_regular
from katra_trace.jsontext import JsonObject
from katra_trace.text import shown

DURATION_NOTICE = (
    "a --duration run keeps no frame for image checks: how many frames it renders depends on "
    "speed, so its last frame is a different one in every run (use --frames N)"
)


class CheckStatus(ValueEnum):
    """The image verdict's outcomes, then the checks that could not compare."""

    IDENTICAL = ImageOutcome.IDENTICAL.value
    WITHIN_TOLERANCE = ImageOutcome.WITHIN_TOLERANCE.value
    CHANGED = ImageOutcome.CHANGED.value
    OTHER_FRAME = "other_frame"
    OTHER_SCENE = "other_scene"
    NO_REFERENCE = "no_reference"
    RECORDED = "recorded"
    NOT_KEPT = "not_kept"
    UNREADABLE = "unreadable"


MAX_FACTS_BYTES = 64 << 10
MAX_REFERENCE_PNG_BYTES = MAX_IMAGE_BYTES + (1 << 20)


@dataclasses.dataclass(frozen=True)
class ReferenceFacts:
    """``<key id>.json``: frame, animation time (s), size, raw pixels' SHA-256, key, channels
    (None in older facts)."""

    scene: str
    frame_index: int
    time_s: float
    width: int
    height: int
    sha256: str
    key: dict[str, str]
    channels: int | None = None

    @classmethod
    def from_json(cls, obj: object, where: str) -> ReferenceFacts:
        """ConfigError naming ``where`` and the first bad field."""
        if not isinstance(obj, dict):
            raise ConfigError(f"{where} is not a reference's facts (a JSON object)")

        def bad(key: str, what: str) -> ConfigError:
            got = repr(obj[key])[:40] if key in obj else "nothing"
            return ConfigError(f"{where}: {key!r} is not {what} (it is {got})")

        def whole(key: str, low: int) -> int:
            value = obj.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value < 1 << 31:
                raise bad(key, f"an integer >= {low}")
            return value

        scene = obj.get("scene")
        if not isinstance(scene, str):
            raise bad("scene", "a string")
        time_s = obj.get("time_s")
        if (
            not isinstance(time_s, (int, float))
            or isinstance(time_s, bool)
            or not math.isfinite(time_s)
        ):
            raise bad("time_s", "a finite number of seconds")
        sha = obj.get("sha256")
        if (
            not isinstance(sha, str)
            or len(sha) != 64
            or any(c not in "0123456789abcdef" for c in sha)
        ):
            raise bad("sha256", "64 lower-case hex digits")
        key = obj.get("key")
        if not isinstance(key, dict) or not all(isinstance(v, str) for v in key.values()):
            raise bad("key", "an object of strings")
        channels = obj.get("channels")
        if channels is not None and (isinstance(channels, bool) or channels not in (3, 4)):
            raise bad("channels", "3 or 4")
        return cls(
            scene,
            whole("frame_index", 0),
            float(time_s),
            whole("width", 1),
            whole("height", 1),
            sha,
            dict(key),
            channels,
        )

    def as_dict(self) -> JsonObject:
        out = dataclasses.asdict(self)
        if self.channels is None:
            del out["channels"]
        return out


def images_policy(keep: bool, duration: bool) -> str:
    """``capture_options.resolved.images`` of a run's header."""
    if duration:
        return f"not kept: {DURATION_NOTICE}"
    return "kept: each scene's last measured frame" if keep else "off (--no-keep-image)"


@dataclasses.dataclass(frozen=True)
class ImageCheck:
    scene: str
    status: CheckStatus
    line: str
    reference: Path | None = None
    verdict: ImageVerdict | None = None

    @property
    def regression(self) -> bool:
        """Exit 1."""
        return self.status is CheckStatus.CHANGED

    @property
    def error(self) -> bool:
        """Exit 2: the reference is of another frame or scene, or the kept frame is unreadable."""
        return self.status in (
            CheckStatus.OTHER_FRAME,
            CheckStatus.OTHER_SCENE,
            CheckStatus.UNREADABLE,
        )


def reference_paths(directory: Path, scene: str, key: Mapping[str, str]) -> tuple[Path, Path]:
    folder = Path(directory) / file_stem(scene)
    kid = key_id(key)
    return folder / f"{kid}.png", folder / f"{kid}.json"


def _recorded_paths(
    directory: Path, scene: str, key: Mapping[str, str]
) -> tuple[Path, Path] | None:
    """Its own folder, or the older one when the facts there name this scene; else None."""
    png, facts = reference_paths(directory, scene, key)
    if os.path.lexists(png) or os.path.lexists(facts):
        return png, facts
    old = Path(directory) / legacy_file_stem(scene)
    if old == png.parent:
        return None
    old_png, old_facts = old / png.name, old / facts.name
    if not os.path.lexists(old_png):
        return None
    try:
        named = json.loads(
            read_regular(old_facts, what="reference facts file", max_bytes=MAX_FACTS_BYTES)
        ).get("scene")
    except (KatraError, ValueError, RecursionError, AttributeError):
        return old_png, old_facts  # load_reference reports it
    return (old_png, old_facts) if named == scene else None


def record_references(
    directory: Path, images: Mapping[str, FrameImage | KeptFrame]
) -> list[ImageCheck]:
    """Store each kept frame as its scene's reference, replacing the old one; ConfigError for a
    symbolic link."""
    checks = []
    for scene, image in images.items():
        png, facts = reference_paths(directory, scene, image.key)
        if isinstance(image, KeptFrame):
            frame_pixels(image)
            data, channels = image.png, image.channels
        else:
            data, channels = encode_png(image.pixels), int(image.pixels.shape[2])
        record = ReferenceFacts(
            scene,
            image.frame_index,
            image.time_s,
            image.width,
            image.height,
            image.sha256,
            dict(image.key),
            channels,
        )
        for link in (png.parent, png, facts):
            if link.is_symlink():
                raise ConfigError(
                    f"reference {shown(link)} is a symbolic link; references are never written "
                    "through links: remove it, or record into another --expect-images folder"
                )
        try:
            png.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"recording reference image {shown(png)} failed: {exc.strerror or exc}"
            ) from None
        for path, content in (
            (png, data),
            (
                facts,
                (json.dumps(record.as_dict(), indent=1, sort_keys=True) + "\n").encode("utf-8"),
            ),
        ):
            with open_output(path, force=True, option="--expect-images", example="refs") as f:
                f.write(content)
        checks.append(
            ImageCheck(
                scene, CheckStatus.RECORDED, f"image reference recorded: {scene}: {png}", png
            )
        )
    return checks


def load_reference(png: Path, facts: Path) -> FrameImage:
    """ConfigError if either is unreadable, malformed or they disagree."""
    raw = read_regular(facts, what="reference facts file", max_bytes=MAX_FACTS_BYTES)
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConfigError(
            f"reference facts {shown(facts)} are not JSON ({type(exc).__name__}: {str(exc)[:80]})"
        ) from None
    record = ReferenceFacts.from_json(obj, f"reference facts {shown(facts)}")
    data = read_regular(png, what="reference image", max_bytes=MAX_REFERENCE_PNG_BYTES)
    # IHDR's colour type
    channels = record.channels or (4 if len(data) > 25 and data[25] == 6 else 3)
    problem = png_problem(
        data, {"width": record.width, "height": record.height, "channels": channels}
    )
    if problem is not None:
        raise ConfigError(
            f"reference image {shown(png)} is not a readable PNG of its facts: {problem}"
        )
    where = f"reference image {shown(png)}"
    try:
        pixels = png_pixels(
            data, record.width, record.height, channels, where, DecodeBudget(len(data))
        )
    except ValueError as exc:
        raise ConfigError(f"{exc}") from None
    except KatraError as exc:
        raise ConfigError(str(exc)) from None
    if record.sha256 != image_checksum(pixels):
        raise ConfigError(
            f"reference image {shown(png)} does not match the SHA-256 in {shown(facts)}"
        )
    return FrameImage(
        record.scene,
        record.frame_index,
        record.time_s,
        record.width,
        record.height,
        record.sha256,
        dict(record.key),
        pixels,
    )


def check_references(
    directory: Path,
    images: Mapping[str, FrameImage | KeptFrame],
    scenes: Sequence[str],
    thresholds: ImageThresholds | None = None,
) -> list[ImageCheck]:
    """A reference there but unreadable is a ConfigError, never a skip."""
    checks = []
    for scene in scenes:
        image = images.get(scene)
        if image is None:
            checks.append(
                ImageCheck(
                    scene,
                    CheckStatus.NOT_KEPT,
                    f"image check: {scene}: no frame kept (skipped or interrupted), not checked",
                )
            )
            continue
        found = _recorded_paths(directory, scene, image.key)
        if found is None:
            what = ", ".join(f"{k} {v}" for k, v in image.key.items() if v) or "an unknown device"
            checks.append(
                ImageCheck(
                    scene,
                    CheckStatus.NO_REFERENCE,
                    f"image check: {scene}: skipped, no reference for this "
                    f"device (key {key_id(image.key)}: {what}); record one with --update-images",
                )
            )
            continue
        checks.append(_check(scene, load_reference(*found), image, found[0], thresholds))
    return checks


def _check(
    scene: str,
    ref: FrameImage,
    new: FrameImage | KeptFrame,
    png: Path,
    thresholds: ImageThresholds | None,
) -> ImageCheck:
    if ref.scene != scene:
        return ImageCheck(
            scene,
            CheckStatus.OTHER_SCENE,
            f"image check: {scene}: the reference {png} was recorded for scene "
            f"{ref.scene!r} (katra3d before 0.2 gave labels such as 'clear#2' and 'clear_2' one "
            "folder): record this scene's again with --update-images",
            png,
        )
    if (ref.frame_index, ref.width, ref.height) != (new.frame_index, new.width, new.height):
        return ImageCheck(
            scene,
            CheckStatus.OTHER_FRAME,
            f"image check: {scene}: the reference is frame {ref.frame_index} "
            f"at {ref.width}x{ref.height}, this run kept frame {new.frame_index} at "
            f"{new.width}x{new.height}: run with the reference's --warmup, --frames and --size, "
            "or record it again with --update-images",
            png,
        )
    verdict = image_verdict(ref, new, thresholds)
    if not verdict.readable:
        return ImageCheck(
            scene, CheckStatus.UNREADABLE, f"image check: {scene}: {verdict.reason}", png, verdict
        )
    outcome = verdict.verdict
    status = (
        CheckStatus.OTHER_FRAME
        if outcome is ImageOutcome.INCOMPARABLE
        else CheckStatus(outcome.value)
    )
    line = f"image {status.words}: {scene}: {verdict.reason}"
    return ImageCheck(scene, status, line, png, verdict)


__all__ = [
    "CheckStatus",
    "DURATION_NOTICE",
    "MAX_FACTS_BYTES",
    "MAX_REFERENCE_PNG_BYTES",
    "ImageCheck",
    "ReferenceFacts",
    "check_references",
    "images_policy",
    "load_reference",
    "record_references",
    "reference_paths",
]
