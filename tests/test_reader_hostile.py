"""Hostile input files: CRC-valid traces with bad content, decompression bombs and non-regular
files. Each either reads or fails with one line and exit 2: never a traceback, never a hang."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard

from katra_trace import (
    Clock,
    KatraError,
    TraceFormatError,
    TraceRecoveryWarning,
    TraceTooLargeError,
    open_trace,
)
from katra_trace.io import format as fmt
from tests.cli_helpers import katra, katra_main
from tests.trace_helpers import (
    edit_json_block,
    frame_zone_stream,
    seal_blocks,
    split_blocks,
    write_trace,
)

REPO = Path(__file__).resolve().parent.parent
STRINGS = ["", "scene", "frame", "pass-a", "pass-b", "pass-c"]
Blocks = list[tuple[int, bytes, int]]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("hostile") / "base.katra"
    write_trace(
        path, frame_zone_stream(12, zones=2), STRINGS, batch_events=8, annotations=[{"k": "v"}]
    )
    return path.read_bytes()


def _edit_events(column: str, value: int, row: int = 0, which: int = 1) -> Callable[[Blocks], None]:
    """Set ``column`` of one row of the ``which``-th EVENTS block."""

    def edit(blocks: Blocks) -> None:
        i = [k for k, b in enumerate(blocks) if b[0] == fmt.BlockType.EVENTS][which]
        ev = fmt.decode_events(blocks[i][1], 0)
        ev[column][row] = value
        blocks[i] = (fmt.BlockType.EVENTS, fmt.encode_events(ev), blocks[i][2])

    return edit


def _header(edit: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[Blocks], None]:
    return lambda blocks: edit_json_block(blocks, fmt.BlockType.HEADER, edit)


def _summary(edit: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[Blocks], None]:
    return lambda blocks: edit_json_block(blocks, fmt.BlockType.SUMMARY, edit)


def _second_summary(blocks: Blocks) -> None:
    summary = next(b for b in blocks if b[0] == fmt.BlockType.SUMMARY)
    blocks.append(summary)


#: (id, edit, what the reader says: a fragment of the damage reason)
DAMAGE = [
    ("kind-99", _edit_events("kind", 99), "event kind 99 is not defined"),
    ("clock-99", _edit_events("clock", 99), "event clock 99 is not defined"),
    ("flag-bit-12", _edit_events("flags", 1 << 12), "flag bits 0x1000"),
    ("negative-duration", _edit_events("dur_ns", -1), "negative duration -1"),
    ("span-beyond-int64", _edit_events("start_ns", 2**63 - 10), "beyond the int64"),
    (
        "summary-user-list",
        _summary(lambda s: {**s, "user": [1, 2]}),
        "summary 'user' is not a JSON object",
    ),
    ("summary-events-str", _summary(lambda s: {**s, "events": "many"}), "summary 'events' is not"),
    ("two-summaries", _second_summary, "second SUMMARY block"),
]

#: header problems: nothing to recover, so every reading command fails with one line
BAD_HEADERS = [
    ("start-wall-1e40", _header(lambda h: {**h, "start_wall_ns": 10**40}), "'start_wall_ns'"),
    ("start-wall-float", _header(lambda h: {**h, "start_wall_ns": 1.5}), "'start_wall_ns'"),
    (
        "capture-options-list",
        _header(lambda h: {**h, "capture_options": [1]}),
        "'capture_options' is not",
    ),
    ("host-info-str", _header(lambda h: {**h, "host_info": "x"}), "'host_info' is not"),
    (
        "measure-list",
        _header(lambda h: {**h, "capture_options": {"measure": []}}),
        "'capture_options.measure' is not",
    ),
    (
        "codegen-str",
        _header(lambda h: {**h, "host_info": {"codegen": "x"}}),
        "'host_info.codegen' is not",
    ),
    ("empty-header", _header(lambda h: {}), "HEADER block at offset 16 is empty"),
    (
        "timing-mode-dict",
        _header(lambda h: {**h, "capture_options": {"timing_mode": {"a": 1}}}),
        "'capture_options.timing_mode' is not a string",
    ),
    (
        "measure-mode-list",
        _header(lambda h: {**h, "capture_options": {"measure": {"mode": []}}}),
        "'capture_options.measure.mode' is not a string",
    ),
    (
        "gl-renderer-int",
        _header(lambda h: {**h, "host_info": {"gl_renderer": 5}}),
        "'host_info.gl_renderer'",
    ),
]


def _craft(
    tmp_path: Path,
    base: bytes,
    edit: Callable[[Blocks], None],
    name: str = "crafted.katra",
    minor: int | None = None,
) -> Path:
    blocks = split_blocks(base)
    edit(blocks)
    path = tmp_path / name
    path.write_bytes(seal_blocks(blocks, minor=minor))
    return path


@pytest.mark.parametrize("case", DAMAGE, ids=[c[0] for c in DAMAGE])
def test_crafted_content_is_damage_not_a_traceback(
    tmp_path: Path,
    base: bytes,
    capsys: pytest.CaptureFixture[str],
    case: tuple[str, Callable[[Blocks], None], str],
) -> None:
    _, edit, reason = case
    path = _craft(tmp_path, base, edit)
    with pytest.raises(TraceFormatError, match=reason):
        open_trace(path, strict=True)
    with pytest.warns(TraceRecoveryWarning, match=reason):
        t = open_trace(path)
    assert t.truncated and reason in t.stop_reason
    rc, _, err = katra_main(capsys, "validate", str(path))
    assert rc == 2 and reason in err
    for args in (
        ("info", str(path)),
        ("info", "--json", str(path)),
        ("stats", str(path)),
        ("compare", str(path), str(path)),
    ):
        rc, out, err = katra_main(capsys, *args)
        assert rc in (0, 2), (args, rc, err)


@pytest.mark.parametrize("case", BAD_HEADERS, ids=[c[0] for c in BAD_HEADERS])
def test_crafted_header_fails_with_one_line(
    tmp_path: Path,
    base: bytes,
    capsys: pytest.CaptureFixture[str],
    case: tuple[str, Callable[[Blocks], None], str],
) -> None:
    _, edit, reason = case
    path = _craft(tmp_path, base, edit)
    with pytest.raises(TraceFormatError, match=reason):
        open_trace(path)
    for args in (
        ("validate", str(path)),
        ("info", str(path)),
        ("stats", str(path)),
        ("compare", str(path), str(path)),
    ):
        rc, out, err = katra_main(capsys, *args)
        assert rc == 2 and err.startswith("katra3d: error: ") and err.count("\n") == 1, (args, err)
        assert reason in err and "comes before the HEADER" not in err


def test_count_clocks_are_corrupt_in_a_1_0_file_and_unknown_clocks_read_in_a_newer_minor(
    tmp_path: Path, base: bytes
) -> None:
    as_1_0 = _craft(
        tmp_path, base, _edit_events("clock", int(Clock.INSTRUCTIONS)), "v10.katra", minor=0
    )
    with pytest.raises(TraceFormatError, match="clock 3 is not defined in format 1.0"):
        open_trace(as_1_0, strict=True)
    as_1_1 = _craft(
        tmp_path, base, _edit_events("clock", int(Clock.INSTRUCTIONS)), "v11.katra", minor=1
    )
    assert int(open_trace(as_1_1, strict=True).events["clock"][8]) == Clock.INSTRUCTIONS
    future = _craft(tmp_path, base, _edit_events("clock", 9), "v19.katra", minor=9)
    t = open_trace(future, strict=True)  # a clock added after 1.1: kept for the consumers
    assert int(t.events["clock"][8]) == 9 and not t.truncated
    neg = _craft(tmp_path, base, _edit_events("dur_ns", -5), "v19neg.katra", minor=9)
    with pytest.raises(TraceFormatError, match="negative duration"):
        open_trace(neg, strict=True)  # the other checks hold for every minor


def test_unknown_clock_of_a_newer_minor_is_named_by_info(
    tmp_path: Path, base: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    future = _craft(tmp_path, base, _edit_events("clock", 9), "v19.katra", minor=9)
    rc, out, err = katra_main(capsys, "info", str(future))
    assert rc == 0 and "clock9=1" in out, err


def test_lone_surrogates_are_read_as_replacement_characters(tmp_path: Path, base: bytes) -> None:
    """katra3d 0.1.0 wrote a lone surrogate in a name as encoded surrogate bytes; a JSON string can
    hold one as an escape. Both print (as U+FFFD) instead of raising UnicodeEncodeError."""

    def edit(blocks: Blocks) -> None:
        i = next(
            k for k, b in enumerate(blocks) if b[0] == fmt.BlockType.STRINGS and len(b[1]) > 12
        )
        first, names = fmt.decode_strings(blocks[i][1], 0)
        names = [n.replace("scene", "sc\udc80ne") for n in names]
        blobs = [n.encode("utf-8", "surrogatepass") for n in names]
        raw = (
            fmt.STRINGS_HEAD.pack(first, len(blobs))
            + np.array([len(b) for b in blobs], "<u4").tobytes()
            + b"".join(blobs)
        )
        blocks[i] = (fmt.BlockType.STRINGS, raw, 0)
        edit_json_block(blocks, fmt.BlockType.HEADER, lambda h: {**h, "workload": "w\udc80"})

    path = _craft(tmp_path, base, edit)
    t = open_trace(path, strict=True)
    assert "sc\ufffdne" in t.strings and t.header.workload == "w\ufffd"
    assert any("U+FFFD" in note for note in t.notes)
    for args in (("info", str(path)), ("stats", str(path)), ("compare", str(path), str(path))):
        r = katra(*args, cwd=REPO, timeout=60)
        assert r.returncode in (0, 2) and "Traceback" not in r.stderr, (args, r.stderr)
    r = katra("validate", str(path), cwd=REPO, timeout=60)
    assert r.returncode == 0 and "U+FFFD" in r.stderr, r.stderr


# -- decompression bombs --------------------------------------------------------------------------


def _bomb(path: Path, blocks: int) -> Path:
    """A CRC-valid trace whose EVENTS blocks each decode to 256 MiB of zero
    events (~8 kB stored)."""
    n = fmt.MAX_BLOCK_EVENTS
    raw_len = fmt.EVENTS_HEAD.size + n * 42
    cctx = zstandard.ZstdCompressor(level=3)
    chunk = bytes(1 << 20)
    co = cctx.compressobj(size=raw_len)
    parts = [co.compress(fmt.EVENTS_HEAD.pack(n, 0))]
    left = raw_len - fmt.EVENTS_HEAD.size
    while left:
        take = min(left, len(chunk))
        parts.append(co.compress(chunk[:take]))
        left -= take
    parts.append(co.flush())
    stored = b"".join(parts)
    out = bytearray(fmt.encode_preamble())
    out += b"".join(
        fmt.encode_block(
            fmt.BlockType.HEADER,
            fmt.encode_json({"format_version": "1.1"}),
            seq=0,
            codec=fmt.Codec.NONE,
        )
    )
    for seq in range(1, blocks + 1):
        head = bytearray(
            fmt.BLOCK_HEADER.pack(
                fmt.SYNC, fmt.BlockType.EVENTS, fmt.Codec.ZSTD, 1, seq, len(stored), raw_len, 0
            )
        )
        import zlib

        struct.pack_into("<I", head, 20, zlib.crc32(stored, zlib.crc32(bytes(head[:20]))))
        out += head + stored
    path.write_bytes(bytes(out))
    return path


BOMB_RSS = textwrap.dedent("""
    import resource, sys, warnings
    from katra_trace import KatraError, open_trace
    warnings.simplefilter("ignore")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        open_trace(sys.argv[1], events=sys.argv[2] == "1")
        print("read")
    except KatraError as err:
        print("refused:", err)
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
""")


@pytest.mark.parametrize("events", [True, False])
def test_decompression_bomb_is_refused_within_a_memory_bound(tmp_path: Path, events: bool) -> None:
    path = _bomb(tmp_path / "bomb.katra", blocks=4)
    size = path.stat().st_size
    assert size < 64 * 1024
    r = subprocess.run(
        [sys.executable, "-c", BOMB_RSS, str(path), "1" if events else "0"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    verdict, grown_mib = r.stdout.splitlines()
    assert verdict.startswith("refused:") and "KATRA3D_MAX_RATIO" in verdict
    # the bound: 10x the file + 64 MiB of decoded data (+ its copy while decoding), never 4 x 256
    # MiB
    assert int(grown_mib) < 2 * (10 * size / 2**20 + 64) + 32, r.stdout


def test_bomb_cli_is_one_line_and_opt_out_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _bomb(tmp_path / "bomb.katra", blocks=1)
    for cmd in ("validate", "info", "stats"):
        rc, _, err = katra_main(capsys, cmd, str(path))
        assert rc == 2 and err.count("\n") == 1 and "decompression bomb" in err, (cmd, err)
    with pytest.raises(TraceTooLargeError):
        open_trace(path, max_ratio=10)
    # a genuine, very compressible trace: lift the limit
    monkeypatch.setenv("KATRA3D_MAX_RATIO", "0")
    with pytest.warns(TraceRecoveryWarning, match="without a footer"):
        t = open_trace(path, events=False)
    assert t.summary.events == fmt.MAX_BLOCK_EVENTS and t.summary.rebuilt


def test_genuine_well_compressed_trace_reads_under_the_default_limit(tmp_path: Path) -> None:
    """Instruction counts repeat frame after frame and compress ~400x: a long such capture reads."""
    n = 1_000_000
    ev = np.zeros(n, dtype=fmt.EVENT_DTYPE)
    ev["frame"] = np.arange(n)
    ev["start_ns"] = np.arange(n) * 1000
    ev["clock"] = Clock.INSTRUCTIONS
    ev["dur_ns"] = 14_775_643
    path = tmp_path / "regular.katra"
    write_trace(path, ev, ["", "s"], batch_events=65536)
    assert path.stat().st_size * 10 < n * 42  # far beyond 10x: the constant allowance covers it
    assert len(open_trace(path, strict=True).events) == n


def test_bad_max_ratio_setting_is_a_config_error(
    tmp_path: Path, base: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.katra"
    path.write_bytes(base)
    monkeypatch.setenv("KATRA3D_MAX_RATIO", "lots")
    with pytest.raises(KatraError, match="KATRA3D_MAX_RATIO"):
        open_trace(path)


# -- non-regular files ----------------------------------------------------------------------------

READERS = (("validate",), ("info",), ("info", "--json"), ("stats",))


def test_fifo_without_a_writer_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "t.katra"
    os.mkfifo(fifo)
    for args in READERS:
        r = katra(*args, str(fifo), cwd=REPO, timeout=60)
        assert (
            r.returncode == 2 and r.stderr.count("\n") == 1 and "not a regular file" in r.stderr
        ), (args, r.stderr)
    r = katra("compare", str(fifo), str(fifo), cwd=REPO, timeout=60)
    assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr


def test_pipes_and_proc_files_give_one_line(tmp_path: Path, base: bytes) -> None:
    path = tmp_path / "t.katra"
    path.write_bytes(base)
    with open(path, "rb") as f:  # /dev/stdin that is a regular file reads like the file
        r = subprocess.run(
            [sys.executable, "-m", "katra3d", "validate", "/dev/stdin"],
            stdin=f,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
    assert r.returncode == 0 and "ok:" in r.stdout, r.stderr
    r = subprocess.run(
        ["bash", "-c", f'cat "{path}" | "{sys.executable}" -m katra3d info /dev/stdin'],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "pipe" in r.stderr, r.stderr
    r = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -m katra3d stats <(cat "{path}")'],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "pipe" in r.stderr, r.stderr
    for proc in ("/proc/self/status", "/proc/version"):
        r = katra("info", proc, cwd=REPO, timeout=60)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, (
            r.stderr
        )
    r = katra("info", "/dev/null", cwd=REPO, timeout=60)
    assert r.returncode == 2 and "character device" in r.stderr, r.stderr


def test_json_summary_shapes(tmp_path: Path, base: bytes) -> None:
    """A summary with every documented count is accepted; the summary's keys are all optional."""
    path = _craft(tmp_path, base, _summary(lambda s: {"status": "complete"}))
    t = open_trace(path, strict=True)
    assert t.status == "complete" and json.dumps(t.summary.as_dict())
