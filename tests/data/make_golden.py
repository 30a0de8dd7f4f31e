"""Writes tests/data/golden-v1.1.katra, deterministically (fixed pid, times and end time).

    .venv/bin/python tests/data/make_golden.py [OUT [CODEC]]   (OUT "": the codec's golden file)

CODEC is ``zstd`` (golden-v1.1.katra, the default), ``blosc2`` (golden-v1.1-blosc2.katra: EVENTS
blocks in codec 2, the other blocks in zstd) or ``none`` (golden-v1.1-none.katra): one golden file
per codec, with the same content.

Run once per format version; never regenerate an old golden file. golden-v1.0.katra was written by
katra3d 0.1.0's writer (format 1.0: wall clock frames and zones, a counter, a clock sync and an
annotation); this build writes format 1.1 and cannot produce it again. This build's writer writes
format 1.2 (1.1 + IMAGE blocks, which this file has none of): the preamble and header are pinned to
1.1.

The 1.1 file exercises every 1.1 addition (docs/trace-format.md): frames and zones on the
INSTRUCTIONS clock, frames on the CYCLES clock with the raw cache counts as COUNTER rows on that
clock, REFERENCE markers on the WALL and CPU clocks, ``capture_options["measure"]`` and
``host_info["codegen"]``. It is a format fixture, not a real capture.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from katra_trace import Clock, Flag, Kind, TraceWriter
from katra_trace.io import format as fmt
from katra_trace.io.blocks import ScanState, iter_blocks
from katra_trace.schema import REFERENCE_NAME

OUT = Path(__file__).with_name("golden-v1.1.katra")

MEASURE = {
    "mode": "cycles",
    "valgrind": "3.19.0",
    "command": [
        "valgrind",
        "--tool=callgrind",
        "--separate-threads=yes",
        "--cache-sim=yes",
        "python3",
        "-m",
        "harness",
        "run",
        "golden",
    ],
    "env": {"LP_NUM_THREADS": "0", "PYTHONHASHSEED": "0", "LP_NATIVE_VECTOR_WIDTH": "128"},
    "frame_boundary": "golden frame boundary",
    "pinned": {"LP_NATIVE_VECTOR_WIDTH": "128"},
}
CODEGEN = {
    "cpu_model": "golden cpu",
    "cpu_flags_sha": "0" * 16,
    "mesa": "23.2.1",
    "llvm": "15.0.7",
    "lp_native_vector_width": 128,
}
#: callgrind cache counters written per measured frame, with per-frame values
COUNTERS = {
    "Ir": 1_000_000,
    "I1mr": 120,
    "D1mr": 3400,
    "D1mw": 560,
    "ILmr": 30,
    "DLmr": 700,
    "DLmw": 90,
}
#: fixed facts that make the file byte-for-byte reproducible
FIXED_HEADER = {
    "pid": 4242,
    "start_wall_ns": 1_790_000_000_000_000_000,
    "tool_version": "katra3d golden",
    "format_version": "1.1",
}
#: the format this file is the golden file of (the writer may write a newer minor)
GOLDEN_MINOR = 1
FIXED_SUMMARY = {"end_host_ns": 200_000_000}


def write_events(w: TraceWriter) -> None:
    instr, cyc = w.intern("golden-instructions"), w.intern("golden-cycles")
    frame, zone, ref = w.intern("frame"), w.intern("pass"), w.intern(REFERENCE_NAME)
    for i in range(12):  # frame 0 is the shader-JIT frame: warmup
        start = i * 1_000_000
        flags = int(Flag.WARMUP) if i == 0 else 0
        w.append(Kind.ZONE, Clock.INSTRUCTIONS, instr, zone, i, 1, start, 400_000 + i, flags=flags)
        w.append(
            Kind.FRAME,
            Clock.INSTRUCTIONS,
            instr,
            frame,
            i,
            0,
            start,
            1_000_000 + 7 * i,
            flags=flags,
        )
        if i % 4 == 3:  # a reference draw every 4 frames, after frame i
            for clock in (Clock.WALL, Clock.CPU):
                w.append(
                    Kind.MARKER,
                    clock,
                    instr,
                    ref,
                    i,
                    0,
                    start + 900_000,
                    50_000 + i,
                    flags=Flag.REFERENCE,
                )
    for i in range(6):
        start = 20_000_000 + i * 1_000_000
        flags = int(Flag.WARMUP) if i == 0 else 0
        w.append(
            Kind.FRAME,
            Clock.CYCLES,
            cyc,
            frame,
            i,
            0,
            start,
            1_500_000 + 11 * i,
            flags=flags | Flag.ESTIMATED,
        )
        for name, value in COUNTERS.items():
            w.append(
                Kind.COUNTER,
                Clock.CYCLES,
                cyc,
                w.intern(name),
                i,
                0,
                start,
                0,
                value=float(value + i),
                flags=flags,
            )
    w.annotate({"scene": "golden-cycles", "last_frame_sha256": "1" * 64})


def _fix(payload: dict[str, Any], fixed: dict[str, Any]) -> bytes:
    return fmt.encode_json({**payload, **fixed})


#: the golden file of each codec
GOLDEN = {
    "zstd": OUT,
    "blosc2": OUT.with_name("golden-v1.1-blosc2.katra"),
    "none": OUT.with_name("golden-v1.1-none.katra"),
}


def main(out: Path = OUT, codec: str = "zstd") -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.katra"
        w = TraceWriter(
            raw,
            workload="golden",
            notes="golden v1.1: every 1.1 addition (a format fixture)",
            capture_options={"frames": 12, "warmup": 1, "size": [32, 32], "measure": MEASURE},
            host_info={
                "gl_renderer": "golden renderer",
                "software_renderer": True,
                "codegen": CODEGEN,
            },
            batch_events=16,
            batch_ms=60_000,
            start_host_ns=0,
            codec=codec,
        )
        write_events(w)
        w.finish({"scenes": 2})
        data = raw.read_bytes()
        with open(raw, "rb") as f:
            blocks = list(iter_blocks(f, ScanState(), strict=True))
    # Re-seal every block with the fixed facts (pid, times) so the file is reproducible.
    result = bytearray(fmt.PREAMBLE.pack(fmt.MAGIC, fmt.FORMAT_MAJOR, GOLDEN_MINOR, 0))
    summary_at = 0
    for b in blocks:
        _, btype, codec, schema, seq, stored_len, raw_len, _ = fmt.BLOCK_HEADER.unpack_from(
            data, b.offset
        )
        stored = data[
            b.offset + fmt.BLOCK_HEADER_SIZE : b.offset + fmt.BLOCK_HEADER_SIZE + stored_len
        ]
        if codec == fmt.Codec.BLOSC2:  # EVENTS hold no fixed fact: kept as written
            result += b"".join(
                fmt.frame_block(
                    btype, stored, raw_len, seq=seq, codec=fmt.Codec(codec), schema=schema
                )
            )
            continue
        payload = fmt.decompress(stored, raw_len, codec, b.offset)
        if btype == fmt.BlockType.HEADER:
            payload = _fix(b.payload, FIXED_HEADER)
        elif btype == fmt.BlockType.SUMMARY:
            payload = _fix(b.payload, FIXED_SUMMARY)
            summary_at = len(result)
        result += b"".join(
            fmt.encode_block(btype, payload, seq=seq, codec=fmt.Codec(codec), schema=schema)
        )
    result += fmt.encode_footer(summary_at)
    out.write_bytes(bytes(result))


if __name__ == "__main__":
    codec_arg = sys.argv[2] if len(sys.argv) > 2 else "zstd"
    main(Path(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else GOLDEN[codec_arg], codec_arg)
