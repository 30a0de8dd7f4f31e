"""Kept frames without GL: PNG through Pillow, the IMAGE block in a trace, older readers, hostile
payloads, and the reference folder of --expect-images / --update-images."""

from __future__ import annotations

import dataclasses
import hashlib
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from katra3d.harness.run.config import RunConfig, plan_run
from katra_trace.analysis.references import (
    CheckStatus,
    check_references,
    record_references,
    reference_paths,
)
from katra_trace.errors import ConfigError, TraceFormatError
from katra_trace.io import blocks
from katra_trace.io import format as fmt
from katra_trace.io.image_block import decode_image_payload, encode_image_payload
from katra_trace.io.images import (
    FrameImage,
    decode_png,
    encode_png,
    frame_record,
    image_checksum,
    image_key,
    key_id,
    load_png,
    read_frame_images,
    save_png,
)
from katra_trace.io.reader import open_trace
from katra_trace.schema import EVENT_DTYPE
from tests.cli_helpers import katra_main
from tests.trace_helpers import write_trace

HOST = {
    "gl": {
        "renderer": "llvmpipe (LLVM 15.0.6, 256 bits)",
        "version": "4.5 (Core Profile) Mesa 22.3.6",
    }
}
KEY = image_key(HOST)


def _pixels(seed: int, shape: tuple[int, int, int] = (9, 13, 4)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def _frame(
    scene: str, pixels: np.ndarray, index: int = 5, key: dict[str, str] | None = None
) -> FrameImage:
    key = dict(KEY if key is None else key)
    return FrameImage(
        scene,
        index,
        index / 60,
        pixels.shape[1],
        pixels.shape[0],
        image_checksum(pixels),
        key,
        pixels,
    )


def _trace_with_images(path: Path, images: dict[str, np.ndarray]) -> None:
    events = np.array(
        [(1, 0, 0, 0, 1, 1, i, 10 * i, 5, 0.0) for i in range(len(images))], dtype=EVENT_DTYPE
    )
    write_trace(
        path,
        events,
        ["", "a"],
        batch_events=4096,
        header={"workload": "images"},
        summary={},
        annotations=[{"type": "scene", "scene": scene} for scene in images],
        images=[
            frame_record(scene, 3 + i, (3 + i) / 60, pixels, KEY)
            for i, (scene, pixels) in enumerate(images.items())
        ],
    )


def test_image_key_from_host_info() -> None:
    assert KEY == {
        "renderer": "llvmpipe (LLVM 15.0.6, 256 bits)",
        "mesa": "22.3.6",
        "llvm": "15.0.6",
        "vector_bits": "256",
    }
    assert image_key({}) == {"renderer": "", "mesa": "", "llvm": "", "vector_bits": ""}
    other = image_key({"gl": {**HOST["gl"], "renderer": "llvmpipe (LLVM 15.0.6, 128 bits)"}})
    assert other["vector_bits"] == "128" and key_id(other) != key_id(KEY) and len(key_id(KEY)) == 12


def test_png_round_trip_rgba_and_rgb(tmp_path: Path) -> None:
    rgba = _pixels(1)
    save_png(tmp_path / "a.png", rgba)
    assert np.array_equal(load_png(tmp_path / "a.png"), rgba)
    with Image.open(tmp_path / "a.png") as img:  # a real PNG, row 0 at the top
        assert (
            img.format == "PNG" and img.mode == "RGBA" and img.getpixel((0, 0)) == tuple(rgba[0, 0])
        )
    rgb = rgba[:, :, :3]
    assert np.array_equal(decode_png(encode_png(rgb)), rgb)
    save_png(tmp_path / "f.png", _frame("s", rgba))
    assert np.array_equal(load_png(tmp_path / "f.png"), rgba)


def test_png_bad_input_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="expected an"):
        encode_png(np.zeros((4, 4), np.uint8))
    with pytest.raises(ValueError, match="expected an"):
        encode_png(np.zeros((4, 4, 4), np.float32))
    with pytest.raises(ValueError, match="not a readable PNG"):
        decode_png(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    grey = io.BytesIO()
    Image.fromarray(np.full((3, 5), 7, np.uint8), "L").save(grey, format="PNG")
    assert decode_png(grey.getvalue()).shape == (3, 5, 3)  # converted to 8-bit RGB


def test_trace_keeps_frames_and_reads_them_back(tmp_path: Path) -> None:
    path = tmp_path / "t.katra"
    shots = {"a": _pixels(2), "b": _pixels(3, (4, 6, 3))}
    _trace_with_images(path, shots)
    trace = open_trace(path)
    assert (
        trace.version == (1, fmt.FORMAT_MINOR)
        and trace.header.format_version == f"1.{fmt.FORMAT_MINOR}"
    )
    assert trace.status == "complete" and len(trace.events) == 2 and trace.skipped_blocks == 0
    images = read_frame_images(path)
    assert sorted(images) == ["a", "b"]
    for i, (scene, pixels) in enumerate(shots.items()):
        got = images[scene]
        assert np.array_equal(got.pixels, pixels) and got.pixels.dtype == np.uint8
        assert (got.frame_index, got.time_s, got.width, got.height) == (
            3 + i,
            (3 + i) / 60,
            pixels.shape[1],
            pixels.shape[0],
        )
        assert got.sha256 == hashlib.sha256(pixels.tobytes()).hexdigest() and got.key == KEY


def test_trace_without_images_reads_empty(tmp_path: Path) -> None:
    path = tmp_path / "t.katra"
    _trace_with_images(path, {})
    assert read_frame_images(path) == {}
    golden = Path(__file__).resolve().parent / "data" / "golden-v1.1.katra"
    assert read_frame_images(golden) == {}


def test_an_older_reader_skips_the_image_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1.1 reader does not know block type 7: it skips it by length and reads everything else."""
    path = tmp_path / "t.katra"
    _trace_with_images(path, {"a": _pixels(4), "b": _pixels(5)})
    now = open_trace(path)
    monkeypatch.setattr(
        blocks, "_KNOWN_TYPES", frozenset(blocks._KNOWN_TYPES - {int(fmt.BlockType.IMAGE)})
    )
    old = open_trace(path, strict=True)
    assert old.skipped_blocks == 2 and now.skipped_blocks == 0
    assert old.status == "complete" and not old.truncated
    assert np.array_equal(old.events, now.events) and old.annotations == now.annotations
    assert old.summary == now.summary


def test_image_payload_checks() -> None:
    meta, png = frame_record("s", 1, 0.5, _pixels(6), KEY)
    payload = encode_image_payload(meta, png)
    assert decode_image_payload(payload, 0) == (meta, png)
    with pytest.raises(TraceFormatError, match="too short"):
        decode_image_payload(b"\1", 9)
    with pytest.raises(TraceFormatError, match="claims"):
        decode_image_payload(b"\xff\xff\0\0{}", 9)
    for bad, why in (
        ({"width": 0}, "'width'"),
        ({"sha256": "x"}, "'sha256'"),
        ({"channels": 2}, "'channels'"),
        ({"key": {"a": 1}}, "'key'"),
        ({"encoding": "jpeg"}, "unknown encoding"),
        ({"width": 1 << 20, "height": 1 << 20}, "exceed"),
        ({"frame_index": True}, "'frame_index'"),
    ):
        with pytest.raises(ValueError, match=why):
            encode_image_payload({**meta, **bad}, png)
        text = fmt.encode_json({**meta, **bad})
        with pytest.raises(TraceFormatError, match=why):
            decode_image_payload(len(text).to_bytes(4, "little") + text + png, 0)


def test_validate_checks_the_kept_frames(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.katra", tmp_path / "bad.katra"
    _trace_with_images(good, {"a": _pixels(12), "b": _pixels(13)})
    meta, png = frame_record("s", 1, 0.5, _pixels(14), KEY)
    write_trace(
        bad,
        np.array([], dtype=EVENT_DTYPE),
        [""],
        header={"workload": "x"},
        summary={},
        images=[({**meta, "sha256": "0" * 64}, png)],
    )
    code, out, _ = katra_main(capsys, "validate", str(good))
    assert code == 0
    assert out.rstrip().endswith(", 2 kept frames (pixels checked)")
    code, _, err = katra_main(capsys, "validate", str(bad))
    assert code == 2
    assert "do not match their recorded SHA-256" in err and len(err.strip().splitlines()) == 1


def test_a_kept_frame_that_does_not_match_its_record_is_corrupt(tmp_path: Path) -> None:
    pixels = _pixels(7)
    meta, png = frame_record("s", 1, 0.5, pixels, KEY)
    for bad, why in (
        ({"sha256": "0" * 64}, "SHA-256"),
        ({"width": 3}, "its record says"),
        ({}, "its PNG is truncated"),
    ):
        path = tmp_path / f"t{len(why)}.katra"
        write_trace(
            path,
            np.array([], dtype=EVENT_DTYPE),
            [""],
            header={"workload": "x"},
            summary={},
            images=[({**meta, **bad}, png if bad else png[:-30])],
        )
        with pytest.raises(TraceFormatError, match=why) as caught:
            read_frame_images(path)
        assert str(caught.value).startswith(f"'{path}': kept frame of scene 's' at offset ")


def test_references_record_check_and_skip(tmp_path: Path) -> None:
    refs = tmp_path / "refs"
    a, b = _pixels(8), _pixels(9)
    recorded = record_references(refs, {"a": _frame("a", a), "b/x": _frame("b/x", b)})
    assert [c.status for c in recorded] == [CheckStatus.RECORDED] * 2
    png, facts = reference_paths(refs, "b/x", KEY)
    # 'b/x' is not a file name
    assert png.parent.name.startswith("b_x~") and png.parent.parent == refs
    assert png.is_file() and facts.is_file() and png.stem == key_id(KEY)
    changed = 255 - a  # every pixel inverted
    rounded = b.copy()
    # one level of one channel of one pixel: another code generator's rounding
    rounded[2, 3, 0] ^= 1
    other_device = {**KEY, "vector_bits": "128"}
    checks = check_references(
        refs,
        {"a": _frame("a", changed), "b/x": _frame("b/x", b), "c": _frame("c", a, key=other_device)},
        ["a", "b/x", "c", "d"],
    )
    by = {c.scene: c for c in checks}
    assert (
        by["a"].status is CheckStatus.CHANGED
        and by["a"].regression
        and by["a"].line.startswith("image changed: a: ")
    )
    assert by["a"].verdict is not None and by["a"].verdict.is_regression
    assert by["b/x"].status is CheckStatus.IDENTICAL and not by["b/x"].regression
    (near,) = check_references(refs, {"b/x": _frame("b/x", rounded)}, ["b/x"])
    assert (
        near.status is CheckStatus.WITHIN_TOLERANCE
        and not near.regression
        and "FLIP mean" in near.line
    )
    assert (
        by["c"].status is CheckStatus.NO_REFERENCE
        and "skipped" in by["c"].line
        and key_id(other_device) in by["c"].line
    )
    assert by["d"].status is CheckStatus.NOT_KEPT
    later = check_references(refs, {"a": _frame("a", a, index=9)}, ["a"])
    assert (
        later[0].status is CheckStatus.OTHER_FRAME and later[0].error and "frame 5" in later[0].line
    )


def test_a_damaged_reference_is_one_line_error(tmp_path: Path) -> None:
    refs = tmp_path / "refs"
    record_references(refs, {"a": _frame("a", _pixels(10))})
    png, _ = reference_paths(refs, "a", KEY)
    save_png(png, _pixels(11))
    with pytest.raises(ConfigError, match="does not match the SHA-256"):
        check_references(refs, {"a": _frame("a", _pixels(10))}, ["a"])
    png.write_bytes(b"nope")
    with pytest.raises(ConfigError, match="not a readable PNG"):
        check_references(refs, {"a": _frame("a", _pixels(10))}, ["a"])


def test_image_options_are_checked_before_anything_runs(tmp_path: Path) -> None:
    base = RunConfig(scenes=("triangle",), output=str(tmp_path / "t.katra"))
    assert plan_run(base).keep_images and plan_run(base).expect_images is None
    assert not plan_run(dataclasses.replace(base, keep_image=False)).keep_images
    assert not plan_run(dataclasses.replace(base, frames=None, duration_s=1.0)).keep_images
    for change, message in (
        ({"update_images": True}, "--update-images needs --expect-images"),
        ({"expect_images": str(tmp_path), "duration_s": 1.0}, "needs --frames"),
        ({"expect_images": str(tmp_path), "keep_image": False}, "drop --no-keep-image"),
        ({"expect_images": str(tmp_path / "nope")}, "does not exist"),
        ({"expect_images": str(tmp_path / "t.katra.x"), "update_images": True}, None),
    ):
        config = dataclasses.replace(base, **change)  # type: ignore[arg-type]
        if message is None:
            assert plan_run(config).expect_images == tmp_path / "t.katra.x"  # made when recording
            continue
        with pytest.raises(ConfigError, match=message):
            plan_run(config)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        plan_run(dataclasses.replace(base, expect_images=str(tmp_path / "file")))
