"""Reference image folders as hostile input, no GL: ``run
--expect-images DIR`` reads files that live in repositories, where a file can be a symbolic link to
``/dev/zero``, a FIFO, or JSON that says anything. Each is one line, exit 2, never a traceback,
never exit 1 (the "image changed" code), never a hang; and two scene labels never share a reference
folder."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest

from katra_trace.analysis import images as image_rule
from katra_trace.analysis import references
from katra_trace.analysis.images import file_stem
from katra_trace.analysis.references import (
    CheckStatus,
    check_references,
    load_reference,
    record_references,
    reference_paths,
)
from katra_trace.errors import ConfigError
from katra_trace.io.images import FrameImage, image_checksum, save_png
from katra_trace.io.reader import open_trace
from tests.hostile_images import KEY, picture_frame, write_frames_trace, zero_png


def _frame(scene: str, seed: int = 1) -> FrameImage:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(16, 24, 4), dtype=np.uint8)
    return FrameImage(scene, 13, 13 / 60, 24, 16, image_checksum(pixels), dict(KEY), pixels)


@contextlib.contextmanager
def _no_hang(seconds: int = 20) -> Iterator[None]:
    """Fail instead of hanging (a FIFO opened blocking never returns)."""

    def hang(_signum: int, _frame: FrameType | None) -> None:
        raise AssertionError(f"no answer within {seconds} s: it hung")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def refs(tmp_path: Path) -> Path:
    """A reference folder holding scene 's''s reference for :data:`KEY`."""
    folder = tmp_path / "refs"
    record_references(folder, {"s": _frame("s")})
    return folder


def _one_line_error(folder: Path, image: FrameImage) -> str:
    with _no_hang(), pytest.raises(ConfigError) as caught:
        check_references(folder, {"s": image}, ["s"])
    message = str(caught.value)
    assert caught.value.exit_code == 2 and "\n" not in message and message
    return message


@pytest.mark.parametrize("which", ["facts", "png"])
@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "too-big"])
def test_a_reference_file_that_is_not_a_small_regular_file_is_one_line(
    refs: Path, which: str, kind: str
) -> None:
    png, facts = reference_paths(refs, "s", KEY)
    path = facts if which == "facts" else png
    path.unlink()
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")  # git stores symbolic links: a cloned folder can hold this
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(b" " * (1 << 20) if which == "facts" else b"\0" * (300 << 20))
    message = _one_line_error(refs, _frame("s"))
    assert repr(str(path)) in message
    assert ("not a regular file" if kind != "too-big" else "more than") in message


#: (what the facts file holds instead of a good value, the field the message names)
MALFORMED = [
    ('"frame_index": "abc"', "'frame_index'"),
    ('"frame_index": Infinity', "'frame_index'"),
    ('"frame_index": [1]', "'frame_index'"),
    ('"frame_index": true', "'frame_index'"),
    ('"frame_index": -1', "'frame_index'"),
    ('"time_s": "x"', "'time_s'"),
    ('"time_s": {}', "'time_s'"),
    ('"time_s": NaN', "'time_s'"),
    ('"width": 1e400', "'width'"),
    ('"sha256": 5', "'sha256'"),
    ('"key": [1]', "'key'"),
    ('"scene": null', "'scene'"),
]


@pytest.mark.parametrize(("value", "field"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_reference_facts_are_one_line_exit_2(refs: Path, value: str, field: str) -> None:
    _, facts = reference_paths(refs, "s", KEY)
    record = json.loads(facts.read_text(encoding="utf-8"))
    key = value.split(":")[0].strip('"')
    text = json.dumps({k: v for k, v in record.items() if k != key})[:-1] + ", " + value + "}"
    facts.write_text(text, encoding="utf-8")
    message = _one_line_error(refs, _frame("s"))
    assert message.startswith(f"reference facts {str(facts)!r}: {field} is not ")


@pytest.mark.parametrize(
    "text", ["[1, 2]", "{", "[" * 100_000, "\xff"], ids=["array", "torn", "deep", "not-utf8"]
)
def test_reference_facts_that_are_not_a_json_object_are_one_line(refs: Path, text: str) -> None:
    _, facts = reference_paths(refs, "s", KEY)
    facts.write_bytes(text.encode("latin-1"))
    assert str(facts) in _one_line_error(refs, _frame("s"))


def test_a_reference_png_too_large_for_its_budget_is_refused_before_decoding(refs: Path) -> None:
    png, facts = reference_paths(refs, "s", KEY)
    data, sha = zero_png(8192, 8192)  # 261 KB that would decode to 256 MiB
    png.write_bytes(data)
    facts.write_text(
        json.dumps({**json.loads(facts.read_text()), "width": 8192, "height": 8192, "sha256": sha})
    )
    assert "KATRA3D_MAX_RATIO=0" in _one_line_error(refs, _frame("s"))


def test_reference_facts_are_a_typed_record(refs: Path) -> None:
    png, facts = reference_paths(refs, "s", KEY)
    record = references.ReferenceFacts.from_json(json.loads(facts.read_text()), "facts")
    assert record == references.ReferenceFacts(
        "s", 13, 13 / 60, 24, 16, _frame("s").sha256, dict(KEY), 4
    )
    old = record.as_dict()
    del old["channels"]  # facts that do not say it
    assert references.ReferenceFacts.from_json(old, "facts").channels is None
    loaded = load_reference(png, facts)
    assert np.array_equal(loaded.pixels, _frame("s").pixels)


def test_a_kept_frame_is_recorded_as_its_own_png_and_checked(tmp_path: Path) -> None:
    trace = open_trace(write_frames_trace(tmp_path / "t.katra", {"s": picture_frame("s")}))
    (recorded,) = record_references(tmp_path / "refs", trace.kept_frames)
    assert (
        recorded.reference is not None
        and recorded.reference.read_bytes() == trace.kept_frames["s"].png
    )
    (check,) = check_references(tmp_path / "refs", trace.kept_frames, ["s"])
    assert check.status is CheckStatus.IDENTICAL


def test_recording_never_writes_through_a_symbolic_link(refs: Path, tmp_path: Path) -> None:
    png, _ = reference_paths(refs, "s", KEY)
    outside = tmp_path / "outside.png"
    outside.write_bytes(b"mine")
    png.unlink()
    png.symlink_to(outside)
    with pytest.raises(ConfigError, match="symbolic link"):
        record_references(refs, {"s": _frame("s", 2)})
    assert outside.read_bytes() == b"mine"


# --------------------------------------------------------------------------- item 11: one file per
# label


@pytest.mark.parametrize(
    "labels",
    [
        ("clear#2", "clear_2"),
        ("a/b", "a_b"),
        ("a b", "a_b"),
        (".x", "x"),
        ("é", "_"),
        ("x" * 120, "x" * 121),
    ],
)
def test_distinct_labels_never_share_a_file_stem(labels: tuple[str, str]) -> None:
    one, two = labels
    assert file_stem(one) != file_stem(two)
    for label in labels:
        stem = file_stem(label)
        assert stem and "/" not in stem and not stem.startswith(".") and len(stem.encode()) <= 100


def test_plain_labels_keep_their_stem() -> None:
    for label in ("clear", "clear_2", "fill-rate.v2", "Mesh_3"):
        assert file_stem(label) == label == image_rule.legacy_file_stem(label)


def test_two_labels_that_read_alike_keep_two_references(tmp_path: Path) -> None:
    refs = tmp_path / "refs"
    record_references(refs, {"clear#2": _frame("clear#2", 1), "clear_2": _frame("clear_2", 2)})
    assert len(list(refs.iterdir())) == 2
    checks = check_references(
        refs,
        {"clear#2": _frame("clear#2", 1), "clear_2": _frame("clear_2", 2)},
        ["clear#2", "clear_2"],
    )
    assert [c.status for c in checks] == [CheckStatus.IDENTICAL] * 2


def test_a_reference_recorded_under_the_old_stem_is_still_found_for_its_own_label(
    tmp_path: Path,
) -> None:
    refs = tmp_path / "refs"
    record_references(refs, {"clear#2": _frame("clear#2", 1)})
    new_folder = refs / file_stem("clear#2")
    # where katra3d before 0.2 recorded it
    new_folder.rename(refs / image_rule.legacy_file_stem("clear#2"))
    found: Any = check_references(refs, {"clear#2": _frame("clear#2", 1)}, ["clear#2"])
    assert found[0].status is CheckStatus.IDENTICAL
    other: Any = check_references(refs, {"clear_2": _frame("clear_2", 1)}, ["clear_2"])
    # that folder's facts name another scene
    assert other[0].status is CheckStatus.OTHER_SCENE and other[0].error
    assert "recorded for scene 'clear#2'" in other[0].line


def test_image_diff_pictures_of_labels_that_read_alike_do_not_collide(tmp_path: Path) -> None:
    from katra_trace.analysis.images import image_verdicts, write_image_diff

    base = {"clear#2": _frame("clear#2", 1), "clear_2": _frame("clear_2", 2)}
    new = {"clear#2": _frame("clear#2", 3), "clear_2": _frame("clear_2", 4)}
    written = write_image_diff(tmp_path / "diff", image_verdicts(base, new), base, new)
    assert len(written) == len(set(written)) == len(list((tmp_path / "diff").iterdir())) >= 4
    # the stems are file names Pillow writes to
    save_png(tmp_path / "x.png", base["clear_2"].pixels)
