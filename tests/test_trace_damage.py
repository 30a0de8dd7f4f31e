"""Damaged, truncated, foreign and future files: recover what is intact, or
fail with a KatraError."""

from __future__ import annotations

import random
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from katra_trace import (
    KatraError,
    TraceFormatError,
    TraceRecoveryWarning,
    TraceVersionError,
    open_trace,
)
from katra_trace.io import format as fmt
from katra_trace.io.blocks import ScanState, iter_blocks
from tests.trace_helpers import frame_zone_stream, seal_blocks, split_blocks, write_trace

STRINGS = ["", "scene", "frame", "pass-a", "pass-b", "pass-c"]


def _codecs() -> list[str]:
    try:
        import blosc2  # noqa: F401
    except ImportError:
        return ["zstd"]
    return ["zstd", "blosc2"]


@pytest.fixture(scope="module", params=_codecs())
def small_trace(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> tuple[bytes, list]:
    """A trace of ~10 blocks (header, strings, events x N, annotation, summary) and its block list,
    with each codec (blosc2 codes the EVENTS blocks; the other blocks are zstd)."""
    path = tmp_path_factory.mktemp("dmg") / "small.katra"
    write_trace(
        path,
        frame_zone_stream(12, zones=2),
        STRINGS,
        batch_events=8,
        annotations=[{"k": "v"}],
        codec=request.param,
    )
    data = path.read_bytes()
    with open(path, "rb") as f:
        blocks = list(iter_blocks(f, ScanState(), strict=True))
    return data, blocks


def _read_prefix(tmp_path: Path, data: bytes, strict: bool = False):  # noqa: ANN202
    p = tmp_path / "cut.katra"
    p.write_bytes(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        return open_trace(p, strict=strict)


def _block_end(data: bytes, offset: int) -> int:
    stored_len = struct.unpack_from("<I", data, offset + 12)[0]
    return offset + fmt.BLOCK_HEADER_SIZE + stored_len


def test_every_truncation_recovers_exactly_the_complete_blocks(tmp_path: Path, small_trace) -> None:
    data, blocks = small_trace
    assert len(blocks) >= 8
    ends = [_block_end(data, b.offset) for b in blocks]
    header_end = ends[0]
    for cut in range(len(data)):
        prefix = data[:cut]
        if cut < header_end:
            with pytest.raises(TraceFormatError):
                _read_prefix(tmp_path, prefix)
            continue
        t = _read_prefix(tmp_path, prefix)
        complete = [b for b, end in zip(blocks, ends, strict=True) if end <= cut]
        assert t.truncated, cut
        assert t.blocks == len(complete), cut
        expect_events = [b.payload.decode() for b in complete if b.type == fmt.BlockType.EVENTS]
        expect = np.concatenate(expect_events) if expect_events else np.empty(0)
        assert t.events.tobytes() == expect.tobytes(), cut
        n_strings = sum(len(b.payload[1]) for b in complete if b.type == fmt.BlockType.STRINGS)
        assert t.strings == STRINGS[:n_strings], cut
        has_summary = any(b.type == fmt.BlockType.SUMMARY for b in complete)
        assert t.summary.rebuilt is not has_summary, cut
        with pytest.raises(TraceFormatError):
            _read_prefix(tmp_path, prefix, strict=True)
    whole = _read_prefix(tmp_path, data, strict=True)
    assert not whole.truncated and whole.status == "complete"


def test_every_single_byte_flip_is_caught(tmp_path: Path, small_trace) -> None:
    data, _ = small_trace
    rng = random.Random(1234)
    # Bytes 8-11 hold the major/minor version: a changed minor is a valid (newer) file and a
    # changed major is refused as a version error; everything else is checksummed or checked.
    candidates = [i for i in range(len(data)) if not 8 <= i < 12]
    positions = sorted(rng.sample(candidates, min(400, len(candidates))))
    for pos in positions:
        damaged = bytearray(data)
        damaged[pos] ^= 1 << rng.randrange(8)
        try:
            t = _read_prefix(tmp_path, bytes(damaged))
        except KatraError:
            continue
        assert t.truncated, f"flip at byte {pos} went unnoticed"
        assert t.stopped_at is not None and t.stopped_at <= pos


def test_recovery_warns_and_names_where_it_stopped(tmp_path: Path, small_trace) -> None:
    data, blocks = small_trace
    p = tmp_path / "torn.katra"
    p.write_bytes(data[: blocks[4].offset + 10])
    with pytest.warns(TraceRecoveryWarning, match=f"before offset {blocks[4].offset}"):
        t = open_trace(p)
    assert t.stopped_at == blocks[4].offset
    assert "torn block" in t.stop_reason


def test_not_a_trace(tmp_path: Path) -> None:
    for content in (b"", b"hello", b"x" * 100, b"\x89PNG\r\n\x1a\n" + b"\0" * 40):
        p = tmp_path / "foreign"
        p.write_bytes(content)
        with pytest.raises(TraceFormatError, match="not a katra3d trace"):
            open_trace(p)


def test_text_mode_damage_is_named(tmp_path: Path, small_trace) -> None:
    data, _ = small_trace
    p = tmp_path / "crlf.katra"
    p.write_bytes(data.replace(b"\r\n", b"\n"))
    with pytest.raises(TraceFormatError, match="text-mode"):
        open_trace(p)


def test_newer_major_is_refused_with_advice(tmp_path: Path, small_trace) -> None:
    data, _ = small_trace
    p = tmp_path / "v2.katra"
    p.write_bytes(data[:8] + struct.pack("<H", 2) + data[10:])
    # the writer's minor, kept
    newer = rf"format 2\.{fmt.FORMAT_MINOR} is newer .* reads \(1\.x\); upgrade katra3d"
    with pytest.raises(TraceVersionError, match=newer):
        open_trace(p)


def test_newer_minor_is_read(tmp_path: Path, small_trace) -> None:
    data, _ = small_trace
    p = tmp_path / "v1_7.katra"
    p.write_bytes(data[:10] + struct.pack("<H", 7) + data[12:])
    t = open_trace(p, strict=True)
    assert len(t.events) == 36


def _rebuild(data: bytes, edit) -> bytes:  # noqa: ANN001
    """Re-encode a trace block by block through ``edit(list of (type, raw payload, schema))``, with
    zstd blocks, renumbering sequence numbers and the footer as a writer would."""
    payloads = split_blocks(data)
    edit(payloads)
    return seal_blocks(payloads, codec=fmt.Codec.ZSTD)


def test_unknown_block_types_are_skipped_by_length(tmp_path: Path, small_trace) -> None:
    data, _ = small_trace
    p = tmp_path / "future.katra"
    p.write_bytes(
        _rebuild(data, lambda ps: ps.insert(1, (200, b"a future block type's payload", 0)))
    )
    t = open_trace(p, strict=True)
    assert t.skipped_blocks == 1
    assert len(t.events) == 36 and t.strings == STRINGS


@pytest.mark.parametrize("claimed", [0, 5, 35, 37, 10**9])
def test_a_wrong_event_count_in_the_summary_does_not_matter(
    tmp_path: Path, small_trace, claimed: int
) -> None:
    """open_trace sizes its array from the summary; a lying summary must not change what is read."""
    import json

    data, _ = small_trace
    truth = open_trace(_write(tmp_path / "ok.katra", data), strict=True).events

    def lie(ps: list) -> None:  # noqa: ANN001
        i = next(k for k, (btype, _, _) in enumerate(ps) if btype == fmt.BlockType.SUMMARY)
        summary = json.loads(ps[i][1])
        summary["events"] = claimed
        ps[i] = (fmt.BlockType.SUMMARY, json.dumps(summary).encode(), 0)

    t = open_trace(_write(tmp_path / "lie.katra", _rebuild(data, lie)), strict=True)
    assert t.events.tobytes() == truth.tobytes()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_huge_length_fields_are_rejected_before_allocating(tmp_path: Path, small_trace) -> None:
    data, blocks = small_trace
    off = blocks[2].offset
    head = bytearray(data[off : off + 24])
    struct.pack_into("<II", head, 12, 0xFFFFFFF0, 0xFFFFFFF0)
    p = tmp_path / "huge.katra"
    p.write_bytes(data[:off] + bytes(head) + data[off + 24 :])
    with pytest.raises(TraceFormatError, match=f"torn block at offset {off}"):
        open_trace(p, strict=True)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tail=st.binary(max_size=400), keep=st.integers(0, 2000), noise=st.binary(max_size=64))
def test_any_bytes_parse_or_raise_katra_error(
    tmp_path: Path, small_trace, tail: bytes, keep: int, noise: bytes
) -> None:
    data, _ = small_trace
    for content in (tail, data[:keep] + noise + tail, fmt.encode_preamble() + tail):
        p = tmp_path / "fuzz.katra"
        p.write_bytes(content)
        for strict in (False, True):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", TraceRecoveryWarning)
                    open_trace(p, strict=strict)
            except KatraError:
                pass
