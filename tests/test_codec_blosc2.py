"""Codec 2 (blosc2): golden files, round trips, the decompression bound, hostile chunks and a
missing library.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest

from katra_trace import (
    KatraError,
    TraceFormatError,
    TraceRecoveryWarning,
    TraceTooLargeError,
    TraceWriter,
    open_trace,
)
from katra_trace.io import blosc2_events as b2ev
from katra_trace.io import format as fmt
from katra_trace.io.blocks import ScanState, iter_blocks
from katra_trace.schema import EVENT_DTYPE
from tests.trace_helpers import frame_zone_stream, write_trace

blosc2 = pytest.importorskip("blosc2")

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent
STRINGS = ["", "scene", "frame", "pass-a", "pass-b", "pass-c"]


@pytest.mark.parametrize("name", ["golden-v1.1-blosc2.katra", "golden-v1.1-none.katra"])
def test_each_codec_golden_file_holds_the_v1_1_golden_content(name: str) -> None:
    ref = open_trace(DATA / "golden-v1.1.katra", strict=True)
    t = open_trace(DATA / name, strict=True)
    assert t.version == (1, 1) and len(t.events) == 78
    assert t.events.tobytes() == ref.events.tobytes()
    assert t.header == ref.header and t.summary == ref.summary and t.strings == ref.strings
    assert t.annotations == ref.annotations
    codecs = {}
    data = (DATA / name).read_bytes()
    with open(DATA / name, "rb") as f:
        for b in iter_blocks(f, ScanState(), strict=True):
            codecs.setdefault(fmt.BlockType(b.type).name, set()).add(
                fmt.BLOCK_HEADER.unpack_from(data, b.offset)[2]
            )
    if "blosc2" in name:  # codec 2 for EVENTS, zstd for everything else
        assert codecs.pop("EVENTS") == {fmt.Codec.BLOSC2}
        assert set().union(*codecs.values()) == {fmt.Codec.ZSTD}
    else:
        assert set().union(*codecs.values()) == {fmt.Codec.NONE}


@pytest.mark.parametrize("codec", ["blosc2", "none"])
def test_make_golden_rewrites_the_committed_codec_golden_file(tmp_path: Path, codec: str) -> None:
    from tests.data import make_golden

    make_golden.main(tmp_path / "a.katra", codec)
    make_golden.main(tmp_path / "b.katra", codec)
    assert (tmp_path / "a.katra").read_bytes() == (tmp_path / "b.katra").read_bytes()
    new, old = (
        open_trace(tmp_path / "a.katra", strict=True),
        open_trace(make_golden.GOLDEN[codec], strict=True),
    )
    assert new.header == old.header and new.events.tobytes() == old.events.tobytes()


@pytest.mark.parametrize("batch", [1, 7, 4096])
def test_blosc2_round_trip_whole_and_streamed(tmp_path: Path, batch: int) -> None:
    events = frame_zone_stream(300)
    path = tmp_path / "b.katra"
    write_trace(path, events, STRINGS, batch_events=batch, codec="blosc2")
    t = open_trace(path, strict=True)
    assert t.events.tobytes() == events.tobytes() and t.strings == STRINGS
    assert np.concatenate(list(t.iter_batches(strict=True))).tobytes() == events.tobytes()


def test_blosc2_decodes_into_the_callers_array(tmp_path: Path) -> None:
    events = frame_zone_stream(50)
    path = tmp_path / "b.katra"
    write_trace(path, events, STRINGS, batch_events=1000, codec="blosc2")
    with open(path, "rb") as f:
        batch = next(
            b for b in iter_blocks(f, ScanState(), strict=True) if b.type == fmt.BlockType.EVENTS
        ).payload
    out = np.zeros(len(events) + 2, dtype=EVENT_DTYPE)
    got = batch.decode(out[1:-1])
    assert np.shares_memory(got, out) and out[1:-1].tobytes() == events.tobytes()
    assert out[0].tobytes() == out[-1].tobytes() == bytes(EVENT_DTYPE.itemsize)


def test_blosc2_writer_refuses_rows_the_format_cannot_hold(tmp_path: Path) -> None:
    from katra_trace import ConfigError

    ev = frame_zone_stream(3)
    ev["dur_ns"][2] = -1
    w = TraceWriter(tmp_path / "neg.katra", codec="blosc2")
    w.append_array(ev)
    with pytest.raises(ConfigError, match="negative duration"):
        w.finish()


def _events_block(data: bytes) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        p = DATA / "golden-v1.1-blosc2.katra"
        with open(p, "rb") as f:
            return next(
                b.offset for b in iter_blocks(f, ScanState()) if b.type == fmt.BlockType.EVENTS
            )


def _reseal(
    data: bytes,
    off: int,
    stored: bytes,
    raw_len: int | None = None,
    codec: int | None = None,
    btype: int | None = None,
) -> bytes:
    """``data`` with the block at ``off`` replaced by one holding ``stored`` (valid CRC)."""
    _, t, c, schema, seq, stored_len, old_raw, _ = fmt.BLOCK_HEADER.unpack_from(data, off)
    head = fmt.BLOCK_HEADER.pack(
        fmt.SYNC,
        t if btype is None else btype,
        c if codec is None else codec,
        schema,
        seq,
        len(stored),
        old_raw if raw_len is None else raw_len,
        0,
    )
    crc = zlib.crc32(stored, zlib.crc32(head[:20]))
    return (
        data[:off]
        + head[:20]
        + struct.pack("<I", crc)
        + stored
        + data[off + fmt.BLOCK_HEADER_SIZE + stored_len :]
    )


def _read(tmp_path: Path, data: bytes, **kw: object):  # noqa: ANN202
    p = tmp_path / "x.katra"
    p.write_bytes(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        return open_trace(p, **kw)  # type: ignore[arg-type]


def test_chunk_sizes_must_agree_with_the_block_before_decoding(tmp_path: Path) -> None:
    data = (DATA / "golden-v1.1-blosc2.katra").read_bytes()
    off = _events_block(data)
    _, _, _, _, _, stored_len, raw_len, _ = fmt.BLOCK_HEADER.unpack_from(data, off)
    stored = bytearray(data[off + fmt.BLOCK_HEADER_SIZE : off + fmt.BLOCK_HEADER_SIZE + stored_len])
    cases = {}
    # the chunk declares more bytes than its events: a bomb, or a crash in blosc2
    big = bytearray(stored)
    struct.pack_into("<i", big, 12 + 4, 1 << 27)
    cases["declares 134217728 bytes"] = (bytes(big), None)
    cut = bytes(stored[:-5])  # a chunk shorter than it says
    cases["declares"] = (cut, None)
    n = struct.unpack_from("<I", stored)[0]
    more = bytearray(stored)  # more events claimed: raw_len and the chunk disagree
    struct.pack_into("<I", more, 0, n + 1)
    cases["do not match raw length"] = (bytes(more), None)
    cases["events do not match"] = (bytes(stored), raw_len + 42)
    for reason, (payload, raw) in cases.items():
        t = _read(tmp_path, _reseal(data, off, payload, raw))
        assert t.truncated and t.stopped_at == off and reason in t.stop_reason, (
            reason,
            t.stop_reason,
        )
        with pytest.raises(TraceFormatError, match=f"offset {off}"):
            _read(tmp_path, _reseal(data, off, payload, raw), strict=True)


def test_decompression_budget_holds_for_blosc2(tmp_path: Path) -> None:
    """A block whose raw_len is beyond the file's budget is refused before blosc2 runs."""
    events = np.zeros(200_000, dtype=EVENT_DTYPE)  # compresses ~1000x
    path = tmp_path / "bomb.katra"
    write_trace(path, events, [""], batch_events=200_000, codec="blosc2")
    assert path.stat().st_size < 100_000 and len(open_trace(path).events) == len(events)
    data = path.read_bytes()
    off = _events_block_of(path)
    _, _, _, _, _, stored_len, _, _ = fmt.BLOCK_HEADER.unpack_from(data, off)
    stored = bytearray(data[off + fmt.BLOCK_HEADER_SIZE : off + fmt.BLOCK_HEADER_SIZE + stored_len])
    n_claimed = (fmt.MAX_BLOCK_BYTES - 12) // 42  # 256 MiB of events from a tiny chunk
    struct.pack_into("<I", stored, 0, n_claimed)
    forged = _reseal(data, off, bytes(stored), 12 + 42 * n_claimed)
    with pytest.raises(TraceTooLargeError, match="decompression bomb"):
        _read(tmp_path, forged)
    t = _read(tmp_path, forged, max_ratio=0)  # no budget: the chunk's own header still refuses it
    assert t.truncated and "blosc2 chunk declares" in t.stop_reason


def _events_block_of(path: Path) -> int:
    with open(path, "rb") as f:
        return next(b.offset for b in iter_blocks(f, ScanState()) if b.type == fmt.BlockType.EVENTS)


def test_codec_2_is_for_events_blocks_only(tmp_path: Path) -> None:
    data = (DATA / "golden-v1.1-none.katra").read_bytes()
    with open(DATA / "golden-v1.1-none.katra", "rb") as f:
        strings = [
            b for b in iter_blocks(f, ScanState(), strict=True) if b.type == fmt.BlockType.STRINGS
        ][1]
    _, _, _, _, _, stored_len, _, _ = fmt.BLOCK_HEADER.unpack_from(data, strings.offset)
    stored = data[strings.offset + 24 : strings.offset + 24 + stored_len]
    t = _read(tmp_path, _reseal(data, strings.offset, stored, codec=fmt.Codec.BLOSC2))
    assert t.truncated and "EVENTS blocks only" in t.stop_reason


def test_garbage_in_a_sized_chunk_reads_or_raises_katra_error(tmp_path: Path) -> None:
    """CRC-valid damage inside the chunk (a forged file): blosc2 must report it, never crash the
    reader.
    """
    events = frame_zone_stream(200)
    p = tmp_path / "g.katra"
    write_trace(p, events, STRINGS, batch_events=800, codec="blosc2")
    data = p.read_bytes()
    off = _events_block_of(p)
    _, _, _, _, _, stored_len, raw_len, _ = fmt.BLOCK_HEADER.unpack_from(data, off)
    stored = data[off + 24 : off + 24 + stored_len]
    rng = np.random.default_rng(7)
    for _ in range(150):
        damaged = bytearray(stored)
        for pos in rng.integers(12 + 16, len(stored), 4):  # keep the sizes; garble the rest
            damaged[int(pos)] = int(rng.integers(256))
        try:
            _read(tmp_path, _reseal(data, off, bytes(damaged), raw_len))
        except KatraError:
            pass


BLOCKED = "import sys; sys.modules['blosc2'] = None\n"


def _run_blocked(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKED + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_without_blosc2_reading_a_blosc2_trace_fails_cleanly_with_exit_3() -> None:
    r = _run_blocked(f"""
        from katra3d.harness.cli import main
        raise SystemExit(main(["stats", {str(DATA / "golden-v1.1-blosc2.katra")!r}]))
    """)
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("katra3d: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "blosc2" in r.stderr and "pip install" in r.stderr and "Traceback" not in r.stderr
    r = _run_blocked(f"""
        from katra_trace import open_trace
        t = open_trace({str(DATA / "golden-v1.1.katra")!r}, strict=True)  # zstd traces still read
        # so do headers and counts
        h = open_trace({str(DATA / "golden-v1.1-blosc2.katra")!r}, events=False)
        print(len(t.events), h.summary.events)
    """)
    assert r.returncode == 0 and r.stdout.split() == ["78", "78"], r.stderr


def test_without_blosc2_writing_with_it_fails_cleanly_before_any_file(tmp_path: Path) -> None:
    out = tmp_path / "w.katra"
    r = _run_blocked(f"""
        from katra_trace import TraceWriter, KatraError
        try:
            TraceWriter({str(out)!r}, codec="blosc2")
        except KatraError as err:
            print(err.exit_code, err)
    """)
    assert r.returncode == 0 and r.stdout.startswith(
        "3 writing a trace with codec 'blosc2' needs"
    ), r.stderr
    assert "pip install" in r.stdout and r.stderr == ""
    assert list(tmp_path.iterdir()) == []


def test_run_codec_option_is_checked_before_any_gl_work(katra_cli, tmp_path: Path) -> None:  # noqa: ANN001
    r = katra_cli("run", "triangle", "--codec", "lz4", "-o", str(tmp_path / "x.katra"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unknown codec 'lz4'" in r.stderr, (
        r.stderr
    )
    r = _run_blocked(f"""
        from katra3d.harness.cli import main
        out = {str(tmp_path / "y.katra")!r}
        raise SystemExit(main(["run", "triangle", "--codec", "blosc2", "-o", out]))
    """)
    assert r.returncode == 3 and r.stderr.startswith(
        "katra3d: error: --codec blosc2 needs the blosc2 codec"
    ), r.stderr
    assert r.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []


@pytest.mark.gl
def test_run_writes_the_codec_it_is_given(katra_cli, tmp_path: Path) -> None:  # noqa: ANN001
    out = tmp_path / "b.katra"
    r = katra_cli(
        "run",
        "triangle",
        "--frames",
        "3",
        "--warmup",
        "1",
        "--size",
        "32x32",
        "--codec",
        "blosc2",
        "--quiet",
        "-o",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    t = open_trace(out, strict=True)
    assert len(t.events) >= 4 and t.header.capture_options.codec == "blosc2"
    data = out.read_bytes()
    with open(out, "rb") as f:
        codecs = {
            fmt.BLOCK_HEADER.unpack_from(data, b.offset)[2]
            for b in iter_blocks(f, ScanState(), strict=True)
            if b.type == fmt.BlockType.EVENTS
        }
    assert codecs == {fmt.Codec.BLOSC2}


def test_encoding_leaves_the_callers_events_alone_unless_in_place() -> None:
    events = frame_zone_stream(40)
    before = events.tobytes()
    a = b2ev.encode_events_blosc2(events, blosc2)
    assert events.tobytes() == before
    # the writer's own batch: start_ns becomes deltas
    b = b2ev.encode_events_blosc2(events, blosc2, in_place=True)
    assert a == b and events.tobytes() != before and events["start_ns"][0] == 0
    raw_len = fmt.EVENTS_HEAD.size + 42 * len(events)
    assert b2ev.decode_events_blosc2(b, raw_len, 0).tobytes() == before
