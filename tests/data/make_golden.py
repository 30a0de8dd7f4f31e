"""Writes tests/data/golden-v1.0.katra. Run once per format version; never regenerate an old one.

    .venv/bin/python tests/data/make_golden.py
"""

from __future__ import annotations

from pathlib import Path

from katra_trace import Clock, Flag, Kind, TraceWriter

OUT = Path(__file__).with_name("golden-v1.0.katra")


def main() -> None:
    w = TraceWriter(OUT, workload="golden", capture_options={"size": [64, 64], "frames": 10, "timing_mode": "sync"},
                    host_info={"gl_renderer": "golden renderer", "software_renderer": True}, notes="golden v1.0",
                    batch_events=16, batch_ms=60_000, start_host_ns=0)
    scene, frame, zone = w.intern("golden-scene"), w.intern("frame"), w.intern("pass")
    w.clock_sync({"host_ns": 1000, "gpu_ns": 5000})
    for i in range(40):
        start = i * 2_000_000
        w.append(Kind.ZONE, Clock.WALL, scene, zone, i, 1, start, 400_000 + i)
        w.append(Kind.FRAME, Clock.WALL, scene, frame, i, 0, start, 1_000_000 + 1000 * i,
                 flags=Flag.WARMUP if i < 5 else 0)
    w.append(Kind.COUNTER, Clock.CPU, scene, w.intern("triangles"), 39, 0, 80_000_000, 0, value=12345.5)
    w.annotate({"scene": "golden-scene", "last_frame_sha256": "0" * 64})
    w.finish({"scenes": 1})


if __name__ == "__main__":
    main()
